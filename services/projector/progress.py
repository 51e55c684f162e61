"""Where the projector stands on each partition it is assigned: the stored position (the next
offset to apply, committed with the rows), the offset below which nothing is left to apply, and
the last known end of the partition's log; the lag gauge reads them when it is scraped."""

from __future__ import annotations

import functools
import logging
from typing import Callable, Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition

from ..common import kafka
from ..readmodel.positions import PositionMovedBack
from .metrics import ProjectorMetrics

log = logging.getLogger(__name__)


class PartitionProgress:
    def __init__(self, metrics: ProjectorMetrics, consumer: Callable[[], AIOKafkaConsumer | None]) -> None:
        self.metrics = metrics
        self._consumer = consumer
        #: The stored position per assigned partition (the next offset to apply).
        self.stored: dict[TopicPartition, int] = {}
        #: Per partition, an offset below which every offset is applied or holds nothing to apply
        #: (the consumer's position once all it fetched was applied; transaction markers and
        #: aborted records have offsets but nothing to apply), and the last known end of its log.
        self._settled: dict[TopicPartition, int] = {}
        self._ends: dict[TopicPartition, int] = {}

    def assigned(self, tp: TopicPartition, position: int) -> None:
        """``tp`` is this process's now, at its stored ``position``."""
        self.reading_from(tp, position)
        self.metrics.lag.labels(tp.topic, str(tp.partition)).set_function(functools.partial(self.lag, tp))

    def release(self, revoked: Iterable[TopicPartition]) -> None:
        """Forget the revoked partitions: another process reports them now."""
        for tp in revoked:
            self.stored.pop(tp, None)
            self._settled.pop(tp, None)
            for gauge in (self.metrics.lag, self.metrics.position):
                try:
                    gauge.remove(tp.topic, str(tp.partition))
                except KeyError:
                    pass

    def committed(self, tp: TopicPartition, position: int) -> None:
        """A batch of ``tp`` committed, its stored position now ``position``."""
        self.stored[tp] = position
        self.metrics.position.labels(tp.topic, str(tp.partition)).set(position)

    def reading_from(self, tp: TopicPartition, position: int) -> None:
        """``tp`` is read again from its stored ``position`` (the caller seeks the consumer)."""
        self.committed(tp, position)
        self._settled.pop(tp, None)

    def rewound(self, moved: PositionMovedBack) -> None:
        """A stored position behind the one this process stored: say so, count it."""
        log.warning("%s; reading the partition again from offset %d", moved, moved.stored)
        self.metrics.position_rewinds.labels(moved.topic, str(moved.partition)).inc()

    def lag(self, tp: TopicPartition) -> float:
        """Offsets of ``tp`` between its stored position and the end of its readable log (the last
        stable offset), computed when the gauge is read: records waiting while the consume loop
        is blocked or failing count, whatever the loop is doing. Offsets that hold nothing to
        apply (transaction markers, aborted records) do not."""
        consumer = self._consumer()
        end = kafka.log_end(consumer, tp) if consumer is not None and tp in consumer.assignment() else None
        if end is None:
            end = self._ends.get(tp)  # a new consumer before its first fetch: the last end known
        else:
            self._ends[tp] = end
        if end is None or tp not in self.stored:
            return 0.0
        return float(max(end - max(self.stored[tp], self._settled.get(tp, 0)), 0))

    def reached(self, tp: TopicPartition, offset: int) -> bool:
        """Whether everything of ``tp`` below ``offset`` is applied or holds nothing to apply."""
        return max(self.stored.get(tp, 0), self._settled.get(tp, 0)) >= offset

    def settled(self, tp: TopicPartition, fetching: int) -> None:
        """Everything below the consumer's position ``fetching`` was applied or holds nothing to apply."""
        self._settled[tp] = fetching
