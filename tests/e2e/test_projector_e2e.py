"""The projector as real processes: SIGKILLed mid-batch, scaled out, rebuilt under a live API.

Every test compares the read model the processes leave with one built in-process from the same
log (``replay_into`` a side schema, one consumer, one batch after another), table by table,
announcements included; post_count and the sentiment buckets are also recomputed from scratch,
so an event applied twice (which would double a counter) or lost fails the test.
"""

from __future__ import annotations

import asyncio
import random
import signal
from datetime import timedelta

import aiohttp
import asyncpg
import pytest

from tests.support.events import T0, category_ev, locale_ev, post_ev, token_ev
from tests.support.readmodel import announcements, comparable, derived_from_scratch, read_model
from tests.support.stack import BASE, ServiceStack, auth
from tickerwire.devstack.embedded.postgres import scratch_database
from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.common import kafka
from tickerwire.services.projector.rebuild import rebuild, replay_into
from tickerwire.services.readmodel import positions

pytestmark = pytest.mark.e2e

SMALL_BATCHES = {"TICKERWIRE_PROJECTOR_BATCH_MAX": "50"}


def backlog(posts: int, seed: int, first_id: int = 1) -> list:
    """Catalog plus ``posts`` posts in three versions each, published out of order (so some
    arrive stale) and changing status, tickers, sentiment and published_at between versions."""
    rng = random.Random(seed)
    events = [
        locale_ev("en-US", default=True),
        locale_ev("de-DE", position=1),
        category_ev("markets"),
        category_ev("btc", group="markets", names={"en-US": "Bitcoin", "de-DE": "Bitcoin DE"}),
    ]
    events += [token_ev(t) for t in ("BTC", "ETH", "SOL", "XRP")]
    for post_id in range(first_id, first_id + posts):
        versions = [
            post_ev(
                post_id,
                v,
                status=rng.choice(["published", "published", "queued", "partial", "retracted", "draft"]),
                at=T0 - timedelta(minutes=rng.randrange(0, 2000)),
                sentiment=rng.choice(["BULLISH", "NEUTRAL", "BEARISH"]),
                tickers=rng.sample(["BTC", "ETH", "SOL", "XRP"], rng.randrange(0, 3)),
                categories=rng.choice([(), ("btc",)]),
                langs=rng.choice([("en-US",), ("en-US", "de-DE")]),
            )
            for v in (1, 2, 3)
        ]
        rng.shuffle(versions)
        events += versions
    return events


async def expected_model(stack: ServiceStack, schema: str = "expected") -> tuple[dict, dict]:
    await replay_into(stack.config, schema, catch_up_with="rm")  # the broker's reported end offsets can lag
    conn = await asyncpg.connect(stack.database_url)
    try:
        # Badge statuses are sweeper ticks, not log events: take the live ones.
        await conn.execute(
            f"UPDATE {schema}.workspaces n SET badge_status = o.badge_status FROM rm.workspaces o WHERE o.id = n.id"
        )
        return comparable(await read_model(conn, schema)), await announcements(conn, schema)
    finally:
        await conn.close()


async def assert_live_model_is(stack: ServiceStack, expected: tuple[dict, dict]) -> None:
    conn = await asyncpg.connect(stack.database_url)
    try:
        live = comparable(await read_model(conn, "rm"))
        assert live == expected[0], first_differences(live, expected[0])
        assert await announcements(conn, "rm") == expected[1]
        counts, buckets = await derived_from_scratch(conn, "rm")
        assert live["ticker_post_counts"] == counts
        assert live["sentiment_buckets"] == buckets
        assert await conn.fetchval("SELECT count(*) FROM rm.posts") > 0
    finally:
        await conn.close()


def first_differences(a: dict, b: dict) -> str:
    out = []
    for table in a:
        if a[table] != b[table]:
            left = [r for r in a[table] if r not in b[table]][:2]
            right = [r for r in b[table] if r not in a[table]][:2]
            out.append(f"{table}: {len(a[table])} vs {len(b[table])} rows; only live {left}; only expected {right}")
    return "\n".join(out)


async def stored_total(stack: ServiceStack) -> int:
    conn = await stack.read_conn()
    try:
        return await conn.fetchval("SELECT coalesce(sum(next_offset), 0) FROM positions")
    finally:
        await conn.close()


async def wait_posts_final(stack: ServiceStack, ids: range) -> None:
    """Until every post of ``ids`` is at its last version (3) and its key's workspace is swept:
    the broker's reported end offsets alone can lag behind."""
    conn = await stack.read_conn()
    try:
        while await conn.fetchval(
            "SELECT count(*) FROM posts WHERE id >= $1 AND id < $2 AND version = 3", ids.start, ids.stop
        ) < len(ids):
            await asyncio.sleep(0.05)
    finally:
        await conn.close()


async def provision(stack: ServiceStack, workspace_id: str) -> str:
    key = await stack.provision(workspace_id, rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000)
    conn = await stack.read_conn()
    try:
        while await conn.fetchval("SELECT badge_status FROM workspaces WHERE id = $1", workspace_id) != "ok":
            await asyncio.sleep(0.05)
            await stack.sweep()
    finally:
        await conn.close()
    return key


