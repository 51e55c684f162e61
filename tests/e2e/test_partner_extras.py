"""Partner extras over the real processes (projector, API, stream): opt-in stream filters,
the consistency mark shared by the API (``X-Log-Position``) and the stream (``log_position``),
and the draft-11 ``RateLimit`` and ``RateLimit-Policy`` headers. (The stream's handshake
refusals, with the Bearer header or a bad filter, are tested in process: tests/app.) Expectations come from the published events, never from the
read model."""

from __future__ import annotations

import asyncio
import os
import random
import re
import time
from datetime import datetime, timezone

import aiohttp
import orjson
import pytest

from tests.support.stack import BASE, ServiceStack, auth, started_stack
from tests.support.ws import WAIT, handshake
from tickerwire.devstack.demo import dataset, trickle
from tickerwire.schemas.models import CategoryEvent, PostEventV2

pytestmark = pytest.mark.e2e

MARK = re.compile(r"^(\d+:\d+)(,\d+:\d+)*$")
RATELIMIT = re.compile(r'^"minute";r=(\d+);t=(\d+), "day";r=(\d+);t=(\d+)$')
NOW = datetime.now(timezone.utc).replace(microsecond=0)


@pytest.fixture(scope="module")
async def stack(pg_dsn, kafka_bootstrap):
    env = {"TICKERWIRE_STREAM_PING_INTERVAL_S": "1"}
    async with started_stack(pg_dsn, kafka_bootstrap, f"extras{os.getpid()}", **env) as s:
        s.catalog = dataset.catalog_events(5, now=NOW, tokens=40)
        await s.publish(s.catalog)
        await s.wait_projected()
        s.key = await s.provision(
            "ws_extras", rate_limit_per_minute=100_000, daily_quota=1_000_000, stream_connection_limit=20
        )
        yield s


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as session:
        yield session


def stream_url(stack: ServiceStack, query: str = "") -> str:
    return f"{stack.of('stream')[0].url}{BASE}/stream" + (f"?{query}" if query else "")


def new_posts(first_id: int, count: int) -> list[PostEventV2]:
    rng = random.Random(first_id)
    return [
        trickle.next_post(rng, post_id=first_id + i, now=datetime.now(timezone.utc), locales=dataset.LISTED_LOCALES)
        for i in range(count)
    ]


def parse_mark(header: str) -> dict[int, int]:
    assert MARK.match(header), header
    pairs = [tuple(int(x) for x in item.split(":")) for item in header.split(",")]
    assert [p for p, _ in pairs] == sorted({p for p, _ in pairs}), header  # ascending, each partition once
    return dict(pairs)


async def stored_positions(stack: ServiceStack) -> dict[int, int]:
    conn = await stack.read_conn()
    try:
        rows = await conn.fetch(
            "SELECT partition, next_offset FROM positions WHERE topic = $1", f"{stack.topic_prefix}.posts.v1"
        )
    finally:
        await conn.close()
    return {r["partition"]: r["next_offset"] for r in rows}


async def posts_until(ws, wanted: set[tuple[int, str]]) -> dict[tuple[int, str], dict]:
    """post.created messages until every (id, lang) in ``wanted`` has arrived."""
    got: dict[tuple[int, str], dict] = {}
    deadline = time.monotonic() + WAIT
    while not wanted <= set(got):
        msg = await ws.receive(timeout=max(deadline - time.monotonic(), 0.01))
        body = orjson.loads(msg.data)
        if body["type"] == "post.created":
            got[(body["data"]["id"], body["data"]["lang"])] = body
    return got


async def posts_before_a_later_ping(ws, after_ts: str) -> set[tuple[int, str]]:
    """Every post.created queued to ``ws`` before a ping stamped after ``after_ts`` (a queue is FIFO)."""
    seen = set()
    deadline = time.monotonic() + WAIT
    while True:
        body = orjson.loads((await ws.receive(timeout=max(deadline - time.monotonic(), 0.01))).data)
        if body["type"] == "post.created":
            seen.add((body["data"]["id"], body["data"]["lang"]))
        elif body["type"] == "ping" and body["ts"] > after_ts:
            return seen


# ---------------------------------------------------------------------------------------------- filters


async def test_filtered_connections_get_only_their_posts_and_an_unfiltered_one_gets_everything(stack, http):
    posts = new_posts(50_001, 12)
    groups = {c.data.slug: c.data.group_slug for c in stack.catalog if isinstance(c, CategoryEvent)}
    ticker = posts[0].data.symbols[0]
    group = groups[posts[0].data.categories[0]] or posts[0].data.categories[0]

    def matches(p, lang, *, langs=None, tickers=None, categories=None) -> bool:
        slugs = set(p.categories) | {groups[c] for c in p.categories if groups.get(c)}
        return (
            (langs is None or lang in langs)
            and (tickers is None or bool(tickers & set(p.symbols)))
            and (categories is None or bool(categories & slugs))
        )

    filters = {
        "lang=de-DE,fr-FR": dict(langs={"de-DE", "fr-FR"}),
        f"tickers={ticker.lower()}": dict(tickers={ticker}),
        f"categories={group}": dict(categories={group}),
        f"lang=en-US&tickers={ticker}&categories={group}": dict(langs={"en-US"}, tickers={ticker}, categories={group}),
        "lang=xx-XX": dict(langs={"xx-XX"}),
    }
    everything = await handshake(http, stream_url(stack, f"key={stack.key}"))
    filtered = {q: await handshake(http, stream_url(stack, f"key={stack.key}&{q}")) for q in filters}
    await stack.publish(posts)
    every = {(p.data.id, t.lang) for p in posts for t in p.data.translations}
    await posts_until(everything, every)
    done = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    for query, spec in filters.items():
        expected = {(p.data.id, t.lang) for p in posts for t in p.data.translations if matches(p.data, t.lang, **spec)}
        assert bool(expected) == (query != "lang=xx-XX"), query  # each filter has something to show but one
        assert await posts_before_a_later_ping(filtered[query], done) == expected, query
    for ws in (everything, *filtered.values()):
        await ws.close()


