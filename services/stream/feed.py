"""The stream's view of the post topic: every partition, no consumer group, no replay.

Each stream process assigns itself every partition of the post topic and starts at the
projector's stored positions, so it announces exactly the posts projected after it started
(it never trusts the broker's end offset).

Two tasks form a pipeline. The consumer decodes each record's post id into a pending
queue and goes on reading. The announcer waits until the projector's stored position
has passed the oldest pending records (one cheap query per poll, and only while something
is pending), then selects the lean JSON of the translations those records first made
visible and broadcasts it. A post.created is therefore sent only after the projector has
committed the post, and its data is the stored lean JSON, identical to the GET /posts item.
"""

from __future__ import annotations

import asyncio
import collections
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
from . import protocol, sql
from .filters import PostFacts
from .hub import Hub
from .metrics import StreamMetrics

log = logging.getLogger(__name__)

#: Records waiting for the projector beyond which consumption pauses (bounded memory).
MAX_PENDING = 50_000
#: Records announced per query.
ANNOUNCE_BATCH = 1_000


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
        self.yield_every = max(1, config.stream_queue_size // 4)
        self.started = asyncio.Event()
        self._pending: collections.deque[Pending] = collections.deque()
        self._has_pending = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._next: dict[int, int] = {}  # next offset to consume per partition, kept across broker reconnects

    async def run(self) -> None:
        announcer = asyncio.create_task(self._announce_forever(), name="stream-announcer")
        try:
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
        finally:
            announcer.cancel()
            await asyncio.gather(announcer, return_exceptions=True)

    # ------------------------------------------------------------------ consuming

    async def _consume(self, consumer) -> None:
        partitions = None
        while not partitions:
            await consumer.topics()
            partitions = consumer.partitions_for_topic(self.topic)
            if not partitions:
                await asyncio.sleep(0.5)
        tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        if not self._next:
            self._next = {p: o for p, o in (await self._positions()).items()}
        for tp in tps:
            consumer.seek(tp, self._next.setdefault(tp.partition, 0))
        self.started.set()
        log.info("stream feed reading from %s", dict(self._next))
        while True:
            await self._room.wait()
            batches = await consumer.getmany(timeout_ms=500)
            arrived = time.perf_counter()
            for tp, msgs in batches.items():
                for m in msgs:
                    if (post_id := _post_id(m.value)) is not None:
                        self._pending.append(Pending(tp.partition, m.offset, post_id, arrived))
                if msgs:
                    self._next[tp.partition] = msgs[-1].offset + 1
            if self._pending:
                self._has_pending.set()
                if len(self._pending) >= MAX_PENDING:
                    self._room.clear()

    # ------------------------------------------------------------------ announcing

    async def _positions(self) -> dict[int, int]:
        async def load():
            with storage_errors("projector positions"):
                return await self.pool.fetch(sql.SELECT_POSITIONS, self.topic)

        rows = await retry_transient(load, what="projector positions", cap=2.0)
        return {r["partition"]: r["next_offset"] for r in rows}

    async def _announce_forever(self) -> None:
        while True:
            await self._has_pending.wait()
            positions = await self._positions()
            ready = self._take_committed(positions)
            if ready:
                await self._announce(ready)
            else:
                await asyncio.sleep(self.poll_s)
            if not self._pending:
                self._has_pending.clear()
            if len(self._pending) < MAX_PENDING // 2:
                self._room.set()

    def _take_committed(self, positions: dict[int, int]) -> list[Pending]:
        """Remove and return pending records the projector has committed, in log order per partition."""
        ready, waiting = [], collections.deque()
        for p in self._pending:
            if len(ready) < ANNOUNCE_BATCH and positions.get(p.partition, 0) > p.offset:
                ready.append(p)
            else:
                waiting.append(p)
        self._pending = waiting
        return ready

    async def _announce(self, ready: list[Pending]) -> None:
        async def load():
            with storage_errors("announced posts"):
                return await self.pool.fetch(
                    sql.SELECT_ANNOUNCED,
                    [p.post_id for p in ready],
                    [p.partition for p in ready],
                    [p.offset for p in ready],
                )

        rows = await retry_transient(load, what="announced posts", cap=2.0)
        arrived = {(p.partition, p.offset): p.arrived for p in ready}
        for n, row in enumerate(rows, start=1):
            partition, offset = row["announced_partition"], row["announced_offset"]
            facts = PostFacts(row["lang"], frozenset(row["tickers"]), frozenset(row["category_slugs"]))
            self.hub.publish(protocol.post_created(row["lean"], partition, offset), facts)
            self.metrics.delivery_seconds.observe(time.perf_counter() - arrived[(partition, offset)])
            if n % self.yield_every == 0:
                # Let every writer hand the queued messages to its socket: a burst never
                # fills the queue of a client that is reading.
                await asyncio.sleep(0)
        await asyncio.sleep(0)


def _post_id(value: bytes | None) -> int | None:
    if value is None:
        return None
    try:
        event = decode_event(value)
    except InvalidEvent:
        return None  # the projector dead-letters it; nothing to announce
    return event.data.id if event.type == "post" else None
