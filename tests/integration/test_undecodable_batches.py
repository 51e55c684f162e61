"""A record batch the projector cannot decode costs only itself (real broker, real PostgreSQL):
it is dead-lettered with its cause and the partition reads on past it, the other partitions
never wait; the stream's feed reads on past it too. And the lag counts records that wait while the consume loop cannot apply them."""

from __future__ import annotations

import contextlib
import os
import time
from typing import AsyncIterator

import aiokafka.codec
import asyncpg

from tests.support.events import post_ev
from tests.support.producers import Raw, librdkafka
from tests.support.projector import projector_on
from tests.support.wait import background, until
from tickerwire.schemas.models import encode_event, entity_key
from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.cli.publish import publish
from tickerwire.services.common import kafka
from tickerwire.services.projector.apply import SWITCH_LOCK
from tickerwire.services.projector.metrics import DEAD_LETTER_KINDS, ProjectorMetrics
from tickerwire.services.projector.runner import Projector
from tickerwire.services.stream.feed import Feed
from tickerwire.services.stream.hub import Hub
from tickerwire.services.stream.metrics import StreamMetrics


def raw_post(post_id: int, partition: int) -> Raw:
    event = post_ev(post_id)
    return Raw(encode_event(event), entity_key(event).encode(), partition)


@contextlib.asynccontextmanager
async def projector_with_topics(
    dsn: str, bootstrap: str, prefix: str
) -> AsyncIterator[tuple[Projector, asyncpg.Pool, ProjectorMetrics, str]]:
    """An in-process projector on ``prefix``'s topics, created; yields it, its pool, its metrics and the posts topic."""
    async with projector_on(
        dsn, kafka_bootstrap_servers=bootstrap, topic_prefix=prefix, topic_replication_factor=1
    ) as (
        projector,
        pool,
        metrics,
    ):
        await kafka.ensure_topics(projector.config)
        yield projector, pool, metrics, topic_name(prefix, POSTS)


async def post_ids(pool: asyncpg.Pool) -> set[int]:
    return {r["id"] for r in await pool.fetch("SELECT id FROM posts")}


async def test_a_batch_whose_codec_cannot_be_decoded_is_dead_lettered_and_the_partition_reads_on(
    fresh_db, kafka_bootstrap, monkeypatch
):
    # As in an image without the codec libraries: aiokafka decodes gzip only.
    monkeypatch.setattr(aiokafka.codec, "cramjam", None)
    prefix = f"codec{os.getpid()}"
    async with projector_with_topics(fresh_db, kafka_bootstrap, prefix) as (projector, pool, metrics, topic):
        for kind in DEAD_LETTER_KINDS:  # every reason's series exists from the start
            assert metrics.registry.get_sample_value("tickerwire_projector_dead_lettered_total", {"reason": kind}) == 0
        async with background(projector.run()):
            await librdkafka(
                kafka_bootstrap, topic, [raw_post(i, 0) for i in (1, 2, 3, 4)], **{"compression.type": "zstd"}
            )
            await librdkafka(kafka_bootstrap, topic, [raw_post(5, 0)])
            published = time.monotonic()
            await librdkafka(kafka_bootstrap, topic, [raw_post(6, 1)])
            await until(lambda: projector.caught_up.is_set(), 60, "the projector caught up")
            pool_ids: set[int] = set()

            async def served() -> bool:
                pool_ids.update(await post_ids(pool))
                return {5, 6} <= pool_ids

            deadline = time.monotonic() + 30
            while not await served():
                assert time.monotonic() < deadline, f"posts 5 and 6 not projected within 30 s: {pool_ids}"
            took = time.monotonic() - published
        letters = await pool.fetch(
            'SELECT partition, "offset", reason_kind, reason, value FROM dead_letters ORDER BY "offset"'
        )
    assert pool_ids == {5, 6}
    assert [(r["partition"], r["offset"], r["reason_kind"]) for r in letters] == [(0, o, "codec") for o in range(4)]
    assert all("zstd" in r["reason"] and r["value"] is None for r in letters)
    assert metrics.registry.get_sample_value("tickerwire_projector_dead_lettered_total", {"reason": "codec"}) == 4
    print(f"the plain record after the poison batch was projected {took:.2f} s after it was published")
    assert took < 15, f"the plain record after the poison batch took {took:.1f} s"


async def test_the_lag_counts_records_waiting_while_the_loop_cannot_apply_them(fresh_db, kafka_bootstrap):
    prefix = f"lag{os.getpid()}"
    async with projector_with_topics(fresh_db, kafka_bootstrap, prefix) as (projector, pool, metrics, topic):
        async with background(projector.run()):
            marks = await publish(projector.config, [post_ev(1)])
            await until(lambda: projector.caught_up.is_set(), 60, "the projector caught up")
            ((_, partition),) = [key for key in marks if key[0] == topic]
            labels = {"topic": topic, "partition": str(partition)}

            def lag() -> float | None:
                return metrics.registry.get_sample_value("tickerwire_projector_lag", labels)

            await until(lambda: lag() == 0, 30, "lag 0 once applied")
            blocker = await asyncpg.connect(fresh_db)
            try:
                await blocker.execute(
                    "SELECT pg_advisory_lock($1)", SWITCH_LOCK
                )  # every apply waits (as for a rebuild's swap)
                await publish(projector.config, [post_ev(1, 2), post_ev(1, 3)])
                await until(lambda: (lag() or 0) >= 2, 30, "the lag above 0 while two records wait")
            finally:
                await blocker.close()
            await until(lambda: lag() == 0, 30, "lag 0 once the records are applied")


async def test_the_stream_feed_reads_on_past_a_batch_it_cannot_decode(fresh_db, kafka_bootstrap, monkeypatch):
    monkeypatch.setattr(aiokafka.codec, "cramjam", None)
    prefix = f"feedcodec{os.getpid()}"
    async with projector_with_topics(fresh_db, kafka_bootstrap, prefix) as (projector, pool, _, topic):
        metrics = StreamMetrics()
        feed = Feed(projector.config, pool, Hub(metrics, projector.config.stream_queue_size), metrics)
        async with background(feed.run()):
            await until(lambda: feed.started.is_set(), 60, "the feed reading")
            await librdkafka(
                kafka_bootstrap, topic, [raw_post(i, 0) for i in (1, 2, 3, 4)], **{"compression.type": "snappy"}
            )
            await librdkafka(kafka_bootstrap, topic, [raw_post(5, 0)])
            await librdkafka(kafka_bootstrap, topic, [raw_post(6, 1)])
            await until(
                lambda: feed._next.get(0) == 5 and feed._next.get(1) == 1, 30, "the feed past the batch on partition 0"
            )
            assert sorted(p.post_id for p in feed._pending) == [5, 6]  # waiting for the projector to commit them
