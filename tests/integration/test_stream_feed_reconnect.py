"""The stream feed reconnects to the broker after a capped, jittered pause that grows while the
broker is away and is short again once a fetch worked (real broker, real PostgreSQL; the
bootstrap address refuses connections until it forwards to the broker); a posts topic that does
not exist yet is logged once, and the feed starts when it appears."""

from __future__ import annotations

import os

from tests.support.apps import config_for
from tests.support.forward import Forwarder
from tests.support.projector import projector_on
from tests.support.wait import background, until
from tickerwire.services.common import kafka
from tickerwire.services.stream import feed as feed_module
from tickerwire.services.stream.feed import Feed
from tickerwire.services.stream.hub import Hub
from tickerwire.services.stream.metrics import StreamMetrics


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


async def test_a_missing_posts_topic_is_logged_once_and_the_feed_starts_when_it_appears(
    fresh_db, kafka_bootstrap, caplog, monkeypatch
):
    monkeypatch.setattr(feed_module, "TOPIC_WAIT_WARN_S", 0.5)
    prefix = f"feedtopic{os.getpid()}"
    config = config_for(fresh_db, kafka_bootstrap_servers=kafka_bootstrap, topic_prefix=prefix)
    async with projector_on(fresh_db) as (_, pool, _):
        metrics = StreamMetrics()
        feed = Feed(config, pool, Hub(metrics, config.stream_queue_size), metrics)
        async with background(feed.run()):
            await until(lambda: "does not exist on the broker yet" in caplog.text, 30, "the missing topic logged")
            assert not feed.started.is_set()
            await kafka.ensure_topics(config)
            await until(lambda: feed.started.is_set(), 60, "the feed reading")
    missing = [r for r in caplog.records if "does not exist on the broker yet" in r.getMessage()]
    assert len(missing) == 1 and missing[0].levelname == "WARNING" and config.topic_prefix in missing[0].getMessage()
    assert any(
        f"{config.topic_prefix}.posts" in r.getMessage() and "exists now" in r.getMessage() for r in caplog.records
    )
