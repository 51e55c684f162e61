"""Resume cursors: one position space for the stream and ``GET /changes`` (docs/resume.md).

Every announcement (a translation first made visible by a posts-topic record, see
:mod:`.announcements`) has a key ``(partition, offset, lang)``: the record's position, then the
locale (compared byte-wise, as ``COLLATE "C"`` does). Within a partition, keys are delivered in
ascending order, by the stream and by ``/changes`` alike. A cursor holds, for every partition, a
mark ``(offset, lang)``: every announcement of that partition whose key is at or below it
(``(o, l) <= mark``, with ``lang == ""`` meaning "nothing of that offset yet") has been
delivered. Partitions a cursor does not name are at ``(0, "")``.

The cursor also holds the epoch: the identity of the log the positions belong to, stored in
the read model (``log_epoch``). A cursor of another epoch (a reset or re-created posts topic
accepted with ``accept-log``, a rebuild that moved announcements, a new read model) is
refused, never misread.

The token is opaque to clients (store it, send it back): ``c1~<epoch>`` then, per partition,
``~<partition>.<offset>[.<lang>]``. It needs no escaping in a URL, and the OpenAPI pattern
(:data:`PATTERN`) admits exactly the tokens :func:`decode` reads.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Iterable, Mapping

import asyncpg
import orjson

from ..common.db import Queryable, is_migrated, quote_ident
from .announcements import COLUMNS, Announcement

PREFIX = "c1~"
#: A token longer than this is malformed.
MAX_TOKEN = 8192
#: Every token :func:`decode` reads, and only those (with at most ``MAX_TOKEN`` characters).
PATTERN = r"^c1~[0-9a-z]{1,32}(~[0-9]{1,4}\.[0-9]{1,18}(\.[A-Za-z0-9-]{1,64})?)*$"
_TOKEN = re.compile(PATTERN, re.ASCII)

#: (offset, lang): every announcement of a partition at or below it was delivered.
Mark = tuple[int, str]
START: Mark = (0, "")


#: The code of a refused cursor of another epoch (HTTP 409 with ``field: cursor``; the stream's
#: ``ready`` says ``resumed: false`` with it).
EPOCH_CHANGED = "CURSOR_EPOCH_CHANGED"
EPOCH_CHANGED_MESSAGE = (
    "This cursor belongs to an earlier log (the posts log was reset or re-created, or the read model "
    "was rebuilt with other positions): it cannot be resumed. Fill the gap with GET /posts, then "
    "start again from a fresh cursor (GET /changes without cursor, or the stream's ready)."
)


#: The code of a refused cursor of this epoch that this read model cannot have issued: it names
#: a partition the posts topic does not have, or a mark past what the projector has committed
#: (``/changes`` answers 422 ``VALIDATION_FAILED`` with ``field: cursor``; the stream's
#: ``ready`` says ``resumed: false`` with this code).
NOT_ISSUED = "CURSOR_NOT_ISSUED"
NOT_ISSUED_MESSAGE = (
    "This cursor was not issued by this service: {why}. Fill the gap with GET /posts, then start "
    "again from a fresh cursor (GET /changes without cursor, or the stream's ready)."
)


class InvalidCursor(ValueError):
    """A token that is not a cursor this service wrote."""


@dataclass(frozen=True, slots=True)
class Cursor:
    epoch: str
    marks: Mapping[int, Mark] = field(default_factory=dict)

    def mark(self, partition: int) -> Mark:
        return self.marks.get(partition, START)

    def encode(self) -> str:
        return encode(self.epoch, self.marks)


def encode(epoch: str, marks: Mapping[int, Mark]) -> str:
    parts = [PREFIX + epoch]
    for p in sorted(marks):
        offset, lang = marks[p]
        parts.append(f"{p}.{offset}.{lang}" if lang else f"{p}.{offset}")
    return "~".join(parts)


def decode(token: str) -> Cursor:
    """The cursor of ``token``; :class:`InvalidCursor` for anything this service did not write.
    A partition named twice keeps its furthest mark."""
    if len(token) > MAX_TOKEN or not _TOKEN.fullmatch(token):
        raise InvalidCursor("not a cursor")
    epoch, *items = token[len(PREFIX) :].split("~")
    marks: dict[int, Mark] = {}
    for item in items:
        partition, offset, *lang = item.split(".", 2)
        mark = (int(offset), lang[0] if lang else "")
        marks[int(partition)] = max(marks.get(int(partition), mark), mark)
    return Cursor(epoch, marks)


def needs(cursor: Cursor) -> dict[int, int]:
    """The log position (next offset per partition) the read model must have committed for
    ``cursor`` to be one it issued: every mark is at or below the committed frontier, and a mark
    ``(offset, lang)`` covers the record at ``offset`` only once that record is committed."""
    return {p: offset + 1 if lang else offset for p, (offset, lang) in cursor.marks.items()}


def not_issued(cursor: Cursor, frontier: Mapping[int, int]) -> str | None:
    """Why ``cursor`` cannot have been issued by a read model whose committed frontier (next
    offset per partition of the posts topic, read in the same snapshot as the epoch) is
    ``frontier``, or None when it can. Every issuer hands out marks at or below the frontier it
    read, and the frontier only moves forward within an epoch, so a cursor of this epoch that
    passes this check once passes it ever after."""
    for p, need in sorted(needs(cursor).items()):
        if p not in frontier:
            return f"it names partition {p}, which the posts topic does not have"
        if need > frontier[p]:
            return f"its mark on partition {p} is past the committed log position ({p}:{frontier[p]})"
    return None


#: How long a cursor of this epoch that is ahead of the committed frontier is waited for before
#: it is refused. The frontier never steps back across a crash of PostgreSQL (the projector's
#: commits are synchronous), but a failover to an asynchronous standby forgets what the standby
#: had not received, until the projector has applied it again from the log (docs/api.md#durability).
AHEAD_WAIT_S = 5.0
AHEAD_POLL_S = 0.25


def ahead(cursor: Cursor, frontier: Mapping[int, int]) -> bool:
    """Whether ``cursor`` names only partitions the posts topic has and is past ``frontier`` on
    one of them: a cursor the read model may yet reach (it is waited for)."""
    need = needs(cursor)
    return all(p in frontier for p in need) and any(n > frontier[p] for p, n in need.items())


async def read_reaching(
    read: Callable[[], Awaitable[Changes]],
    cursor: Cursor | None,
    *,
    wait_s: float = AHEAD_WAIT_S,
    poll_s: float = AHEAD_POLL_S,
) -> Changes:
    """``read()``, read again every ``poll_s`` for up to ``wait_s`` while ``cursor`` (of the read's
    epoch) is :func:`ahead` of the frontier read with it. The caller then judges the last read."""
    deadline = time.monotonic() + wait_s
    while True:
        changes = await read()
        if cursor is None or cursor.epoch != changes.epoch or not ahead(cursor, changes.frontier):
            return changes
        if time.monotonic() >= deadline:
            return changes
        await asyncio.sleep(poll_s)


def after(mark: Mark, offset: int, lang: str) -> bool:
    """Whether the announcement ``(offset, lang)`` comes after ``mark`` (is not delivered by it)."""
    return (offset, lang) > mark


def furthest(a: Mapping[int, Mark], b: Mapping[int, Mark]) -> dict[int, Mark]:
    """Per partition, the further of two sets of marks."""
    return {p: max(a.get(p, START), b.get(p, START)) for p in set(a) | set(b)}


def advance(marks: dict[int, Mark], partition: int, mark: Mark) -> None:
    """Move one partition's mark forward to ``mark`` (never back)."""
    if mark > marks.get(partition, START):
        marks[partition] = mark