async def wait_progress_beyond(stack: ServiceStack, total: int, service) -> int:
    while True:
        now = await stored_total(stack)
        if now > total:
            return now
        assert service.proc.poll() is None, service.log()[-3000:]
        await asyncio.sleep(0.01)


@pytest.fixture
async def stack(pg_dsn, kafka_bootstrap, topic_prefix):
    async with scratch_database(pg_dsn) as dsn:
        s = ServiceStack(dsn, kafka_bootstrap, topic_prefix, extra_env=dict(SMALL_BATCHES))
        await s.prepare()
        try:
            yield s
        finally:
            s.stop_all()


async def test_sigkill_mid_batch_repeatedly_loses_nothing_and_applies_nothing_twice(stack: ServiceStack):
    await stack.publish(backlog(700, seed=1))
    rng = random.Random(3)
    progress = 0
    for _ in range(4):
        projector = await stack.start("projector")
        progress = await wait_progress_beyond(stack, progress, projector)
        await asyncio.sleep(rng.uniform(0.0, 0.3))  # somewhere inside the following batches
        stack.stop(projector, signal.SIGKILL)
        assert projector.proc.returncode == -signal.SIGKILL
    projector = await stack.start("projector")
    await stack.wait_projected(timeout=120)
    assert await stored_total(stack) > progress
    await assert_live_model_is(stack, await expected_model(stack))

    # One scrape of /metrics from the survivor after it applies one poison and one good record.
    producer = kafka.producer(stack.config)
    await producer.start()
    try:
        await producer.send_and_wait(topic_name(stack.topic_prefix, POSTS), b"\xffnot json", key=b"post:999999")
    finally:
        await producer.stop()
    await stack.publish([post_ev(999_999, 1)])
    await stack.wait_projected()
    conn = await stack.read_conn()
    try:
        stored = {
            (r["topic"], r["partition"]): r["next_offset"]
            for r in await conn.fetch(
                "SELECT topic, partition, next_offset FROM positions WHERE topic = $1",
                topic_name(stack.topic_prefix, POSTS),
            )
        }
    finally:
        await conn.close()
    # A SIGKILLed member stays in the group until its session expires and may still hold a
    # partition meanwhile; the survivor reports a partition's position and lag once it is
    # assigned it. So scrape until the group has settled on the survivor (bounded), then check.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    async with aiohttp.ClientSession() as http:
        while True:
            async with http.get(f"{projector.admin_url}/metrics") as resp:
                assert resp.status == 200
                text = await resp.text()
            samples = {
                line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line and not line.startswith("#")
            }
            settled = all(
                samples.get(f'tickerwire_projector_position{{partition="{p}",topic="{t}"}}') == offset
                and samples.get(f'tickerwire_projector_lag{{partition="{p}",topic="{t}"}}') == 0
                for (t, p), offset in stored.items()
            )
            if settled or loop.time() > deadline:
                break
            await asyncio.sleep(0.2)
    assert samples['tickerwire_projector_dead_lettered_total{reason="undecodable"}'] == 1
    assert samples['tickerwire_projector_events_applied_total{type="post"}'] >= 1
    assert samples["tickerwire_projector_batch_size_count"] >= 1
    assert samples["tickerwire_projector_batch_seconds_count"] >= 1
    assert samples["tickerwire_projector_newest_event_age_seconds"] > 0
    for (topic, partition), next_offset in stored.items():
        labels = f'{{partition="{partition}",topic="{topic}"}}'
        assert samples.get(f"tickerwire_projector_position{labels}") == next_offset
        assert samples.get(f"tickerwire_projector_lag{labels}") == 0


async def test_two_projectors_one_killed_end_with_the_read_model_of_one(stack: ServiceStack):
    await stack.publish(backlog(600, seed=2))
    first = await stack.start("projector")
    second = await stack.start("projector")
    await wait_progress_beyond(stack, 300, first)
    await stack.publish(backlog(200, seed=5, first_id=5000))  # more arrives while they share the work
    stack.stop(first, signal.SIGKILL)
    await stack.wait_projected(timeout=120)
    assert second.proc.poll() is None
    await assert_live_model_is(stack, await expected_model(stack))


