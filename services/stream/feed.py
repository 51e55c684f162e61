"""The stream's view of the post topic: every partition, no consumer group, no replay.

Each stream process assigns itself every partition of the post topic and starts at the
projector's stored positions, so it announces exactly the posts projected after it started
(it never trusts the broker's end offset).

Two tasks form a pipeline. The consumer decodes each record's post id into a pending
queue and goes on reading. The announcer waits until the projector's stored position
has passed the oldest pending records (one cheap query per poll, and only while something
is pending), then selects the lean JSON of the translations those records first made
visible and broadcasts it (:class:`.broadcast.Broadcaster`). A post.created is therefore sent only after the projector has
committed the post, and its data is the stored lean JSON, identical to the GET /posts item.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Annotated, Awaitable, Callable

import asyncpg
from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError, OffsetOutOfRangeError
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from tickerwire.schemas.models import unframe
from tickerwire.schemas.topics import POSTS, topic_name

from ..common import kafka
from ..common.db import BACKGROUND_ACQUIRE_TIMEOUT_S, BoundedReader, storage_errors
from ..common.kafka.logcheck import LogGuard, find_discontinuities
from ..common.runtime.retry import Backoff, retry_transient
from ..common.runtime.supervise import honour_cancellation
from ..common.tracing import OFF, Tracing
from ..readmodel import positions
from .broadcast import Broadcaster
from .hub import Hub
from .metrics import StreamMetrics
from .pending import Pending
from .reread import reread_start
from .settings import StreamConfig

log = logging.getLogger(__name__)

#: A missing posts topic is logged once after this long (a fresh cluster may create it a moment later).
TOPIC_WAIT_WARN_S = 5.0

#: Records announced per query.
ANNOUNCE_BATCH = 1_000


class Feed:
    def __init__(
        self,
        config: StreamConfig,
        pool: asyncpg.Pool,
        hub: Hub,
        metrics: StreamMetrics,
        poll_s: float = 0.02,
        *,
        before_announce: Callable[[list[tuple[int, int]]], Awaitable[None]] | None = None,
        tracing: Tracing = OFF,
    ) -> None:
        self.config = config
        self.pool = pool
        #: Its statements, each wait for a pooled connection bounded (the handshakes share the pool).
        self.db = BoundedReader(pool, BACKGROUND_ACQUIRE_TIMEOUT_S)
        self.hub = hub
        self.metrics = metrics
        self.poll_s = poll_s
        self.topic = topic_name(config.topic_prefix, POSTS)
        self.yield_every = max(1, config.stream_queue_size // 4)
        self.started = asyncio.Event()
        self._pending: collections.deque[Pending] = collections.deque()
        self._has_pending = asyncio.Event()
        self.max_pending = config.stream_max_pending
        self._room = asyncio.Event()
        self._room.set()
        #: time.monotonic() since when reading is paused because max_pending records wait, or None.
        self.paused_since: float | None = None
        metrics.feed_pending.set_function(lambda: len(self._pending))
        self._next: dict[int, int] = {}  # next offset to consume per partition, kept across broker reconnects
        #: The newest record timestamp (ms) read per partition: after a log reset, what was already read.
        self._seen_ts: dict[int, int] = {}
        #: Since when the posts topic is missing on the broker (None: it was there), and whether that was logged.
        self._topic_missing_since: float | None = None
        self._topic_missing_logged = False
        self.announcer: asyncio.Task | None = None
        #: Why the feed cannot read on (its positions are not in the log), or "".
        self.stopped = ""
        metrics.feed_stopped.set_function(lambda: 1 if self.stopped else 0)
        self._guard = LogGuard(config, "tickerwire-stream-probe")
        #: Pauses before reconnecting to the broker; short again after a fetch worked.
        self.backoff = Backoff(0.5, 10.0)
        #: Announces what the projector committed, and holds the resume position (docs/resume.md).
        self.broadcaster = Broadcaster(self.db, hub, metrics, self.yield_every, before_announce, tracing)

    async def run(self) -> None:
        """Run the consumer and the announcer until cancelled; if either stage crashes, the
        other is stopped and the crash propagates (to the supervisor, which restarts both)."""
        stages = [
            asyncio.create_task(self._consume_forever(), name="stream-consumer"),
            asyncio.create_task(self._announce_forever(), name="stream-announcer"),
        ]
        self.announcer = stages[1]
        try:
            done, _ = await asyncio.wait(stages, return_when=asyncio.FIRST_COMPLETED)
            for stage in done:
                stage.result()
            raise RuntimeError("a stream feed stage stopped")
        finally:
            for stage in stages:
                stage.cancel()
            await asyncio.wait(stages)

    def check(self) -> tuple[bool, str]:
        """Readiness: both stages running, reading, and the log still holds the feed's positions."""
        if not self.started.is_set():
            return False, "feed starting"
        if self.announcer is None or self.announcer.done():
            return False, "announcer not running"
        if self.stopped:
            return False, self.stopped
        if self.paused_since is not None:
            # Ready, with the reason: connected clients are still served, only late; taking
            # the process out of rotation would not make the projector catch up sooner.
            return True, (
                f"paused for {time.monotonic() - self.paused_since:.0f}s: {len(self._pending)} records "
                "wait for the projector to commit them; posts are announced late"
            )
        return True, "ok"

    def _pause(self) -> None:
        self._room.clear()
        if self.paused_since is None:
            self.paused_since = time.monotonic()
            self.metrics.feed_paused.set(1)
            log.warning(
                "stream feed paused: %d records wait for the projector to commit them "
                "(TICKERWIRE_STREAM_MAX_PENDING); reading resumes at half that",
                len(self._pending),
            )

    def _resume(self) -> None:
        self._room.set()
        if self.paused_since is not None:
            log.warning("stream feed resumes after %.1fs paused", time.monotonic() - self.paused_since)
            self.paused_since = None
            self.metrics.feed_paused.set(0)

    async def _consume_forever(self) -> None:
        while True:
            honour_cancellation()  # a stop requested while the last consumer stopped
            consumer = kafka.consumer(
                self.config, group_id=None, client_id="tickerwire-stream", auto_offset_reset="none"
            )
            try:
                await consumer.start()
                await self._consume(consumer)  # returns only to be replaced by a new consumer
            except KafkaError as exc:
                delay = self.backoff.delay()
                log.warning("broker error, reconnecting in %.1fs: %s", delay, exc)
                await asyncio.sleep(delay)
            finally:
                try:
                    await self._guard.close()
                finally:
                    await kafka.stop_consumer(consumer)  # even when closing the probe failed

    # ------------------------------------------------------------------ consuming

    async def _consume(self, consumer) -> None:
        tps = await self._assign(consumer, await self._wait_for_topic(consumer))
        while True:
            honour_cancellation()
            await self._room.wait()
            if self._guard.due(self.config.log_check_interval_s):
                await self._check_log(consumer, tps)
            batches = await self._fetch(consumer, tps)
            if batches is not None:
                self._queue(batches)

    async def _wait_for_topic(self, consumer) -> set[int]:
        """The partitions of the posts topic, once the broker has it."""
        while not (partitions := await kafka.partitions_of(consumer, self.topic)):
            if self._topic_missing_since is None:
                self._topic_missing_since = time.monotonic()
            elif not self._topic_missing_logged and time.monotonic() - self._topic_missing_since >= TOPIC_WAIT_WARN_S:
                self._topic_missing_logged = True  # once: readiness keeps saying "feed starting" meanwhile
                log.warning(
                    "stream feed: topic %s does not exist on the broker yet; waiting for it "
                    "(create it with `tickerwire topics ensure`)",
                    self.topic,
                )
            await asyncio.sleep(0.5)
        if self._topic_missing_logged:
            log.warning("stream feed: topic %s exists now", self.topic)
        self._topic_missing_since, self._topic_missing_logged = None, False
        return partitions

    async def _assign(self, consumer, partitions: set[int]) -> list[TopicPartition]:
        """Assign every partition to ``consumer`` and seek each to the next offset to read: the
        projector's stored positions the first time, where this feed got to after that."""
        tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        if not self._next:
            self._next = positions.of_topic(await self._stored(), self.topic)
            self.broadcaster.marks = {p: (offset, "") for p, offset in self._next.items()}
            await self.broadcaster.refresh_epoch()
        for tp in tps:
            consumer.seek(tp, self._next.setdefault(tp.partition, 0))
        self.started.set()
        log.info("stream feed reading from %s", dict(self._next))
        return tps

    async def _fetch(self, consumer, tps: list[TopicPartition]) -> dict[TopicPartition, list[ConsumerRecord]] | None:
        """The records of one fetch by partition, or None when a position was out of range (the
        log is checked then)."""

        async def rewind(tps: list[TopicPartition]) -> None:
            for tp in tps:
                consumer.seek(tp, self._next.get(tp.partition, 0))

        try:
            # A batch that cannot be decoded is found and skipped (the projector dead-letters
            # it); the other partitions go on.
            batches, bad = await kafka.fetch(consumer, rewind, timeout_ms=500)
        except OffsetOutOfRangeError as exc:
            log.warning("stream feed position out of range (%s); checking the log", exc)
            await self._check_log(consumer, tps)
            return None
        if bad is not None:
            log.warning("stream feed skips %s[%d]@%d: %s", bad.tp.topic, bad.tp.partition, bad.offset, bad.reason)
            self._next[bad.tp.partition] = bad.offset + 1
            consumer.seek(bad.tp, bad.offset + 1)
        self.backoff.reset()
        return batches

    def _queue(self, batches: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        """Queue the post records of a fetch for the announcer; pause reading at ``max_pending``."""
        arrived = time.perf_counter()
        for tp, msgs in batches.items():
            for m in msgs:
                if (post_id := announced_post_id(m.value)) is not None:
                    self._pending.append(Pending(tp.partition, m.offset, post_id, arrived))
            if msgs:
                self._next[tp.partition] = msgs[-1].offset + 1
                if msgs[-1].timestamp > self._seen_ts.get(tp.partition, -1):
                    self._seen_ts[tp.partition] = msgs[-1].timestamp
        if self._pending:
            self._has_pending.set()
            if len(self._pending) >= self.max_pending:
                self._pause()

    async def _check_log(self, consumer, tps: list[TopicPartition]) -> None:
        """When the post log no longer holds the feed's positions (log reset, or records deleted
        before the feed read them), the feed is stopped, loudly (ERROR log, readiness, metric),
        until the log holds the projector's stored positions (after ``accept-log``). Then it
        reads the partition again from the first record it has not read
        (:func:`~..common.kafka.logcheck.reread_from`): the log start for a new log or for deleted
        records, past the records already read for a log cut back. Every record of a new log
        that the projector projects is announced, those it projected before the feed got here
        included (late, not lost). Announcements are tied to the record that first made a
        translation visible, so a new log's record never announces one already pushed, and one
        the projector skipped (``accept-log --from latest``) announces nothing."""
        await self.broadcaster.refresh_epoch()  # an idle feed learns a new epoch within one check interval
        suspected, found = await self._guard.look(consumer, {tp: self._next.get(tp.partition, 0) for tp in tps})
        if not suspected:
            if self.stopped:
                log.warning("stream feed resumes: its positions are in the log again")
                for tp in tps:
                    consumer.resume(tp)
            self.stopped = ""
            return
        if not found:
            return  # suspected only, not confirmed yet
        projector = positions.of_topic(await self._stored(), self.topic)
        again = await find_discontinuities(
            consumer, self._guard.probe, {tp: projector.get(tp.partition, 0) for tp in found}
        )
        for tp in found:
            if tp in again:
                continue
            start = await reread_start(consumer, tp, found[tp], self._seen_ts)
            log.warning(
                "stream feed %s; reading it again from offset %d (log start %d, the projector at %d)",
                found[tp].reason,
                start,
                found[tp].log_start,
                projector.get(tp.partition, 0),
            )
            self.metrics.feed_log_restarts.labels(str(tp.partition)).inc()
            self._next[tp.partition] = start
            # A partition the marks do not name is at START already: naming it could name one
            # the read model has no position of (a cursor it would refuse).
            if tp.partition in (marks := self.broadcaster.marks):
                marks[tp.partition] = min(marks[tp.partition], (start, ""))
            consumer.seek(tp, start)
            # Records of the old log still waiting would never match the new one.
            self._pending = collections.deque(p for p in self._pending if p.partition != tp.partition)
        stopped = "; ".join(gap.reason for gap in again.values())
        if stopped and stopped != self.stopped:
            log.error("stream feed stopped: %s; waiting for `tickerwire projector accept-log`", stopped)
        for tp in again:
            consumer.pause(tp)
        for tp in found:
            if tp not in again:
                consumer.resume(tp)
        self.stopped = stopped

    # ------------------------------------------------------------------ announcing

    async def _stored(self) -> dict[positions.Key, int]:
        """The projector's stored positions of the posts topic."""

        async def load():
            with storage_errors("projector positions"):
                return await positions.load(self.db, [self.topic])

        return await retry_transient(load, what="projector positions", cap=2.0)

    async def _announce_forever(self) -> None:
        while True:
            await self._has_pending.wait()
            ready = self._take_committed(await self._stored())
            if ready:
                await self.broadcaster.announce(ready)
            else:
                await asyncio.sleep(self.poll_s)
            if not self._pending:
                self._has_pending.clear()
            if len(self._pending) <= self.max_pending // 2:
                self._resume()

    def _take_committed(self, stored: dict[positions.Key, int]) -> list[Pending]:
        """Remove and return pending records the projector has committed, in log order per partition."""
        ready: list[Pending] = []
        waiting: collections.deque[Pending] = collections.deque()
        for p in self._pending:
            if len(ready) < ANNOUNCE_BATCH and positions.projected(stored, (self.topic, p.partition), p.offset):
                ready.append(p)
            else:
                waiting.append(p)
        self._pending = waiting
        return ready


class _PostRef(BaseModel):
    """``data.id`` of a post event, typed and bounded as the event contract has it."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    id: Annotated[int, Field(strict=True, ge=1, le=2**53)]


class _Announcing(BaseModel):
    """What the stream needs of a posts-topic record: is it a post event, and which post. The
    rest (a whole post, every translation's body) is the projector's to validate; the stream
    announces only what the projector committed, so a record it dead-letters announces nothing."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    type: str
    data: _PostRef | None = None


_ANNOUNCING = TypeAdapter(_Announcing)


def announced_post_id(value: bytes | None) -> int | None:
    """The post id a posts-topic record announces, or None (not a post event, or not decodable).
    A value framed by a schema-registry serializer is read past its frame, as the projector reads it."""
    if value is None:
        return None
    try:
        record = _ANNOUNCING.validate_json(unframe(value)[1])
    except ValidationError:
        return None  # the projector dead-letters it; nothing to announce
    return record.data.id if record.type == "post" and record.data is not None else None
