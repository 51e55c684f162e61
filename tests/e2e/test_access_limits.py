"""Keys, gates, the rate limit and the daily quota over real HTTP against three API processes
sharing one PostgreSQL: every rule of spec sections 5, 7 and 8 that the access layer owns."""

from __future__ import annotations

import asyncio
import itertools

import aiohttp
import pytest

from tests.support.stack import BASE, ServiceStack, auth, started_stack
from tickerwire.services.cli import admin
from tickerwire.services.common.http.keys import generate_key, hash_key

pytestmark = pytest.mark.e2e

API_PROCESSES = 3
LIMIT_HEADERS = (
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
    "X-Quota-Limit",
    "X-Quota-Remaining",
    "X-Quota-Reset",
)


@pytest.fixture(scope="module")
async def stack(pg_dsn, kafka_bootstrap):
    services = ("projector",) + ("api",) * API_PROCESSES
    async with started_stack(pg_dsn, kafka_bootstrap, "access-limits", services=services) as s:
        yield s


@pytest.fixture
async def http():
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        yield session


def urls(stack: ServiceStack, path: str = "/languages") -> list[str]:
    apis = stack.of("api")
    assert len(apis) == API_PROCESSES
    return [f"{a.url}{BASE}{path}" for a in apis]


_ids = itertools.count()


def new_id(stem: str) -> str:
    return f"{stem}{next(_ids)}"


async def provision(stack: ServiceStack, *specs: dict, keys_per_workspace: int = 1) -> list[list[str]]:
    """Workspaces with an embed, a fresh heartbeat and keys, all in one projection and one tick.
    ``specs``: {"id": ..., **workspace fields}. Returns the keys of each workspace."""
    conn = await stack.read_conn()
    try:
        events, keys = [], []
        for spec in specs:
            ws = spec["id"]
            fields = {k: v for k, v in spec.items() if k != "id"}
            events.append(await admin.workspace_event(conn, ws, create=True, **fields))
            issued = [admin.issue_key(ws) for _ in range(keys_per_workspace)]
            events += [e for _, e in issued]
            keys.append([k for k, _ in issued])
            embed = "bdg_" + ws
            events += [admin.embed_event(embed, ws), admin.heartbeat_event(embed, ws)]
    finally:
        await conn.close()
    await stack.publish(events)
    await stack.wait_projected()
    await stack.sweep()
    return keys


async def change_workspace(stack: ServiceStack, ws: str, **fields) -> None:
    conn = await stack.read_conn()
    try:
        event = await admin.workspace_event(conn, ws, **fields)
    finally:
        await conn.close()
    await stack.publish([event])
    await stack.wait_projected()


async def db_now(stack: ServiceStack) -> float:
    conn = await stack.read_conn()
    try:
        return float(await conn.fetchval("SELECT extract(epoch FROM now())"))
    finally:
        await conn.close()


async def usage(stack: ServiceStack, ws: str) -> tuple[int, int]:
    """(requests counted in the current UTC minute, requests counted today) from the database."""
    conn = await stack.read_conn()
    try:
        minute = await conn.fetchval(
            "SELECT coalesce(sum(count), 0) FROM usage_minute WHERE workspace_id = $1 AND minute = date_trunc('minute', now(), 'UTC')",
            ws,
        )
        day = await conn.fetchval(
            "SELECT coalesce(sum(count), 0) FROM usage_day WHERE workspace_id = $1 AND day = (now() AT TIME ZONE 'UTC')::date",
            ws,
        )
        return int(minute), int(day)
    finally:
        await conn.close()


async def away_from_minute_end(stack: ServiceStack) -> None:
    """Start a burst early in a UTC minute (database clock), so it cannot straddle two windows."""
    left = 60 - (await db_now(stack)) % 60
    if left < 10:
        await asyncio.sleep(left + 0.2)


