"""The projector's restart pauses grow while the broker is away and are short again once a
fetch has worked: one outage does not leave every later failure waiting the cap (real broker,
real PostgreSQL; the bootstrap address refuses connections until it forwards to the broker)."""

from __future__ import annotations

import os

from tests.support.forward import Forwarder
from tests.support.projector import projector_on
from tests.support.wait import background, until
from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.common import kafka


async def test_the_consume_loops_pause_is_short_again_after_a_fetch_worked(fresh_db, kafka_bootstrap):
    prefix = f"backoff{os.getpid()}"
    settings = dict(topic_prefix=prefix, topic_replication_factor=1, projector_group=f"{prefix}-projector")
    await kafka.ensure_topics(FullConfig(database_url=fresh_db, kafka_bootstrap_servers=kafka_bootstrap, **settings))
    async with (
        Forwarder(kafka_bootstrap) as forwarder,
        projector_on(fresh_db, kafka_bootstrap_servers=forwarder.address, **settings) as (projector, _, metrics),
        background(projector.run()),
    ):

        def broker_retries() -> float:  # as exported, not through the counter's private value
            return metrics.registry.get_sample_value("tickerwire_projector_retries_total", {"what": "broker"}) or 0.0

        await until(lambda: broker_retries() >= 3, 30, "three failed starts")
        assert projector.backoff.ceiling >= 4.0  # 0.5 s doubled per failure
        await forwarder.open()  # the broker is back
        fetched_after = projector.fetched_at
        await until(lambda: projector.fetched_at > fetched_after, 60, "a fetch")
        await until(lambda: projector.backoff.ceiling == 0.5, 5, "the pause back at its base")
