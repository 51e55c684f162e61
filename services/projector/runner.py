"""The projector's consume loop: fetch, apply per partition, repeat.

Positions live in PostgreSQL next to the rows (see :mod:`.apply`). On every assignment the
consumer seeks each partition to its stored position, so Kafka's own committed offsets are
only informational (they are still committed, after the database, for lag tooling).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Coroutine

import asyncpg
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError

from tickerwire.schemas.topics import ALL_TOPICS, topic_name

from ..common import kafka
from ..common.db import storage_errors
from ..common.kafka.leave import leave_as_static_member
from ..common.kafka.logcheck import Discontinuity, LogGuard
from ..common.runtime import retry
from ..common.runtime.retry import Backoff, Failing, retry_transient
from ..common.runtime.supervise import honour_cancellation
from ..common.tracing import OFF, Tracing
from ..readmodel import positions
from .apply import ConsumedRecord
from .batch_traces import consumed
from .batches import Batches
from .catalog import CatalogFirst
from .logwatch import LogWatch, fetch_position
from .membership import Membership
from .metrics import ProjectorMetrics
from .progress import PartitionProgress
from .registry import registry_of
from .settings import ProjectorConfig

log = logging.getLogger(__name__)


KAFKA_COMMIT_INTERVAL_S = 2.0
#: How often the consume loop's watcher looks at the consumer-group join.
JOIN_WATCH_EVERY_S = 1.0


def projector_topics(config: ProjectorConfig) -> list[str]:
    return [topic_name(config.topic_prefix, spec) for spec in ALL_TOPICS]


class _SeekToStored(ConsumerRebalanceListener):
    def __init__(self, projector: "Projector") -> None:
        self.projector = projector

    async def on_partitions_revoked(self, revoked) -> None:
        log.info("partitions revoked: %s", sorted((tp.topic, tp.partition) for tp in revoked))
        self.projector.membership.joining()  # aiokafka calls this as a (re)join begins
        self.projector.progress.release(revoked)

    async def on_partitions_assigned(self, assigned) -> None:
        self.projector.membership.joined()  # the join completed (assigned may be empty: a spare member)
        async with self.projector.catalog_first.assigning(self.projector.consumer, list(assigned), self.projector):
            await self.projector.seek_to_stored(list(assigned))


class GroupJoinStalled(KafkaError):
    """A consumer-group join did not complete within ``projector_group_join_timeout_s``."""


class Projector:
    """Consumes every topic in one consumer group and applies batches to the read model: the
    loop, the consumer's life (its group join watched, replaced after a failure) and readiness.
    Where each partition stands is :class:`.progress.PartitionProgress`'s; applying a fetch is
    :class:`.batches.Batches`'s; the periodic look at the log is :class:`.logwatch.LogWatch`'s."""

    def __init__(
        self,
        config: ProjectorConfig,
        pool: asyncpg.Pool,
        metrics: ProjectorMetrics,
        *,
        client_id: str = "tickerwire-projector",
        failing: Failing | None = None,
        tracing: Tracing = OFF,
    ):
        #: The operations being retried now (this service's, shown by its readiness).
        self.failing = failing if failing is not None else Failing()
        self.config = config
        self.pool = pool
        self.metrics = metrics
        self.client_id = client_id
        self.consumer: AIOKafkaConsumer | None = None
        self._uncommitted: dict[TopicPartition, int] = {}
        self.caught_up = asyncio.Event()
        #: time.monotonic() of the last fetch that returned (records or not).
        self.fetched_at = 0.0
        self.progress = PartitionProgress(metrics, lambda: self.consumer)
        self.catalog_first = CatalogFirst(self.progress, config.topic_prefix)
        self.batches = Batches(
            pool,
            metrics,
            self.progress,
            self.failing,
            lambda: self.consumer,
            registry_of(config.projector_schema_registry_url, config.projector_schema_registry_timeout_s),
            tracing,
        )
        self._guard = LogGuard(config, f"{client_id}-probe")
        self.log_watch = LogWatch(self._guard, metrics, self.progress, self.batches, self._stored_offsets)
        #: Pauses before the consume loop restarts; reset by every fetch that was applied.
        self.backoff = Backoff(0.5, 30.0)
        #: Why the consume loop last failed, until a fetch is applied again ("" meanwhile): readiness names it.
        self.fault = ""
        self._failing_since: float | None = None
        self._fault_said_at: float | None = None
        self.membership = Membership(metrics)

    @property
    def stored_positions(self) -> dict[TopicPartition, int]:
        """The stored position per assigned partition (the next offset to apply)."""
        return self.progress.stored

    @property
    def stopped(self) -> dict[TopicPartition, Discontinuity]:
        """Partitions whose projection is stopped because the log no longer holds their position."""
        return self.log_watch.stopped

    async def close(self) -> None:
        """Release what outlives one consumer (the schema registry's HTTP session)."""
        if self.batches.registry is not None:
            await self.batches.registry.close()

    async def apply_records(self, tp: TopicPartition, records: list[ConsumedRecord]) -> None:
        """Apply one fetched batch of ``tp`` (:meth:`.batches.Batches.apply`)."""
        await self.batches.apply(tp, records)

    async def check_log(self, tps) -> None:
        """The periodic look at the log (:meth:`.logwatch.LogWatch.check`)."""
        assert self.consumer is not None
        await self.log_watch.check(self.consumer, tps)

    async def seek_to_stored(self, assigned: list[TopicPartition]) -> None:
        assert self.consumer is not None
        if not assigned:
            return
        stored = await self._rewind(assigned)
        for tp in assigned:
            self.progress.assigned(tp, stored.get((tp.topic, tp.partition), 0))
        log.info(
            "assigned and seeked: %s",
            {f"{tp.topic}[{tp.partition}]": stored.get((tp.topic, tp.partition), 0) for tp in assigned},
        )
        self.log_watch.forget_others(assigned)
        await self.check_log(assigned)

    async def _stored_offsets(self, tps) -> dict[tuple[str, int], int]:
        async def load():
            with storage_errors("load positions"):
                return await positions.load(self.pool, {tp.topic for tp in tps})

        return await retry_transient(
            load,
            what="load positions",
            failing=self.failing,
            on_retry=lambda _: self.metrics.retries.labels("positions").inc(),
        )

    async def _rewind(self, tps: list[TopicPartition]) -> dict[tuple[str, int], int]:
        """Seek ``tps`` to their stored positions (the log start where none is stored); returns those."""
        assert self.consumer is not None
        stored = await self._stored_offsets(tps)
        for tp in tps:
            offset = stored.get((tp.topic, tp.partition))
            if offset is None:
                await self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, offset)
        return stored

    async def _update_lag(self) -> None:
        """After a fetch was applied: what the consumer has read past holds nothing to apply; set
        ``caught_up`` once every partition's lag is 0."""
        assert self.consumer is not None
        assignment = self.consumer.assignment()
        caught_up = bool(assignment)
        for tp in assignment:
            fetching = await fetch_position(self.consumer, tp)  # bounded: a position being reset asks the broker
            if fetching is None or kafka.log_end(self.consumer, tp) is None or tp not in self.progress.stored:
                caught_up = False
                continue
            self.progress.settled(tp, fetching)
            caught_up = caught_up and self.progress.lag(tp) == 0
        if caught_up:
            self.caught_up.set()

    async def run(self) -> None:
        """Consume until cancelled. Broker outages are retried, never skipped past."""
        while True:
            honour_cancellation()  # a stop requested while the last consumer stopped
            self.consumer = kafka.consumer(
                self.config,
                group_id=self.config.projector_group,
                group_instance_id=self.config.projector_group_instance_id or None,
                client_id=self.client_id,
                max_poll_records=self.config.projector_batch_max,
            )
            self.consumer.subscribe(projector_topics(self.config), listener=_SeekToStored(self))
            self.membership.new_consumer()
            try:
                await self._watching_the_join(self._start_and_loop())
            except GroupJoinStalled as exc:
                log.error("%s; replacing the consumer", exc)
                self._failed(str(exc), None)
                self.metrics.retries.labels("group_join").inc()
                await asyncio.sleep(self.backoff.delay())
            except KafkaError as exc:
                self._failed(f"broker error: {type(exc).__name__}: {exc}", "broker error, reconnecting")
                self.metrics.retries.labels("broker").inc()
                await asyncio.sleep(self.backoff.delay())
            except Exception as exc:
                # Not known to be transient (a bug, a constraint a snapshot violates): never skip
                # the batch; start over from the stored positions after a capped, jittered pause.
                log.exception("projector loop failed; restarting from the stored positions")
                self._failed(f"loop failed: {type(exc).__name__}: {exc}", None)
                self.metrics.retries.labels("loop").inc()
                await asyncio.sleep(self.backoff.delay())
            finally:
                try:
                    await self._guard.close()
                    await self._leave_if_stopping()
                finally:
                    await kafka.stop_consumer(self.consumer)  # even when closing the probe failed

    async def _leave_if_stopping(self) -> None:
        """On a planned stop, a static member leaves its group at once (aiokafka would not), so
        its partitions move now instead of after its session timeout."""
        task = asyncio.current_task()
        instance_id = self.config.projector_group_instance_id
        if instance_id and self.consumer is not None and task is not None and task.cancelling():
            await leave_as_static_member(self.consumer, self.config.projector_group, instance_id)

    async def _watching_the_join(self, consume: Coroutine[Any, Any, None]) -> None:
        """Run the consume loop while watching the consumer-group join: aiokafka's fetch waits
        for an assignment whatever its timeout, so a join that does not complete would hold the
        loop without a word. One that passes ``projector_group_join_timeout_s`` ends the loop
        with :class:`GroupJoinStalled` (the consumer is then replaced)."""
        task = asyncio.create_task(consume, name="projector-consume")
        try:
            while not task.done():
                await asyncio.wait([task], timeout=JOIN_WATCH_EVERY_S)
                if not task.done() and (cause := self.join_stalled()) is not None:
                    raise GroupJoinStalled(cause)
            task.result()
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait([task], timeout=JOIN_WATCH_EVERY_S * 10)

    async def _start_and_loop(self) -> None:
        assert self.consumer is not None
        await self.consumer.start()
        committer = asyncio.create_task(self._commit_forever(), name="kafka-commit")
        try:
            await self._loop()
        finally:
            committer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await committer

    async def _loop(self) -> None:
        assert self.consumer is not None
        while True:
            honour_cancellation()
            if self._guard.due(self.config.log_check_interval_s):
                await self.check_log(self.consumer.assignment())
            # A fetch position out of the log's range makes the consumer jump to the log start;
            # what it then reads lies below the stored position and is skipped, never applied,
            # until the check stops the partition. Nothing is lost: accept-log re-reads it.
            # A batch that cannot be decoded is found and set aside; the other partitions go on.
            batches, bad = await kafka.fetch(
                self.consumer, self._rewind, timeout_ms=500, max_records=self.config.projector_batch_max
            )
            self.fetched_at = time.monotonic()
            await self.batches.apply_all({tp: [consumed(m) for m in msgs] for tp, msgs in batches.items() if msgs})
            if bad is not None:
                await self.batches.set_aside(bad)
            for tp, msgs in batches.items():
                if msgs and tp in self.progress.stored:
                    self._uncommitted[tp] = self.progress.stored[tp]
            await self._update_lag()
            self.catalog_first.resume_when_done(self.consumer, self.stopped)
            self.backoff.reset()  # a fetch applied: the next failure starts from the short pause
            self._recovered()

    def join_stalled(self) -> str | None:
        """Why the consumer-group join counts as stalled, or None while it is not."""
        joining_for = self.membership.joining_for()
        if joining_for < self.config.projector_group_join_timeout_s:
            return None
        coordinator = getattr(getattr(self.consumer, "_coordinator", None), "coordinator_id", None)
        return (
            f"the join of consumer group {self.config.projector_group!r} has not completed for {joining_for:.0f} s "
            f"(group coordinator: {'unknown' if coordinator is None else f'broker {coordinator}'}; "
            f"brokers {self.config.kafka_bootstrap_servers})"
        )

    def consuming(self, stall_s: float) -> tuple[bool, str]:
        """Readiness: caught up once since start, and fetching within ``stall_s``; when not,
        with the cause: a consumer-group join that does not complete, the consume loop's last
        failure, or an operation being retried."""
        if (stalled := self.join_stalled()) is not None:
            return False, stalled
        cause = self.fault or self.failing.causes()
        because = f" ({cause})" if cause else ""
        if not self.caught_up.is_set():
            return False, "catching up" + because
        silent = time.monotonic() - self.fetched_at
        if silent > stall_s:
            return False, f"no fetch for {silent:.0f}s{because}"
        return True, "ok"

    def _failed(self, fault: str, warning: str | None) -> None:
        """The consume loop failed: readiness names ``fault``; a WARNING line (``warning``), or an
        ERROR once the loop has been failing for ERROR_AFTER_S (then every ERROR_EVERY_S)."""
        now = time.monotonic()
        self.fault = fault
        if self._failing_since is None:
            self._failing_since = now
        failing_for = now - self._failing_since
        if failing_for >= retry.ERROR_AFTER_S and (
            self._fault_said_at is None or now - self._fault_said_at >= retry.ERROR_EVERY_S
        ):
            self._fault_said_at = now
            log.error("the projector has not applied a fetch for %.0f s: %s; retrying", failing_for, fault)
        elif warning is not None:
            log.warning("%s: %s", warning, fault)

    def _recovered(self) -> None:
        if self._failing_since is not None:
            log.warning("the projector applies fetches again after %.0f s", time.monotonic() - self._failing_since)
        self.fault, self._failing_since, self._fault_said_at = "", None, None

    async def _commit_forever(self) -> None:
        """Mirror the stored positions into Kafka's committed offsets now and then, off the hot
        path: they are informational (lag tooling), the database holds the truth. A failure
        is retried at the next tick; a crash is logged and the mirror goes on after a pause
        that grows while it keeps crashing and is short again once a tick worked."""
        backoff = Backoff(KAFKA_COMMIT_INTERVAL_S, 30.0)
        while True:
            honour_cancellation()
            await asyncio.sleep(KAFKA_COMMIT_INTERVAL_S)
            try:
                await self._commit_to_kafka()
            except Exception:
                log.exception("kafka position mirror crashed; going on")
                await asyncio.sleep(backoff.delay())
            else:
                backoff.reset()

    async def _commit_to_kafka(self) -> None:
        offsets, self._uncommitted = self._uncommitted, {}
        consumer = self.consumer
        assigned = consumer.assignment() if consumer is not None else set()
        offsets = {tp: o for tp, o in offsets.items() if tp in assigned}
        if offsets and consumer is not None:
            try:
                await consumer.commit(offsets)
            except KafkaError as exc:
                log.debug("kafka commit failed: %s", exc)


async def ensure_topics_with_retry(config: ProjectorConfig, failing: Failing | None = None) -> None:
    await retry_transient(lambda: kafka.ensure_topics(config), what="create topics", cap=2.0, failing=failing)
