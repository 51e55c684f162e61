"""The bulk rebuild's worker processes on the real broker and PostgreSQL: what goes wrong in a
worker reaches the rebuild as an error (never a hang, never a half-told success), and no
worker outlives the rebuild. (The happy path and the equality with a live projection are
end-to-end tests: tests/e2e/test_projector_e2e.py.) The index builds after the load get a
maintenance bound, not the chunk statements' one."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal

import asyncpg
import pytest
from aiokafka import TopicPartition

from tests.support.events import category_ev, post_ev
from tests.support.stack import ServiceStack
from tickerwire.schemas.models import encode_event, entity_key
from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.common import kafka
from tickerwire.services.common.db import create_pool
from tickerwire.services.common.runtime.errors import TickerwireError
from tickerwire.services.projector.bulk import NotBulkable, build_indexes, bulk_load_posts


async def posts_stack(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str, count: int
) -> tuple[ServiceStack, list[TopicPartition]]:
    stack = ServiceStack(fresh_db, kafka_bootstrap, topic_prefix)
    await stack.prepare()
    await stack.publish([post_ev(i) for i in range(1, count + 1)])
    topic = topic_name(topic_prefix, POSTS)
    return stack, [TopicPartition(topic, p) for p in range(POSTS.partitions)]


def ends_of(stack: ServiceStack, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    return {tp: stack.marks.get((tp.topic, tp.partition), 0) for tp in tps}


async def test_an_error_in_a_worker_fails_the_rebuild_with_that_error_and_stops_every_worker(
    fresh_db, kafka_bootstrap, topic_prefix
):
    stack, tps = await posts_stack(fresh_db, kafka_bootstrap, topic_prefix, 20)
    ends = ends_of(stack, tps)
    stray = category_ev("stray")  # a catalog event where only posts belong
    async with kafka.started_producer(stack.config) as producer:
        sent = await (
            await producer.send(tps[0].topic, value=encode_event(stray), key=entity_key(stray).encode(), partition=0)
        )
    ends[tps[0]] = sent.offset + 1
    pool = await create_pool(fresh_db, "rm", min_size=1, max_size=2)
    try:
        with pytest.raises(NotBulkable, match=rf"{tps[0].topic}\[0\] offset {sent.offset} carries a category event"):
            await asyncio.wait_for(bulk_load_posts(stack.config, pool, "rm", tps, ends), timeout=120)
    finally:
        await pool.close()
    assert multiprocessing.active_children() == []


async def test_a_worker_that_vanishes_fails_the_rebuild_and_stops_the_others(fresh_db, kafka_bootstrap, topic_prefix):
    stack, tps = await posts_stack(fresh_db, kafka_bootstrap, topic_prefix, 20)
    pool = await create_pool(fresh_db, "rm", min_size=1, max_size=2)
    try:
        load = asyncio.create_task(bulk_load_posts(stack.config, pool, "rm", tps, ends_of(stack, tps)))
        async with asyncio.timeout(30):
            while not (workers := multiprocessing.active_children()):
                await asyncio.sleep(0.01)
        os.kill(workers[0].pid, signal.SIGKILL)  # still importing: it cannot have reported yet
        with pytest.raises(TickerwireError, match=r"exited with status -9 before reporting"):
            await asyncio.wait_for(load, timeout=120)
    finally:
        await pool.close()
    assert multiprocessing.active_children() == []


async def test_index_builds_after_the_load_are_not_cut_short_by_the_pools_statement_timeout(fresh_db):
    pool = await create_pool(fresh_db, "public", min_size=1, max_size=2, statement_timeout_s=0.2)
    try:
        async with pool.acquire() as conn:
            await conn.execute("""
                CREATE TABLE loaded AS SELECT i FROM generate_series(1, 40) i;
                CREATE FUNCTION slow_key(int) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT $1 FROM pg_sleep(0.01)';""")
            with pytest.raises(
                (asyncio.TimeoutError, asyncpg.exceptions.QueryCanceledError)
            ):  # a chunk statement's bound
                await conn.execute("SELECT count(slow_key(i)) FROM loaded")
        await build_indexes(pool, ["CREATE INDEX loaded_slow ON loaded (slow_key(i))"])  # about 0.4 s
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT count(*) FROM pg_indexes WHERE indexname = 'loaded_slow'") == 1
            assert await conn.fetchval("SHOW statement_timeout") == "200ms"  # the pool's bound is back
    finally:
        await pool.close()
