"""The bulk rebuild's move of staged translations into the new schema, against the real
PostgreSQL: taking a tsvector from the live schema is a primary-key lookup per staged row, never
a scan of the live table (which would make every chunk cost the whole read model)."""

from __future__ import annotations

import json

from tickerwire.services.projector import sql
from tickerwire.services.readmodel.migrate import migrate

LIVE_ROWS = 20_000
STAGED_ROWS = 5_000


def nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


async def test_reusing_live_vectors_looks_each_staged_row_up_by_primary_key(conn):
    await conn.execute(f"""
        INSERT INTO rm.post_translations (post_id, lang, slug, importance, sentiment, visible, category_slugs,
                                          tickers, hashtags, tsv, lean, detail, text_hash)
        SELECT i, 'en-US', 's' || i, 0, 'neutral', true, '{{}}', '{{}}', '{{}}', to_tsvector('simple', 'word ' || i),
               '{{}}', '{{}}', int8send(i)
        FROM generate_series(1, {LIVE_ROWS}) i""")
    await conn.execute("ANALYZE rm.post_translations")
    await migrate(conn, "rm_next")
    await conn.execute("SET search_path TO rm_next, public")
    await conn.execute(sql.CREATE_TRANSLATION_STAGING)
    await conn.execute(f"""
        INSERT INTO translation_staging (post_id, lang, slug, importance, sentiment, visible, category_slugs, tickers,
                                         hashtags, ts_config, title, lede, body, lean, detail, text_hash)
        SELECT i, 'en-US', 's' || i, 0, 'neutral', true, '{{}}', '{{}}', '{{}}', 'simple', 't', 'l', 'b', '{{}}', '{{}}',
               int8send(i)
        FROM generate_series(1, {STAGED_ROWS}) i""")
    await conn.execute("ANALYZE translation_staging")
    move = sql.MOVE_TRANSLATION_STAGING_REUSING.replace("{live}", '"rm"')

    plan = json.loads(await conn.fetchval("EXPLAIN (VERBOSE, FORMAT JSON) " + move))[0]["Plan"]

    live = [n for n in nodes(plan) if n.get("Relation Name") == "post_translations" and n.get("Schema") == "rm"]
    assert live and all(n["Node Type"] == "Index Scan" and n["Index Name"] == "post_translations_pkey" for n in live), live
    assert not any("Join" in n["Node Type"] or n["Node Type"] == "Nested Loop" for n in nodes(plan))
    # And it takes the live vector where the text is the same, computes it where not.
    await conn.execute("UPDATE translation_staging SET text_hash = '\\x00' WHERE post_id > $1", STAGED_ROWS - 10)
    await conn.execute(move)
    reused = await conn.fetchval("SELECT count(*) FROM rm_next.post_translations WHERE tsv = to_tsvector('simple', 'word ' || post_id)")
    assert reused == STAGED_ROWS - 10