async def get(http: aiohttp.ClientSession, url: str, key: str | None = None, headers: dict | None = None):
    hdrs = dict(auth(key)) if key else {}
    hdrs.update(headers or {})
    async with http.get(url, headers=hdrs) as resp:
        return resp.status, resp.headers.copy(), await resp.read()


async def error_code(body: bytes) -> str:
    import orjson

    return orjson.loads(body)["error"]["code"]


def err(body: bytes) -> dict:
    import orjson

    return orjson.loads(body)["error"]


# ---------------------------------------------------------------------------------------- keys


async def test_missing_malformed_unknown_and_revoked_keys_get_one_identical_401(stack, http):
    ws = new_id("wsrevoke")
    [[key, other]] = await provision(stack, {"id": ws}, keys_per_workspace=2)
    a, b, c = urls(stack)
    status, headers, _ = await get(http, a, key)
    assert status == 200
    remaining_before = int(headers["X-Quota-Remaining"])

    conn = await stack.read_conn()
    try:
        revoke = await admin.revoke_key_event(conn, "key_" + hash_key(key)[:16])
    finally:
        await conn.close()
    await stack.publish([revoke])
    await stack.wait_projected()

    attempts = [
        {},  # missing
        {"Authorization": key},  # no scheme
        {"Authorization": f"Basic {key}"},  # wrong scheme
        {"Authorization": "Bearer "},  # empty
        {"Authorization": "Bearer not-a-key"},  # malformed
        {"Authorization": f"Bearer {generate_key()}"},  # well formed, never issued
        {"Authorization": f"Bearer {key}"},  # revoked
    ]
    bodies = set()
    for url in (a, b, c):
        for headers in attempts:
            status, resp_headers, body = await get(http, url, headers=headers)
            assert status == 401, headers
            assert resp_headers["WWW-Authenticate"].startswith("Bearer")
            assert not any(h in resp_headers for h in LIMIT_HEADERS)
            bodies.add(body)
    assert len(bodies) == 1
    assert err(bodies.pop())["code"] == "NOT_AUTHENTICATED"
    # The revoked key's 401s counted nothing against its workspace; the other key still works.
    status, headers, _ = await get(http, b, other)
    assert status == 200
    assert int(headers["X-Quota-Remaining"]) == remaining_before - 1


# --------------------------------------------------------------------------------------- gates


async def test_suspension_and_reinstatement_apply_on_every_process_as_soon_as_projected(stack, http):
    ws = new_id("wssusp")
    [[key]] = await provision(stack, {"id": ws})
    for url in urls(stack):
        assert (await get(http, url, key))[0] == 200
    counted = await usage(stack, ws)

    await change_workspace(stack, ws, status="suspended")
    for url in urls(stack):
        status, headers, body = await get(http, url, key)
        assert status == 403 and err(body)["code"] == "WORKSPACE_SUSPENDED"
        assert not any(h in headers for h in LIMIT_HEADERS)
    assert await usage(stack, ws) == counted  # a 403 never counts

    await change_workspace(stack, ws, status="active")
    for url in urls(stack):
        assert (await get(http, url, key))[0] == 200


async def test_suspension_is_checked_before_the_badge(stack, http):
    ws = new_id("wsorder")
    [[key]] = await provision(stack, {"id": ws})
    await change_workspace(stack, ws, status="suspended")
    conn = await stack.read_conn()
    try:  # the badge goes missing too: a tick with no heartbeat of this workspace's embed
        await conn.execute("DELETE FROM heartbeats WHERE workspace_id = $1", ws)
    finally:
        await conn.close()
    statuses = await stack.sweep()
    assert statuses[ws] == "unknown"
    status, _, body = await get(http, urls(stack)[0], key)
    assert (status, err(body)["code"]) == (403, "WORKSPACE_SUSPENDED")
    await change_workspace(stack, ws, status="active")
    status, _, body = await get(http, urls(stack)[1], key)
    assert (status, err(body)["code"]) == (403, "BADGE_MISSING")
    assert "re-paste the snippet" in err(body)["message"]


