"""Search ranking over a real PostgreSQL: tiers (title, lede, whole text), newest first within
a tier, every match reachable by paging, and plans whose work does not grow with the matches."""

from __future__ import annotations

import json

import asyncpg
import pytest

from tickerwire.services.api.params import Filters, PageWindow
from tickerwire.services.api.queries import ITEM, NEWER, OLDER, Search, page_query
from tickerwire.services.readmodel.migrate import migrate

LOCALES = (
    "en-US",
    "de-DE",
    "fr-FR",
    "es-ES",
    "it-IT",
    "pt-BR",
    "ru-RU",
    "tr-TR",
    "ja-JP",
    "ko-KR",
    "zh-CN",
    "ar-SA",
    "id-ID",
    "nl-NL",
)

# Rows generated in SQL: post i (1..n) in every locale, published i minutes after T0. Where the
# word "halving" appears depends on i: the title when i % 5 = 0, the lede when i % 5 = 1, the
# body when i % 5 = 2 (none otherwise). "rarissime" is in the body of every 997th post.
# "common" is in the title of every third post and in every body.
GENERATE = """
INSERT INTO post_translations (post_id, lang, slug, published_at, importance, sentiment, visible,
    category_slugs, tickers, hashtags, tsv, lean, detail)
SELECT i, l.code, 's' || i || l.code, timestamptz '2026-01-01' + i * interval '1 minute', i % 101,
    CASE WHEN i % 2 = 0 THEN 'BULLISH' ELSE 'BEARISH' END, i % 50 <> 7, '{}', '{}', '{}',
    setweight(to_tsvector('simple', 'note ' || i || CASE WHEN i % 5 = 0 THEN ' halving' ELSE '' END
                                   || CASE WHEN i % 3 = 0 THEN ' common' ELSE '' END), 'A')
    || setweight(to_tsvector('simple', 'lede ' || CASE WHEN i % 5 = 1 THEN 'halving' ELSE 'market' END), 'B')
    || setweight(to_tsvector('simple', 'body ' || repeat('filler words ', 40) || 'common'
                                   || CASE WHEN i % 5 = 2 THEN ' halving' ELSE '' END
                                   || CASE WHEN i % 997 = 0 THEN ' rarissime' ELSE '' END), 'C'),
    '{"id":' || i || '}', '{}'
FROM generate_series(1, $1::integer) i CROSS JOIN unnest($2::text[]) AS l(code)
"""


def tier(i: int) -> int:
    return {0: 0, 1: 1, 2: 2}[i % 5]


def visible(i: int) -> bool:
    return i % 50 != 7


async def database(dsn: str, posts: int, locales: tuple[str, ...]) -> asyncpg.Connection:
    conn = await asyncpg.connect(dsn, server_settings={"search_path": "rm,public"})
    await migrate(conn, "rm")
    await conn.execute("SELECT ensure_search_indexes(code) FROM unnest($1::text[]) AS code", list(locales))
    await conn.execute(GENERATE, posts, list(locales))
    await conn.execute("VACUUM ANALYZE post_translations")
    return conn


async def page(conn, word: str, filters: Filters = Filters(), **cursor) -> tuple[list[int], set[int]]:
    sql, args = page_query("en-US", filters, PageWindow(**cursor), Search("simple", word), log_topic="posts")
    rows = await conn.fetch(sql, *args)
    return [r["post_id"] for r in rows if r["kind"] == ITEM], {r["kind"] for r in rows if r["kind"] != ITEM}


@pytest.fixture
async def thousands(fresh_db):
    conn = await database(fresh_db, 6000, ("en-US", "de-DE"))
    yield conn
    await conn.close()


async def test_every_match_is_reachable_by_paging_in_tier_order(thousands):
    """1,176 matches (more than the old 1,000 cap): a walk with `before` returns each once, in
    (tier, newest first) order; the same walk with `after` from the end gives it back."""
    expected = sorted((i for i in range(1, 6001) if i % 5 in (0, 1, 2) and visible(i)), key=lambda i: (tier(i), -i))
    assert len(expected) > 1000
    walked, cursor, flags = [], None, set()
    while True:
        ids, flags = await page(thousands, "halving", limit=50, **({"before": cursor} if cursor else {}))
        walked += ids
        if OLDER not in flags:
            break
        cursor = ids[-1]
    assert walked == expected
    back, cursor = [], walked[-1]
    while True:
        ids, flags = await page(thousands, "halving", limit=50, after=cursor)
        back = ids + back
        if not ids or NEWER not in flags:
            break
        cursor = ids[0]
    assert back == expected[:-1]


