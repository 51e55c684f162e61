"""4. Search: ranked top-20 over synthetic post translations across 14 locales, p50/p95/p99
over a Zipf-like query sample, against the unranked GIN match of the same queries.

The rows are generated straight into ``rm.post_translations`` of a benchmark database with
COPY (text format; indexes dropped during the load and rebuilt after, then ANALYZE). Words of
the documents and of the queries follow a Zipf law over a synthetic vocabulary; the stored
tsvector holds already-normalized lexemes with positions and weights, so queries use the
``simple`` configuration. The ranked statement is the API's own (services/api/queries.py
``page_query`` with a ``Search``) when it can be built, else websearch_to_tsquery +
ts_rank_cd ORDER BY rank DESC LIMIT 20; the notes say which.
"""

from __future__ import annotations

import itertools
import random
import time
from typing import AsyncIterator

import asyncpg

from tickerwire.services.common.db import migrate

from .common import Context, Result, percentile

NAME = "search"

LOCALES = ("en-US", "es-ES", "fr-FR", "de-DE", "pt-BR", "it-IT", "ru-RU", "tr-TR", "ar-SA", "ja-JP", "ko-KR", "zh-CN", "id-ID", "nl-NL")
VOCABULARY = 20_000
WORDS_PER_DOC = 40
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]

FALLBACK_RANKED = """
SELECT t.post_id, t.lean FROM post_translations t
WHERE t.lang = $1 AND t.visible AND t.tsv @@ websearch_to_tsquery($2::regconfig, $3)
ORDER BY ts_rank_cd(t.tsv, websearch_to_tsquery($2::regconfig, $3)) DESC, t.published_at DESC, t.post_id DESC
LIMIT 20
"""
UNRANKED = """
SELECT t.post_id, t.lean FROM post_translations t
WHERE t.lang = $1 AND t.visible AND t.tsv @@ websearch_to_tsquery($2::regconfig, $3)
LIMIT 20
"""


def vocabulary() -> list[str]:
    rng = random.Random("bench/vocab")
    words: set[str] = set()
    while len(words) < VOCABULARY:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words, key=lambda w: rng.random())


def zipf_cum(n: int, s: float = 1.0) -> list[float]:
    return list(itertools.accumulate(1 / (k**s) for k in range(1, n + 1)))


def ranked_statement(lang: str, text: str) -> tuple[str, list, str]:
    """(sql, args, source) of the API's search statement, or the fallback."""
    try:
        from tickerwire.services.api import queries
        from tickerwire.services.api.params import Filters, Page

        sql, args = queries.page_query(lang, Filters(), Page(limit=20), queries.Search("simple", text))
        return sql, args, "services/api/queries.py page_query"
    except Exception as exc:  # the API's search is being written; fall back to the plain statement
        return FALLBACK_RANKED, [lang, "simple", text], f"fallback websearch_to_tsquery + ts_rank_cd (API statement unavailable: {type(exc).__name__})"


async def rows(count: int, words: list[str], cum: list[float]) -> AsyncIterator[bytes]:
    rng = random.Random("bench/docs")
    chunk: list[str] = []
    for i in range(count):
        post_id, lang = i // len(LOCALES) + 1, LOCALES[i % len(LOCALES)]
        doc = rng.choices(words, cum_weights=cum, k=WORDS_PER_DOC)
        positions: dict[str, list[str]] = {}
        for pos, w in enumerate(doc, start=1):
            positions.setdefault(w, []).append(f"{pos}{'A' if pos <= 8 else 'B' if pos <= 20 else 'C'}")
        tsv = " ".join(f"{w}:{','.join(p)}" for w, p in positions.items())
        lean = '{"id":%d,"title":"%s"}' % (post_id, " ".join(doc[:8]))
        published = f"2026-01-{1 + i % 28:02d} {i % 24:02d}:{i % 60:02d}:00+00"
        chunk.append(f"{post_id}\t{lang}\ts-{post_id}-{lang}\t{published}\t50\tNEUTRAL\tt\t{{}}\t{{}}\t{{}}\t{tsv}\t{lean}\t{lean}\n")
        if len(chunk) == 20_000:
            yield "".join(chunk).encode()
            chunk = []
    if chunk:
        yield "".join(chunk).encode()


async def load(conn: asyncpg.Connection, count: int, words: list[str], cum: list[float]) -> None:
    await conn.execute("SELECT ensure_search_indexes(code) FROM unnest($1::text[]) AS code", list(LOCALES))
    indexes = await conn.fetch("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'rm' AND tablename = 'post_translations' AND indexname NOT LIKE '%pkey'")
    for r in indexes:
        await conn.execute(f'DROP INDEX rm."{r["indexname"]}"')
    await conn.copy_to_table(
        "post_translations", schema_name="rm", source=rows(count, words, cum),
        columns=["post_id", "lang", "slug", "published_at", "importance", "sentiment", "visible", "category_slugs", "tickers", "hashtags", "tsv", "lean", "detail"],
    )
    for r in indexes:
        await conn.execute(r["indexdef"])
    await conn.execute("ANALYZE rm.post_translations")


async def timed(conn: asyncpg.Connection, statements: list[tuple[str, list]]) -> list[float]:
    out = []
    for sql, args in statements:
        started = time.perf_counter()
        await conn.fetch(sql, *args)
        out.append((time.perf_counter() - started) * 1000)
    return out


async def run(ctx: Context) -> Result:
    s = ctx.settings
    result = Result(NAME)
    count = s.pick(20_000, 1_000_000)
    words = vocabulary()
    cum = zipf_cum(len(words))
    rng = random.Random("bench/queries")
    sample = [(rng.choice(LOCALES), " ".join(rng.choices(words, cum_weights=cum, k=rng.choice((1, 1, 2))))) for _ in range(s.pick(60, 300))]
    p50, p95, p99 = (result.metric(f"top-20 {q}", "ms", higher_is_better=False) for q in ("p50", "p95", "p99"))
    p95.target = "<= 2x baseline and < 50 ms"
    p95.check = lambda p, r: p < 50 and r is not None and r >= 0.5
    async with ctx.database() as dsn:
        conn = await asyncpg.connect(dsn)
        try:
            await migrate(conn, "rm")
            await conn.execute("SET search_path TO rm, public")
            started = time.perf_counter()
            await load(conn, count, words, cum)
            result.notes.append(f"{count:,} rows over {len(LOCALES)} locales, {WORDS_PER_DOC} Zipf words per row from {VOCABULARY:,}; "
                                f"loaded and indexed in {time.perf_counter() - started:.0f} s; {len(sample)} queries (1-2 Zipf words) per run")
            ranked = [ranked_statement(lang, text) for lang, text in sample]
            result.notes.append(f"ranked statement: {ranked[0][2]}")
            product = [(sql, args) for sql, args, _ in ranked]
            baseline = [(UNRANKED, [lang, "simple", text]) for lang, text in sample]
            await timed(conn, product[:10] + baseline[:10])  # warm the cache once
            for _ in range(s.runs):
                for side, statements in (("product", product), ("baseline", baseline)):
                    lat = await timed(conn, statements)
                    for metric, q in ((p50, 50), (p95, 95), (p99, 99)):
                        getattr(metric, side).append(percentile(lat, q))
        finally:
            await conn.close()
    return result
