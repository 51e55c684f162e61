"""Connection slots in the real PostgreSQL: concurrent handshakes on several processes never
exceed the limit; released and expired slots are granted again; lost leases are reported."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from tickerwire.services.common.db import connect, create_pool, migrate
from tickerwire.services.stream.leases import Leases


@pytest.fixture
async def pool(fresh_db):
    async with connect(fresh_db) as conn:
        await migrate(conn, "rm")
    p = await create_pool(fresh_db, "rm", min_size=1, max_size=8)
    yield p
    await p.close()


async def test_concurrent_acquires_on_two_holders_grant_exactly_the_limit(pool: asyncpg.Pool):
    one, two = Leases(pool), Leases(pool)
    results = await asyncio.gather(*[(one if i % 2 else two).acquire("ws_a", f"ses_{i}", 5) for i in range(20)])
    assert sum(results) == 5
    assert await pool.fetchval("SELECT count(*) FROM public.stream_leases WHERE workspace_id = 'ws_a'") == 5
    assert await one.acquire("ws_b", "ses_other", 5)  # limits are per workspace

    owner = one if one.held - {"ses_other"} else two
    await owner.release(next(iter(owner.held - {"ses_other"})))
    assert await two.acquire("ws_a", "ses_again", 5)
    assert not await two.acquire("ws_a", "ses_sixth", 5)


async def test_slots_of_a_holder_that_stopped_renewing_free_themselves(pool: asyncpg.Pool):
    crashed = Leases(pool, ttl_s=0.3)
    alive = Leases(pool)
    assert await crashed.acquire("ws_c", "ses_1", 1)
    assert not await alive.acquire("ws_c", "ses_2", 1)
    deadline = time.monotonic() + 30
    while not await alive.acquire("ws_c", "ses_2", 1):
        assert time.monotonic() < deadline, "expired lease never freed its slot"
        await asyncio.sleep(0.1)
    # The crashed holder's lease is gone: a renewal reports it lost instead of reviving it.
    assert await crashed.renew() == {"ses_1"}
    assert await alive.renew() == set()
