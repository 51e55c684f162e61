"""An in-process Projector on a migrated scratch database, for integration tests of its batch path."""

from __future__ import annotations

import contextlib
from typing import AsyncIterator

import asyncpg

from tests.support.pgbouncer import routed
from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.common.db import create_pool
from tickerwire.services.projector.metrics import ProjectorMetrics
from tickerwire.services.projector.runner import Projector
from tickerwire.services.readmodel.migrate import migrate


@contextlib.asynccontextmanager
async def projector_on(dsn: str, **settings) -> AsyncIterator[tuple[Projector, asyncpg.Pool, ProjectorMetrics]]:
    """No broker involved unless ``settings`` name one: tests hand batches to
    ``Projector.apply_records`` directly, or run its consume loop."""
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn, "rm")
    finally:
        await conn.close()
    # Through the session's PgBouncer, if any (tests/support/pgbouncer.py), as a projector process would be.
    config = FullConfig(**{**routed(dsn), "kafka_bootstrap_servers": "unused:9092", **settings})
    pool = await create_pool(config.database_url, "rm", min_size=1, max_size=2, pooled=config.pooled)
    metrics = ProjectorMetrics()
    try:
        yield Projector(config, pool, metrics), pool, metrics
    finally:
        await pool.close()
