"""A database outage in the middle of a batch is retried with backoff and skips nothing (real PostgreSQL)."""

from __future__ import annotations

import asyncio

import asyncpg
from aiokafka import TopicPartition

from tests.support.events import post_ev, records
from tests.support.pgbouncer import routed, routed_pool
from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.projector.apply import SWITCH_LOCK
from tickerwire.services.projector.metrics import ProjectorMetrics
from tickerwire.services.projector.runner import Projector
from tickerwire.services.readmodel.migrate import migrate


async def test_a_dropped_connection_mid_batch_is_retried_and_the_batch_applied_once(fresh_db):
    admin = await asyncpg.connect(fresh_db)
    await migrate(admin, "rm")
    pool = await routed_pool(fresh_db, "rm", min_size=1, max_size=2)  # through the session's PgBouncer, if any
    metrics = ProjectorMetrics()
    projector = Projector(FullConfig(**routed(fresh_db), kafka_bootstrap_servers="unused:9092"), pool, metrics)
    try:
        # Hold the batch at its first statement, then kill its connection: the server went away.
        await admin.execute("SELECT pg_advisory_lock($1)", SWITCH_LOCK)
        applying = asyncio.create_task(
            projector.apply_records(TopicPartition("t.posts.v1", 0), records([post_ev(1, tickers=("BTC",))]))
        )
        while not (
            pids := await admin.fetch(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%pg_advisory_xact_lock_shared%'"
            )
        ):
            await asyncio.sleep(0.01)
        await admin.execute("SELECT pg_terminate_backend($1)", pids[0]["pid"])
        while (metrics.registry.get_sample_value("tickerwire_projector_retries_total", {"what": "apply"}) or 0) < 1:
            await asyncio.sleep(0.01)
        await admin.execute("SELECT pg_advisory_unlock($1)", SWITCH_LOCK)
        await applying
        assert await admin.fetchval("SELECT post_count FROM rm.ticker_post_counts WHERE ticker = 'BTC'") == 1
        assert await admin.fetchval("SELECT next_offset FROM rm.positions") == 1
        assert metrics.registry.get_sample_value("tickerwire_projector_events_applied_total", {"type": "post"}) == 1
    finally:
        await pool.close()
        await admin.close()
