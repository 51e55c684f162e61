"""The read model's positions over a real PostgreSQL: load, lock and save, another schema's
positions, and waiting until marks are projected."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from tickerwire.services.common.db import is_migrated, postgres_check
from tickerwire.services.readmodel import positions


async def test_lock_creates_at_zero_and_save_stores_within_the_transaction(conn):
    async with conn.transaction():
        assert await positions.lock(conn, "t.posts", 2) == 0
        await positions.save(conn, "t.posts", 2, 41)
    assert await positions.load(conn) == {("t.posts", 2): 41}
    async with conn.transaction():
        assert await positions.lock(conn, "t.posts", 2) == 41


async def test_save_many_inserts_and_overwrites_and_load_filters_by_topic(conn):
    await positions.save_many(conn, {("a", 0): 3, ("a", 1): 4, ("b", 0): 5})
    await positions.save_many(conn, {("a", 1): 9})
    assert await positions.load(conn) == {("a", 0): 3, ("a", 1): 9, ("b", 0): 5}
    assert await positions.load(conn, ["a"]) == {("a", 0): 3, ("a", 1): 9}
    assert await positions.load(conn, ["nothing"]) == {}


async def test_load_of_another_schema_and_of_one_not_there(conn):
    await conn.execute("CREATE SCHEMA other; CREATE TABLE other.positions (LIKE rm.positions INCLUDING DEFAULTS)")
    await conn.execute("INSERT INTO other.positions (topic, partition, next_offset) VALUES ('a', 0, 12)")
    await positions.save_many(conn, {("a", 0): 1})
    assert await positions.load(conn, schema="other") == {("a", 0): 12}
    assert await positions.load(conn, schema="missing") == {}


async def test_a_read_model_schema_with_capitals_is_seen_as_migrated(conn, fresh_db):
    # TICKERWIRE_READ_MODEL_SCHEMA=Live is a valid identifier and migrate creates it quoted;
    # readiness, the stored positions and the rebuild's switch must find it, not "live".
    await conn.execute('CREATE SCHEMA "Live"; CREATE TABLE "Live".positions (LIKE rm.positions INCLUDING DEFAULTS)')
    await conn.execute("INSERT INTO \"Live\".positions (topic, partition, next_offset) VALUES ('a', 0, 7)")
    assert await is_migrated(conn, "Live")
    assert not await is_migrated(conn, "Other")
    assert await positions.load(conn, schema="Live") == {("a", 0): 7}
    async with asyncpg.create_pool(fresh_db, min_size=1, max_size=1) as pool:
        assert await postgres_check(pool, "Live") == (True, "ok")
        assert await postgres_check(pool, "Other") == (False, "read model not migrated")


async def test_wait_until_returns_once_projected_and_times_out_saying_how_far(conn, fresh_db):
    await positions.save_many(conn, {("a", 0): 1})

    async def project_later():
        await asyncio.sleep(0.2)
        await positions.save_many(conn, {("a", 0): 5})

    mover = asyncio.create_task(project_later())
    watcher = await asyncpg.connect(fresh_db, server_settings={"search_path": "rm,public"})
    try:
        await positions.wait_until(watcher, {("a", 0): 5}, timeout=5)
        await mover
        with pytest.raises(TimeoutError, match="did not catch up"):
            await positions.wait_until(watcher, {("a", 0): 6}, timeout=0.2)
    finally:
        await watcher.close()
