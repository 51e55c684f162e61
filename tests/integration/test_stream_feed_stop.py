"""A stream feed asked to stop stops, even when the request arrives while its consumer is being
stopped for a reconnect: aiokafka's stop() swallows a cancellation that lands inside it (real
broker, real PostgreSQL; aiokafka's consumer wrapped to fail one fetch and to stop slowly)."""

from __future__ import annotations

import asyncio
import contextlib
import os

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaConnectionError

from tickerwire.services.common import kafka
from tickerwire.services.stream.feed import Feed
from tickerwire.services.stream.hub import Hub
from tickerwire.services.stream.metrics import StreamMetrics
from tests.support.apps import config_for
from tests.support.projector import projector_on


async def test_a_stop_asked_for_while_the_consumer_reconnects_stops_the_feed(fresh_db, kafka_bootstrap, monkeypatch):
    config = config_for(fresh_db, kafka_bootstrap_servers=kafka_bootstrap, topic_prefix=f"feedstop{os.getpid()}")
    await kafka.ensure_topics(config)
    stopping = asyncio.Event()
    failed: list[AIOKafkaConsumer] = []
    getmany, stop = AIOKafkaConsumer.getmany, AIOKafkaConsumer.stop

    async def fails_once(self, *args, **kwargs):
        if not failed:
            failed.append(self)
            raise KafkaConnectionError("injected: the broker went away")
        return await getmany(self, *args, **kwargs)

    async def stops_slowly(self):
        if self in failed:  # the feed's consumer, stopped for the reconnect
            own = asyncio.ensure_future(asyncio.sleep(1.0))  # aiokafka's own pattern: its task awaited,
            stopping.set()
            with contextlib.suppress(asyncio.CancelledError):  # a cancellation of the caller swallowed
                await own
        await stop(self)

    monkeypatch.setattr(AIOKafkaConsumer, "getmany", fails_once)
    monkeypatch.setattr(AIOKafkaConsumer, "stop", stops_slowly)
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
