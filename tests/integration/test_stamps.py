"""The change-stamp watcher on a real PostgreSQL: a committed stamp bump is pushed (NOTIFY from the
read-model trigger) and applied at once, an uncommitted one never; a listener whose connection
dies reports not-ready and comes back; a refresh that keeps failing makes the copy stale."""

from __future__ import annotations

import asyncio
import contextlib
import time

import asyncpg
import pytest

from tickerwire.services.common.runtime.errors import StorageUnavailable
from tickerwire.services.readmodel.migrate import migrate
from tickerwire.services.readmodel.stamps import LISTENER_NAME, StampWatcher


@pytest.fixture
async def db(fresh_db):
    conn = await asyncpg.connect(fresh_db, server_settings={"search_path": "rm,public"})
    try:
        await migrate(conn, "rm")
        yield fresh_db, conn
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def watching(dsn: str, refresh, **kw):
    watcher = StampWatcher(dsn, refresh, **kw)
    task = asyncio.create_task(watcher.run())
    try:
        yield watcher
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def until(predicate, within: float) -> float:
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < within, "condition not met in time"
        await asyncio.sleep(0.005)
    return time.monotonic() - started


async def test_a_committed_bump_is_pushed_and_applied_long_before_the_poll(db):
    dsn, conn = db
    refreshes = []
    reader = await asyncpg.connect(dsn, server_settings={"search_path": "rm,public"})

    async def refresh():
        refreshes.append(await reader.fetchval("SELECT stamp FROM change_stamps WHERE name = 'access'"))

    async with watching(dsn, refresh, poll_s=30) as watcher:  # the poll cannot be what applies it
        await until(lambda: watcher.listening and refreshes, 10)
        async with conn.transaction():
            await conn.execute("UPDATE change_stamps SET stamp = stamp + 1 WHERE name = 'access'")
            await asyncio.sleep(0.3)
            assert len(refreshes) <= 2 and max(refreshes) == 0  # not before the commit
        took = await until(lambda: max(refreshes) == 1, 1.0)
        assert took < 0.5
        assert not watcher.behind("access")
        assert watcher.status() == (True, "ok")
    await reader.close()


async def test_a_dead_listener_is_not_ready_then_reconnects_and_polling_continues(db):
    dsn, conn = db
    calls = []

    async def refresh():
        calls.append(time.monotonic())

    async with watching(dsn, refresh, poll_s=0.1) as watcher:
        await until(lambda: watcher.listening, 10)
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
            LISTENER_NAME,
        )
        await until(lambda: not watcher.listening, 5)
        ready, detail = watcher.status()
        assert not ready and "listener" in detail
        await until(lambda: watcher.listening, 10)  # back, with capped backoff
        assert watcher.fresh()  # the poll kept the copy confirmed meanwhile


async def test_a_copy_that_cannot_be_refreshed_goes_stale_and_not_ready(db):
    dsn, _ = db
    failing = False

    async def refresh():
        if failing:
            raise StorageUnavailable("refresh: database unreachable")

    async with watching(dsn, refresh, poll_s=0.05, stale_after_s=0.3) as watcher:
        await until(watcher.fresh, 10)
        failing = True
        await until(lambda: not watcher.fresh(), 2)
        ready, detail = watcher.status()
        assert not ready and "not confirmed" in detail
        failing = False
        await until(watcher.fresh, 2)
