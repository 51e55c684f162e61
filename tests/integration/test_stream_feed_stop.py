"""A stream feed asked to stop stops, even when the request arrives while its consumer is being
stopped for a reconnect: aiokafka's stop() swallows a cancellation that lands inside it (real
broker, real PostgreSQL; aiokafka's consumer wrapped to fail one fetch and to stop slowly)."""

from __future__ import annotations

import asyncio
import os

from tests.support.apps import config_for
from tests.support.projector import projector_on
from tests.support.swallow import fail_once_then_stop_swallowing
from tickerwire.services.common import kafka
from tickerwire.services.stream.feed import Feed
from tickerwire.services.stream.hub import Hub
from tickerwire.services.stream.metrics import StreamMetrics


async def test_a_stop_asked_for_while_the_consumer_reconnects_stops_the_feed(fresh_db, kafka_bootstrap, monkeypatch):
    config = config_for(fresh_db, kafka_bootstrap_servers=kafka_bootstrap, topic_prefix=f"feedstop{os.getpid()}")
    await kafka.ensure_topics(config)
    stopping = fail_once_then_stop_swallowing(monkeypatch)
    async with projector_on(fresh_db) as (_, pool, _):  # a migrated read model
        metrics = StreamMetrics()
        feed = Feed(config, pool, Hub(metrics, config.stream_queue_size), metrics)
        running = asyncio.create_task(feed.run())
        try:
            await asyncio.wait_for(stopping.wait(), 60)
            running.cancel()  # reaches the consumer stage inside the consumer's stop
            done, _ = await asyncio.wait([running], timeout=15)
            assert running in done and running.cancelled(), "the feed went on after it was asked to stop"
        finally:
            running.cancel()
            await asyncio.wait([running], timeout=15)