# ------------------------------------------------------------------------------ limit headers


async def test_admitted_responses_carry_both_windows_on_the_database_clock(stack, http):
    ws = new_id("wshdr")
    [[key]] = await provision(stack, {"id": ws})
    await away_from_minute_end(stack)
    before = await db_now(stack)
    seen = []
    for url in urls(stack):
        status, headers, _ = await get(http, url, key)
        assert status == 200
        seen.append(headers)
    after = await db_now(stack)
    assert [h["X-RateLimit-Limit"] for h in seen] == ["60"] * 3  # Config defaults
    assert [h["X-Quota-Limit"] for h in seen] == ["5000"] * 3
    assert [int(h["X-RateLimit-Remaining"]) for h in seen] == [59, 58, 57]  # one counter across processes
    assert [int(h["X-Quota-Remaining"]) for h in seen] == [4999, 4998, 4997]
    minute_reset = {int(h["X-RateLimit-Reset"]) for h in seen}
    day_reset = {int(h["X-Quota-Reset"]) for h in seen}
    assert len(minute_reset) == 1 and len(day_reset) == 1
    (minute_reset,), (day_reset,) = minute_reset, day_reset
    assert minute_reset % 60 == 0 and before < minute_reset <= after + 60  # start of the next UTC minute
    assert day_reset % 86400 == 0 and before < day_reset <= after + 86400  # next UTC midnight


async def test_workspace_events_override_the_default_limits(stack, http):
    ws = new_id("wsover")
    [[key]] = await provision(stack, {"id": ws, "rate_limit_per_minute": 7, "daily_quota": 70})
    status, headers, _ = await get(http, urls(stack)[0], key)
    assert (status, headers["X-RateLimit-Limit"], headers["X-Quota-Limit"]) == (200, "7", "70")
    await change_workspace(stack, ws, rate_limit_per_minute=9, daily_quota=90)
    for url in urls(stack):
        status, headers, _ = await get(http, url, key)
        assert (status, headers["X-RateLimit-Limit"], headers["X-Quota-Limit"]) == (200, "9", "90")


async def test_handler_errors_count_and_carry_the_headers_unknown_paths_do_not(stack, http):
    ws = new_id("wserr")
    [[key]] = await provision(stack, {"id": ws})
    a, b, _ = urls(stack)
    status, headers, body = await get(http, a.replace("/languages", "/posts?limit=abc"), key)
    assert (status, err(body)["code"]) == (422, "VALIDATION_FAILED")
    assert headers["X-Quota-Remaining"] == "4999" and headers["X-RateLimit-Remaining"] == "59"
    status, headers, _ = await get(http, b.replace("/languages", "/no-such-endpoint"), key)
    assert status == 404 and not any(h in headers for h in LIMIT_HEADERS)
    assert (await usage(stack, ws))[1] == 1


# ------------------------------------------------------------------------------------- 429s


async def test_rate_limited_answer_and_it_does_not_count(stack, http):
    ws = new_id("wsrl")
    [[key]] = await provision(stack, {"id": ws, "rate_limit_per_minute": 3, "daily_quota": 100})
    await away_from_minute_end(stack)
    a, b, c = urls(stack)
    assert [(await get(http, u, key))[0] for u in (a, b, c)] == [200, 200, 200]
    before = await db_now(stack)
    for url in (a, b, c):
        status, headers, body = await get(http, url, key)
        error = err(body)
        assert (status, error["code"]) == (429, "RATE_LIMITED")
        retry = int(headers["Retry-After"])
        reset = int(headers["X-RateLimit-Reset"])
        assert error["retry_after_sec"] == retry
        assert headers["X-RateLimit-Limit"] == "3" and headers["X-RateLimit-Remaining"] == "0"
        assert reset % 60 == 0 and 1 <= retry <= 60 and abs(reset - before - retry) <= 2
        assert headers["X-Quota-Remaining"] == "97"  # the refused requests were not counted
    assert await usage(stack, ws) == (3, 3)