# --------------------------------------------------------------------------- the epoch

_SELECT_EPOCH = "SELECT epoch, starts::text AS starts FROM log_epoch"
_NEW_EPOCH = """
UPDATE log_epoch SET epoch = substr(md5(random()::text || clock_timestamp()::text), 1, 12), starts = $1::jsonb
RETURNING epoch
"""
# Announcements of a log that is gone are moved below every cursor of the new one: still not
# null, so the projector's COALESCE never announces those translations again.
_RETIRE = "UPDATE post_translations SET announced_offset = -1 WHERE announced_partition = ANY($1::integer[]) AND announced_offset >= 0"
# Whether two read-model schemas ($1 and $2, quoted identifiers) disagree on any announcement.
_DIFFERENT_ANNOUNCEMENTS = """
SELECT EXISTS (
    SELECT 1 FROM {a}.post_translations a JOIN {b}.post_translations b USING (post_id, lang)
    WHERE (a.announced_partition, a.announced_offset) IS DISTINCT FROM (b.announced_partition, b.announced_offset)
)
"""


@dataclass(frozen=True, slots=True)
class Epoch:
    epoch: str
    #: The partitions whose log was replaced when it began, each with the position it began at.
    starts: dict[int, int]


async def current_epoch(db: Queryable) -> Epoch:
    row = (await db.fetch(_SELECT_EPOCH))[0]  # one row, from the migration on
    return Epoch(row["epoch"], {int(p): int(o) for p, o in orjson.loads(row["starts"]).items()})


