"""Committed post.created announcements: a translation is announced for exactly the record
that first made it visible, only while it is visible, and only in a locale the API answers in."""

from __future__ import annotations

from tickerwire.services.readmodel.announcements import Announcement, announced

INSERT = """
INSERT INTO post_translations (post_id, lang, slug, published_at, importance, sentiment, visible, category_slugs,
                               tickers, hashtags, tsv, lean, detail, announced_partition, announced_offset)
VALUES ($1, $2, 'a-slug', now(), 1, 'neutral', $3, ARRAY['defi'], ARRAY['BTC'], ARRAY[]::text[],
        to_tsvector('simple', 'x'), $4, '{}', $5, $6)
"""


LOCALE = """
INSERT INTO locales (code, version, name, native_name, country_code, direction, active, web_channel, is_default, position)
VALUES ($1, 1, $1, $1, 'XX', 'ltr', $2, true, $1 = 'en-US', 0)
"""


async def test_the_announcements_of_projected_records_in_log_order(conn):
    for code in ("en-US", "de-DE"):
        await conn.execute(LOCALE, code, True)
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


async def test_a_translation_in_a_locale_the_api_does_not_answer_in_is_not_announced(conn):
    await conn.execute(LOCALE, "en-US", True)
    await conn.execute(LOCALE, "pt-BR", True)
    await conn.execute(LOCALE, "pl-PL", False)  # inactive: /posts?lang=pl-PL answers en-US
    for lang in ("en-US", "pt-br", "pl-PL", "xx-YY"):
        await conn.execute(INSERT, 1, lang, True, f'{{"lang":"{lang}"}}', 0, 7)

    found = await announced(conn, [(1, 0, 7)])

    assert [a.lang for a in found] == ["en-US", "pt-br"]  # tags compare case-insensitively


async def test_with_no_locale_listed_the_default_en_us_is_still_announced(conn):
    await conn.execute(INSERT, 1, "en-US", True, '{"id":1}', 0, 7)
    await conn.execute(INSERT, 1, "de-DE", True, '{"id":1,"de":1}', 0, 7)

    assert [a.lang for a in await announced(conn, [(1, 0, 7)])] == ["en-US"]
