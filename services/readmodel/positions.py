"""The projector's stored positions, and what "projected up to here" means.

A position is the next offset to project of one partition (``positions.next_offset``),
committed in the same transaction as the rows its records produced. So a record at ``offset``
is projected, and its rows are visible to every reader, exactly when the stored position of
its partition is greater than ``offset`` (:func:`projected`); a set of marks (offsets a
publisher was acknowledged for, or a log's end offsets) is reached when every partition's
position is at or past its mark (:func:`caught_up`). Every reader of positions uses this
module: the projector (load, lock, save), the rebuild (another schema's positions), the
stream's feed (announce only what is projected), ``tickerwire up`` (wait until projected),
and the replicas' probe (:func:`marks_array_sql`); the API's consistency mark is
:mod:`.logposition`'s.
"""

from __future__ import annotations

import asyncio
import time
from typing import Iterable, Mapping

import asyncpg

from ..common.db import Queryable, is_migrated, quote_ident
from .logposition import covers

#: (topic, partition)
Key = tuple[str, int]

_LOCK = """
INSERT INTO positions (topic, partition, next_offset) VALUES ($1, $2, 0)
ON CONFLICT (topic, partition) DO NOTHING
"""
_SELECT_FOR_UPDATE = "SELECT next_offset FROM positions WHERE topic = $1 AND partition = $2 FOR UPDATE"
#: Stores a position locked by :func:`lock` ($1 topic, $2 partition, $3 next offset); also the
#: final statement of the projector's one-statement batch end (``projector/sql.py FINISH_BATCH``).
SAVE_SQL = "UPDATE positions SET next_offset = $3, updated_at = now() WHERE topic = $1 AND partition = $2"
_SAVE_MANY = """
INSERT INTO positions (topic, partition, next_offset)
SELECT * FROM unnest($1::text[], $2::integer[], $3::bigint[])
ON CONFLICT (topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset, updated_at = now()
"""
_SELECT = "SELECT topic, partition, next_offset FROM {table}"

# The same positions as an array of [partition, next offset] pairs ('{}' while none is stored):
# what a replica's probe reads to know how far its data goes.
_MARKS_ARRAY = (
    "COALESCE((SELECT array_agg(ARRAY[partition::bigint, next_offset]) FROM positions WHERE topic = {topic}), '{{}}')"
)


def marks_array_sql(topic_ref: str) -> str:
    """The stored positions of one topic as an SQL expression: an array of ``[partition, next
    offset]`` pairs, empty while none is stored; ``topic_ref`` is the parameter holding the
    topic (``$1``). The replica monitor (:class:`tickerwire.services.common.db.replicas.Replicas`)
    is handed it: it reads the positions of the read model it does not know."""
    return _MARKS_ARRAY.format(topic=topic_ref)


def _table(schema: str | None) -> str:
    return "positions" if schema is None else quote_ident(schema) + ".positions"


async def load(
    db: Queryable, topics: Iterable[str] | None = None, *, schema: str | None = None, for_update: bool = False
) -> dict[Key, int]:
    """The stored positions (of ``topics`` only, when given), by (topic, partition).

    ``schema``: of that read-model schema instead of the search_path's (nothing while it does
    not exist); ``for_update``: row-locked until the caller's transaction ends."""
    if schema is not None:
        if not await is_migrated(db, schema):
            return {}
    statement = _SELECT.format(table=_table(schema))
    args: tuple[object, ...] = ()
    if topics is not None:
        statement += " WHERE topic = ANY($1::text[])"
        args = (sorted(set(topics)),)
    if for_update:
        statement += " FOR UPDATE"
    return {(r["topic"], r["partition"]): r["next_offset"] for r in await db.fetch(statement, *args)}


def of_topic(stored: Mapping[Key, int], topic: str) -> dict[int, int]:
    """One topic's positions by partition."""
    return {p: offset for (t, p), offset in stored.items() if t == topic}


def projected(stored: Mapping[Key, int], key: Key, offset: int) -> bool:
    """Whether the record at ``offset`` of partition ``key`` is projected (its rows committed)."""
    return stored.get(key, 0) > offset


def caught_up(stored: Mapping[Key, int], marks: Mapping[Key, int]) -> bool:
    """Whether every partition's position is at or past its mark (a next offset to reach)."""
    return covers(stored, marks)


async def wait_until(db: Queryable, marks: Mapping[Key, int], *, timeout: float, poll_s: float = 0.05) -> None:
    """Until :func:`caught_up` with ``marks``; ``TimeoutError`` (saying how far it got) after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        stored = await load(db)
        if caught_up(stored, marks):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the projector did not catch up in {timeout:.0f}s: {stored} of {dict(marks)}")
        await asyncio.sleep(poll_s)


class PositionMovedBack(Exception):
    """The stored position of a partition is behind the one its writer read it at: commits were
    lost (a PostgreSQL crash with asynchronous commits, a failover to a standby that had not
    received them) or an operator moved it (``projector accept-log``). Nothing may be written
    on top of it: the records between the two would be skipped for good. The transaction is
    rolled back and the partition is read again from ``stored``."""

    def __init__(self, topic: str, partition: int, stored: int, expected: int) -> None:
        super().__init__(
            f"{topic}[{partition}]: the stored position is {stored}, behind {expected} where this projector "
            "last stored it (commits lost by a PostgreSQL crash or failover, or `projector accept-log`)"
        )
        self.topic, self.partition, self.stored, self.expected = topic, partition, stored, expected


async def lock(conn: asyncpg.Connection, topic: str, partition: int, *, expected: int | None = None) -> int:
    """The partition's stored position, row-locked for the caller's transaction (created at 0).

    ``expected``: the position the caller last stored or read (the one its records were fetched
    from). A stored position behind it raises :class:`PositionMovedBack`, so a batch commits only
    on top of the position it was read from, never over a gap. One ahead of it is fine: another
    writer (a rebalance's new owner) applied those records, and the caller skips them."""
    await conn.execute(_LOCK, topic, partition)
    stored = await conn.fetchval(_SELECT_FOR_UPDATE, topic, partition)
    if expected is not None and stored < expected:
        raise PositionMovedBack(topic, partition, stored, expected)
    return stored


async def save(conn: asyncpg.Connection, topic: str, partition: int, next_offset: int) -> None:
    """Store a position locked by :func:`lock` in this transaction."""
    await conn.execute(SAVE_SQL, topic, partition, next_offset)


async def save_many(conn: asyncpg.Connection, positions: Mapping[Key, int]) -> None:
    """Store these positions, whether or not they were stored before."""
    keys = sorted(positions)
    await conn.execute(_SAVE_MANY, [t for t, _ in keys], [p for _, p in keys], [positions[k] for k in keys])