async def test_rebuild_switches_atomically_while_the_api_answers(stack: ServiceStack):
    await stack.publish(backlog(400, seed=4))
    await stack.start("projector")
    api = await stack.start("api")
    key = await provision(stack, "ws_rebuild")
    await wait_posts_final(stack, range(1, 401))
    conn = await asyncpg.connect(stack.database_url)
    try:
        live_before = comparable(await read_model(conn, "rm")), await announcements(conn, "rm")
    finally:
        await conn.close()

    statuses: list[int] = []
    stop = asyncio.Event()

    async def partner() -> None:
        async with aiohttp.ClientSession() as http:
            while not stop.is_set():
                async with http.get(f"{api.url}{BASE}/posts?limit=5", headers=auth(key)) as resp:
                    statuses.append(resp.status)
                    body = await resp.json()
                    assert resp.status != 200 or len(body["posts"]) == 5
                await asyncio.sleep(0.005)

    reader = asyncio.create_task(partner())
    try:
        await rebuild(stack.config)  # nothing new published: the rebuilt model is the live one
        await assert_live_model_is(stack, live_before)
        # Again, with posts arriving before, during and after the switch.
        await stack.publish(backlog(50, seed=6, first_id=7000))
        publishing = asyncio.create_task(stack.publish(backlog(50, seed=7, first_id=8000)))
        await rebuild(stack.config)
        await publishing
        await stack.publish(backlog(20, seed=8, first_id=9000))
        for first in (7000, 8000, 9000):
            await wait_posts_final(stack, range(first, first + 50 if first < 9000 else first + 20))
    finally:
        stop.set()
        await reader
    assert statuses and set(statuses) == {200}, {s: statuses.count(s) for s in set(statuses)}
    await assert_live_model_is(stack, await expected_model(stack))

    conn = await asyncpg.connect(stack.database_url)
    try:
        schemas = {r["nspname"] for r in await conn.fetch("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'rm%'")}
        assert schemas == {"rm"}
        scopes = {
            r["scope"]
            for r in await conn.fetch(
                "SELECT DISTINCT scope FROM public.tw_migrations WHERE scope LIKE 'readmodel:rm%'"
            )
        }
        assert scopes == {"readmodel:rm"}
        assert await conn.fetchval("SELECT badge_status FROM rm.workspaces WHERE id = 'ws_rebuild'") == "ok"
        assert await conn.fetchval("SELECT count(*) FROM rm.posts WHERE id >= 9000") == 20
    finally:
        await conn.close()


async def test_bulk_rebuild_equals_an_event_by_event_replay(stack: ServiceStack, capfd):
    """The bulk path (reduce, COPY, indexes after) leaves the read model a one-by-one replay
    leaves: stale versions, dropped locales (hidden rows and their announcements), a category
    renamed after its posts, and a poison record set aside as the same dead letter."""
    await stack.publish(backlog(300, seed=11))
    async with kafka.started_producer(stack.config) as producer:
        await producer.send_and_wait(
            topic_name(stack.config.topic_prefix, POSTS), b"not json", key=b"post:poison", partition=1
        )
    await stack.publish([category_ev("btc", 2, group="markets", names={"en-US": "Bitcoin!", "de-DE": "Bitcoin DE!"})])
    await stack.start("projector")
    await wait_posts_final(stack, range(1, 301))
    await stack.wait_projected()

    report = await rebuild(stack.config)
    assert report.bulk is not None and report.bulk.posts == 300 and report.bulk.dead_letters == 1
    assert report.bulk.rows == await _count(stack, "SELECT count(*) FROM post_translations")
    err = capfd.readouterr().err
    assert "records read" in err and "rows loaded" in err and "ETA" in err
    await assert_live_model_is(stack, await expected_model(stack))
    conn = await asyncpg.connect(stack.database_url)
    try:
        letters = 'SELECT topic, partition, "offset", reason_kind FROM {}.dead_letters ORDER BY 1, 2, 3'
        assert [tuple(r) for r in await conn.fetch(letters.format("rm"))] == [
            tuple(r) for r in await conn.fetch(letters.format("expected"))
        ]
        assert (
            await conn.fetchval("SELECT count(*) FROM rm.post_translations WHERE NOT visible") > 0
        )  # dropped locales were in the log
        indexes = (
            "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'post_translations' ORDER BY 1"
        )
        assert [r[0] for r in await conn.fetch(indexes, "rm")] == [r[0] for r in await conn.fetch(indexes, "expected")]
    finally:
        await conn.close()


async def _count(stack: ServiceStack, query: str) -> int:
    conn = await stack.read_conn()
    try:
        return await conn.fetchval(query)
    finally:
        await conn.close()


async def test_a_rebuild_is_a_way_out_of_a_log_reset(stack: ServiceStack):
    """After a log reset (the read model's positions past the new log's end) the projector stops
    those partitions; ``rebuild`` re-derives the read model from the log as it is now, instead of
    waiting for offsets that will never come, and the projector then resumes from there."""
    await stack.publish([post_ev(i, langs=("en-US", "de-DE")) for i in range(1, 31)])
    posts = topic_name(stack.config.topic_prefix, POSTS)
    conn = await stack.read_conn()
    try:
        await positions.save_many(conn, {(t, p): 10_000 for (t, p) in stack.marks if t == posts})
        await stack.start("projector", TICKERWIRE_PROJECTOR_LOG_CHECK_INTERVAL_S="1")

        async with asyncio.timeout(90):
            report = await rebuild(stack.config)

        assert report.schema == "rm"
        await stack.wait_projected()
        assert await conn.fetchval("SELECT count(*) FROM posts") == 30
        assert await conn.fetchval("SELECT count(*) FROM post_translations WHERE visible") == 60
    finally:
        await conn.close()