async def new_log(conn: asyncpg.Connection, starts: Mapping[int, int]) -> str:
    """The posts log's partitions ``starts`` hold another log now, read from these positions on
    (accepted by ``accept-log``): their announcements are retired and a new epoch begins;
    returns it. In the caller's transaction."""
    await conn.execute(_RETIRE, sorted(starts))
    return await conn.fetchval(_NEW_EPOCH, orjson.dumps({str(p): o for p, o in starts.items()}).decode())


async def carry_epoch(conn: asyncpg.Connection, live: str, rebuilt: str) -> bool:
    """Before a rebuild's switch: the rebuilt schema keeps the live epoch when every translation
    both hold was announced at the same position (the same log, replayed), so cursors stay valid
    across the switch; otherwise it keeps the new epoch of its own. Returns whether carried."""
    a, b = quote_ident(live), quote_ident(rebuilt)
    if not await is_migrated(conn, live) or await conn.fetchval("SELECT to_regclass($1)", f"{a}.log_epoch") is None:
        return False
    if await conn.fetchval(_DIFFERENT_ANNOUNCEMENTS.format(a=a, b=b)):
        return False
    await conn.execute(f"UPDATE {b}.log_epoch n SET epoch = o.epoch FROM {a}.log_epoch o")
    return True


# --------------------------------------------------------------------------- reading announcements

