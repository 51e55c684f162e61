"""Committed ``post.created`` announcements: which translations a log record first made visible.

The projector remembers, per translation, the record (partition, offset) of the first event
that made it visible (``post_translations.announced_partition/offset``, kept forever by
``COALESCE`` in its upsert). A translation is announced once, for exactly that record, after the
record is projected (:func:`.positions.projected`); the stream reads the announcements here.

Only translations in a locale the API answers in (:func:`.taxonomy.served_locales`, read when
the announcements are) are announced: ``data`` must be the item of ``GET /posts?lang=<its
lang>``, and the API renders a locale that is not listed (inactive, off the web channel, or
unknown) as the default. Such a translation is never announced, even if its locale is listed later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..common.db import Queryable
from .taxonomy import served_locales

#: What an announcement is made of, as each reader of announcements selects it from
#: ``post_translations t`` (and :meth:`Announcement.of` reads it).
COLUMNS = (
    't.announced_partition AS partition, t.announced_offset AS "offset", t.lang, t.lean, t.tickers, t.category_slugs'
)

# The translations that the given log records first made visible, as stored by the projector.
#
# Two statements read announcements: this one, for the live stream, and the replay's
# (:func:`.cursors.read_changes`, for a resume and GET /changes). The live feed asks for the
# announcements of the records it has just seen committed: exactly those records, one index
# probe per post (by post id), in every served locale, all at once. A replay asks by position:
# the ranges between a cursor's marks, in key order, through a connection's filters, a page at a
# time, with the epoch and the projector's frontier read in the same snapshot. One statement
# for both would make every live batch read index ranges and carry an epoch and a frontier it
# does not need, or make a replay name its records first. So the two share what an
# announcement is (:data:`COLUMNS` read by :meth:`Announcement.of`: a visible translation at
# the position that first showed it), this one keeps the served locales itself and the replay
# is handed them, and tests/integration/test_readmodel_announcements.py holds the two equal:
# for any projected log, both read the same announcements.
_SELECT_ANNOUNCED = f"""
SELECT {COLUMNS}
FROM post_translations t
JOIN unnest($1::bigint[], $2::integer[], $3::bigint[]) AS e(post_id, partition, "offset")
  ON t.post_id = e.post_id AND t.announced_partition = e.partition AND t.announced_offset = e."offset"
WHERE t.visible
ORDER BY t.announced_partition, t.announced_offset, t.lang COLLATE "C"
"""


@dataclass(frozen=True, slots=True)
class Announcement:
    """One visible translation first shown by the record at (partition, offset)."""

    partition: int
    offset: int
    lang: str
    #: The partner JSON of the post (schemas/openapi.json#/components/schemas/PostLean), as stored.
    lean: str
    tickers: tuple[str, ...]
    category_slugs: tuple[str, ...]

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> "Announcement":
        """The announcement of a row selected as :data:`COLUMNS`."""
        return cls(
            row["partition"],
            row["offset"],
            row["lang"],
            row["lean"],
            tuple(row["tickers"]),
            tuple(row["category_slugs"]),
        )


async def announced(pool: Queryable, records: Iterable[tuple[int, int, int]]) -> list[Announcement]:
    """The announcements of these projected records, given as (post id, partition, offset), in
    log order (partition, offset, then locale compared byte-wise): the order of the announcement
    keys of :mod:`.cursors`."""
    records = list(records)
    if not records:
        return []
    rows = await pool.fetch(
        _SELECT_ANNOUNCED, [r[0] for r in records], [r[1] for r in records], [r[2] for r in records]
    )
    served = await served_locales(pool) if rows else frozenset()
    return [Announcement.of(r) for r in rows if r["lang"].lower() in served]
