"""The ``tw_access`` function (platform migration 0002) on a real PostgreSQL: the gates in
order, both counters atomically, and no admission beyond a limit under concurrent callers."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from tickerwire.services.common.access import (
    AccessDenied,
    check_access,
    resolve,
)
from tickerwire.services.common.db import create_pool, migrate
from tickerwire.services.common.keys import generate_key, hash_key


@pytest.fixture
async def pool(fresh_db):
    conn = await asyncpg.connect(fresh_db)
    try:
        await migrate(conn, "rm")
    finally:
        await conn.close()
    p = await create_pool(fresh_db, "rm", min_size=1, max_size=12)
    try:
        yield p
    finally:
        await p.close()


async def add_workspace(pool, ws: str, *, status="active", badge="ok", rate=None, quota=None, revoked=False) -> str:
    """Rows as the projector and the sweeper would have written them."""
    key = generate_key()
    await pool.execute(
        "INSERT INTO workspaces (id, version, name, status, rate_limit_per_minute, daily_quota, badge_status)"
        " VALUES ($1, 1, $1, $2, $3, $4, $5)",
        ws, status, rate, quota, badge,
    )
    await pool.execute(
        "INSERT INTO api_keys (id, version, workspace_id, key_hash, display_prefix, issued_at, revoked_at)"
        " VALUES ($1, 1, $2, $3, 'tw_live_xxxx', now(), CASE WHEN $4 THEN now() END)",
        "key_" + ws, ws, hash_key(key), revoked,
    )
    return key


async def away_from_minute_end(pool) -> None:
    """Start a burst early in a UTC minute (database clock), so it cannot straddle two windows."""
    left = await pool.fetchval("SELECT 60 - extract(second FROM now())")
    if left < 10:
        await asyncio.sleep(float(left) + 0.2)


async def admit(pool, key, rate=60, quota=5000):
    return await resolve(pool, key, count=True, default_rate=rate, default_quota=quota)


async def test_gates_in_order_and_nothing_counted_when_refused(pool):
    cases = {
        "revoked": (dict(revoked=True, status="suspended", badge="missing"), "NOT_AUTHENTICATED"),
        "suspended": (dict(status="suspended", badge="missing"), "WORKSPACE_SUSPENDED"),
        "missing": (dict(badge="missing"), "BADGE_MISSING"),
        "unknown": (dict(badge="unknown"), "BADGE_MISSING"),
    }
    for ws, (attrs, code) in cases.items():
        key = await add_workspace(pool, ws, **attrs)
        with pytest.raises(AccessDenied) as exc:
            await admit(pool, key)
        assert exc.value.denial.code == code, ws
    with pytest.raises(AccessDenied) as exc:
        await admit(pool, generate_key())
    assert exc.value.denial.code == "NOT_AUTHENTICATED"
    assert await pool.fetchval("SELECT count(*) FROM usage_minute") == 0
    assert await pool.fetchval("SELECT count(*) FROM usage_day") == 0


async def test_warning_badge_is_served_and_counted(pool):
    key = await add_workspace(pool, "warn", badge="warning")
    principal, row = await admit(pool, key)
    assert principal.workspace_id == "warn"
    assert (row["outcome"], row["minute_used"], row["day_used"]) == ("OK", 1, 1)


async def test_defaults_apply_unless_the_workspace_overrides_them(pool):
    plain = await add_workspace(pool, "plain")
    custom = await add_workspace(pool, "custom", rate=7, quota=70)
    _, row = await admit(pool, plain, rate=60, quota=5000)
    assert (row["rate_limit"], row["quota"]) == (60, 5000)
    _, row = await admit(pool, custom, rate=60, quota=5000)
    assert (row["rate_limit"], row["quota"]) == (7, 70)


async def test_windows_are_the_utc_minute_and_the_utc_day_on_the_database_clock(pool):
    key = await add_workspace(pool, "clock")
    _, row = await admit(pool, key)
    db_now = row["db_now"]
    assert row["minute_reset"] % 60 == 0 and 0 < row["minute_reset"] - db_now <= 60
    assert row["day_reset"] % 86400 == 0 and 0 < row["day_reset"] - db_now <= 86400


async def test_rate_limit_refusal_counts_nothing(pool):
    key = await add_workspace(pool, "rl", rate=3, quota=100)
    outcomes = [(await admit(pool, key))[1]["outcome"] for _ in range(5)]
    assert outcomes == ["OK"] * 3 + ["RATE_LIMITED"] * 2
    assert await pool.fetchval("SELECT count FROM usage_day WHERE workspace_id = 'rl'") == 3
    assert await pool.fetchval("SELECT count FROM usage_minute WHERE workspace_id = 'rl'") == 3


async def test_quota_refusal_gives_the_minute_slot_back(pool):
    key = await add_workspace(pool, "q", rate=10, quota=2)
    rows = [(await admit(pool, key))[1] for _ in range(4)]
    assert [r["outcome"] for r in rows] == ["OK", "OK", "QUOTA_EXHAUSTED", "QUOTA_EXHAUSTED"]
    assert rows[-1]["minute_used"] == 2 and rows[-1]["day_used"] == 2
    assert await pool.fetchval("SELECT count FROM usage_minute WHERE workspace_id = 'q'") == 2


async def test_stream_check_counts_nothing(pool):
    key = await add_workspace(pool, "streamer", rate=1, quota=1)
    for _ in range(3):
        assert (await check_access(pool, key)).workspace_id == "streamer"
    assert await pool.fetchval("SELECT count(*) FROM usage_minute") == 0


async def test_old_minute_windows_are_pruned(pool):
    key = await add_workspace(pool, "prune")
    await pool.execute(
        "INSERT INTO usage_minute VALUES ('prune', date_trunc('minute', now(), 'UTC') - interval '5 minutes', 9)"
    )
    await admit(pool, key)
    minutes = await pool.fetchval("SELECT count(*) FROM usage_minute WHERE workspace_id = 'prune'")
    assert minutes == 1


async def test_concurrent_callers_never_exceed_either_limit(pool):
    rate_key = await add_workspace(pool, "crate", rate=25, quota=10_000)
    quota_key = await add_workspace(pool, "cquota", rate=10_000, quota=15)
    await away_from_minute_end(pool)
    rows = await asyncio.gather(*(admit(pool, k) for k in [rate_key, quota_key] * 100))
    by_ws: dict[str, list[str]] = {}
    for principal, row in rows:
        by_ws.setdefault(principal.workspace_id, []).append(row["outcome"])
    assert by_ws["crate"].count("OK") == 25 and set(by_ws["crate"]) == {"OK", "RATE_LIMITED"}
    assert by_ws["cquota"].count("OK") == 15 and set(by_ws["cquota"]) == {"OK", "QUOTA_EXHAUSTED"}
