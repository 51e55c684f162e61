"""A statement through a BoundedReader never waits without end for a pooled connection: with
every connection of the pool held, it gives up after its bound (real PostgreSQL)."""

from __future__ import annotations

import time

import pytest

from tickerwire.services.common.db import BoundedReader, create_pool, storage_errors
from tickerwire.services.common.runtime.errors import StorageUnavailable


async def test_a_statement_gives_up_waiting_for_a_connection_after_its_bound(fresh_db):
    pool = await create_pool(fresh_db, "public", min_size=1, max_size=1)
    try:
        reader = BoundedReader(pool, 0.3)
        assert await reader.fetchval("SELECT 1") == 1
        async with pool.acquire():  # the pool's only connection, held
            for statement in (reader.fetch, reader.fetchrow, reader.fetchval, reader.execute):
                started = time.monotonic()
                with pytest.raises(StorageUnavailable, match="gave up waiting"):
                    with storage_errors("probe"):
                        await statement("SELECT 1")
                assert 0.25 < time.monotonic() - started < 2.0
        assert await reader.execute("SELECT 1") == "SELECT 1"  # released: served again
    finally:
        await pool.close()
