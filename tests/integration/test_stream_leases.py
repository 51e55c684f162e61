"""Connection slots in the real PostgreSQL: concurrent handshakes on several processes never
exceed the limit; released and expired slots are granted again; lost leases are reported."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from tests.support.pgbouncer import routed_pool
from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.common.db import connect
from tickerwire.services.common.runtime.errors import StorageUnavailable
from tickerwire.services.readmodel.migrate import migrate
from tickerwire.services.stream import sql
from tickerwire.services.stream.leases import Leases

#: The configured defaults (TICKERWIRE_STREAM_LEASE_TTL_S, _LEASE_RENEW_S).
_DEFAULTS = FullConfig.from_env({}, database_url="postgresql:///unused", kafka_bootstrap_servers="-")
TTL_S, RENEW_S = _DEFAULTS.stream_lease_ttl_s, _DEFAULTS.stream_lease_renew_s


@pytest.fixture
async def pool(fresh_db):
    async with connect(fresh_db) as conn:
        await migrate(conn, "rm")
    p = await routed_pool(fresh_db, "rm", min_size=1, max_size=8)
    yield p
    await p.close()


async def test_concurrent_acquires_on_two_holders_grant_exactly_the_limit(pool: asyncpg.Pool):
    one, two = Leases(pool, TTL_S, RENEW_S), Leases(pool, TTL_S, RENEW_S)
    results = await asyncio.gather(*[(one if i % 2 else two).acquire("ws_a", f"ses_{i}", 5) for i in range(20)])
    assert sum(results) == 5
    assert await pool.fetchval("SELECT count(*) FROM public.stream_leases WHERE workspace_id = 'ws_a'") == 5
    assert await one.acquire("ws_b", "ses_other", 5)  # limits are per workspace

    owner = one if one.held - {"ses_other"} else two
    await owner.release(next(iter(owner.held - {"ses_other"})))
    assert await two.acquire("ws_a", "ses_again", 5)
    assert not await two.acquire("ws_a", "ses_sixth", 5)


async def test_slots_of_a_holder_that_stopped_renewing_free_themselves(pool: asyncpg.Pool):
    crashed = Leases(pool, ttl_s=0.3, renew_every_s=0.1)
    alive = Leases(pool, TTL_S, RENEW_S)
    assert await crashed.acquire("ws_c", "ses_1", 1)
    assert not await alive.acquire("ws_c", "ses_2", 1)
    deadline = time.monotonic() + 30
    while not await alive.acquire("ws_c", "ses_2", 1):
        assert time.monotonic() < deadline, "expired lease never freed its slot"
        await asyncio.sleep(0.1)
    # The crashed holder's lease is gone: a renewal reports it lost instead of reviving it.
    assert await crashed.renew() == {"ses_1"}
    assert await alive.renew() == set()


async def test_a_lease_that_cannot_be_renewed_before_it_expires_is_reported_lost(fresh_db):
    async with connect(fresh_db) as conn:
        await migrate(conn, "rm")
    doomed = await routed_pool(fresh_db, "rm", min_size=1, max_size=2)
    leases = Leases(doomed, ttl_s=0.6, renew_every_s=0.1)
    assert await leases.acquire("ws_d", "ses_1", 5)
    lost: list[set[str]] = []
    renewing = asyncio.create_task(leases.run(lost.append))
    await asyncio.sleep(0.3)
    assert lost == []  # renewed while the database answers
    await doomed.close()  # from here on every renewal fails, as with PostgreSQL down
    closed_at = time.monotonic()
    while not lost:
        assert time.monotonic() - closed_at < 5, "a lease that could not be renewed was never reported lost"
        await asyncio.sleep(0.05)
    renewing.cancel()
    assert lost == [{"ses_1"}] and leases.held == set()
    assert time.monotonic() - closed_at >= 0.3  # not before the lease could have expired


async def test_a_burst_of_one_workspaces_handshakes_takes_one_pooled_connection_not_the_pool(
    pool: asyncpg.Pool, fresh_db
):
    leases = Leases(pool, TTL_S, RENEW_S, acquire_timeout_s=0.5)
    async with connect(fresh_db) as elsewhere, elsewhere.transaction():
        # Another process is granting ws_burst a slot: it holds that workspace's lock meanwhile.
        await elsewhere.execute(sql.LOCK_WORKSPACE_SLOTS, "ws_burst")
        burst = [asyncio.create_task(leases.acquire("ws_burst", f"ses_{i}", 1000)) for i in range(20)]
        await asyncio.sleep(0.2)
        waiting_on_the_lock = await pool_sessions_waiting_for_a_lock(elsewhere)
        started = time.monotonic()
        assert await leases.acquire("ws_quiet", "ses_quiet", 5)  # the pool (8) was not all taken by the burst
        assert time.monotonic() - started < 0.5
    results = await asyncio.gather(*burst, return_exceptions=True)
    assert waiting_on_the_lock == 1
    # The burst's handshakes waited for their turn for at most the bound, then were refused (503).
    assert all(r is True or isinstance(r, StorageUnavailable) for r in results), results
    assert any(r is True for r in results)


async def pool_sessions_waiting_for_a_lock(conn: asyncpg.Connection) -> int:
    return await conn.fetchval(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid <> pg_backend_pid() "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )


async def test_a_burst_of_one_workspaces_handshakes_is_settled_in_a_few_statements_within_the_bound(pool: asyncpg.Pool):
    # A reconnect storm: 1,000 handshakes of one workspace at once, on one process. Each would
    # be a committed statement of its own under the workspace's lock; grouped, the burst is a
    # few statements, so none waits past the 0.5 s bound and exactly the limit is granted.
    leases = Leases(pool, TTL_S, RENEW_S, acquire_timeout_s=0.5)
    results = await asyncio.gather(
        *[leases.acquire("ws_storm", f"ses_{i}", 600) for i in range(1000)], return_exceptions=True
    )
    refused = [r for r in results if not isinstance(r, bool)]
    assert refused == []
    assert sum(results) == 600 and len(leases.held) == 600
    assert await pool.fetchval("SELECT count(*) FROM public.stream_leases WHERE workspace_id = 'ws_storm'") == 600
