"""The read model as data: a comparable dump of every table partners read, the announcements,
and the derived counters computed from scratch, for tests that compare two read models."""

from __future__ import annotations

import asyncpg

from tickerwire.services.readmodel.migrate import forget, migrate

#: Order-independent content of every table the API and stream read. Positions, dead letters,
#: change stamps and announcements are compared separately where a test means them.
_TABLES = {
    "locales": "SELECT * FROM locales ORDER BY code",
    "categories": "SELECT * FROM categories ORDER BY slug",
    "posts": "SELECT * FROM posts ORDER BY id",
    "post_translations": """SELECT post_id, lang, slug, published_at, importance, sentiment, visible, category_slugs,
                                   tickers, hashtags, tsv::text AS tsv, lean, detail
                            FROM post_translations ORDER BY post_id, lang""",
    "tokens": "SELECT * FROM tokens ORDER BY ticker",
    "ticker_post_counts": "SELECT * FROM ticker_post_counts WHERE post_count <> 0 ORDER BY ticker",
    "sentiment_buckets": "SELECT * FROM sentiment_buckets WHERE count <> 0 ORDER BY bucket, sentiment",
    "workspaces": "SELECT id, version, name, status, rate_limit_per_minute, daily_quota, stream_connection_limit, badge_status FROM workspaces ORDER BY id",
    "api_keys": "SELECT * FROM api_keys ORDER BY id",
    "embeds": "SELECT * FROM embeds ORDER BY id",
    "heartbeats": "SELECT * FROM heartbeats ORDER BY embed_id",
}


async def read_model(conn: asyncpg.Connection, schema: str = "rm") -> dict[str, list[dict]]:
    out = {}
    for table, query in _TABLES.items():
        await conn.execute(f'SET search_path TO "{schema}", public')
        out[table] = [dict(r) for r in await conn.fetch(query)]
    return out


async def announcements(conn: asyncpg.Connection, schema: str = "rm") -> dict[tuple[int, str], tuple]:
    await conn.execute(f'SET search_path TO "{schema}", public')
    rows = await conn.fetch("SELECT post_id, lang, announced_partition, announced_offset FROM post_translations")
    return {(r["post_id"], r["lang"]): (r["announced_partition"], r["announced_offset"]) for r in rows}


async def derived_from_scratch(conn: asyncpg.Connection, schema: str = "rm") -> tuple[list[dict], list[dict]]:
    """post_count and the sentiment buckets computed from the posts table alone (docs/api.md#post-count, and the SentimentPulse schema of schemas/openapi.json)."""
    await conn.execute(f'SET search_path TO "{schema}", public')
    counts = await conn.fetch("""
        SELECT ticker, count(*)::integer AS post_count
        FROM posts, LATERAL (SELECT DISTINCT unnest(tickers) AS ticker) t
        WHERE status IN ('queued', 'publishing', 'published', 'partial')
        GROUP BY ticker ORDER BY ticker""")
    buckets = await conn.fetch("""
        SELECT date_trunc('minute', published_at) AS bucket, sentiment, count(*)::integer AS count
        FROM posts WHERE status IN ('published', 'partial') AND published_at IS NOT NULL
        GROUP BY 1, 2 ORDER BY 1, 2""")
    return [dict(r) for r in counts], [dict(r) for r in buckets]


#: Columns of a translation row rendered with the taxonomy of the moment.
_RENDERED = ("lean", "detail", "category_slugs")


def comparable(model: dict) -> dict:
    """A hidden translation row keeps what its last snapshot rendered with the taxonomy of that
    moment (it is never served, and category changes re-render only visible rows), so its
    taxonomy-dependent columns legitimately depend on how partitions interleaved."""
    rows = [
        r if r["visible"] else {k: v for k, v in r.items() if k not in _RENDERED} for r in model["post_translations"]
    ]
    return {**model, "post_translations": rows}


async def reset(conn: asyncpg.Connection, schema: str) -> None:
    """An empty, migrated read model ``schema`` (dropped first), first on ``conn``'s search path."""
    await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    await forget(conn, schema)
    await migrate(conn, schema)
    await conn.execute(f'SET search_path TO "{schema}", public')
