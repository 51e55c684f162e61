"""Committed post.created announcements: a translation is announced for exactly the record
that first made it visible, and only while it is visible."""

from __future__ import annotations

from tickerwire.services.readmodel.announcements import Announcement, announced

INSERT = """
INSERT INTO post_translations (post_id, lang, slug, published_at, importance, sentiment, visible, category_slugs,
                               tickers, hashtags, tsv, lean, detail, announced_partition, announced_offset)
VALUES ($1, $2, 'a-slug', now(), 1, 'neutral', $3, ARRAY['defi'], ARRAY['BTC'], ARRAY[]::text[],
        to_tsvector('simple', 'x'), $4, '{}', $5, $6)
"""


async def test_the_announcements_of_projected_records_in_log_order(conn):
    await conn.execute(INSERT, 1, "en-US", True, '{"id":1}', 0, 7)
    await conn.execute(INSERT, 1, "de-DE", True, '{"id":1,"de":1}', 0, 7)
    await conn.execute(INSERT, 2, "en-US", True, '{"id":2}', 1, 3)
    await conn.execute(INSERT, 3, "en-US", False, '{"id":3}', 0, 8)  # hidden since: not announced
    await conn.execute(INSERT, 4, "en-US", True, '{"id":4}', 0, 2)  # first shown by another record

    found = await announced(conn, [(2, 1, 3), (1, 0, 7), (3, 0, 8), (4, 0, 9)])

    assert found == [
        Announcement(0, 7, "de-DE", '{"id":1,"de":1}', ("BTC",), ("defi",)),
        Announcement(0, 7, "en-US", '{"id":1}', ("BTC",), ("defi",)),
        Announcement(1, 3, "en-US", '{"id":2}', ("BTC",), ("defi",)),
    ]
    assert await announced(conn, []) == []
