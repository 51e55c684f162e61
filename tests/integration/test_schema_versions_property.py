"""Property: a log holding version 1 and version 2 events of the same posts, in any order of
their entity versions, projects to one read model, live and by the rebuild's bulk load.

Hypothesis draws histories of a few posts (random entity versions, shuffled so older versions
follow newer ones), writes each event as version 1 or as version 2 of the post event (the
same post; a version 2 event sometimes carries a field this release does not know), and
publishes them to Apache Kafka, keyed as the real publisher does. The result must equal the
read model of the same log written in version 1 alone (every row, announcements included):

* applied live (``apply_batch``) in random batches with replays from earlier offsets, and
* loaded by the rebuild's bulk path (``bulk_load_posts``, its worker processes reading the topic).
"""

from __future__ import annotations

import itertools

from aiokafka import TopicPartition
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.support.events import encode_event, encode_v2, post_ev
from tests.support.readmodel import announcements, comparable, read_model, reset
from tests.support.stack import ServiceStack
from tickerwire.schemas.models import entity_key
from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.common import kafka
from tickerwire.services.common.db import create_pool
from tickerwire.services.projector.apply import ConsumedRecord, apply_batch
from tickerwire.services.projector.bulk import bulk_load_posts

LANGS = ("en-US", "de-DE", "fr-FR")
_examples = itertools.count()


@st.composite
def post_history(draw, post_id: int) -> list:
    out = []
    for v in draw(st.lists(st.integers(1, 9), min_size=1, max_size=4, unique=True)):
        status = draw(st.sampled_from(["draft", "queued", "published", "partial", "retracted"]))
        out.append(
            post_ev(
                post_id,
                v,
                status=status,
                sentiment=draw(st.sampled_from(["BULLISH", "NEUTRAL", "BEARISH"])),
                tickers=draw(st.lists(st.sampled_from(["BTC", "ETH", "SOL"]), max_size=3)),  # v1 may repeat one
                langs=draw(st.lists(st.sampled_from(LANGS), min_size=1, max_size=3, unique=True)),
                importance=draw(st.integers(0, 100)),
            )
        )
    return out


@st.composite
def mixed_log(draw) -> list[tuple]:
    """(event, its value as published: version 1 or 2), in log order."""
    events = [e for post_id in (1, 2, 3) for e in draw(post_history(post_id))]
    out = []
    for event in draw(st.permutations(events)):
        written = draw(st.sampled_from(["v1", "v2", "v2+unknown"]))
        value = {
            "v1": lambda: encode_event(event),
            "v2": lambda: encode_v2(event),
            "v2+unknown": lambda: encode_v2(event, reading_time_s=42, source_tier={"rank": 1}),
        }[written]()
        out.append((event, value))
    return out


async def publish(
    stack: ServiceStack, log: list[tuple]
) -> dict[TopicPartition, list[tuple[ConsumedRecord, ConsumedRecord]]]:
    """Publish the mixed log; per partition, each record as published and its version 1 twin."""
    topic = topic_name(stack.topic_prefix, POSTS)
    out: dict[TopicPartition, list[tuple[ConsumedRecord, ConsumedRecord]]] = {}
    async with kafka.started_producer(stack.config) as producer:
        for event, value in log:
            key = entity_key(event).encode()
            meta = await (await producer.send(topic, value=value, key=key))
            twin = ConsumedRecord(meta.offset, key, encode_event(event))
            out.setdefault(TopicPartition(topic, meta.partition), []).append(
                (ConsumedRecord(meta.offset, key, value), twin)
            )
    return out


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(log=mixed_log(), data=st.data())
async def test_v1_and_v2_of_the_same_posts_project_alike_live_and_by_the_bulk_load(
    db, fresh_db, kafka_bootstrap, topic_prefix, log, data
):
    stack = ServiceStack(fresh_db, kafka_bootstrap, f"{topic_prefix}x{next(_examples)}")
    await stack.prepare()
    partitions = await publish(stack, log)

    await reset(db, "v1only")  # the same log, every event in version 1, one record at a time
    for tp, pairs in sorted(partitions.items()):
        for _, twin in pairs:
            await apply_batch(db, tp.topic, tp.partition, [twin])
    expected = comparable(await read_model(db, "v1only"))
    expected_announcements = await announcements(db, "v1only")
    assert expected["posts"], "the log projects to something"

    await reset(db, "rm")  # live: random batches, interleaved, with replays
    progress = {tp: 0 for tp in partitions}
    while pending := sorted(tp for tp, pos in progress.items() if pos < len(partitions[tp])):
        tp = data.draw(st.sampled_from(pending), label="partition")
        start, size = progress[tp], data.draw(st.integers(1, 5), label="batch size")
        if start and data.draw(st.booleans(), label="replay?"):
            start = data.draw(st.integers(0, start - 1), label="replay from")
        batch = [rec for rec, _ in partitions[tp][start : start + size]]
        await apply_batch(db, tp.topic, tp.partition, batch)
        progress[tp] = max(progress[tp], min(start + size, len(partitions[tp])))
    assert comparable(await read_model(db, "rm")) == expected
    assert await announcements(db, "rm") == expected_announcements
    assert await db.fetchval("SELECT count(*) FROM rm.dead_letters") == 0

    await reset(db, "bulk")  # the rebuild's bulk load, reading the topic
    tps = [TopicPartition(topic_name(stack.topic_prefix, POSTS), p) for p in range(POSTS.partitions)]
    ends = {tp: pairs[-1][0].offset + 1 for tp, pairs in partitions.items()}
    pool = await create_pool(fresh_db, "bulk", min_size=1, max_size=2)
    try:
        report = await bulk_load_posts(stack.config, pool, "bulk", tps, ends)
    finally:
        await pool.close()
    assert report.dead_letters == 0
    assert comparable(await read_model(db, "bulk")) == expected
    assert await announcements(db, "bulk") == expected_announcements
