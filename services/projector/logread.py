"""Reading the log up to given offsets, for ``tickerwire projector rebuild``: the one loop behind
the bulk load's passes and the event-by-event replay, and the checks that keep it from waiting
forever.

- Before reading, the live schema's stored positions are compared with the log
  (:func:`discontinuities`, the rule of :mod:`..common.kafka.logcheck`). After a log reset the live
  positions are past the new log's end; a rebuild catching up with them would wait for offsets
  that never come. The rebuild is the documented way out of a reset, so it reads those
  partitions to the log's end instead (:mod:`.rebuild`).
- While reading (:func:`read_until`), a partition whose position stops moving short of its
  target for :data:`STALL_S` seconds (a broker gone, a log that ends earlier than it said) ends
  the rebuild with an error naming the partition, instead of a silent wait.
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from ..common import kafka
from ..common.kafka.logcheck import LIST_OFFSETS_TIMEOUT_S, Discontinuity, LogProbe, find_discontinuities
from ..common.runtime.config import Config
from ..common.runtime.errors import BrokerUnavailable
from .apply import ConsumedRecord
from .registry import SchemaRegistry

#: No partition position moving for this long, short of its target, ends the read.
STALL_S = 60.0
#: One fetch waits at most this long for records.
FETCH_TIMEOUT_MS = 500


async def read_until(
    consumer: AIOKafkaConsumer,
    targets: dict[TopicPartition, int],
    *,
    max_records: int,
    stall_s: float = STALL_S,
    registry: SchemaRegistry | None = None,
) -> AsyncIterator[tuple[TopicPartition, list[ConsumedRecord]]]:
    """Fetch whole batches of the assigned partitions until each position in ``targets`` has
    reached its target offset (records past a target are yielded too; the caller decides). A
    record the consumer cannot decode is yielded alone with its ``fault``, and read past.

    Raises :class:`BrokerUnavailable` when no position moves for ``stall_s`` seconds while
    one is short of its target. With ``registry``, a framed record whose schema id it does not
    know is yielded with its ``fault``, as the live projector sets it aside (:mod:`.registry`)."""
    positions = {tp: await consumer.position(tp) for tp in targets}
    unread = dict(positions)  # the next offset not yielded yet, per partition
    pending = {tp for tp, position in positions.items() if position < targets[tp]}
    moved = time.monotonic()

    async def rewind(tps: list[TopicPartition]) -> None:
        for tp in tps:
            consumer.seek(tp, unread[tp])

    while pending:
        batches, bad = await kafka.fetch(
            consumer, rewind, *pending, timeout_ms=FETCH_TIMEOUT_MS, max_records=max_records
        )
        for tp, records in batches.items():
            if records:
                unread[tp] = records[-1].offset + 1
                read = [ConsumedRecord(m.offset, m.key, m.value) for m in records]
                yield tp, read if registry is None else await registry.vet_retrying(read)
        if bad is not None:
            unread[bad.tp] = bad.offset + 1
            consumer.seek(bad.tp, bad.offset + 1)
            yield bad.tp, [ConsumedRecord(bad.offset, None, None, (bad.kind, bad.reason))]
        for tp in list(pending):
            position = await consumer.position(tp)
            if position != positions[tp]:
                positions[tp], moved = position, time.monotonic()
            if position >= targets[tp]:
                pending.discard(tp)
        if pending and time.monotonic() - moved > stall_s:
            short = ", ".join(
                f"{tp.topic}[{tp.partition}] at {positions[tp]} of {targets[tp]}" for tp in sorted(pending)
            )
            raise BrokerUnavailable(
                f"the log stopped delivering records for {stall_s:.0f} s short of the offsets to read ({short}): "
                "the broker is unreachable or the log ends earlier than it reported"
            )


async def discontinuities(config: Config, stored: dict[TopicPartition, int]) -> dict[TopicPartition, Discontinuity]:
    """The stored positions that are not a place in the log (past its end after a reset or a
    re-created topic, before its start after records were deleted), by the projector's rule."""
    stored = {tp: position for tp, position in stored.items() if position > 0}
    if not stored:
        return {}
    consumer = kafka.consumer(config, group_id=None, client_id="tickerwire-rebuild-check")
    probe = LogProbe(config, "tickerwire-rebuild-probe")
    try:
        async with asyncio.timeout(LIST_OFFSETS_TIMEOUT_S):
            await consumer.start()
        return await find_discontinuities(consumer, probe, stored)
    except (KafkaError, OSError, asyncio.TimeoutError) as exc:
        raise kafka.unreachable(config, exc, "cannot read the log offsets from") from exc
    finally:
        try:
            await probe.close()
        finally:
            await consumer.stop()