# ---------------------------------------------------------------------------------------------- the consistency mark


async def test_a_read_after_a_push_carries_a_mark_past_the_pushed_log_position(stack, http):
    ws = await handshake(http, stream_url(stack, f"key={stack.key}"))
    posts = new_posts(60_001, 6)
    await stack.publish(posts)
    got = await posts_until(ws, {(p.data.id, t.lang) for p in posts for t in p.data.translations})
    api = stack.of("api")[0].url + BASE
    for (post_id, lang), message in got.items():
        partition, offset = (int(x) for x in message["log_position"].split(":"))
        async with http.get(f"{api}/posts/{post_id}", params={"lang": lang}, headers=auth(stack.key)) as resp:
            assert resp.status == 200
            assert parse_mark(resp.headers["X-Log-Position"])[partition] > offset
        async with http.get(
            f"{api}/posts", params={"lang": lang, "after": str(post_id - 1), "limit": "1"}, headers=auth(stack.key)
        ) as resp:
            assert parse_mark(resp.headers["X-Log-Position"])[partition] > offset
    await ws.close()


async def test_the_mark_is_on_every_admitted_response_and_never_ahead_of_the_projector(stack, http):
    await stack.publish(new_posts(70_001, 4))
    await stack.wait_projected()
    api = stack.of("api")[0].url + BASE
    calls = [
        ("/posts", {}, 200),
        ("/search", {"q": "market"}, 200),
        ("/posts/70001", {}, 200),
        ("/tokens", {}, 200),
        ("/categories", {}, 200),
        ("/languages", {}, 200),
        ("/sentiment-pulse", {}, 200),
        ("/posts/nope", {}, 404),
        ("/posts", {"limit": "0"}, 422),
        ("/tokens/NOPE", {}, 404),
    ]
    for path, params, status in calls:
        async with http.get(api + path, params=params, headers=auth(stack.key)) as resp:
            assert resp.status == status, path
            mark = parse_mark(resp.headers["X-Log-Position"])
        stored = await stored_positions(stack)
        assert all(mark[p] <= stored.get(p, 0) for p in mark), (path, mark, stored)  # conservative: never ahead
    # Statements that read posts give this very snapshot's mark: with the projector idle, the stored one.
    stored = await stored_positions(stack)
    for path in ("/posts", "/posts/70001", "/sentiment-pulse"):
        async with http.get(api + path, headers=auth(stack.key)) as resp:
            assert parse_mark(resp.headers["X-Log-Position"]) == stored, path
        async with http.get(api + path, headers={**auth(stack.key), "If-None-Match": resp.headers["ETag"]}) as again:
            if path != "/sentiment-pulse":  # as_of moves with the clock
                assert again.status == 304 and parse_mark(again.headers["X-Log-Position"]) == stored
    # Cached bodies (tokens, categories, languages) carry the mark of the catalog's last refresh.
    for _ in range(100):
        async with http.get(api + "/tokens", headers=auth(stack.key)) as resp:
            if parse_mark(resp.headers["X-Log-Position"]) == stored:
                break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the catalog's mark never caught up with an idle projector")
    # Refusals at the gates carry no mark.
    async with http.get(api + "/posts") as resp:
        assert resp.status == 401 and "X-Log-Position" not in resp.headers


# ---------------------------------------------------------------------------------------------- RateLimit headers


async def test_ratelimit_and_ratelimit_policy_on_every_counted_response_and_on_429(stack, http):
    key = await stack.provision("ws_pacing", rate_limit_per_minute=4, daily_quota=1000)
    api = stack.of("api")[0].url + BASE
    # Wait for a fresh minute window if this one is about to end, so all five calls share one.
    if (wait := 60 - datetime.now(timezone.utc).second) < 10:
        await asyncio.sleep(wait)
    seen = []
    for path, params in (
        ("/posts", {}),
        ("/posts", {"limit": "0"}),
        ("/posts/nope", {}),
        ("/languages", {}),
        ("/posts", {}),
    ):
        async with http.get(api + path, params=params, headers=auth(key)) as resp:
            seen.append(resp.status)
            assert resp.headers["RateLimit-Policy"] == '"minute";q=4;w=60, "day";q=1000;w=86400'
            minute_r, minute_t, day_r, day_t = (int(g) for g in RATELIMIT.match(resp.headers["RateLimit"]).groups())
            assert minute_r == int(resp.headers["X-RateLimit-Remaining"]) and day_r == int(
                resp.headers["X-Quota-Remaining"]
            )
            assert 1 <= minute_t <= 60 and 1 <= day_t <= 86400
            if resp.status == 429:
                assert minute_r == 0 and minute_t == int(resp.headers["Retry-After"])
    assert seen == [200, 422, 404, 200, 429]
