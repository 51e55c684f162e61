"""Sending one record as every producer of ours does: under a PRODUCER span ``send <topic>``
whose context travels in the record's ``traceparent``/``tracestate`` headers (W3C), so the
projector continues the trace. A ``traceparent`` the caller already gave is honoured: it becomes
the span's parent, and the record carries the span's own context; the caller's other headers
are kept as given. With tracing off the record is sent exactly as the caller gave it."""

from __future__ import annotations

import asyncio
from typing import Sequence

from aiokafka import AIOKafkaProducer

from ..tracing import OFF, Kind, Tracing


async def send_traced(
    producer: AIOKafkaProducer,
    topic: str,
    value: bytes,
    key: bytes | None,
    *,
    headers: Sequence[tuple[str, bytes]] = (),
    tracing: Tracing = OFF,
) -> asyncio.Future:
    """``producer.send``: returns the future of the record's acknowledgement."""
    if not tracing.enabled:
        return await producer.send(topic, value=value, key=key, headers=list(headers) or None)
    carried = list(headers)
    attributes = {
        "messaging.system": "kafka",
        "messaging.operation.type": "send",
        "messaging.destination.name": topic,
    }
    with tracing.start(f"send {topic}", Kind.PRODUCER, parent=tracing.extract(carried), attributes=attributes):
        tracing.inject(carried)
        return await producer.send(topic, value=value, key=key, headers=carried)
