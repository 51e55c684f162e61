"""4. Search at scale: the API's search statement (services/api/queries.py ``page_query`` with a
``Search``) on generated post translations over 14 locales, p50/p95/p99 of the first page (20)
for rare, medium and common words, at each table size, against the unranked GIN match of the
same queries (``... WHERE tsv @@ q LIMIT 20``, no order: the cheapest possible answer).

The rows are generated straight into ``rm.post_translations`` of a benchmark database with
COPY (text format; indexes dropped during the load and rebuilt after, then VACUUM ANALYZE).
Words of the documents follow a Zipf law over a synthetic vocabulary; positions 1-8 are the
title (weight A), 9-20 the lede (B), the rest the body (C), so the ranking tiers are real.
Queries use the ``simple`` configuration. Word classes by Zipf rank: common = ranks 1-10
(each in about a tenth to a third of all rows), medium = ranks 200-400, rare = ranks
5,000-20,000. Sizes: ``TICKERWIRE_BENCH_SEARCH_ROWS`` (comma-separated; default 110000 and
1100000 in a full run, 20000 in smoke mode).

The ranking (tiers by where the whole query matches, newest first within a tier) is exact by
construction, not an approximation of a heavier function, so there is no agreement figure to
report: every page is the exact top of that order.
"""

from __future__ import annotations

import itertools
import os
import random
import time
from typing import AsyncIterator

import asyncpg

from tickerwire.services.api import queries
from tickerwire.services.api.params import Filters, PageWindow

from .common import Context, Result, percentile

NAME = "search"

LOCALES = (
    "en-US",
    "es-ES",
    "fr-FR",
    "de-DE",
    "pt-BR",
    "it-IT",
    "ru-RU",
    "tr-TR",
    "ar-SA",
    "ja-JP",
    "ko-KR",
    "zh-CN",
    "id-ID",
    "nl-NL",
)
VOCABULARY = 20_000
WORDS_PER_DOC = 40
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]

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
    return sorted(sorted(words), key=lambda w: rng.random())  # sorted first: set order varies by process


def zipf_cum(n: int, s: float = 1.0) -> list[float]:
    return list(itertools.accumulate(1 / (k**s) for k in range(1, n + 1)))


def ranked_statement(lang: str, text: str) -> tuple[str, list, str]:
    """(sql, args, source) of the API's search statement for the first page of 20."""
    sql, args = queries.page_query(lang, Filters(), PageWindow(limit=20), queries.Search("simple", text))
    return sql, args, "services/api/queries.py page_query"


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
        chunk.append(
            f"{post_id}\t{lang}\ts-{post_id}-{lang}\t{published}\t50\tNEUTRAL\tt\t{{}}\t{{}}\t{{}}\t{tsv}\t{lean}\t{lean}\n"
        )
        if len(chunk) == 20_000:
            yield "".join(chunk).encode()
            chunk = []
    if chunk:
        yield "".join(chunk).encode()


async def load(conn: asyncpg.Connection, count: int, words: list[str], cum: list[float]) -> None:
    await conn.execute("SELECT ensure_search_indexes(code) FROM unnest($1::text[]) AS code", list(LOCALES))
    indexes = await conn.fetch(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'rm' AND tablename = 'post_translations' AND indexname NOT LIKE '%pkey'"
    )
    for r in indexes:
        await conn.execute(f'DROP INDEX rm."{r["indexname"]}"')
    await conn.copy_to_table(
        "post_translations",
        schema_name="rm",
        source=rows(count, words, cum),
        columns=[
            "post_id",
            "lang",
            "slug",
            "published_at",
            "importance",
            "sentiment",
            "visible",
            "category_slugs",
            "tickers",
            "hashtags",
            "tsv",
            "lean",
            "detail",
        ],
    )
    await conn.execute("SET maintenance_work_mem = '256MB'")
    for r in indexes:
        await conn.execute(r["indexdef"])
    await conn.execute("VACUUM ANALYZE rm.post_translations")


