"""The stream feed reconnects to the broker after a capped, jittered pause that grows while the
broker is away and is short again once a fetch worked (real broker, real PostgreSQL; the
bootstrap address refuses connections until it forwards to the broker)."""

from __future__ import annotations

import os

from tickerwire.services.common import kafka
from tickerwire.services.stream.feed import Feed
from tickerwire.services.stream.hub import Hub
from tickerwire.services.stream.metrics import StreamMetrics
from tests.support.apps import config_for
from tests.support.forward import Forwarder
from tests.support.projector import projector_on
from tests.support.wait import background, until


async def test_the_feeds_reconnect_pause_is_short_again_after_a_fetch_worked(fresh_db, kafka_bootstrap):
    prefix = f"feedreconnect{os.getpid()}"
    await kafka.ensure_topics(config_for(fresh_db, kafka_bootstrap_servers=kafka_bootstrap, topic_prefix=prefix))
    async with Forwarder(kafka_bootstrap) as forwarder, projector_on(fresh_db) as (_, pool, _):  # a migrated read model
        config = config_for(fresh_db, kafka_bootstrap_servers=forwarder.address, topic_prefix=prefix)
        metrics = StreamMetrics()
        feed = Feed(config, pool, Hub(metrics, config.stream_queue_size), metrics)
        async with background(feed.run()):
            await until(lambda: feed.backoff.failures >= 3, 30, "three failed connects")
            assert feed.backoff.ceiling >= 4.0
            await forwarder.open()  # the broker is back
            await until(lambda: feed.started.is_set(), 60, "the feed reading")
            await until(lambda: feed.backoff.ceiling == 0.5, 5, "the pause back at its base")
