"""The rebuild's log reads on the real broker: a log that stops delivering short of the offsets
to read ends the read with an error naming the partition, instead of a silent wait; a batch
it cannot decode is read past, each record with its cause. (The
rebuild after a log reset is an end-to-end test: tests/e2e/test_projector_e2e.py.)"""

from __future__ import annotations

import time

import aiokafka.codec
import pytest
from aiokafka import TopicPartition

from tests.support.events import post_ev
from tests.support.producers import Raw, librdkafka
from tests.support.stack import ServiceStack
from tickerwire.schemas.models import encode_event, entity_key
from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.common import kafka
from tickerwire.services.common.runtime.errors import BrokerUnavailable
from tickerwire.services.projector.apply import decode_records
from tickerwire.services.projector.logread import read_until


async def test_a_log_that_stops_short_of_the_offsets_to_read_ends_the_read_with_the_partition_named(
    fresh_db, kafka_bootstrap, topic_prefix
):
    stack = ServiceStack(fresh_db, kafka_bootstrap, topic_prefix)
    await stack.prepare()
    await stack.publish([post_ev(1)])
    (topic, partition), held = next(
        (key, mark) for key, mark in stack.marks.items() if key[0] == topic_name(topic_prefix, POSTS)
    )
    tp = TopicPartition(topic, partition)
    consumer = kafka.consumer(stack.config, group_id=None, client_id="test-read-until")
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        read: list[int] = []
        started = time.monotonic()
        with pytest.raises(BrokerUnavailable, match=rf"{topic}\[{partition}\] at {held} of {held + 5}"):
            async for _, records in read_until(consumer, {tp: held + 5}, max_records=100, stall_s=1.5):
                read += [r.offset for r in records]
        assert read == list(range(held))  # what the log holds was read first
        assert time.monotonic() - started < 10
    finally:
        await consumer.stop()


async def test_a_batch_the_rebuild_cannot_decode_is_read_past_with_its_cause(
    fresh_db, kafka_bootstrap, topic_prefix, monkeypatch
):
    monkeypatch.setattr(aiokafka.codec, "cramjam", None)  # as without the codec libraries
    stack = ServiceStack(fresh_db, kafka_bootstrap, topic_prefix)
    await stack.prepare()
    tp = TopicPartition(topic_name(topic_prefix, POSTS), 0)
    posts = [post_ev(i) for i in range(1, 6)]
    values = [(encode_event(e), entity_key(e).encode()) for e in posts]
    await librdkafka(kafka_bootstrap, tp.topic, [Raw(v, k, 0) for v, k in values[:4]], **{"compression.type": "lz4"})
    await librdkafka(kafka_bootstrap, tp.topic, [Raw(values[4][0], values[4][1], 0)])
    consumer = kafka.consumer(stack.config, group_id=None, client_id="test-read-until")
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        read = [r async for _, records in read_until(consumer, {tp: 5}, max_records=100) for r in records]
    finally:
        await consumer.stop()
    assert [(r.offset, r.fault[0] if r.fault else None) for r in read] == [
        (0, "codec"),
        (1, "codec"),
        (2, "codec"),
        (3, "codec"),
        (4, None),
    ]
    assert "lz4" in read[0].fault[1] and read[4].value == values[4][0]
    _, dead = decode_records(read, tp.topic)  # as the rebuild's replay and bulk load set them aside
    assert [(d.offset, d.kind) for d in dead] == [(o, "codec") for o in range(4)]
