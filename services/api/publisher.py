"""The API's one Kafka producer, for the partner's webhook endpoint changes
(docs/api.md#managing-endpoints), each sent under its ``send <topic>`` span
(:func:`..common.kafka.send_traced`): idempotent with ``acks=all`` like every producer
(:func:`..common.kafka.producer`), started on the first change (so an API that is never asked
to change anything never needs the broker, and its readiness does not depend on it) and
stopped with the application. A broker that cannot be reached is a 503, retried by the partner."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from tickerwire.schemas.models import WebhookEndpointEvent, encode_event, entity_key, topic_for_event_type

from ..common import kafka
from ..common.runtime.config import Config
from ..common.runtime.errors import BrokerUnavailable
from ..common.tracing import OFF, Tracing

#: Bound of starting the producer and of one send's acknowledgement.
PUBLISH_TIMEOUT_S = 10.0


class Publisher:
    def __init__(self, config: Config, tracing: Tracing = OFF) -> None:
        self._config = config
        self._tracing = tracing
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()

    async def _started(self) -> AIOKafkaProducer:
        async with self._lock:
            if self._producer is None:
                producer = kafka.producer(self._config, client_id="tickerwire-api", request_timeout_ms=10_000)
                try:
                    await asyncio.wait_for(producer.start(), PUBLISH_TIMEOUT_S)
                except (KafkaError, OSError, asyncio.TimeoutError) as exc:
                    await producer.stop()
                    raise kafka.unreachable(self._config, exc) from exc
                self._producer = producer
            return self._producer

    async def publish(self, event: WebhookEndpointEvent) -> None:
        """``event`` on the access topic, acknowledged by every in-sync replica; BrokerUnavailable
        (a 503) when it is not within :data:`PUBLISH_TIMEOUT_S`."""
        producer = await self._started()
        topic = topic_for_event_type(self._config.topic_prefix, event.type)
        try:
            sent = await kafka.send_traced(
                producer, topic, encode_event(event), entity_key(event).encode(), tracing=self._tracing
            )
            await asyncio.wait_for(sent, PUBLISH_TIMEOUT_S)
        except (KafkaError, asyncio.TimeoutError) as exc:
            raise BrokerUnavailable(f"cannot publish to {topic}: {type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        async with self._lock:
            if self._producer is not None:
                await self._producer.stop()
                self._producer = None
