"""9. Resume cursors at scale (docs/resume.md): the statement of ``GET /changes`` and of a
stream resume's replay (``services/readmodel/cursors.py read_changes``) on 1.1M generated
translation rows.

The rows are generated straight into ``rm.post_translations`` of a benchmark database with COPY
(indexes dropped during the load and rebuilt after, then VACUUM ANALYZE): 200,000 posts over 4
posts-topic partitions, 3 to 8 of 14 locales each (about 5.5 rows per post: the 1.1M-row shape),
a 400-byte lean JSON per row. A post is announced at its first record; about 30% are partial
and announce their later translations at a record some offsets further on. The projector's
positions (the frontier) sit past the last record.

Figures, each the product statement only (it is the only way to answer; there is no cheaper
baseline that keeps the order):
- a ``/changes`` page (limit 20) after a random cursor (every partition at a random offset), in
  every locale, and in one locale (``lang=de-DE``): p50 and p99 over the queries of a run;
- a ``/changes`` page after a cursor near the head (the steady state of a polling client);
- a replay of 10,000 announcements in every locale: 10 statements of 1,000, bounded above as a
  stream resume is. (The WebSocket part of a replay is measured end to end by
  tests/e2e/test_resume_cursors.py, which reports it.)
Sizes: ``TICKERWIRE_BENCH_CHANGES_ROWS`` (default 1,100,000; 20,000 in smoke mode).
"""

from __future__ import annotations

import os
import random
import time
from typing import AsyncIterator

import asyncpg

from tickerwire.services.readmodel import cursors

from .common import Context, Result, percentile

NAME = "changes"

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
PARTITIONS = 4
TOPIC = "bench.posts.v1"
LEAN = (
    '{"id":%d,"slug":"post-%d-%s","published_at":"2026-01-05T14:30:00.000Z","lang":"%s","canonical_url":"https://news.example/%s/post-%d",'
    '"title":"Spot bitcoin ETFs log record inflows as the market turns","lede":"US spot bitcoin ETFs took in a record amount on Monday as BTC neared its high.",'
    '"cover_image_url":"https://img.example/posts/%d/cover.jpg","categories":[{"slug":"bitcoin-etfs","name":"Bitcoin ETFs"}],"importance":82,"sentiment":"BULLISH"}'
)


def size(smoke: bool) -> int:
    raw = os.environ.get("TICKERWIRE_BENCH_CHANGES_ROWS")
    return int(raw) if raw else 20_000 if smoke else 1_100_000


async def rows(count: int, frontier: dict[int, int]) -> AsyncIterator[bytes]:
    rng = random.Random("bench/changes")
    chunk: list[str] = []
    made, post_id = 0, 0
    while made < count:
        post_id += 1
        partition = post_id % PARTITIONS
        first = frontier.get(partition, 0)
        frontier[partition] = first + 1
        langs = ["en-US", *rng.sample(LOCALES[1:], rng.randint(2, 7))]
        later = rng.randint(1, len(langs) - 1) if rng.random() < 0.3 else len(langs)
        for n, lang in enumerate(langs):
            offset = first if n < later else first + rng.randint(4, 60)
            lean = LEAN % (post_id, post_id, lang.lower(), lang, lang, post_id, post_id)
            chunk.append(
                f"{post_id}\t{lang}\tp-{post_id}-{lang}\t2026-01-05 14:30:00+00\t50\tNEUTRAL\tt\t{{}}\t{{BTC}}\t{{}}\t\t"
                f"{lean}\t{lean}\t{partition}\t{offset}\n"
            )
            frontier[partition] = max(frontier[partition], offset + 1)
        made += len(langs)
        if len(chunk) >= 20_000:
            yield "".join(chunk).encode()
            chunk = []
    if chunk:
        yield "".join(chunk).encode()


async def load(conn: asyncpg.Connection, count: int) -> dict[int, int]:
    indexes = await conn.fetch(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'rm' AND tablename = 'post_translations' AND indexname NOT LIKE '%pkey'"
    )
    for r in indexes:
        await conn.execute(f'DROP INDEX rm."{r["indexname"]}"')
    frontier: dict[int, int] = {}
    await conn.copy_to_table(
        "post_translations",
        schema_name="rm",
        source=rows(count, frontier),
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
            "announced_partition",
            "announced_offset",
        ],
    )
    await conn.execute("SET maintenance_work_mem = '256MB'")
    for r in indexes:
        await conn.execute(r["indexdef"])
    await conn.executemany(
        "INSERT INTO positions (topic, partition, next_offset) VALUES ($1, $2, $3)",
        [(TOPIC, p, o) for p, o in frontier.items()],
    )
    await conn.execute("VACUUM ANALYZE rm.post_translations")
    return frontier


async def timed_pages(
    conn: asyncpg.Connection, cursors_: list[dict[int, cursors.Mark]], langs: list[str]
) -> list[float]:
    out = []
    for marks in cursors_:
        started = time.perf_counter()
        page = await cursors.read_changes(conn, TOPIC, marks, langs, limit=21)
        out.append((time.perf_counter() - started) * 1000)
        assert page.epoch
    return out


