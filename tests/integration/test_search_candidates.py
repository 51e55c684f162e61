"""Search ranks by relevance among the newest SEARCH_CANDIDATES matches of the locale."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import asyncpg

from tickerwire.services.api.params import Filters, Page
from tickerwire.services.api.queries import ITEM, SEARCH_CANDIDATES, Search, page_query
from tickerwire.services.common.db import migrate

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


async def seed(conn: asyncpg.Connection, n: int) -> None:
    """Post 1 is the oldest and the most relevant (its title repeats the word); the rest mention it once."""
    rows = []
    for post_id in range(1, n + 1):
        title = "halving halving halving" if post_id == 1 else f"market note {post_id}"
        rows.append((post_id, T0 + timedelta(minutes=post_id), title, f"body about the halving {post_id}", f'{{"id":{post_id}}}'))
    await conn.executemany(
        """
        INSERT INTO post_translations (post_id, lang, slug, published_at, importance, sentiment, visible,
            category_slugs, tickers, hashtags, tsv, lean, detail)
        VALUES ($1::bigint, 'en-US', 's' || $1::bigint::text, $2, 50, 'NEUTRAL', true, '{}', '{}', '{}',
            setweight(to_tsvector('english', $3), 'A') || setweight(to_tsvector('english', $4), 'C'), $5, $5)
        """,
        rows,
    )


async def search_ids(conn: asyncpg.Connection, limit: int = 50) -> list[int]:
    sql, args = page_query("en-US", Filters(), Page(limit=limit), Search("english", "halving"))
    return [r["post_id"] for r in await conn.fetch(sql, *args) if r["kind"] == ITEM]


async def test_the_most_relevant_match_ranks_first_while_it_is_among_the_newest(fresh_db):
    conn = await asyncpg.connect(fresh_db, server_settings={"search_path": "rm,public"})
    try:
        await migrate(conn, "rm")
        await seed(conn, SEARCH_CANDIDATES)
        assert (await search_ids(conn))[0] == 1
    finally:
        await conn.close()


async def test_matches_older_than_the_newest_candidates_are_not_ranked(fresh_db):
    conn = await asyncpg.connect(fresh_db, server_settings={"search_path": "rm,public"})
    try:
        await migrate(conn, "rm")
        await seed(conn, SEARCH_CANDIDATES + 1)
        ids = await search_ids(conn)
        assert 1 not in ids
        assert ids[0] == SEARCH_CANDIDATES + 1  # equal ranks: newest first
    finally:
        await conn.close()
