"""The bulk rebuild's vectors for a chunk of translations, against the real PostgreSQL: taking a
tsvector from the live schema is a primary-key lookup per row, never a scan of the live table
(which would make every chunk cost the whole read model), and a row whose text changed gets the
vector the live upsert would compute."""

from __future__ import annotations

import json

from tickerwire.services.projector import sql

LIVE_ROWS = 20_000
CHUNK_ROWS = 5_000


def nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def chunk(changed: set[int]) -> list[list]:
    """The statement's arguments for rows 1..CHUNK_ROWS of the live table ('en-US'), with other
    text (and another text hash) for the ``changed`` post ids."""
    ids = list(range(1, CHUNK_ROWS + 1))
    return [
        list(range(len(ids))),
        ids,
        ["en-US"] * len(ids),
        [b"\x00" if i in changed else i.to_bytes(8, "big", signed=True) for i in ids],
        ["simple"] * len(ids),
        [f"title {i}" for i in ids],
        ["lede"] * len(ids),
        ["body"] * len(ids),
    ]


async def computed(conn, title: str) -> str:
    """The vector the live upsert computes for a chunk row (config 'simple', lede and body fixed)."""
    return await conn.fetchval(
        "SELECT (setweight(to_tsvector('simple', $1), 'A') || setweight(to_tsvector('simple', 'lede'), 'B') "
        "|| setweight(to_tsvector('simple', 'body'), 'C'))::text",
        title,
    )


async def test_reusing_live_vectors_looks_each_row_up_by_primary_key(conn):
    await conn.execute(f"""
        INSERT INTO rm.post_translations (post_id, lang, slug, importance, sentiment, visible, category_slugs,
                                          tickers, hashtags, tsv, lean, detail, text_hash)
        SELECT i, 'en-US', 's' || i, 0, 'neutral', true, '{{}}', '{{}}', '{{}}', to_tsvector('simple', 'word ' || i),
               '{{}}', '{{}}', int8send(i)
        FROM generate_series(1, {LIVE_ROWS}) i""")
    await conn.execute("ANALYZE rm.post_translations")
    vectors = sql.TRANSLATION_VECTORS_REUSING.replace("{live}", '"rm"')

    plan = json.loads(await conn.fetchval("EXPLAIN (VERBOSE, FORMAT JSON) " + vectors, *chunk(set())))[0]["Plan"]

    live = [n for n in nodes(plan) if n.get("Relation Name") == "post_translations" and n.get("Schema") == "rm"]
    assert live and all(n["Node Type"] == "Index Scan" and n["Index Name"] == "post_translations_pkey" for n in live), (
        live
    )
    assert not any("Join" in n["Node Type"] or n["Node Type"] == "Nested Loop" for n in nodes(plan))

    changed = {7, CHUNK_ROWS}
    got = [r["tsv"] for r in await conn.fetch(vectors, *chunk(changed))]
    for i in (1, 7, 100, CHUNK_ROWS):
        want = (
            await computed(conn, f"title {i}")
            if i in changed
            else await conn.fetchval("SELECT to_tsvector('simple', 'word ' || $1::int)::text", i)
        )
        assert await conn.fetchval("SELECT $1::tsvector::text", got[i - 1]) == want, i


async def test_without_a_live_schema_every_vector_is_computed_as_the_live_upsert_does(conn):
    got = [r["tsv"] for r in await conn.fetch(sql.TRANSLATION_VECTORS, *chunk(set()))]
    assert len(got) == CHUNK_ROWS
    for i in (1, 2, CHUNK_ROWS):
        assert await conn.fetchval("SELECT $1::tsvector::text", got[i - 1]) == await computed(conn, f"title {i}"), i