async def test_cursors_cross_tier_boundaries_both_ways(thousands):
    expected = sorted((i for i in range(1, 6001) if i % 5 in (0, 1, 2) and visible(i)), key=lambda i: (tier(i), -i))
    last_title = max(i for i in expected if tier(i) == 0 and i < 20)  # deep in tier 0, near its end
    at = expected.index(last_title)
    ids, flags = await page(thousands, "halving", limit=5, before=last_title)
    assert ids == expected[at + 1 : at + 6] and {OLDER, NEWER} <= flags
    ids, flags = await page(thousands, "halving", limit=5, after=expected[at + 2])
    assert ids == expected[at - 3 : at + 2]
    ids, _ = await page(thousands, "halving", limit=50, before=expected[at], after=expected[at + 7])
    assert ids == expected[at + 1 : at + 7]
    # A cursor post the query does not match sits in the last tier, by its date.
    ids, _ = await page(thousands, "halving", limit=3, before=4)  # 4 % 5 == 4: no "halving"
    assert ids == [i for i in expected if tier(i) == 2 and i < 4][:3]


async def test_filters_and_phrases_apply_within_tiers(thousands):
    ids, _ = await page(thousands, "halving", Filters(sentiment=("BULLISH",)), limit=50)
    expected = sorted(
        (i for i in range(1, 6001) if i % 5 in (0, 1, 2) and visible(i) and i % 2 == 0), key=lambda i: (tier(i), -i)
    )
    assert ids == expected[:50]
    # An exclusion anywhere in the text removes a post whose title or lede matches.
    ids, _ = await page(thousands, "halving -market", limit=50)
    assert ids == sorted((i for i in range(1, 6001) if i % 5 == 1 and visible(i)), reverse=True)[:50]
    ids, _ = await page(thousands, "halving -common", limit=50)
    assert ids == []
    ids, _ = await page(thousands, "the", limit=50)  # only a stop word in english, but 'simple' keeps it
    assert ids == []


def _nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


async def explain(conn, word: str, **cursor) -> dict:
    sql, args = page_query(
        "en-US", Filters(), PageWindow(limit=20, **cursor), Search("simple", word), log_topic="posts"
    )
    return json.loads(await conn.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, *args))[0]["Plan"]


@pytest.fixture
async def generated(fresh_db):
    """42,000 translation rows over 14 locales."""
    conn = await database(fresh_db, 3000, LOCALES)
    yield conn
    await conn.close()


async def test_common_words_walk_the_feed_index_and_stop_after_a_page(generated):
    # "common" matches every row of the locale (a third of them in the title).
    for cursor in ({}, {"before": 1500}):
        plan = await explain(generated, "common", **cursor)
        scans = [
            n
            for n in _nodes(plan)
            if n["Node Type"] == "Index Scan" and n.get("Index Name") == "post_translations_feed"
        ]
        assert scans, "the feed index is walked"
        visited = sum(
            n["Actual Rows"] + n.get("Rows Removed by Filter", 0) for n in _nodes(plan) if "Relation Name" in n
        )
        assert visited < 300  # a page of 20 from a third of 3,000 rows, plus the flag probes
        assert not [n for n in _nodes(plan) if n["Node Type"] == "Sort" and n["Actual Rows"] > 100]
        assert plan["Shared Hit Blocks"] + plan.get("Shared Read Blocks", 0) < 500


async def test_rare_words_use_the_locale_text_index(generated):
    plan = await explain(generated, "rarissime")
    bitmaps = {n["Index Name"] for n in _nodes(plan) if n["Node Type"] == "Bitmap Index Scan"} - {"positions_pkey"}
    assert bitmaps and all(name.startswith("pt_search_") and "en_us" in name for name in bitmaps)
    assert not [n for n in _nodes(plan) if n["Node Type"] == "Seq Scan" and n.get("Actual Loops", 0)]
    ids, _ = await page(generated, "rarissime", limit=20)
    assert ids == [2991, 1994, 997]


async def test_every_search_is_planned_for_its_words(generated):
    """A prepared search statement never falls back to one generic plan: after many executions
    a common word still walks the feed index and a rare one still reads the text index."""
    sql, _ = page_query("en-US", Filters(), PageWindow(limit=20), Search("simple", "x"), log_topic="posts")
    statement = await generated.prepare(sql)
    for word in ["common", "rarissime"] * 8:
        await statement.fetch("simple", word, 20, "posts")
    row = await generated.fetchrow(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1", sql
    )
    assert row["generic_plans"] == 0 and row["custom_plans"] >= 16
    assert [r["post_id"] for r in await statement.fetch("simple", "rarissime", 20, "posts") if r["kind"] == ITEM] == [
        2991,
        1994,
        997,
    ]
