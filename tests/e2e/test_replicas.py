"""Reads from real streaming replicas: one projector, one API and one stream process on an
embedded primary with two hot-standby replicas, one of them replaying each commit 500 ms late
(``recovery_min_apply_delay``). The API reads from both (round robin), the stream waits for both.
"""

from __future__ import annotations

import asyncio
import signal
import time

import aiohttp
import orjson
import pytest

from tests.support.events import post_ev, token_ev
from tests.support.replicas import freeze, replicated_cluster, rotation, serving_stack, signal_server, thaw
from tests.support.stack import BASE, auth
from tests.support.ws import session
from tickerwire.services.readmodel.logposition import LogPosition, covers

pytestmark = pytest.mark.e2e

DELAY_MS = 500
WAIT = 30.0


@pytest.fixture(scope="module")
def cluster():
    with replicated_cluster([0, DELAY_MS]) as (primary, replicas):
        yield primary, replicas


@pytest.fixture(scope="module")
async def replicated(cluster, kafka_bootstrap):
    primary, replicas = cluster
    async with serving_stack(primary, replicas, kafka_bootstrap) as (stack, key):
        yield stack, key, replicas


async def _all_in_rotation(stack, http: aiohttp.ClientSession, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while True:
        states = [await rotation(s.admin_url, http) for s in (*stack.of("api"), *stack.of("stream"))]
        if all(state and all(v == 1 for v in state.values()) for state in states):
            return
        assert time.monotonic() < deadline, f"replicas not back in rotation: {states}"
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("delay_ms", [DELAY_MS, 1500])
async def test_every_post_created_is_readable_on_receipt_through_a_delayed_replica(replicated, delay_ms):
    """200 of 200, with the replica 500 ms behind, and 1500 ms (still within the lag bound): the
    stream's own pipeline takes about 500 ms here, so the longer delay is the one a stream that
    does not wait for the replicas fails (199 of 200 readable at 500 ms, 0 at 1500 ms)."""
    stack, key, replicas = replicated
    replicas[1].set_apply_delay(delay_ms)
    try:
        await _readable_on_receipt(stack, key, list(range(10_001 + delay_ms * 1000, 10_201 + delay_ms * 1000)))
    finally:
        replicas[1].set_apply_delay(DELAY_MS)


async def _readable_on_receipt(stack, key: str, ids: list[int]) -> None:
    api = stack.of("api")[0].url
    stream = stack.of("stream")[0].url.replace("http", "ws") + f"{BASE}/stream?key={key}"
    statuses: dict[int, int] = {}

    async def read(post_id: int) -> None:
        async with http.get(f"{api}{BASE}/posts/{post_id}", headers=auth(key)) as resp:
            statuses[post_id] = resp.status

    async with aiohttp.ClientSession() as http:
        await _all_in_rotation(stack, http)
        async with session(http, stream) as (ws, _):
            async with stack.publisher() as send:
                await send([post_ev(ids[0] - 1)])  # the pipeline warm: each post arrives well within the delay
                while (msg := orjson.loads((await ws.receive(timeout=WAIT)).data))["type"] != "post.created":
                    pass
                for n in range(0, len(ids), 5):
                    await send([post_ev(i) for i in ids[n : n + 5]])
                    await asyncio.sleep(0.02)
            reads = []
            while len(reads) < len(ids):
                msg = orjson.loads((await ws.receive(timeout=WAIT)).data)
                if msg["type"] == "post.created" and msg["data"]["id"] in ids:
                    # At once, as a plain client would (no X-Min-Log-Position), while reading on.
                    reads.append(asyncio.create_task(read(msg["data"]["id"])))
            await asyncio.gather(*reads)
    missing = sorted(i for i, status in statuses.items() if status != 200)
    assert missing == [], f"{len(missing)} of {len(ids)} posts not readable on receipt: {missing[:10]}"


async def test_a_client_sending_its_mark_never_gets_an_older_state(replicated):
    stack, key, _ = replicated
    api = stack.of("api")[0].url
    ids = list(range(20_001, 20_121))
    mark: dict[int, int] = {}
    seen_newest = 0
    older: list[str] = []
    answers = 0

    async def read(http: aiohttp.ClientSession, path: str) -> None:
        nonlocal seen_newest, answers
        sent = LogPosition.of(mark).text()
        async with http.get(f"{api}{BASE}{path}", headers={**auth(key), "X-Min-Log-Position": sent}) as resp:
            assert resp.status == 200, await resp.text()
            got = LogPosition.parse(resp.headers["X-Log-Position"]).marks()
            body = await resp.json()
        answers += 1
        if not covers(got, mark):
            older.append(f"{path}: sent {sent}, got {resp.headers['X-Log-Position']}")
        for p, o in got.items():
            mark[p] = max(mark.get(p, 0), o)
        if path.startswith("/posts?"):
            newest = max((p["id"] for p in body["posts"]), default=0)
            if newest < seen_newest:
                older.append(f"{path}: newest post {newest} after {seen_newest}")
            seen_newest = max(seen_newest, newest)

    await stack.publish([post_ev(ids[0])])
    await stack.wait_projected()
    async with aiohttp.ClientSession() as http:
        await _all_in_rotation(stack, http)
        async with stack.publisher() as send:
            for n in range(0, len(ids), 10):
                await send([post_ev(i) for i in ids[n : n + 10]])
                for path in ("/posts?limit=5", f"/posts/{ids[0]}", "/tokens", "/sentiment-pulse", "/search?q=bitcoin"):
                    await read(http, path)
    assert answers == 60 and older == []


async def test_the_catalog_never_reloads_an_older_state_from_a_lagging_replica(replicated):
    stack, key, _ = replicated
    api = stack.of("api")[0].url
    async with aiohttp.ClientSession() as http:
        await _all_in_rotation(stack, http)
        for version in range(2, 7):
            await stack.publish([token_ev("BTC", version)])
            await stack.wait_projected()
            deadline = time.monotonic() + 2.0  # a refresh within 0.5 s, a replica within 0.5 s
            while True:
                async with http.get(f"{api}{BASE}/tokens/BTC", headers=auth(key)) as resp:
                    name = (await resp.json())["name"]
                if name == f"BTC v{version}":
                    break
                assert time.monotonic() < deadline, f"/tokens/BTC still says {name!r}, not v{version}"
                await asyncio.sleep(0.05)


async def _load(
    http: aiohttp.ClientSession, url: str, key: str, stop: asyncio.Event, log: list[tuple[float, float, int]]
) -> None:
    """Requests that always read the database (a page after a cursor), one at a time: (start, end, status)."""
    while not stop.is_set():
        started = time.monotonic()
        try:
            async with http.get(url, headers=auth(key), timeout=aiohttp.ClientTimeout(total=10)) as resp:
                await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError):
            status = 0
        log.append((started, time.monotonic(), status))