async def timed(conn: asyncpg.Connection, statements: list[tuple[str, list]]) -> list[float]:
    out = []
    for sql, args in statements:
        started = time.perf_counter()
        await conn.fetch(sql, *args)
        out.append((time.perf_counter() - started) * 1000)
    return out


CLASSES = {"common": (1, 10), "medium": (200, 400), "rare": (5_000, 20_000)}


def sizes(smoke: bool) -> list[int]:
    raw = os.environ.get("TICKERWIRE_BENCH_SEARCH_ROWS")
    if raw:
        return [int(x) for x in raw.split(",") if x.strip()]
    return [20_000] if smoke else [110_000, 1_100_000]


def class_queries(words: list[str], count: int) -> dict[str, list[tuple[str, str]]]:
    rng = random.Random("bench/classes")
    return {
        name: [(rng.choice(LOCALES), words[rng.randint(low, high) - 1]) for _ in range(count)]
        for name, (low, high) in CLASSES.items()
    }


async def run(ctx: Context) -> Result:
    s = ctx.settings
    result = Result(NAME)
    words = vocabulary()
    cum = zipf_cum(len(words))
    queries = class_queries(words, s.pick(20, 200))
    for count in sizes(s.smoke):
        label = f"{count / 1e6:.2f}M" if count >= 1_000_000 else f"{count // 1000}k"
        metrics = {}
        for cls in CLASSES:
            for q in (50, 95, 99):
                m = result.metric(f"{cls} word top-20 p{q} @ {label} rows", "ms", higher_is_better=False)
                if q == 95 and cls in ("rare", "common"):
                    m.target = "< 20 ms"
                    m.check = lambda p, r: p < 20
                metrics[cls, q] = m
        async with ctx.read_model() as conn:
            started = time.perf_counter()
            await load(conn, count, words, cum)
            result.notes.append(
                f"{label}: {count:,} rows over {len(LOCALES)} locales, {WORDS_PER_DOC} Zipf words per row from "
                f"{VOCABULARY:,}; loaded and indexed in {time.perf_counter() - started:.0f} s; "
                f"{sum(len(v) for v in queries.values())} one-word queries per run; statement: {ranked_statement('en-US', 'x')[2]}"
            )
            for cls, sample in queries.items():
                matches = [
                    await conn.fetchval(
                        "SELECT count(*) FROM post_translations WHERE lang = $1 AND visible AND tsv @@ to_tsquery('simple', $2)",
                        lang,
                        word,
                    )
                    for lang, word in sample[:5]
                ]
                result.notes.append(
                    f"{label}: {cls} words match {min(matches):,}-{max(matches):,} rows of their locale (first 5 queries)"
                )
            product = {
                cls: [ranked_statement(lang, word)[:2] for lang, word in sample] for cls, sample in queries.items()
            }
            baseline = {
                cls: [(UNRANKED, [lang, "simple", word]) for lang, word in sample] for cls, sample in queries.items()
            }
            for cls in CLASSES:
                await timed(conn, product[cls][:10] + baseline[cls][:10])  # warm the cache once
            for _ in range(s.runs):
                for side, statements in (("product", product), ("baseline", baseline)):
                    for cls in CLASSES:
                        lat = await timed(conn, statements[cls])
                        for q in (50, 95, 99):
                            getattr(metrics[cls, q], side).append(percentile(lat, q))
            plans = await conn.fetchrow(
                "SELECT sum(custom_plans) AS custom, sum(generic_plans) AS generic FROM pg_prepared_statements "
                "WHERE statement LIKE 'WITH fetched%'"
            )
            result.notes.append(
                f"{label}: plans of the search statements: {plans['custom']} custom, {plans['generic']} generic; "
                f"server {await conn.fetchval('SHOW server_version')}"
            )
    return result
