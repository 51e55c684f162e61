"""A consumer-group join that does not complete is a stall, and a stall is loud (Apache Kafka).

The wedge is a real one: another member of the group is stuck in its revoke callback (a
classic production incident: a consumer blocked in its rebalance listener), so Kafka's
rebalance waits for it up to its rebalance timeout, and the projector's join, asked while
that member holds the group, does not complete. Nothing fails meanwhile: every fetch returns
empty. The projector must say so in readiness, an ERROR line and a metric, and replace its
consumer; once the group moves again it joins and applies what waited.
"""

from __future__ import annotations

import asyncio
import logging
import os

from aiokafka import ConsumerRebalanceListener

from tests.support.events import post_ev
from tests.support.projector import projector_on
from tests.support.wait import background, until
from tickerwire.services.cli.publish import publish
from tickerwire.services.common import kafka
from tickerwire.services.projector.runner import projector_topics

JOIN_TIMEOUT_S = 3.0


class _StuckInRevoke(ConsumerRebalanceListener):
    """A member whose revoke callback blocks until released (its heartbeats go on)."""

    def __init__(self) -> None:
        self.assigned = asyncio.Event()
        self.release = asyncio.Event()
        self.stuck = asyncio.Event()

    async def on_partitions_revoked(self, revoked) -> None:
        if self.assigned.is_set():
            self.stuck.set()
            await self.release.wait()

    async def on_partitions_assigned(self, assigned) -> None:
        self.assigned.set()


async def test_a_join_that_does_not_complete_shows_in_readiness_an_error_line_and_a_metric(
    fresh_db, kafka_bootstrap, caplog
):
    prefix = f"join{os.getpid()}"
    settings = dict(
        topic_prefix=prefix,
        topic_replication_factor=1,
        projector_group=f"{prefix}-projector",
        projector_group_join_timeout_s=JOIN_TIMEOUT_S,
        kafka_session_timeout_ms=30_000,
        kafka_heartbeat_interval_ms=1_000,
    )
    async with projector_on(fresh_db, kafka_bootstrap_servers=kafka_bootstrap, **settings) as (projector, _, metrics):
        config = projector.config
        await kafka.ensure_topics(config)
        listener = _StuckInRevoke()
        # The other member: a rebalance timeout of a minute, so the group waits that long for it.
        other = kafka.consumer(
            config, group_id=config.projector_group, client_id="stuck-member", max_poll_interval_ms=60_000
        )
        other.subscribe(projector_topics(config), listener=listener)
        await other.start()
        poller = asyncio.create_task(_poll(other))
        try:
            await asyncio.wait_for(listener.assigned.wait(), 30)
            await publish(config, [post_ev(1)])

            def joining() -> float:
                return metrics.registry.get_sample_value("tickerwire_projector_group_joining_seconds") or 0.0

            def replaced() -> float:
                labels = {"what": "group_join"}
                return metrics.registry.get_sample_value("tickerwire_projector_retries_total", labels) or 0.0

            caplog.set_level(logging.ERROR, logger="tickerwire.services.projector.runner")
            async with background(projector.run()):
                await asyncio.wait_for(listener.stuck.wait(), 30)  # the projector's join began a rebalance
                await until(lambda: joining() >= JOIN_TIMEOUT_S, 20, "the joining gauge past the bound")
                ready, detail = projector.consuming(stall_s=60)
                assert not ready
                assert f"join of consumer group '{config.projector_group}' has not completed" in detail
                await until(lambda: replaced() >= 1, 20, "the consumer replaced")
                errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
                assert any("has not completed" in e and "replacing the consumer" in e for e in errors), errors

                listener.release.set()  # the stuck member goes on: the group moves again
                poller.cancel()
                await kafka.stop_consumer(other)  # and leaves
                await until(lambda: projector.caught_up.is_set(), 60, "the projector joined and caught up")
                assert joining() == 0.0
                assert projector.consuming(stall_s=60) == (True, "ok")
        finally:
            listener.release.set()
            poller.cancel()
            await kafka.stop_consumer(other)


async def _poll(consumer) -> None:
    """Keep the member's consume loop going (aiokafka runs its rebalance from it)."""
    while True:
        await consumer.getmany(timeout_ms=200)
