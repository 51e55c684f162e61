"""A projector asked to stop stops, even when the request arrives while its consumer is being
stopped for a restart: aiokafka's stop() swallows a cancellation that lands inside it (real
broker, real PostgreSQL; aiokafka's consumer wrapped to fail one fetch and to stop slowly)."""

from __future__ import annotations

import asyncio
import os

from tests.support.projector import projector_on
from tests.support.swallow import fail_once_then_stop_swallowing
from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.common import kafka


async def test_a_stop_asked_for_while_the_consumer_restarts_stops_the_projector(fresh_db, kafka_bootstrap, monkeypatch):
    prefix = f"stop{os.getpid()}"
    settings = dict(topic_prefix=prefix, topic_replication_factor=1, projector_group=f"{prefix}-projector")
    await kafka.ensure_topics(FullConfig(database_url=fresh_db, kafka_bootstrap_servers=kafka_bootstrap, **settings))
    stopping = fail_once_then_stop_swallowing(monkeypatch)
    async with projector_on(fresh_db, kafka_bootstrap_servers=kafka_bootstrap, **settings) as (projector, _, _):
        running = asyncio.create_task(projector.run())
        try:
            await asyncio.wait_for(stopping.wait(), 60)
            running.cancel()  # lands inside the consumer's stop
            done, _ = await asyncio.wait([running], timeout=15)
            assert running in done and running.cancelled(), "the projector went on after it was asked to stop"
        finally:
            running.cancel()
            await asyncio.wait([running], timeout=15)
