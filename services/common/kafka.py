"""Kafka client construction and topic administration, shared by the services and the CLI.

Only standard Kafka protocol features are used (no idempotent or transactional producer:
exactly-once effect comes from positions stored with the rows in PostgreSQL).
"""

from __future__ import annotations

import contextlib
import logging
from typing import AsyncIterator, Iterable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, KafkaError, TopicAlreadyExistsError

from tickerwire.schemas.topics import ALL_TOPICS, TopicSpec, topic_name

from .config import Config
from .errors import BrokerUnavailable

log = logging.getLogger(__name__)


def consumer(config: Config, *topics: str, group_id: str | None, client_id: str, **kw) -> AIOKafkaConsumer:
    params = dict(
        bootstrap_servers=config.kafka_bootstrap_servers,
        client_id=client_id,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=config.kafka_session_timeout_ms,
        heartbeat_interval_ms=config.kafka_heartbeat_interval_ms,
        fetch_max_wait_ms=config.kafka_fetch_max_wait_ms,
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    params.update(kw)
    return AIOKafkaConsumer(*topics, **params)


def producer(config: Config, client_id: str = "tickerwire-publisher", **kw) -> AIOKafkaProducer:
    params = dict(
        bootstrap_servers=config.kafka_bootstrap_servers,
        client_id=client_id,
        acks="all",
        linger_ms=5,
        max_batch_size=256 * 1024,
        compression_type=None,
    )
    params.update(kw)
    return AIOKafkaProducer(**params)


@contextlib.asynccontextmanager
async def started_producer(config: Config, **kw) -> AsyncIterator[AIOKafkaProducer]:
    prod = producer(config, **kw)
    try:
        await prod.start()
    except KafkaConnectionError as exc:
        await prod.stop()
        raise BrokerUnavailable(f"cannot reach the broker at {config.kafka_bootstrap_servers}: {exc}") from exc
    try:
        yield prod
    finally:
        await prod.stop()


async def ensure_topics(config: Config, specs: Iterable[TopicSpec] = ALL_TOPICS, replication: int = 1) -> list[str]:
    """Create missing topics with their explicit partition counts; returns those created."""
    admin = AIOKafkaAdminClient(bootstrap_servers=config.kafka_bootstrap_servers, client_id="tickerwire-admin")
    try:
        await admin.start()
    except KafkaConnectionError as exc:
        await admin.close()
        raise BrokerUnavailable(f"cannot reach the broker at {config.kafka_bootstrap_servers}: {exc}") from exc
    created = []
    try:
        existing = set(await admin.list_topics())
        wanted = [s for s in specs if topic_name(config.topic_prefix, s) not in existing]
        for spec in wanted:
            name = topic_name(config.topic_prefix, spec)
            try:
                await admin.create_topics([NewTopic(name, spec.partitions, replication)])
                created.append(name)
            except TopicAlreadyExistsError:
                pass
            except KafkaError as exc:
                raise BrokerUnavailable(f"cannot create topic {name}: {exc}") from exc
    finally:
        await admin.close()
    for name in created:
        log.info("created topic %s", name)
    return created
