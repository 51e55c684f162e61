"""Reading a topic's log: its partitions as the cluster says now, where a partition's readable
log ends, and fetching that a batch the consumer cannot decode does not stop.

A record batch that cannot be decoded (a compression codec we cannot decode, a corrupt batch)
is the record's own fault, not the broker's: :func:`fetch` isolates it to its partition and
offset, so the caller sets it aside and every other partition goes on.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import CorruptRecordException, KafkaError, UnsupportedCodecError

log = logging.getLogger(__name__)


async def partitions_of(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    """The partitions of ``topic`` as the cluster says now (empty while it does not exist).

    Asked of the broker, not of the consumer's cached metadata: a consumer without a group
    caches only the topics it was assigned, and its bootstrap asks for no topic at all on
    Apache Kafka (an empty Metadata request of v1+ means "none"; some other brokers answer
    with every topic), so ``partitions_for_topic`` of a topic never assigned stays None there."""
    cluster = await consumer._client.fetch_all_metadata()
    return set(cluster.partitions_for_topic(topic) or ())


def log_end(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int | None:
    """Where ``tp``'s readable log ends for this consumer, from its last fetch: the last stable
    offset (no record of an open transaction is readable past it), or the high watermark from
    a broker that reports no last stable offset; None before the first fetch."""
    lso = consumer.last_stable_offset(tp)
    if lso is not None and lso >= 0:
        return lso
    return consumer.highwater(tp)


# ------------------------------------------------------------------ undecodable batches

#: Dead-letter reason kinds of a record that could not be decoded at all.
CODEC = "codec"
CORRUPT_BATCH = "corrupt_batch"
#: Where aiokafka decodes fetched batches (its pure-Python and compiled record readers, the codecs).
_DECODING_CODE = ("aiokafka/record/", "aiokafka\\record\\", "aiokafka/codec", "aiokafka\\codec", "cramjam")


def decode_fault(exc: BaseException) -> tuple[str, str] | None:
    """The dead-letter kind and reason when ``exc`` was raised decoding a fetched batch (the
    record's own fault: retrying reads the same bytes again), else None (a broker or network
    fault, retried)."""
    if isinstance(exc, UnsupportedCodecError):
        return CODEC, f"the record batch's compression codec cannot be decoded here: {exc}"
    if isinstance(exc, CorruptRecordException):
        return CORRUPT_BATCH, f"corrupt record batch: {exc}"
    if isinstance(exc, (KafkaError, asyncio.CancelledError)) or not isinstance(exc, Exception):
        return None
    tb = exc.__traceback__
    while tb is not None:
        if any(part in tb.tb_frame.f_code.co_filename for part in _DECODING_CODE):
            return CORRUPT_BATCH, f"the record batch cannot be decoded: {type(exc).__name__}: {exc}"
        tb = tb.tb_next
    return None


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A record the consumer could not decode: the first offset of its batch not read yet."""

    tp: TopicPartition
    offset: int
    kind: str
    reason: str


#: How long :func:`fetch` waits for the partitions' records again while isolating a bad batch.
ISOLATE_S = 2.0


async def fetch(
    consumer: AIOKafkaConsumer,
    rewind: Callable[[list[TopicPartition]], Awaitable[object]],
    *partitions: TopicPartition,
    timeout_ms: int,
    max_records: int | None = None,
) -> tuple[dict[TopicPartition, list[ConsumerRecord]], Undecodable | None]:
    """``consumer.getmany(*partitions)`` that a batch it cannot decode does not stop.

    aiokafka raises a decode error out of ``getmany`` for all partitions at once, and drops
    what it had already taken from the others. Then ``rewind`` seeks the given partitions back
    to the caller's next unread offset, the partitions are read one at a time to find the one
    that fails, and that one record by record to the offset that fails. Returns the records
    read and that offset (None when nothing failed); the caller sets the offset aside and seeks
    past it. A record of a bad batch fails alone: the next one of its batch is found by the
    next call."""
    try:
        return await consumer.getmany(*partitions, timeout_ms=timeout_ms, max_records=max_records), None
    except Exception as exc:
        if decode_fault(exc) is None:
            raise
        log.warning("a fetched record batch cannot be decoded (%s: %s); finding its partition", type(exc).__name__, exc)
    paused = consumer.paused()
    tps = sorted(tp for tp in (partitions or consumer.assignment()) if tp not in paused)
    await rewind(tps)  # a seek drops what aiokafka had fetched, taken or not
    got: dict[TopicPartition, list[ConsumerRecord]] = {}
    deadline = asyncio.get_running_loop().time() + ISOLATE_S
    while asyncio.get_running_loop().time() < deadline:
        for tp in tps:
            try:
                records = (await consumer.getmany(tp, timeout_ms=0, max_records=max_records)).get(tp)
            except Exception as exc:
                if decode_fault(exc) is None:
                    raise
                if got.get(tp):
                    consumer.seek(tp, got[tp][-1].offset + 1)
                else:
                    await rewind([tp])
                more, bad = await _isolate(consumer, tp, max_records or 500)
                got.setdefault(tp, []).extend(more)
                return got, bad
            if records:
                got.setdefault(tp, []).extend(records)
        await asyncio.sleep(0.05)
    return got, None  # fetched again, and decoded this time


async def _isolate(
    consumer: AIOKafkaConsumer, tp: TopicPartition, most: int
) -> tuple[list[ConsumerRecord], Undecodable | None]:
    """Read ``tp`` one record at a time to the one that cannot be decoded (at most ``most``
    records: the next call goes on from there)."""
    records: list[ConsumerRecord] = []
    while len(records) < most:
        try:
            async with asyncio.timeout(ISOLATE_S):
                records.append(await consumer.getone(tp))
        except TimeoutError:
            return records, None
        except Exception as exc:
            if (fault := decode_fault(exc)) is None:
                raise
            offset = await consumer.position(tp)
            consumer.seek(tp, offset)  # drops the failed batch
            return records, Undecodable(tp, offset, *fault)
    return records, None
