"""The access path on a real PostgreSQL: the gates from in-memory principals (and the database
fallback), and group-committed admission (``tw_admit``, platform migration 0003): both counters
atomically, grants in arrival order, refusals from memory, and no admission beyond a limit
under concurrent batches of several processes."""

from __future__ import annotations

import asyncio
import contextlib

import asyncpg
import pytest

from tests.support.pgbouncer import routed_pool
from tickerwire.services.api.admission import Admissions
from tickerwire.services.common.http.keys import generate_key, hash_key
from tickerwire.services.readmodel.access import AccessDenied, Principals
from tickerwire.services.readmodel.migrate import migrate
from tickerwire.services.readmodel.stamps import StampWatcher


@pytest.fixture
async def pool(fresh_db):
    conn = await asyncpg.connect(fresh_db)
    try:
        await migrate(conn, "rm")
    finally:
        await conn.close()
    p = await routed_pool(fresh_db, "rm", min_size=1, max_size=12)
    try:
        yield p
    finally:
        await p.close()


@contextlib.asynccontextmanager
async def running(admissions: Admissions):
    task = asyncio.create_task(admissions.run())
    try:
        for _ in range(100):
            if admissions.connected:
                break
            await asyncio.sleep(0.05)
        yield admissions
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
async def process(pool, fresh_db):
    """One API process's access path: principals (loaded) and a running admission batcher."""
    principals = Principals()
    async with running(Admissions(fresh_db, default_rate=60, default_quota=5000)) as admissions:
        yield principals, admissions


async def admit(pool, process, key):
    principals, admissions = process
    await principals.refresh(pool)
    principal = await principals.authorize(pool, key)
    return principal, await admissions.admit(principal)


async def add_workspace(pool, ws: str, *, status="active", badge="ok", rate=None, quota=None, revoked=False) -> str:
    """Rows as the projector and the sweeper would have written them."""
    key = generate_key()
    await pool.execute(
        "INSERT INTO workspaces (id, version, name, status, rate_limit_per_minute, daily_quota, badge_status)"
        " VALUES ($1, 1, $1, $2, $3, $4, $5)",
        ws,
        status,
        rate,
        quota,
        badge,
    )
    await pool.execute(
        "INSERT INTO api_keys (id, version, workspace_id, key_hash, display_prefix, issued_at, revoked_at)"
        " VALUES ($1, 1, $2, $3, 'tw_live_xxxx', now(), CASE WHEN $4 THEN now() END)",
        "key_" + ws,
        ws,
        hash_key(key),
        revoked,
    )
    await pool.execute("UPDATE change_stamps SET stamp = stamp + 1 WHERE name = 'access'")  # as the projector does
    return key


async def away_from_minute_end(pool) -> None:
    """Start a burst early in a UTC minute (database clock), so it cannot straddle two windows."""
    left = await pool.fetchval("SELECT 60 - extract(second FROM now())")
    if left < 10:
        await asyncio.sleep(float(left) + 0.2)


async def test_gates_in_order_and_nothing_counted_when_refused(pool, process):
    cases = {
        "revoked": (dict(revoked=True, status="suspended", badge="missing"), "NOT_AUTHENTICATED"),
        "suspended": (dict(status="suspended", badge="missing"), "WORKSPACE_SUSPENDED"),
        "missing": (dict(badge="missing"), "BADGE_MISSING"),
        "unknown": (dict(badge="unknown"), "BADGE_MISSING"),
    }
    for ws, (attrs, code) in cases.items():
        key = await add_workspace(pool, ws, **attrs)
        with pytest.raises(AccessDenied) as exc:
            await admit(pool, process, key)
        assert exc.value.denial.code == code, ws
    with pytest.raises(AccessDenied) as exc:
        await admit(pool, process, generate_key())
    assert exc.value.denial.code == "NOT_AUTHENTICATED"
    assert await pool.fetchval("SELECT count(*) FROM usage_minute") == 0
    assert await pool.fetchval("SELECT count(*) FROM usage_day") == 0
    assert process[0].fallback_lookups == 0  # all answered from memory


async def test_unknown_keys_are_answered_from_memory_and_stored_nowhere(pool, process):
    principals, _ = process
    await add_workspace(pool, "known")
    await principals.refresh(pool)
    size = len(principals.by_hash)
    for _ in range(500):
        with pytest.raises(AccessDenied):
            await principals.authorize(pool, generate_key())
    assert len(principals.by_hash) == size and principals.fallback_lookups == 0


async def test_a_copy_not_confirmed_current_falls_back_to_the_database(pool, process):
    principals, _ = process
    key = await add_workspace(pool, "fallback")
    await principals.refresh(pool)
    principals.follow(StampWatcher("postgresql://never-used", lambda: asyncio.sleep(0)))  # never refreshed: not fresh
    await pool.execute("UPDATE workspaces SET status = 'suspended' WHERE id = 'fallback'")  # no stamp bump
    with pytest.raises(AccessDenied) as exc:
        await principals.authorize(pool, key)
    assert exc.value.denial.code == "WORKSPACE_SUSPENDED" and principals.fallback_lookups == 1


async def test_warning_badge_is_served_and_counted(pool, process):
    key = await add_workspace(pool, "warn", badge="warning")
    principal, usage = await admit(pool, process, key)
    assert principal.workspace_id == "warn"
    assert (usage.outcome, usage.minute_used, usage.day_used) == ("OK", 1, 1)


