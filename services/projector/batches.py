"""Applying what one fetch returned: each partition's batch in its own transaction, all at once;
transient failures retried, a record the read model refuses isolated and dead-lettered, a
batch whose stored position moved back rolled back and its partition read again; the outcome
counted in the metrics."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition

from ..common import kafka
from ..common.db import WRITER_ACQUIRE_TIMEOUT_S, storage_errors
from ..common.runtime.retry import Failing, retry_transient
from ..common.tracing import OFF, Tracing
from ..readmodel.positions import PositionMovedBack
from .apply import BatchResult, ConsumedRecord, apply_batch, reject_record
from .batch_traces import BatchTrace
from .metrics import ProjectorMetrics
from .progress import PartitionProgress
from .registry import SchemaRegistry

log = logging.getLogger(__name__)

#: Errors that say a record's data is unacceptable to the read model (SQLSTATE classes 22
#: and 23). Anything else (connection, schema, locks) is retried, never set aside.
REFUSALS = (asyncpg.exceptions.DataError, asyncpg.exceptions.IntegrityConstraintViolationError)


class Batches:
    def __init__(
        self,
        pool: asyncpg.Pool,
        metrics: ProjectorMetrics,
        progress: PartitionProgress,
        failing: Failing,
        consumer: Callable[[], AIOKafkaConsumer | None],
        registry: SchemaRegistry | None = None,
        tracing: Tracing = OFF,
    ) -> None:
        self.pool, self.metrics, self.progress, self.failing = pool, metrics, progress, failing
        self._consumer = consumer
        #: Where a framed record's schema id is looked up (None: no registry configured).
        self.registry = registry
        #: Partitions with a batch being applied (their stored position may move meanwhile).
        self.applying: set[TopicPartition] = set()
        self.tracing = tracing
        #: The spans of each partition's batch being applied (tracing on).
        self.traces: dict[TopicPartition, BatchTrace] = {}

    async def apply_all(self, batches: dict[TopicPartition, list[ConsumedRecord]]) -> None:
        """Apply each partition's batch in its own transaction on its own connection, all at once.

        Partitions never share an entity (the key picks the partition), so their transactions
        touch disjoint rows except the shared counters and change stamps, which every writer
        locks in one global order (see :mod:`.apply`); a deadlock would still be retried. A
        fetch waits for the slowest partition instead of the sum of all of them. Every batch
        runs to its end (each retries on its own) before the first failure, if any, is raised,
        so no transaction is left behind when the loop restarts."""
        if len(batches) == 1:
            ((tp, records),) = batches.items()
            await self.apply(tp, records)
            return
        outcomes = await asyncio.gather(
            *(self.apply(tp, records) for tp, records in batches.items()), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome

    async def apply(self, tp: TopicPartition, records: list[ConsumedRecord]) -> None:
        """Apply one fetched batch of ``tp`` (under its spans, :mod:`.batch_traces`)."""
        self.applying.add(tp)
        trace = BatchTrace(self.tracing, tp, records) if self.tracing.enabled and records else None
        if trace is not None:
            self.traces[tp] = trace
        failed: BaseException | None = None
        try:
            if self.registry is not None:
                records = await self.registry.vet_retrying(records, self.failing)
            if trace is not None:
                trace.vetted(records)
            await self._isolating(tp, records)
        except PositionMovedBack as moved:
            # Nothing of the batch was written: read the partition again from the stored position.
            self.progress.rewound(moved)
            consumer = self._consumer()
            if consumer is not None and tp in consumer.assignment():
                self.progress.reading_from(tp, moved.stored)
                consumer.seek(tp, moved.stored)
        except BaseException as exc:
            failed = exc
            raise
        finally:
            self.applying.discard(tp)
            if trace is not None:
                del self.traces[tp]
                trace.end(failed)

    async def set_aside(self, bad: kafka.Undecodable) -> None:
        """Dead-letter a record the consumer could not decode and read on past it: the partition
        moves on, the others never waited."""
        tp = bad.tp
        log.error(
            "%s[%d]@%d cannot be decoded: %s; it is dead-lettered and the partition reads on past it",
            tp.topic,
            tp.partition,
            bad.offset,
            bad.reason,
            extra={
                "fields": {"topic": tp.topic, "partition": tp.partition, "offset": bad.offset, "reason_kind": bad.kind}
            },
        )
        await self.apply(tp, [ConsumedRecord(bad.offset, None, None, (bad.kind, bad.reason))])
        if (consumer := self._consumer()) is not None:
            consumer.seek(tp, max(bad.offset + 1, self.progress.stored.get(tp, 0)))

    async def _isolating(self, tp: TopicPartition, records: list[ConsumedRecord]) -> None:
        try:
            result = await self._retrying(tp, records)
        except REFUSALS as exc:
            # Not transient: some record breaks a read-model constraint. Find it by applying
            # one record at a time; the offender is set aside, everything else is applied.
            log.error(
                "batch %s[%d]@%d refused (%s); isolating the record", tp.topic, tp.partition, records[0].offset, exc
            )
            for record in records:
                await self._apply_or_reject(tp, record)
            return
        self._observe(tp, records, result)

    async def _apply_or_reject(self, tp: TopicPartition, record: ConsumedRecord) -> None:
        try:
            result = await self._retrying(tp, [record])
        except REFUSALS as exc:
            reason = f"refused by the read model: {type(exc).__name__}: {exc}"

            async def reject():
                with storage_errors("reject record"):
                    async with self.pool.acquire(timeout=WRITER_ACQUIRE_TIMEOUT_S) as conn:
                        return await reject_record(
                            conn, tp.topic, tp.partition, record, reason, expected=self.progress.stored.get(tp)
                        )

            if await retry_transient(reject, what="reject record", failing=self.failing):
                self.metrics.dead_lettered.labels("rejected").inc()
                log.warning("dead-lettered %s[%d]@%d: %s", tp.topic, tp.partition, record.offset, reason)
                self.progress.committed(tp, record.offset + 1)
            return
        self._observe(tp, [record], result)

    async def _retrying(self, tp: TopicPartition, records: list[ConsumedRecord]) -> BatchResult:
        async def attempt():
            started = time.perf_counter()
            with storage_errors(f"apply {tp.topic}[{tp.partition}]"):
                async with self.pool.acquire(timeout=WRITER_ACQUIRE_TIMEOUT_S) as conn:

                    def run() -> Awaitable[BatchResult]:
                        return apply_batch(conn, tp.topic, tp.partition, records, expected=self.progress.stored.get(tp))

                    trace = self.traces.get(tp)
                    result = await (run() if trace is None else trace.write(conn, records, run))
            self.metrics.batch_seconds.observe(time.perf_counter() - started)
            return result

        return await retry_transient(
            attempt,
            what=f"apply {tp.topic}[{tp.partition}]",
            failing=self.failing,
            on_retry=lambda _: self.metrics.retries.labels("apply").inc(),
        )

    def _observe(self, tp: TopicPartition, records: list[ConsumedRecord], result: BatchResult) -> None:
        m = self.metrics
        m.batch_size.observe(len(records))
        for kind, n in result.applied.items():
            m.events_applied.labels(kind).inc(n)
        if result.stale:
            m.events_stale.inc(result.stale)
        if result.skipped_redelivered:
            m.redelivered.inc(result.skipped_redelivered)
        for d in result.dead:
            m.dead_lettered.labels(d.kind).inc()
            log.warning("dead-lettered %s[%d]@%d: %s", tp.topic, tp.partition, d.offset, d.reason)
        if result.newest_emitted_at is not None:
            m.saw_event(result.newest_emitted_at)
        if result.position is not None:  # the stored position: a redelivered batch does not move it back
            self.progress.committed(tp, result.position)
