"""The projector's periodic look at its partitions (:class:`..common.kafka.logcheck.LogGuard`):
a partition whose stored position the log no longer holds is stopped, loudly (ERROR line,
``tickerwire_projector_log_discontinuity``, readiness), until it holds it again (``tickerwire
projector accept-log``); a stored position that moved (behind what this process had committed,
or moved on by an operator) is followed: the partition is read again from it. The batch's own
check (``positions.lock(expected=)``) is the first line against a position that moved back; this
is the second."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from ..common.kafka.logcheck import Discontinuity, LogGuard
from ..readmodel.positions import Key, PositionMovedBack
from .batches import Batches
from .metrics import ProjectorMetrics
from .progress import PartitionProgress

log = logging.getLogger(__name__)


class LogWatch:
    def __init__(
        self,
        guard: LogGuard,
        metrics: ProjectorMetrics,
        progress: PartitionProgress,
        batches: Batches,
        stored: Callable[[list[TopicPartition]], Awaitable[dict[Key, int]]],
    ) -> None:
        self.guard, self.metrics, self.progress, self.batches = guard, metrics, progress, batches
        self._stored = stored
        #: Partitions whose projection is stopped because the log no longer holds their position.
        self.stopped: dict[TopicPartition, Discontinuity] = {}

    async def check(self, consumer: AIOKafkaConsumer, tps) -> None:
        """Stop every partition of ``tps`` whose stored position the log no longer holds; follow
        one whose stored position moved; resume one whose position is valid again."""
        tps = list(tps)
        if not tps:
            self.guard.checked_at = time.monotonic()
            return
        known = dict(self.progress.stored)  # committed by this process before the read below
        stored = await self._stored(tps)
        suspected, found = await self.guard.look(consumer, {tp: stored.get((tp.topic, tp.partition), 0) for tp in tps})
        for tp, gap in found.items():
            self._stop(consumer, tp, gap)
        for tp in tps:
            offset = stored.get((tp.topic, tp.partition), 0)
            if tp not in suspected and await self._follow(consumer, tp, offset, known):
                self.progress.reading_from(tp, offset)
                consumer.seek(tp, offset)
                consumer.resume(tp)
                self.clear(tp)

    def forget_others(self, assigned: list[TopicPartition]) -> None:
        """Partitions another process owns now, and checks itself."""
        for tp in list(self.stopped):
            if tp not in assigned:
                self.clear(tp)

    def clear(self, tp: TopicPartition) -> None:
        self.stopped.pop(tp, None)
        self.metrics.log_discontinuity.labels(tp.topic, str(tp.partition)).set(0)

    def _stop(self, consumer: AIOKafkaConsumer, tp: TopicPartition, gap: Discontinuity) -> None:
        if self.stopped.get(tp) != gap:
            log.error(
                "%s; projection of this partition is stopped. After checking the log, run "
                "`tickerwire projector accept-log --from earliest` (or rebuild)",
                gap.reason,
                extra={
                    "fields": {
                        "topic": tp.topic,
                        "partition": tp.partition,
                        "stored_position": gap.position,
                        "log_start": gap.log_start,
                        "log_end": gap.log_end,
                    }
                },
            )
        self.stopped[tp] = gap
        consumer.pause(tp)
        self.metrics.log_discontinuity.labels(tp.topic, str(tp.partition)).set(1)

    async def _follow(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int, known: dict[TopicPartition, int]
    ) -> bool:
        """Whether the consumer must read ``tp`` again from its stored position ``offset`` (read
        from the database after ``known`` was taken), saying why when it is news."""
        mine = self.progress.stored.get(tp)
        if tp in self.stopped:
            log.warning(
                "%s[%d]: stored position %d is in the log again; projection resumes", tp.topic, tp.partition, offset
            )
        elif tp in known and offset < known[tp]:
            # Behind what this process had committed before reading it: commits were lost.
            self.progress.rewound(PositionMovedBack(tp.topic, tp.partition, offset, known[tp]))
        elif mine is not None and offset < mine:
            return False  # a batch committed after the read: nothing moved
        elif mine is not None and offset > mine and tp not in self.batches.applying:
            # Moved under us (accept-log), not by a batch of ours committing: it is the truth.
            log.warning(
                "%s[%d]: stored position moved from %d to %d (projector accept-log?); reading from there",
                tp.topic,
                tp.partition,
                mine,
                offset,
            )
        elif (fetching := await fetch_position(consumer, tp)) is None or fetching == offset:
            return False
        else:
            # The stored position is the one this process wrote (or is writing): only the
            # consumer is elsewhere, e.g. a rebalance sought it to the stored position while a
            # batch was being applied. An ordinary re-seek, said at DEBUG.
            log.debug(
                "%s[%d]: reading from the stored position %d (the consumer was at %d)",
                tp.topic,
                tp.partition,
                offset,
                fetching,
            )
        return True


async def fetch_position(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int | None:
    """The consumer's fetch position of ``tp``, or None when the broker does not say within 1 s."""
    try:
        async with asyncio.timeout(1.0):  # not wait_for: see logcheck.find_discontinuities
            return await consumer.position(tp)
    except (asyncio.TimeoutError, KafkaError):
        return None
