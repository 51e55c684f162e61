"""The demo trickle of `tickerwire up` waits longer while the broker is away and is back to its
short pause once a post went out (real broker; the bootstrap address refuses connections until
it forwards to the broker)."""

from __future__ import annotations

import os

from tickerwire.services.cli.up import Trickle
from tickerwire.services.common import kafka
from tickerwire.services.common.config import Config
from tests.support.forward import Forwarder
from tests.support.wait import background, until


async def test_the_trickles_pause_is_short_again_after_a_post_went_out(kafka_bootstrap):
    prefix = f"trickle{os.getpid()}"
    settings = dict(database_url="postgresql://unused/x", topic_prefix=prefix, topic_replication_factor=1)
    await kafka.ensure_topics(Config(kafka_bootstrap_servers=kafka_bootstrap, **settings))
    async with Forwarder(kafka_bootstrap) as forwarder:
        trickle = Trickle(Config(kafka_bootstrap_servers=forwarder.address, **settings), next_id=1, interval=0.05)
        async with background(trickle.run_forever()):
            await until(lambda: trickle.backoff.failures >= 2, 30, "two failed publishes")
            assert trickle.backoff.ceiling >= 4.0
            await forwarder.open()  # the broker is back
            await until(lambda: trickle.next_id > 1, 60, "a post published")
            assert trickle.backoff.ceiling == 1.0
