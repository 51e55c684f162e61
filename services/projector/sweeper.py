"""The badge sweeper (docs/api.md#badge-status): recomputes every workspace's badge status at each tick.

Status moves only at ticks; a heartbeat alone changes nothing until the next one.
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from ..common.db import WRITER_ACQUIRE_TIMEOUT_S, begin_local, storage_errors
from ..common.runtime.errors import TransientError
from ..readmodel import stamps as stamp
from . import sql
from .apply import SWITCH_LOCK
from .metrics import ProjectorMetrics

log = logging.getLogger(__name__)


async def sweep_once(conn: asyncpg.Connection) -> dict[str, str]:
    """One tick, on the database clock. Returns {workspace_id: badge_status}."""
    async with conn.transaction():
        await begin_local(conn)
        await conn.execute(sql.ADVISORY_XACT_LOCK_SHARED, SWITCH_LOCK)  # never across a rebuild's switch
        rows = await conn.fetch(sql.SWEEP_BADGES)
        await conn.execute(sql.BUMP_STAMPS, [stamp.ACCESS])
    return {r["id"]: r["badge_status"] for r in rows}


async def run_sweeper(pool: asyncpg.Pool, interval_s: float, metrics: ProjectorMetrics) -> None:
    """Tick at start-up, then every ``interval_s`` seconds, until cancelled."""
    while True:
        try:
            with storage_errors("badge sweep"):
                async with pool.acquire(timeout=WRITER_ACQUIRE_TIMEOUT_S) as conn:
                    statuses = await sweep_once(conn)
            metrics.sweeps.inc()
            log.info("badge sweep: %d workspaces", len(statuses))
        except TransientError as exc:
            log.warning("badge sweep failed, next tick retries: %s", exc)
        await asyncio.sleep(interval_s)