async def test_quota_exhausted_answer_and_it_leaves_the_minute_window_alone(stack, http):
    ws = new_id("wsq")
    [[key]] = await provision(stack, {"id": ws, "rate_limit_per_minute": 100, "daily_quota": 3})
    await away_from_minute_end(stack)
    a, b, c = urls(stack)
    assert [(await get(http, u, key))[0] for u in (a, b, c)] == [200, 200, 200]
    before = await db_now(stack)
    for url in (a, b, c):
        status, headers, body = await get(http, url, key)
        after = await db_now(stack)
        error = err(body)
        assert (status, error["code"]) == (429, "QUOTA_EXHAUSTED")
        retry = int(headers["Retry-After"])
        reset = int(headers["X-Quota-Reset"])
        assert error["retry_after_sec"] == retry
        assert headers["X-Quota-Limit"] == "3" and headers["X-Quota-Remaining"] == "0"
        assert reset % 86400 == 0  # next UTC midnight
        assert reset - after - 1 <= retry <= reset - before + 1  # seconds until then
        assert headers["X-RateLimit-Remaining"] == "97"  # no minute slot was consumed
    assert await usage(stack, ws) == (3, 3)


# ------------------------------------------------------------------------------- concurrency


async def burst(http: aiohttp.ClientSession, stack: ServiceStack, key: str, n: int):
    targets = urls(stack)
    return await asyncio.gather(*(get(http, targets[i % len(targets)], key) for i in range(n)))


@pytest.mark.parametrize("round_", range(3))
async def test_a_burst_through_three_processes_admits_exactly_the_rate_limit(stack, http, round_):
    ws = new_id("wsburst")
    [[key]] = await provision(stack, {"id": ws, "rate_limit_per_minute": 50, "daily_quota": 100_000})
    await away_from_minute_end(stack)
    results = await burst(http, stack, key, 300)
    admitted = [r for r in results if r[0] == 200]
    refused = [r for r in results if r[0] != 200]
    assert len(admitted) == 50
    assert len(refused) == 250
    for status, headers, body in refused:
        assert status == 429 and err(body)["code"] == "RATE_LIMITED"
        assert headers["X-RateLimit-Limit"] == "50" and headers["X-RateLimit-Remaining"] == "0"
        assert int(headers["Retry-After"]) == err(body)["retry_after_sec"] >= 1
        assert int(headers["X-RateLimit-Reset"]) % 60 == 0
    assert sorted(int(h["X-RateLimit-Remaining"]) for _, h, _ in admitted) == list(range(50))
    assert await usage(stack, ws) == (50, 50)


@pytest.mark.parametrize("round_", range(3))
async def test_a_burst_through_three_processes_admits_exactly_the_daily_quota(stack, http, round_):
    ws = new_id("wsqburst")
    [[key]] = await provision(stack, {"id": ws, "rate_limit_per_minute": 100_000, "daily_quota": 40})
    results = await burst(http, stack, key, 300)
    admitted = [r for r in results if r[0] == 200]
    refused = [r for r in results if r[0] != 200]
    assert len(admitted) == 40
    assert len(refused) == 260
    for status, headers, body in refused:
        assert status == 429 and err(body)["code"] == "QUOTA_EXHAUSTED"
        assert headers["X-Quota-Limit"] == "40" and headers["X-Quota-Remaining"] == "0"
        assert int(headers["Retry-After"]) == err(body)["retry_after_sec"] >= 1
        assert int(headers["X-Quota-Reset"]) % 86400 == 0
    assert sorted(int(h["X-Quota-Remaining"]) for _, h, _ in admitted) == list(range(40))
    assert (await usage(stack, ws))[1] == 40
