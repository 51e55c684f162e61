"""Where a webhook endpoint's deliveries start (a registration and a replay, by the operator's
``tickerwire webhooks`` or the partner API):
the read model's frontier, a ``--from`` cursor this read model issued, or the first records the
posts topic received at or after a ``--since`` time."""

from __future__ import annotations

from datetime import datetime

import asyncpg
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from ..common import kafka
from ..common.runtime.config import Config
from . import cursors
from .snapshots import AdminError, BadArgument
from .walk import Refusal, walk

#: How long a ``--from`` cursor ahead of the committed frontier is waited for before it is refused.
FROM_CURSOR_WAIT_S = 1.0


async def frontier_cursor(conn: asyncpg.Connection, topic: str) -> str:
    """The read model's current frontier as a cursor: every announcement committed so far is
    below it, so a delivery from it gets exactly what is announced after this instant."""
    page = await walk(conn, topic, None, frozenset(), limit=0)
    assert not isinstance(page, Refusal)  # no cursor, nothing to refuse
    return page.cursor()


async def checked_cursor(conn: asyncpg.Connection, topic: str, token: str, option: str = "--from") -> str:
    """``token`` when this read model issued it (the walk's rules: its epoch, its partitions,
    nothing past the committed frontier); :class:`BadArgument` for a token that is not a cursor,
    :class:`AdminError` for one of another epoch (code ``CURSOR_EPOCH_CHANGED``) or that this read
    model cannot have issued (``VALIDATION_FAILED``)."""
    try:
        cursor = cursors.decode(token)
    except cursors.InvalidCursor:
        raise BadArgument(f"{option}: {token[:60]!r} is not a resume cursor (c1~...)", field=option) from None
    page = await walk(conn, topic, cursor, frozenset(), limit=0, wait_s=FROM_CURSOR_WAIT_S)
    if isinstance(page, Refusal):
        if page.code == cursors.EPOCH_CHANGED:
            why = "it belongs to an earlier log (the posts log was reset or the read model rebuilt)"
            raise AdminError(f"{option}: refused, {why}", field=option, code=cursors.EPOCH_CHANGED)
        why = cursors.not_issued(cursor, page.frontier) or "this read model cannot have issued it"
        raise AdminError(f"{option}: refused, {why}", field=option, code="VALIDATION_FAILED")
    return cursor.encode()


async def since_cursor(config: Config, conn: asyncpg.Connection, topic: str, since: datetime) -> str:
    """A cursor from which everything the posts topic received at or after ``since`` is
    delivered again: per partition, the first offset whose record timestamp is at or after it
    (a partition with none: its end), no further than the committed frontier, in the current epoch."""
    head = await walk(conn, topic, None, frozenset(), limit=0)
    assert not isinstance(head, Refusal)
    tps = [TopicPartition(topic, p) for p in sorted(head.frontier)]
    if not tps:  # nothing projected yet: nothing to deliver again
        return head.cursor()
    consumer = kafka.consumer(config, group_id=None, client_id="tickerwire-webhooks-replay")
    try:
        await consumer.start()
        found = await consumer.offsets_for_times({tp: int(since.timestamp() * 1000) for tp in tps})
        ends = await consumer.end_offsets(tps)
    except KafkaError as exc:
        raise kafka.unreachable(config, exc) from exc
    finally:
        await consumer.stop()
    marks: dict[int, cursors.Mark] = {}
    for tp in tps:
        at = found.get(tp)
        offset = at.offset if at is not None else ends[tp]
        marks[tp.partition] = (min(offset, head.frontier[tp.partition]), "")
    return cursors.encode(head.epoch, marks)