async def test_defaults_apply_unless_the_workspace_overrides_them(pool, process):
    plain = await add_workspace(pool, "plain")
    custom = await add_workspace(pool, "custom", rate=7, quota=70)
    _, usage = await admit(pool, process, plain)
    assert (usage.rate_limit, usage.quota) == (60, 5000)
    _, usage = await admit(pool, process, custom)
    assert (usage.rate_limit, usage.quota) == (7, 70)


async def test_windows_are_the_utc_minute_and_the_utc_day_on_the_database_clock(pool, process):
    key = await add_workspace(pool, "clock")
    _, usage = await admit(pool, process, key)
    assert usage.minute_reset % 60 == 0 and 0 < usage.minute_reset - usage.now <= 60
    assert usage.day_reset % 86400 == 0 and 0 < usage.day_reset - usage.now <= 86400


async def test_rate_limit_refusal_counts_nothing_and_repeats_from_memory(pool, process):
    principals, admissions = process
    key = await add_workspace(pool, "rl", rate=3, quota=100)
    await away_from_minute_end(pool)
    outcomes = [(await admit(pool, process, key))[1].outcome for _ in range(3)]
    principal = await principals.authorize(pool, key)
    outcomes += [(await admissions.admit(principal)).outcome for _ in range(3)]
    assert outcomes == ["OK"] * 3 + ["RATE_LIMITED"] * 3
    assert admissions.refused_from_memory == 2  # only the first refusal asked the database
    refused = await admissions.admit(principal)
    assert 1 <= refused.seconds_until(refused.minute_reset) <= 60
    assert await pool.fetchval("SELECT count FROM usage_day WHERE workspace_id = 'rl'") == 3
    assert await pool.fetchval("SELECT count FROM usage_minute WHERE workspace_id = 'rl'") == 3


async def test_quota_refusal_leaves_the_minute_window_alone(pool, process):
    key = await add_workspace(pool, "q", rate=10, quota=2)
    usages = [(await admit(pool, process, key))[1] for _ in range(4)]
    assert [u.outcome for u in usages] == ["OK", "OK", "QUOTA_EXHAUSTED", "QUOTA_EXHAUSTED"]
    assert usages[-1].minute_used == 2 and usages[-1].day_used == 2
    assert await pool.fetchval("SELECT count FROM usage_minute WHERE workspace_id = 'q'") == 2


async def test_the_stream_check_counts_nothing(pool, process):
    principals, _ = process
    key = await add_workspace(pool, "streamer", rate=1, quota=1)
    await principals.refresh(pool)
    for _ in range(3):
        assert (await principals.authorize(pool, key)).workspace_id == "streamer"
    assert await pool.fetchval("SELECT count(*) FROM usage_minute") == 0


async def test_old_minute_windows_are_pruned(pool, process):
    key = await add_workspace(pool, "prune")
    await pool.execute(
        "INSERT INTO usage_minute VALUES ('prune', date_trunc('minute', now(), 'UTC') - interval '5 minutes', 9)"
    )
    await admit(pool, process, key)
    minutes = await pool.fetchval("SELECT count(*) FROM usage_minute WHERE workspace_id = 'prune'")
    assert minutes == 1


async def test_concurrent_requests_settle_in_few_batches_with_distinct_counts(pool, process):
    principals, admissions = process
    key = await add_workspace(pool, "batch", rate=1000, quota=10_000)
    await away_from_minute_end(pool)
    await principals.refresh(pool)
    principal = await principals.authorize(pool, key)
    usages = await asyncio.gather(*(admissions.admit(principal) for _ in range(200)))
    assert sorted(u.minute_used for u in usages) == list(range(1, 201))
    assert admissions.batches <= 3  # one round trip settles every request that was waiting


async def test_concurrent_batches_of_two_processes_never_exceed_either_limit(pool, process, fresh_db):
    principals, first = process
    rate_key = await add_workspace(pool, "crate", rate=25, quota=10_000)
    quota_key = await add_workspace(pool, "cquota", rate=10_000, quota=15)
    await away_from_minute_end(pool)
    await principals.refresh(pool)
    targets = [await principals.authorize(pool, k) for k in (rate_key, quota_key)]
    async with running(Admissions(fresh_db, default_rate=60, default_quota=5000)) as second:
        usages = await asyncio.gather(*((first, second)[i % 2].admit(targets[(i // 2) % 2]) for i in range(400)))
    by_ws: dict[str, list[str]] = {}
    for i, usage in enumerate(usages):
        by_ws.setdefault(targets[(i // 2) % 2].workspace_id, []).append(usage.outcome)
    assert by_ws["crate"].count("OK") == 25 and set(by_ws["crate"]) == {"OK", "RATE_LIMITED"}
    assert by_ws["cquota"].count("OK") == 15 and set(by_ws["cquota"]) == {"OK", "QUOTA_EXHAUSTED"}


async def test_an_admission_connection_the_server_closed_while_idle_is_replaced_before_a_request_needs_it(
    pool, process
):
    # PostgreSQL restarted or crashed while this process had no counted request: the next one
    # must not be the one to find both connections closed (a 503), however long after.
    principals, admissions = process
    key = await add_workspace(pool, "idle", rate=100, quota=100)
    await admit(pool, process, key)
    await pool.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE application_name = 'tickerwire-admission' AND datname = current_database()"
    )
    await asyncio.sleep(2.0)  # the idle check and a reconnect, with room
    _, usage = await admit(pool, process, key)
    assert usage.outcome == "OK"
