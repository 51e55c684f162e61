"""The projector says its stored position was moved back (commits lost, or ``accept-log
--from earliest``) or forward (``accept-log --from latest``) only when it was; not when the consumer is merely elsewhere, as after a
rebalance that sought it back while a batch was being applied, which restarts cause (real
broker, real PostgreSQL)."""

from __future__ import annotations

import logging
import os

from aiokafka import TopicPartition

from tests.support.events import post_ev, records
from tests.support.projector import projector_on
from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.cli.publish import publish
from tickerwire.services.common import kafka

MOVED = "stored position moved"
BEHIND = "behind"


async def test_only_a_moved_stored_position_is_said_to_have_moved(fresh_db, kafka_bootstrap, caplog):
    caplog.set_level(logging.DEBUG, logger="tickerwire")
    prefix = f"moved{os.getpid()}"
    async with projector_on(
        fresh_db, kafka_bootstrap_servers=kafka_bootstrap, topic_prefix=prefix, topic_replication_factor=1
    ) as (
        projector,
        pool,
        _,
    ):
        await kafka.ensure_topics(projector.config)
        topic = topic_name(prefix, POSTS)
        events = [post_ev(7, v) for v in range(1, 6)]  # one key: one partition
        (((_, partition), end),) = [
            (k, m) for k, m in (await publish(projector.config, events)).items() if k[0] == topic
        ]
        tp = TopicPartition(topic, partition)
        consumer = projector.consumer = kafka.consumer(projector.config, group_id=None, client_id="moved")
        await consumer.start()
        try:
            consumer.assign([tp])
            await projector.seek_to_stored([tp])  # stored: none, the consumer at the log start
            # A rebalance sought the consumer to the stored position (0) while this batch was being
            # applied: the batch's commit moves the stored position past where the consumer is.
            await projector.apply_records(tp, records(events))
            await projector.check_log([tp])
            assert not [r.getMessage() for r in caplog.records if MOVED in r.getMessage()]
            assert await consumer.position(tp) == end  # sought to the stored position all the same

            async with pool.acquire() as conn:  # as `tickerwire projector accept-log --from earliest` does
                await conn.execute(
                    "UPDATE positions SET next_offset = 1 WHERE topic = $1 AND partition = $2", topic, partition
                )
            await projector.check_log([tp])
            assert await consumer.position(tp) == 1
            async with pool.acquire() as conn:  # as `tickerwire projector accept-log --from latest` does
                await conn.execute(
                    "UPDATE positions SET next_offset = $3 WHERE topic = $1 AND partition = $2", topic, partition, end
                )
            await projector.check_log([tp])
            assert await consumer.position(tp) == end
        finally:
            await consumer.stop()
    said = [r.getMessage() for r in caplog.records if MOVED in r.getMessage() or BEHIND in r.getMessage()]
    assert said == [
        f"{topic}[{partition}]: the stored position is 1, {BEHIND} {end} where this projector last stored it "
        "(commits lost by a PostgreSQL crash or failover, or `projector accept-log`); reading the partition "
        "again from offset 1",
        f"{topic}[{partition}]: {MOVED} from 1 to {end} (projector accept-log?); reading from there",
    ]
