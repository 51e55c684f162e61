"""A projector asked to stop stops, even when the request arrives while its consumer is being
stopped for a restart: aiokafka's stop() swallows a cancellation that lands inside it (real
broker, real PostgreSQL; aiokafka's consumer wrapped to fail one fetch and to stop slowly)."""

from __future__ import annotations

import asyncio
import contextlib
import os

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaConnectionError

from tickerwire.services.common import kafka
from tickerwire.services.common.config import Config
from tests.support.projector import projector_on


async def test_a_stop_asked_for_while_the_consumer_restarts_stops_the_projector(fresh_db, kafka_bootstrap, monkeypatch):
    prefix = f"stop{os.getpid()}"
    settings = dict(topic_prefix=prefix, topic_replication_factor=1, projector_group=f"{prefix}-projector")
    await kafka.ensure_topics(Config(database_url=fresh_db, kafka_bootstrap_servers=kafka_bootstrap, **settings))
    stopping = asyncio.Event()
    failed: list[AIOKafkaConsumer] = []
    getmany, stop = AIOKafkaConsumer.getmany, AIOKafkaConsumer.stop

    async def fails_once(self, *args, **kwargs):
        if not failed:
            failed.append(self)
            raise KafkaConnectionError("injected: the broker went away")
        return await getmany(self, *args, **kwargs)

    async def stops_slowly(self):
        if self in failed:  # the consume loop's consumer, stopped for the restart
            own = asyncio.ensure_future(asyncio.sleep(1.0))  # aiokafka's own pattern: its task awaited,
            stopping.set()
            with contextlib.suppress(asyncio.CancelledError):  # a cancellation of the caller swallowed
                await own
        await stop(self)

    monkeypatch.setattr(AIOKafkaConsumer, "getmany", fails_once)
    monkeypatch.setattr(AIOKafkaConsumer, "stop", stops_slowly)
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
