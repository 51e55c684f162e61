"""A transaction that is still open holds its records back (Apache Kafka, read_committed).

Its records lie past the partition's last stable offset: the projector does not apply them,
and its lag, measured against that offset, does not count them (they are not readable yet;
an operator cannot act on a producer's open transaction from here). Once committed, they are
applied; had the transaction been aborted, never (tests/compat/)."""

from __future__ import annotations

import asyncio
import os

from tests.support.events import post_ev
from tests.support.projector import projector_on
from tests.support.wait import background
from tickerwire.schemas.models import encode_event, entity_key
from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.common import kafka


async def test_an_open_transactions_post_waits_for_its_commit(fresh_db, kafka_bootstrap):
    prefix = f"opentx{os.getpid()}"
    settings = dict(topic_prefix=prefix, topic_replication_factor=1, projector_group=f"{prefix}-projector")
    async with projector_on(fresh_db, kafka_bootstrap_servers=kafka_bootstrap, **settings) as (
        projector,
        pool,
        metrics,
    ):
        await kafka.ensure_topics(projector.config)
        topic = topic_name(prefix, POSTS)
        event = post_ev(7)
        async with (
            background(projector.run()),
            kafka.started_producer(projector.config, transactional_id=f"{prefix}-tx") as producer,
        ):
            await producer.begin_transaction()
            sent = await (await producer.send(topic, value=encode_event(event), key=entity_key(event).encode()))
            await asyncio.sleep(3)  # several fetches while the transaction is open
            assert await pool.fetchval("SELECT count(*) FROM posts") == 0
            lag = metrics.registry.get_sample_value(
                "tickerwire_projector_lag", {"topic": topic, "partition": str(sent.partition)}
            )
            assert lag == 0.0, lag
            await producer.commit_transaction()
            for _ in range(200):
                if await pool.fetchval("SELECT count(*) FROM posts") == 1:
                    break
                await asyncio.sleep(0.05)
            assert await pool.fetchval("SELECT id FROM posts") == 7