#: How long the replica stays frozen or dead, and the bound on how long after the fault answers
#: may still be slow (over 0.5 s). A probe finds a frozen replica within about 0.6 s on an idle
#: machine (0.6 to 1.1 s in the mixed-fault runs, docs/operations.md); the bound leaves room for
#: a machine shared with another CPU-bound job (3.8 s seen there with the old 2 s bound and a
#: 3 s fault), and a fault that the API did not route around would last the whole FAULT_S.
FAULT_S = 8.0
DEGRADED_BOUND_S = 5.0


@pytest.mark.exclusive  # a latency bound: no other test of the run competes for the cores meanwhile
@pytest.mark.parametrize("fault", ["freeze", "kill"])
async def test_a_replica_frozen_or_killed_is_routed_around_and_rejoins_by_itself(replicated, fault):
    stack, key, replicas = replicated
    api = stack.of("api")[0].url
    stream = stack.of("stream")[0].url.replace("http", "ws") + f"{BASE}/stream?key={key}"
    fast = replicas[0]
    base = 30_001 if fault == "freeze" else 40_001  # a post of its own at base - 1: the cursor of its reads
    ids = list(range(base, base + 60))
    log: list[tuple[float, float, int]] = []
    stop = asyncio.Event()
    received: list[int] = []
    await stack.publish([post_ev(base - 1)])
    await stack.wait_projected()
    async with aiohttp.ClientSession() as http:
        await _all_in_rotation(stack, http)
        page = f"{api}{BASE}/posts?after={base - 1}&limit=5"
        await asyncio.sleep(DELAY_MS / 1000 + 0.5)  # the cursor's post on both replicas
        loaders = [asyncio.create_task(_load(http, page, key, stop, log)) for _ in range(4)]
        async with session(http, stream) as (ws, _):
            async with stack.publisher() as send:
                await send([post_ev(i) for i in ids[:20]])
                await asyncio.sleep(0.5)
                faulted = time.monotonic()
                if fault == "freeze":
                    freeze(fast)
                else:
                    signal_server(fast, signal.SIGKILL)
                await send([post_ev(i) for i in ids[20:40]])
                await asyncio.sleep(FAULT_S)
                if fault == "freeze":
                    thaw(fast)
                else:
                    fast.stop()  # reaps it
                    await asyncio.to_thread(fast.start)
                await send([post_ev(i) for i in ids[40:]])
            deadline = time.monotonic() + WAIT
            drained = None  # then half a second more: a doubled post would come in it
            while (left := (drained or deadline) - time.monotonic()) > 0:
                try:
                    msg = orjson.loads((await ws.receive(timeout=left)).data)
                except TimeoutError:
                    break
                if msg["type"] == "post.created" and msg["data"]["id"] in ids:
                    received.append(msg["data"]["id"])
                if drained is None and set(received) >= set(ids):
                    drained = time.monotonic() + 0.5
        await _all_in_rotation(stack, http)  # back by itself
        stop.set()
        await asyncio.gather(*loaders)
    failed = [entry for entry in log if entry[2] != 200]
    assert failed == [], f"{len(failed)} answers were not 200: {failed[:5]}"
    slow = [
        (round(start - faulted, 2), round(end - faulted, 2))
        for start, end, _ in log
        if end - start > 0.5 and end >= faulted
    ]
    degraded = max((end for _, end in slow), default=0.0)
    print(f"{fault}: {len(log)} answers, degraded for {degraded:.2f} s")
    assert degraded <= DEGRADED_BOUND_S, (
        f"degraded for {degraded:.2f} s after the {fault} of {FAULT_S:g} s: slow answers (start, end) {slow}"
    )
    assert sorted(received) == ids, (
        f"lost {sorted(set(ids) - set(received))[:10]}, doubled {len(received) - len(set(received))}"
    )


