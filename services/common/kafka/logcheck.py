"""Is a stored position still a place in the log? The rule that keeps a log reset loud.

A reader that stores its position (the projector in PostgreSQL, the stream in memory) can
find the log changed under it: the broker replaced by an empty one or a topic deleted and
re-created (the log now ends before the stored position), or retention deleting records
that were never read (the log now starts after it). Reading on would silently skip records
or wait forever for offsets that will never come; both are refused loudly instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaTimeoutError, OffsetOutOfRangeError

from . import clients

#: A discontinuity counts once seen continuously for this long: some brokers report a stale
#: end offset for a few seconds after writes (a real reset does not go away).
CONFIRM_S = 6.0
#: How often a suspected discontinuity is looked at again while it is being confirmed.
RECHECK_SUSPECT_S = 1.0
LIST_OFFSETS_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Discontinuity:
    topic: str
    partition: int
    position: int
    log_start: int
    log_end: int

    @property
    def reason(self) -> str:
        where = f"{self.topic}[{self.partition}]"
        if self.position > self.log_end:
            return (
                f"log discontinuity on {where}: stored position {self.position} is past the log end "
                f"{self.log_end} (log reset or topic re-created)"
            )
        return (
            f"log discontinuity on {where}: stored position {self.position} is before the log start "
            f"{self.log_start} (records deleted before they were projected)"
        )


def reread_from(gap: Discontinuity, newer_than_seen: int | None, looked_up: bool) -> int:
    """Where a reader that announces each record once (the stream's feed) reads a partition
    again after ``gap``, so it neither skips a record it never read nor reads again one it had.

    A position before the log start (records deleted unread): from the log start. A position
    past the log end is either a new log (broker replaced, topic re-created: every record is
    new) or the old one cut back (an unclean leader election: the records left are ones already
    read, at their old offsets). Records are told apart by time: ``newer_than_seen`` is the
    first offset holding a record stamped after the newest one the reader had read (None: no
    such record yet), from the broker's offset-for-timestamp lookup; when the broker could not
    be asked (``looked_up`` false) every record counts as new."""
    if gap.position < gap.log_start or not looked_up:
        return gap.log_start
    if newer_than_seen is None:
        return gap.log_end
    return max(gap.log_start, min(newer_than_seen, gap.log_end))


def discontinuity(tp: TopicPartition, position: int, log_start: int, log_end: int) -> Discontinuity | None:
    """The discontinuity of ``position`` in a log holding offsets [log_start, log_end), if any.

    ``position == log_end`` is the normal caught-up state; ``position == log_start`` has lost
    nothing."""
    if position > log_end or position < log_start:
        return Discontinuity(tp.topic, tp.partition, position, log_start, log_end)
    return None


async def find_discontinuities(
    consumer: AIOKafkaConsumer, probe: "LogProbe", positions: dict[TopicPartition, int]
) -> dict[TopicPartition, Discontinuity]:
    """Compare each position with its partition's log start and end offsets. A position past
    the reported end is only suspected when the log still holds the record just before it:
    some Kafka-protocol brokers report end offsets that lag far behind what they hold."""
    if not positions:
        return {}
    tps = list(positions)
    # asyncio.timeout, not wait_for: the feed's and the projector's loops call this, and on
    # 3.11 wait_for can swallow a cancellation racing the answer (a loop that never stops).
    # A broker that does not answer in time is a broker error to the callers' retry loops.
    try:
        async with asyncio.timeout(LIST_OFFSETS_TIMEOUT_S):
            starts = await consumer.beginning_offsets(tps)
        async with asyncio.timeout(LIST_OFFSETS_TIMEOUT_S):
            ends = await consumer.end_offsets(tps)
    except TimeoutError:
        raise KafkaTimeoutError(
            f"the broker did not answer for the log offsets within {LIST_OFFSETS_TIMEOUT_S:g}s"
        ) from None
    gaps = {tp: d for tp in tps if (d := discontinuity(tp, positions[tp], starts[tp], ends[tp])) is not None}
    past_end = {tp: gap.position - 1 for tp, gap in gaps.items() if gap.position > gap.log_end}
    held = await probe.held(past_end) if past_end else set()
    return {tp: gap for tp, gap in gaps.items() if tp not in held}


class LogProbe:
    """Asks the log whether it still holds one record, with a consumer of its own (no group,
    no automatic offset reset), started on first use. One question at a time: the projector
    asks from its loop and from its rebalance listener, and two first questions at once each
    started a consumer, the second replacing the first unstopped."""

    def __init__(self, config, client_id: str) -> None:
        self.config = config
        self.client_id = client_id
        self._consumer: AIOKafkaConsumer | None = None
        self._asking = asyncio.Lock()

    async def held(self, offsets: dict[TopicPartition, int], timeout_s: float = 3.0) -> set[TopicPartition]:
        """The partitions whose log still holds the record at the given offset (a fetch there
        returns it, or a later one), asked all at once within ``timeout_s``."""
        if not offsets:
            return set()
        async with self._asking:
            return await self._held(offsets, timeout_s)

    async def _held(self, offsets: dict[TopicPartition, int], timeout_s: float) -> set[TopicPartition]:
        if self._consumer is None:
            consumer = clients.consumer(self.config, group_id=None, client_id=self.client_id, auto_offset_reset="none")
            try:
                async with asyncio.timeout(LIST_OFFSETS_TIMEOUT_S):
                    await consumer.start()
            except BaseException as exc:  # never dropped unstopped: a refused or cancelled start too
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(LIST_OFFSETS_TIMEOUT_S):
                        await clients.stop_consumer(consumer)
                if isinstance(exc, TimeoutError):
                    raise KafkaTimeoutError(
                        f"the log probe could not connect within {LIST_OFFSETS_TIMEOUT_S:g}s"
                    ) from None
                raise
            self._consumer = consumer
        consumer = self._consumer
        consumer.assign(list(offsets))
        for tp, offset in offsets.items():
            consumer.seek(tp, offset)
        held: set[TopicPartition] = set()
        deadline = time.monotonic() + timeout_s
        while len(held) < len(offsets) and (left := deadline - time.monotonic()) > 0:
            try:
                batches = await consumer.getmany(timeout_ms=int(left * 1000), max_records=len(offsets) * 10)
            except OffsetOutOfRangeError as exc:
                for tp in exc.args[0] if exc.args and isinstance(exc.args[0], dict) else ():
                    consumer.pause(tp)  # answered: not held
                continue
            for tp, records in batches.items():
                if any(r.offset >= offsets[tp] for r in records):
                    held.add(tp)
                    consumer.pause(tp)
        return held

    async def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await clients.stop_consumer(consumer)


class Confirmer:
    """Turns what single checks suspect into confirmed discontinuities: one that has been seen
    on every check for :data:`CONFIRM_S` seconds."""

    def __init__(self, confirm_s: float = CONFIRM_S) -> None:
        self.confirm_s = confirm_s
        self.first_seen: dict[TopicPartition, float] = {}

    def observe(self, checked, found: dict[TopicPartition, Discontinuity]) -> dict[TopicPartition, Discontinuity]:
        now = time.monotonic()
        for tp in checked:
            if tp not in found:
                self.first_seen.pop(tp, None)
        for tp in found:
            self.first_seen.setdefault(tp, now)
        return {tp: gap for tp, gap in found.items() if now - self.first_seen[tp] >= self.confirm_s}

    def next_check_in(self, interval_s: float) -> float:
        """The regular interval, or sooner while something is suspected."""
        return min(interval_s, RECHECK_SUSPECT_S) if self.first_seen else interval_s


class LogGuard:
    """What the projector and the stream's feed both keep to watch their log's continuity: the
    probe, the confirmation of what single checks suspect, and when it last looked."""

    def __init__(self, config, client_id: str) -> None:
        self.probe = LogProbe(config, client_id)
        self._confirmer = Confirmer()
        self.checked_at = 0.0

    def due(self, interval_s: float) -> bool:
        """Whether the next check is due (sooner while something is suspected)."""
        return time.monotonic() - self.checked_at >= self._confirmer.next_check_in(interval_s)

    async def look(
        self, consumer, positions: dict[TopicPartition, int]
    ) -> tuple[dict[TopicPartition, Discontinuity], dict[TopicPartition, Discontinuity]]:
        """What the log suspects of these positions now, and what of it is confirmed."""
        self.checked_at = time.monotonic()
        suspected = await find_discontinuities(consumer, self.probe, positions)
        return suspected, self._confirmer.observe(list(positions), suspected)

    async def close(self) -> None:
        await self.probe.close()
