"""A batch commits only on top of the position it was read from (docs/architecture.md,
"Projector and read model"): when commits were lost (a PostgreSQL crash with asynchronous
commits, a failover to a standby that had not received them), the stored position is behind
the projector's, and a batch applied on top of it would step over the lost records for good.
The batch is rolled back instead and the partition read again from the stored position (real
broker, real PostgreSQL)."""

from __future__ import annotations

import logging
import os

import pytest
from aiokafka import TopicPartition

from tests.support.events import post_ev, records
from tests.support.projector import projector_on
from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.cli.publish import publish
from tickerwire.services.common import kafka
from tickerwire.services.projector.apply import apply_batch
from tickerwire.services.readmodel import positions

POSTS_IDS = range(1, 8)


async def _posts(pool) -> list[int]:
    return [r["id"] for r in await pool.fetch("SELECT id FROM posts ORDER BY id")]


async def test_a_batch_on_a_position_that_moved_back_is_refused_and_writes_nothing(fresh_db):
    async with projector_on(fresh_db) as (_, pool, _):
        async with pool.acquire() as conn:
            await apply_batch(conn, "t.posts.v1", 0, records([post_ev(1), post_ev(2)]))  # stored: 2
            with pytest.raises(positions.PositionMovedBack) as refused:
                await apply_batch(conn, "t.posts.v1", 0, records([post_ev(6), post_ev(7)], start=5), expected=5)
            assert (refused.value.stored, refused.value.expected) == (2, 5)
            assert await positions.load(conn) == {("t.posts.v1", 0): 2}
            # Ahead of what the caller expects is fine: another writer applied those records.
            await apply_batch(conn, "t.posts.v1", 0, records([post_ev(3)], start=2), expected=1)
        assert await _posts(pool) == [1, 2, 3]


async def test_records_lost_by_a_crash_are_applied_again_not_stepped_over(fresh_db, kafka_bootstrap, caplog):
    caplog.set_level(logging.WARNING, logger="tickerwire")
    prefix = f"rewind{os.getpid()}"
    async with projector_on(
        fresh_db,
        kafka_bootstrap_servers=kafka_bootstrap,
        topic_prefix=prefix,
        topic_replication_factor=1,
        topic_posts_partitions=1,
    ) as (projector, pool, metrics):
        await kafka.ensure_topics(projector.config)
        topic = topic_name(prefix, POSTS)
        tp = TopicPartition(topic, 0)
        events = [post_ev(n) for n in POSTS_IDS]
        await publish(projector.config, events)
        log = records(events)
        consumer = projector.consumer = kafka.consumer(projector.config, group_id=None, client_id="rewind")
        await consumer.start()
        try:
            consumer.assign([tp])
            await projector.seek_to_stored([tp])
            await projector.apply_records(tp, log[0:2])  # committed: stored 2
            # Records 2..4 were applied and committed, then PostgreSQL crashed and forgot that
            # commit: the projector believes 5, the database says 2 and has not posts 3 to 5.
            projector.stored_positions[tp] = 5
            consumer.seek(tp, 5)
            await projector.apply_records(tp, log[5:7])  # fetched from 5: refused, nothing written
            assert await _posts(pool) == [1, 2]
            assert await consumer.position(tp) == 2  # the partition is read again from the stored position
            assert projector.stored_positions[tp] == 2
            while (position := projector.stored_positions[tp]) < len(events):
                batches, _ = await kafka.fetch(consumer, projector._rewind, timeout_ms=500, max_records=100)
                for got, msgs in batches.items():
                    await projector.apply_records(got, log[msgs[0].offset : msgs[-1].offset + 1])
                assert projector.stored_positions[tp] >= position
        finally:
            await consumer.stop()
        assert await _posts(pool) == list(POSTS_IDS)
        assert (
            metrics.registry.get_sample_value(
                "tickerwire_projector_position_rewinds_total", {"topic": topic, "partition": "0"}
            )
            == 1.0
        )
    said = [r.getMessage() for r in caplog.records if "behind 5" in r.getMessage()]
    assert said and "commits lost by a PostgreSQL crash or failover" in said[0]