async def test_a_cursor_just_issued_is_never_refused_by_a_lagging_replica(replicated):
    """While posts flow, a cursor read on the primary or the prompt replica (the stream's ready,
    a /changes page) goes at once to /changes, whose next read may fall on the replica 500 ms
    behind: it is accepted every time, never refused as past the committed frontier."""
    stack, key, _ = replicated
    api, stream = stack.of("api")[0].url, stack.of("stream")[0].url.replace("http", "ws")
    ids = iter(range(40_001, 41_000))
    refused: list[str] = []

    async def publish(send) -> None:
        while True:
            await send([post_ev(next(ids))])
            await asyncio.sleep(0.02)

    async def walk(http: aiohttp.ClientSession, cursor: str | None) -> str:
        async with http.get(
            f"{api}{BASE}/changes", params={"cursor": cursor} if cursor else {}, headers=auth(key)
        ) as resp:
            body = await resp.json()
        if resp.status != 200:
            refused.append(f"{cursor}: {body}")
            return cursor or ""
        return body["cursor"]

    async with aiohttp.ClientSession() as http:
        await _all_in_rotation(stack, http)
        async with stack.publisher() as send:
            publisher = asyncio.create_task(publish(send))
            try:
                for _ in range(20):
                    async with session(http, f"{stream}{BASE}/stream?key={key}&cursors=true") as (_, ready):
                        await walk(http, ready["cursor"])
                    cursor = None
                    for _ in range(5):
                        cursor = await walk(http, cursor)
                    await asyncio.sleep(0.05)
            finally:
                publisher.cancel()
                await asyncio.gather(publisher, return_exceptions=True)
    assert refused == []


async def test_a_mark_that_is_not_one_is_refused_and_an_empty_one_asks_nothing(replicated):
    stack, key, _ = replicated
    api = stack.of("api")[0].url
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{api}{BASE}/tokens", headers={**auth(key), "X-Min-Log-Position": "0:1;1:2"}) as resp:
            assert resp.status == 422
            assert (await resp.json())["error"]["field"] == "X-Min-Log-Position"
        async with http.get(f"{api}{BASE}/tokens", headers={**auth(key), "X-Min-Log-Position": ""}) as resp:
            assert resp.status == 200


async def test_a_replica_lagging_past_the_bound_leaves_the_rotation_and_comes_back(replicated):
    """The delayed replica made 4 s late (the bound is 2 s) while posts flow: it leaves the API's
    rotation (gauge, readiness, a WARNING line), every post stays readable on receipt, and it
    comes back by itself once it keeps up again."""
    stack, key, replicas = replicated
    api = stack.of("api")[0]
    stream = stack.of("stream")[0].url.replace("http", "ws") + f"{BASE}/stream?key={key}"
    ids = list(range(60_001, 60_121))
    statuses: dict[int, int] = {}
    details: set[str] = set()

    async def read(http: aiohttp.ClientSession, post_id: int) -> None:
        async with http.get(f"{api.url}{BASE}/posts/{post_id}", headers=auth(key)) as resp:
            statuses[post_id] = resp.status

    async with aiohttp.ClientSession() as http:
        await _all_in_rotation(stack, http)
        replicas[1].set_apply_delay(4000)
        try:
            async with session(http, stream) as (ws, _):

                async def publish() -> None:
                    async with stack.publisher() as send:
                        for n in range(0, len(ids), 5):
                            await send([post_ev(i) for i in ids[n : n + 5]])
                            async with http.get(api.admin_url + "/readyz") as resp:
                                details.add(orjson.loads(await resp.read())["checks"]["replicas"]["detail"])
                            await asyncio.sleep(0.25)

                publishing = asyncio.create_task(publish())
                reads = []
                while len(reads) < len(ids):
                    msg = orjson.loads((await ws.receive(timeout=WAIT)).data)
                    if msg["type"] == "post.created" and msg["data"]["id"] in ids:
                        reads.append(asyncio.create_task(read(http, msg["data"]["id"])))
                await asyncio.gather(publishing, *reads)
        finally:
            replicas[1].set_apply_delay(DELAY_MS)
        await _all_in_rotation(stack, http)
    assert sorted(i for i, status in statuses.items() if status != 200) == []
    assert any("out of rotation" in d and "behind the primary, over the bound of 2 s" in d for d in details), details
    assert f"replica {replicas[1].dsn.split('@')[1].split('/')[0]} out of the read rotation" in api.log()
