"""How the two hot paths scale with processes on this machine, each beside the same baseline in
the same run.

- **Reads**: ``/posts`` peak (``wrk -t1 -c32``, closed loop) with one api process, then with a
  second one started on the same partner port (``SO_REUSEPORT``, as ``tickerwire up
  --api-processes 2`` runs them), against bare aiohttp in one process returning the same bytes.
- **Projector**: the posts topic in 1, 3 and 6 partitions (``TICKERWIRE_TOPIC_POSTS_PARTITIONS``)
  with one projector process per partition in one consumer group, started and settled before
  the events are published (publishing outruns projecting), events/s from the first committed
  batch to the last (durable commits), against the raw COPY of the same rows in one transaction
  on one connection (the projector benchmark's ceiling part).

Every process shares the machine's cores with the load generator, PostgreSQL and the broker:
what more processes give here is bounded by those cores, and docs/benchmarks.md says what a
bigger host would give and on what model.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import uuid

import asyncpg

from tests.support.stack import BASE
from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.readmodel.mapping import Taxonomy
from tickerwire.services.readmodel.migrate import migrate

from .common import Context, Deadline, Result, baseline_process, catalog, closed_loop, posts, probe, provision_wide_open
from .projector import EQUIVALENT, LATENCY_FETCH_WAIT_MS, committed, copy_rows, raw_copy
from .read_api import wrk_peak

NAME = "scaling"

API_PROCESSES = (1, 2)
PARTITIONS = (1, 3, 6)
PEAK_S = 5.0
#: How long the projectors of one group are given to settle their partitions (test brokers: a
#: 2 s session) before the events are published.
GROUP_SETTLE_S = 3.0


async def _peak(ctx: Context, url: str, key: str | None) -> float:
    if ctx.settings.smoke:
        load = await closed_loop(url, {"Authorization": f"Bearer {key}"} if key else {}, 1.0, 8)
    else:
        load = wrk_peak(url, key, PEAK_S)
    return (load.requests - load.errors) / load.seconds


async def reads(ctx: Context, result: Result) -> None:
    rows = {
        n: result.metric(f"/posts requests/s, {n} api process{'es' if n > 1 else ''}", "req/s") for n in API_PROCESSES
    }
    async with ctx.stack(TICKERWIRE_PORT_SHARING="true") as stack:
        await stack.start("projector")
        await stack.publish([*catalog(), *posts(1, ctx.settings.pick(200, 2000))])
        key = await provision_wide_open(stack)
        first = await stack.start("api")
        url = first.url + BASE + "/posts"
        status, body, missing, _ = await probe(url, {"Authorization": f"Bearer {key}"})
        if missing or status != 200:
            raise RuntimeError(f"/posts answered {status}: {missing}")
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
            fh.write(body)
        try:
            async with baseline_process("http", "--body", fh.name) as (_, base_url):
                bare = base_url + BASE + "/posts"
                for n in API_PROCESSES:
                    while len(stack.of("api")) < n:
                        await stack.start("api", port=first.port)
                    for _ in range(ctx.settings.runs):
                        rows[n].product.append(await _peak(ctx, url, key))
                        rows[n].baseline.append(await _peak(ctx, bare, None))
        finally:
            os.unlink(fh.name)


async def _projector_rate(ctx: Context, partitions: int, events, cat) -> float:
    """Events/s of ``partitions`` projector processes over a posts topic of that many partitions."""
    total = len(events)
    async with ctx.stack(TICKERWIRE_TOPIC_POSTS_PARTITIONS=str(partitions)) as stack:
        await stack.publish(cat)
        topic = topic_name(stack.topic_prefix, POSTS)
        async with ctx.database() as dsn:
            conn = await asyncpg.connect(dsn)
            try:
                await migrate(conn, "rm")
                await conn.execute("SET search_path TO rm, public")
                group = f"bench-{uuid.uuid4().hex[:8]}"
                for _ in range(partitions):
                    await stack.start(
                        "projector",
                        TICKERWIRE_DATABASE_URL=dsn,
                        TICKERWIRE_PROJECTOR_GROUP=group,
                        TICKERWIRE_KAFKA_FETCH_MAX_WAIT_MS=str(LATENCY_FETCH_WAIT_MS),
                    )
                await asyncio.sleep(GROUP_SETTLE_S)  # every member has its partitions before the events come
                started = time.perf_counter()
                await stack.publish(events)
                seen = await committed(
                    conn,
                    topic,
                    total,
                    Deadline(120 + total / 20, f"projecting {total:,} events over {partitions} partitions"),
                )
                if seen.last > seen.first:
                    return seen.rate()
                return seen.last / (
                    seen.last_at - started
                )  # all committed at the first look (a smoke run): joins included
            finally:
                await conn.close()


async def projector(ctx: Context, result: Result) -> None:
    rows = {
        n: result.metric(
            f"projector events/s, {n} partition{'s' if n > 1 else ''} ({n} process{'es' if n > 1 else ''})",
            "events/s",
        )
        for n in PARTITIONS
    }
    total = ctx.settings.pick(300, 6000)
    events = posts(1, total)
    cat = catalog(tokens=0)
    taxonomy = Taxonomy({e.data.slug: e.data for e in cat if e.type == "category"})
    post_rows, tr_rows = copy_rows(events, taxonomy)
    async with ctx.database() as copy_dsn:
        copy_conn = await asyncpg.connect(copy_dsn)
        try:
            await migrate(copy_conn, "rm")
            await copy_conn.execute("SET search_path TO rm, public")
            await copy_conn.execute(EQUIVALENT)
            for _ in range(ctx.settings.runs):
                for n in PARTITIONS:
                    rows[n].product.append(await _projector_rate(ctx, n, events, cat))
                    rows[n].baseline.append(await raw_copy(copy_conn, post_rows, tr_rows))
        finally:
            await copy_conn.close()


async def run(ctx: Context) -> Result:
    result = Result(NAME)
    result.notes.append(
        f"reads: /posts peak {'wrk -t1 -c32 for 5 s' if not ctx.settings.smoke else 'smoke: python closed loop'}, "
        "a second api process on the same port (SO_REUSEPORT); baseline: bare aiohttp, one process, same bytes"
    )
    result.notes.append(
        f"projector: {ctx.settings.pick(300, 6000)} post events x 3 locales per partition count, one projector "
        "process per partition in one group, synchronous_commit on; baseline: raw COPY of the same rows on one "
        "connection, measured after each product run"
    )
    await reads(ctx, result)
    await projector(ctx, result)
    return result
