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
from typing import Iterable

from ..common.db import Queryable
from .taxonomy import served_locales

# The translations that the given log records first made visible, as stored by the projector.
_SELECT_ANNOUNCED = """
SELECT t.lean, t.announced_partition, t.announced_offset, t.lang, t.tickers, t.category_slugs
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
    return [
        Announcement(
            r["announced_partition"],
            r["announced_offset"],
            r["lang"],
            r["lean"],
            tuple(r["tickers"]),
            tuple(r["category_slugs"]),
        )
        for r in rows
        if r["lang"].lower() in served
    ]
