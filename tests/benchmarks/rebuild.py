"""7. Rebuild: ``tickerwire projector rebuild``'s bulk path (reduce the log, COPY, indexes after)
against the event-by-event replay it replaced, from the same topics into side schemas, and
whether the two read models are equal (a hash of every table the API reads).

The topics hold the demo catalog and ``TICKERWIRE_BENCH_REBUILD_POSTS`` published posts
(default 20,000 in a full run, 100 in smoke mode) of the demo generator over the 14 listed
locales (3-8 translations each, about 5.5 on average: the 200k-post / 1.1M-row shape), plus
one edit per post in ten. A projector projects them first, so both runs read up to the
same stored positions (``catch_up_with``).
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Iterator

import asyncpg

from tickerwire.devstack.demo import dataset
from tickerwire.schemas.models import PostStatus
from tickerwire.services.projector.rebuild import replay_into

from .common import Context, Deadline, Result, catalog, log

NAME = "rebuild"


def posts(count: int) -> Iterator:
    """The posts, one at a time (200,000 of them do not fit in memory as objects)."""
    rng = random.Random("bench/rebuild")
    pool = dataset.ticker_pool(7)
    now = datetime.now(timezone.utc)
    for i in range(count):
        yield dataset.build_post(
            rng,
            post_id=i + 1,
            status=PostStatus.published,
            published_at=now + timedelta(microseconds=i),
            emitted_at=now,
            locales=dataset.LISTED_LOCALES,
            pool=pool,
        )


#: Posts per publish call.
PUBLISH_CHUNK = 2_000

#: One hash per table the API reads, in a fixed order: the md5 of the rows' md5s (a table's text
#: at 1.1M rows is far beyond PostgreSQL's 1 GB limit for one string).
DIGEST = """
SELECT (SELECT md5(coalesce(string_agg(md5(p::text), '|' ORDER BY p.id), '')) FROM "{s}".posts p),
       (SELECT md5(coalesce(string_agg(md5(row(t.post_id, t.lang, t.slug, t.published_at, t.importance, t.sentiment,
               t.visible, t.category_slugs, t.tickers, t.hashtags, t.tsv, t.lean, t.detail, t.announced_partition,
               t.announced_offset)::text), '|' ORDER BY t.post_id, t.lang), '')) FROM "{s}".post_translations t),
       (SELECT md5(coalesce(string_agg(c::text, '|' ORDER BY c.ticker), '')) FROM "{s}".ticker_post_counts c WHERE c.post_count <> 0),
       (SELECT md5(coalesce(string_agg(b::text, '|' ORDER BY b.bucket, b.sentiment), '')) FROM "{s}".sentiment_buckets b WHERE b.count <> 0),
       (SELECT md5(coalesce(string_agg(x::text, '|' ORDER BY x.ticker), '')) FROM "{s}".tokens x),
       (SELECT md5(coalesce(string_agg(x::text, '|' ORDER BY x.slug), '')) FROM "{s}".categories x)
"""


def post_count(smoke: bool) -> int:
    raw = os.environ.get("TICKERWIRE_BENCH_REBUILD_POSTS")
    return int(raw) if raw else (100 if smoke else 20_000)


async def digest(dsn: str, schema: str) -> tuple:
    conn = await asyncpg.connect(dsn)
    try:
        return tuple(await conn.fetchrow(DIGEST.format(s=schema)))
    finally:
        await conn.close()


async def wait_projected(dsn: str, total: int, projector: subprocess.Popen) -> None:
    deadline = Deadline(120 + total / 20, f"the live projection of {total:,} records")
    conn = await asyncpg.connect(dsn)
    try:
        while int(await conn.fetchval("SELECT coalesce(sum(next_offset), 0) FROM rm.positions") or 0) < total:
            deadline.check(projector)
            await asyncio.sleep(0.2)
    finally:
        await conn.close()


async def run(ctx: Context) -> Result:
    s = ctx.settings
    result = Result(NAME)
    count = post_count(s.smoke)
    seconds = result.metric(
        f"rebuild of {count:,} posts over 14 locales",
        "s",
        higher_is_better=False,
        target=">= 5x faster than replay, equal read model",
        check=lambda p, r: r is not None and r >= 5,
    )
    rate = result.metric("rebuild rows/s (bulk vs replay)", "rows/s")
    cat = catalog(tokens=200)
    async with ctx.stack() as stack:
        await stack.publish(cat)
        rows, edits, chunk = 0, [], []
        for i, event in enumerate(posts(count)):
            rows += len(event.data.translations)
            if i % 10 == 0:
                edits.append(event.model_copy(update={"version": event.version + 1}))
            chunk.append(event)
            if len(chunk) == PUBLISH_CHUNK:
                await stack.publish(chunk)
                chunk = []
        await stack.publish([*chunk, *edits])
        total = len(cat) + count + len(edits)
        projector = await stack.start("projector", TICKERWIRE_PROJECTOR_GROUP=f"bench-{uuid.uuid4().hex[:8]}")
        started = time.perf_counter()
        await wait_projected(stack.database_url, total, projector.proc)
        result.notes.append(
            f"{total:,} records ({count:,} posts, {rows:,} translation rows over 14 locales, {len(edits):,} edits, catalog); "
            f"the live projector took {time.perf_counter() - started:.0f} s"
        )
        stack.stop(projector)
        digests = {}
        for _ in range(s.runs):
            for side, bulk in (("product", True), ("baseline", False)):
                schema = f"bench_{side}"
                t0 = time.perf_counter()
                report = await replay_into(stack.config, schema, catch_up_with="rm", bulk=bulk)
                took = time.perf_counter() - t0
                getattr(seconds, side).append(took)
                getattr(rate, side).append(rows / took)
                log.info("rebuild: %s %.1f s", "bulk" if bulk else "replay", took)
                digests[side] = await digest(stack.database_url, schema)
                if bulk and report.bulk is not None:
                    b = report.bulk
                    result.notes.append(
                        f"bulk phases: reduce {b.seconds_reduce:.1f} s, load {b.seconds_load:.1f} s "
                        f"({b.rows:,} rows), counters+indexes+ANALYZE {b.seconds_index:.1f} s"
                    )
        live = await digest(stack.database_url, "rm")
        equal = digests["product"] == digests["baseline"] == live
        result.notes.append(
            f"read model equal (hash of posts, translations, counters, tokens, categories): "
            f"bulk = replay = live projector: {'yes' if equal else 'NO'}"
        )
        if not equal:
            result.status = "error"
    return result
