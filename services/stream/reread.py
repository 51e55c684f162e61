"""Where the stream's feed reads a partition again after its log changed under it."""

from __future__ import annotations

import asyncio
import logging

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from ..common.kafka.logcheck import LIST_OFFSETS_TIMEOUT_S, Discontinuity, reread_from

log = logging.getLogger(__name__)


async def reread_start(consumer, tp: TopicPartition, gap: Discontinuity, seen_ts: dict[int, int]) -> int:
    """:func:`~..common.kafka.logcheck.reread_from` for this partition, asking the broker for the
    first record stamped after the newest one the feed had read (``seen_ts``: per partition, in
    ms; forgotten for ``tp`` once the broker answered)."""
    seen = seen_ts.get(tp.partition)
    if gap.position < gap.log_start or seen is None:
        return reread_from(gap, None, looked_up=False)
    try:
        async with asyncio.timeout(LIST_OFFSETS_TIMEOUT_S):
            found = (await consumer.offsets_for_times({tp: seen + 1})).get(tp)
    except (KafkaError, TimeoutError, ValueError) as exc:
        log.warning(
            "stream feed: the broker could not say which records of %s[%d] are newer than the last one "
            "read (%s); reading the whole log again",
            tp.topic,
            tp.partition,
            exc,
        )
        return reread_from(gap, None, looked_up=False)
    # A record stamped before the target is no answer (one broker says "offset 0, timestamp -1"
    # where Apache Kafka says "none").
    newer = found.offset if found is not None and found.timestamp > seen else None
    start = reread_from(gap, newer, looked_up=True)
    seen_ts.pop(tp.partition, None)
    return start