# The replay's reader of announcements; the live stream's is :mod:`.announcements`, which says
# why there are two and what holds them equal.
#
# Announcements after the marks ($1 partitions, $2 offsets, $3 langs of the marks; a partition
# of the posts topic not given is at its start), with $11 only up to the upper marks ($4 offsets,
# $5 langs; a partition not given: nothing), else up to whatever is committed, in the locales $6
# (lower-cased), admitted by the tickers $7 and categories $8 (NULL: no restriction), at most $9,
# ordered by (offset, partition, lang). Both bounds are index conditions, so a bounded read (a
# replay) stops at its upper bound. Read in the same statement (one snapshot): the epoch and
# the projector's committed positions ($10 the topic), below which every announcement is
# committed. {ranges} is one of the two ways to read the index ranges below. A generic plan
# (planned without the values) would not know how long a range is and may read a whole range
# to sort it: the guard (migration 0002, search_generic_plan_guard) folds to TRUE in a custom
# plan and makes every generic plan look too costly to pick.
_CHANGES = """
WITH pos AS (
    SELECT partition, next_offset FROM positions WHERE topic = $10
), cur AS (
    SELECT pos.partition AS p, COALESCE(c.o, 0) AS o, COALESCE(c.l, '') AS l,
           CASE WHEN $11 THEN COALESCE(c.uo, 0) ELSE 9223372036854775807 END AS uo,
           CASE WHEN $11 THEN COALESCE(c.ul, '') ELSE '' END AS ul
    FROM pos LEFT JOIN unnest($1::integer[], $2::bigint[], $3::text[], $4::bigint[], $5::text[]) AS c(p, o, l, uo, ul)
      ON c.p = pos.partition
), page AS (
    SELECT x.* FROM {ranges}
        SELECT {columns}
        FROM post_translations t
        WHERE t.visible AND t.announced_offset IS NOT NULL AND {locale}
          AND t.announced_partition = cur.p AND t.announced_offset >= cur.o AND t.announced_offset <= cur.uo
          AND NOT (t.announced_offset = cur.o AND t.lang COLLATE "C" <= cur.l)
          AND NOT (t.announced_offset = cur.uo AND t.lang COLLATE "C" > cur.ul)
          AND ($7::text[] IS NULL OR t.tickers && $7::text[])
          AND ($8::text[] IS NULL OR t.category_slugs && $8::text[])
          AND ($9::integer IS NOT NULL OR search_generic_plan_guard())
        ORDER BY {order}
        LIMIT $9
    ) x
    ORDER BY x."offset", x.partition, x.lang COLLATE "C"
    LIMIT $9
)
SELECT 0 AS kind, (SELECT epoch FROM log_epoch) AS epoch, NULL::integer AS partition, NULL::bigint AS "offset",
       NULL::text AS lang, NULL::text AS lean, NULL::text[] AS tickers, NULL::text[] AS category_slugs
UNION ALL
SELECT 1, NULL, partition, next_offset, NULL, NULL, NULL, NULL FROM pos
UNION ALL
(SELECT 2, NULL, partition, "offset", lang, lean, tickers, category_slugs FROM page ORDER BY "offset", partition, lang COLLATE "C")
"""
#: Many locales: one range per partition of post_translations_announced_order, in key order, the
#: other locales skipped (a page of every locale reads about ``limit`` rows per partition).
CHANGES_SQL = _CHANGES.format(
    columns=COLUMNS,
    # IS TRUE: the locale test is never an index condition, so no plan (a generic one included)
    # reads the per-locale index and sorts what it read instead of reading this one in order.
    ranges="cur CROSS JOIN LATERAL (",
    locale="(lower(t.lang) = ANY($6::text[])) IS TRUE",
    order='t.announced_partition, t.announced_offset, t.lang COLLATE "C"',
)
#: One or two locales: one range per (locale, partition) of post_translations_announced, so a
#: rare locale is as cheap as a common one.
CHANGES_BY_LOCALE_SQL = _CHANGES.format(
    columns=COLUMNS,
    ranges="cur CROSS JOIN unnest($6::text[]) AS lg(code) CROSS JOIN LATERAL (",
    locale="lower(t.lang) = lg.code",
    order="lower(t.lang), t.announced_partition, t.announced_offset",
)
#: Up to this many locales, a read takes one index range per (locale, partition).
BY_LOCALE_UP_TO = 2


@dataclass(frozen=True, slots=True)
class Changes:
    epoch: str
    #: The projector's committed positions (next offset per partition of the posts topic).
    frontier: dict[int, int]
    items: list[Announcement]


async def read_changes(
    db: Queryable,
    topic: str,
    marks: Mapping[int, Mark],
    langs: Iterable[str],
    *,
    tickers: Iterable[str] | None = None,
    categories: Iterable[str] | None = None,
    limit: int,
    upto: Mapping[int, Mark] | None = None,
) -> Changes:
    """At most ``limit`` announcements after ``marks`` (and at or below ``upto``, when given),
    in the locales ``langs`` (compared lower-case), in (offset, partition, lang) order: so
    within each partition they come in key order, and a prefix of them moves a cursor forward."""
    given = sorted(set(marks) | set(upto or {}))
    ups = [(upto or {}).get(p) for p in given]
    langs = sorted({lang.lower() for lang in langs})
    rows = await db.fetch(
        CHANGES_BY_LOCALE_SQL if len(langs) <= BY_LOCALE_UP_TO else CHANGES_SQL,
        given,
        [marks.get(p, START)[0] for p in given],
        [marks.get(p, START)[1] for p in given],
        [u[0] if u else None for u in ups],
        [u[1] if u else None for u in ups],
        langs,
        sorted(set(tickers)) if tickers is not None else None,
        sorted(set(categories)) if categories is not None else None,
        limit,
        topic,
        upto is not None,
    )
    epoch = ""
    frontier: dict[int, int] = {}
    items: list[Announcement] = []
    for r in rows:
        if r["kind"] == 0:
            epoch = r["epoch"]
        elif r["kind"] == 1:
            frontier[r["partition"]] = r["offset"]
        else:
            items.append(Announcement.of(r))
    return Changes(epoch, frontier, items)