async def replay(
    conn: asyncpg.Connection, start: dict[int, cursors.Mark], upto: dict[int, cursors.Mark]
) -> tuple[float, int]:
    """A stream resume's reads: pages of 1,000 up to ``upto``; (ms, announcements read)."""
    marks, read = dict(start), 0
    started = time.perf_counter()
    while True:
        page = await cursors.read_changes(conn, TOPIC, marks, LOCALES, limit=1_000, upto=upto)
        for item in page.items:
            cursors.advance(marks, item.partition, (item.offset, item.lang))
        read += len(page.items)
        if len(page.items) < 1_000:
            return (time.perf_counter() - started) * 1000, read


async def run(ctx: Context) -> Result:
    s = ctx.settings
    result = Result(NAME)
    count = size(s.smoke)
    label = f"{count / 1e6:.1f}M" if count >= 1_000_000 else f"{count // 1000}k"
    rng = random.Random("bench/changes/cursors")
    queries = s.pick(20, 300)
    every = {
        q: result.metric(f"/changes page, every locale, p{q} @ {label} rows", "ms", higher_is_better=False)
        for q in (50, 99)
    }
    one = {
        q: result.metric(f"/changes page, lang=de-DE, p{q} @ {label} rows", "ms", higher_is_better=False)
        for q in (50, 99)
    }
    head = {
        q: result.metric(f"/changes page near the head, p{q} @ {label} rows", "ms", higher_is_better=False)
        for q in (50, 99)
    }
    for metric in (every[99], one[99], head[99]):
        metric.target = "< 10 ms"
        metric.check = lambda p, r: p < 10
    replayed = result.metric(
        f"replay of 10,000 announcements (read model) @ {label} rows", "ms", higher_is_better=False, target="< 2000 ms"
    )
    replayed.check = lambda p, r: p < 2000
    async with ctx.read_model() as conn:
        started = time.perf_counter()
        frontier = await load(conn, count)
        total = await conn.fetchval("SELECT count(*) FROM post_translations")
        result.notes.append(
            f"{label}: {total:,} rows over {len(LOCALES)} locales and {PARTITIONS} partitions (frontier "
            f"{dict(sorted(frontier.items()))}); loaded and indexed in {time.perf_counter() - started:.0f} s; "
            f"{queries} pages per run and kind; statement: services/readmodel/cursors.py read_changes"
        )
        anywhere = [{p: (rng.randrange(end), "") for p, end in frontier.items()} for _ in range(queries)]
        near = [{p: (max(0, end - rng.randint(1, 30)), "") for p, end in frontier.items()} for _ in range(queries)]
        await timed_pages(conn, anywhere[:20], list(LOCALES))  # warm the cache once
        # 10,000 announcements in every locale: 2,500 after a random point of each partition.
        starts = [{p: (rng.randrange(end // 2), "") for p, end in frontier.items()} for _ in range(s.pick(1, 5))]
        ends = [
            {
                p: (
                    await conn.fetchval(
                        "SELECT announced_offset FROM post_translations WHERE visible AND announced_partition = $1 AND announced_offset >= $2 "
                        'ORDER BY announced_offset, lang COLLATE "C" OFFSET 2499 LIMIT 1',
                        p,
                        m[0],
                    )
                    or 0,
                    "~",
                )
                for p, m in start.items()
            }
            for start in starts
        ]
        for run_number in range(s.runs):
            for metrics, sample, langs in (
                (every, anywhere, list(LOCALES)),
                (one, anywhere, ["de-DE"]),
                (head, near, list(LOCALES)),
            ):
                lat = await timed_pages(conn, sample, langs)
                for q in (50, 99):
                    metrics[q].product.append(percentile(lat, q))
            runs = [await replay(conn, start, end) for start, end in zip(starts, ends)]
            replayed.product.append(max(ms for ms, _ in runs))
            if run_number == 0:
                result.notes.append(
                    f"replay, first run: {', '.join(f'{n:,} announcements in {ms:.0f} ms' for ms, n in runs)}"
                )
        for name, sql, langs in (
            ("every locale", cursors.CHANGES_SQL, [lang.lower() for lang in LOCALES]),
            ("one locale", cursors.CHANGES_BY_LOCALE_SQL, ["de-de"]),
        ):
            plan = "\n".join(
                r[0]
                for r in await conn.fetch(
                    "EXPLAIN " + sql, [0], [0], [""], [None], [None], langs, None, None, 21, TOPIC, False
                )
            )
            used = sorted({w for w in plan.split() if w.startswith("post_translations_announced")})
            result.notes.append(f"plan of a page in {name} reads {', '.join(used) or 'no announcement index'}")
        result.notes.append(f"server {await conn.fetchval('SHOW server_version')}")
    return result
