"""The stream's view of the post topic: every partition, no consumer group, no replay.

Each stream process assigns itself every partition of the post topic and starts at the
projector's stored positions, so it announces exactly the posts projected after it started
(it never trusts the broker's end offset). A record is announced only once the projector's
position has passed it, i.e. the post is committed and readable through the API; the data
sent is the lean JSON the projector stored, identical to the GET /posts item.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import asyncpg
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from tickerwire.schemas.models import InvalidEvent, decode_event
from tickerwire.schemas.topics import POSTS, topic_name

from ..common import kafka
from ..common.config import Config
from ..common.db import storage_errors
from ..common.retry import retry_transient
from . import protocol
from .hub import Hub
from .metrics import StreamMetrics

log = logging.getLogger(__name__)

SELECT_POSITIONS = "SELECT partition, next_offset FROM positions WHERE topic = $1"

SELECT_ANNOUNCED = """
SELECT t.lean, t.announced_partition, t.announced_offset
FROM post_translations t
JOIN unnest($1::bigint[], $2::integer[], $3::bigint[]) AS e(post_id, partition, "offset")
  ON t.post_id = e.post_id AND t.announced_partition = e.partition AND t.announced_offset = e."offset"
WHERE t.visible
ORDER BY t.announced_offset, t.announced_partition, t.lang
"""


@dataclass(frozen=True, slots=True)
class Pending:
    partition: int
    offset: int
    post_id: int
    arrived: float


class Feed:
    def __init__(self, config: Config, pool: asyncpg.Pool, hub: Hub, metrics: StreamMetrics, poll_s: float = 0.02) -> None:
        self.config = config
        self.pool = pool
        self.hub = hub
        self.metrics = metrics
        self.poll_s = poll_s
        self.topic = topic_name(config.topic_prefix, POSTS)
        self.started = asyncio.Event()

    async def _positions(self) -> dict[int, int]:
        async def load():
            with storage_errors("projector positions"):
                return await self.pool.fetch(SELECT_POSITIONS, self.topic)

        rows = await retry_transient(load, what="projector positions", cap=2.0)
        return {r["partition"]: r["next_offset"] for r in rows}

    async def run(self) -> None:
        while True:
            consumer = kafka.consumer(self.config, group_id=None, client_id="tickerwire-stream")
            try:
                await consumer.start()
                await self._consume(consumer)
            except KafkaError as exc:
                log.warning("broker error, reconnecting: %s", exc)
                await asyncio.sleep(1.0)
            finally:
                await consumer.stop()

    async def _consume(self, consumer) -> None:
        partitions = None
        while not partitions:
            await consumer.topics()
            partitions = consumer.partitions_for_topic(self.topic)
            if not partitions:
                await asyncio.sleep(0.5)
        tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        start = await self._positions()
        for tp in tps:
            consumer.seek(tp, start.get(tp.partition, 0))
        self.started.set()
        log.info("stream feed started at %s", {tp.partition: start.get(tp.partition, 0) for tp in tps})
        while True:
            batches = await consumer.getmany(timeout_ms=500)
            arrived = time.perf_counter()
            pending = [
                Pending(tp.partition, m.offset, post_id, arrived)
                for tp, msgs in batches.items()
                for m in msgs
                if (post_id := _post_id(m.value)) is not None
            ]
            if pending:
                await self._announce(pending)

    async def _announce(self, pending: list[Pending]) -> None:
        """Wait for the projector to commit these records, then send their post.created."""
        while True:
            positions = await self._positions()
            if all(positions.get(p.partition, 0) > p.offset for p in pending):
                break
            await asyncio.sleep(self.poll_s)
        async def load():
            with storage_errors("announced posts"):
                return await self.pool.fetch(
                    SELECT_ANNOUNCED,
                    [p.post_id for p in pending],
                    [p.partition for p in pending],
                    [p.offset for p in pending],
                )

        rows = await retry_transient(load, what="announced posts", cap=2.0)
        arrived = {(p.partition, p.offset): p.arrived for p in pending}
        for row in rows:
            self.hub.broadcast(protocol.post_created(row["lean"]), "post.created")
            self.metrics.delivery_seconds.observe(time.perf_counter() - arrived[(row["announced_partition"], row["announced_offset"])])


def _post_id(value: bytes | None) -> int | None:
    if value is None:
        return None
    try:
        event = decode_event(value)
    except InvalidEvent:
        return None  # the projector dead-letters it; nothing to announce
    return event.data.id if event.type == "post" else None
