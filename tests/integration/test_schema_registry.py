"""The schema-registry wire format: records written by Confluent's JSON Schema serializer are
applied like any other; with a registry configured, a framed record's schema id is looked up,
within a bounded time and a bounded cache, and an id the registry does not know is a dead
letter, which `dead-letters retry` publishes again only once the registry knows the id. Against a registry stub written for these tests (tests/support/registry.py), whose
state a test can set (an outage), and against a real Apicurio Registry (tests/support/apicurio.py)
where Java and Maven are at hand."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from typing import Iterator

import orjson
import pytest
from aiokafka import TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.support.apicurio import apicurio_registry
from tests.support.events import encode_v2, post_ev
from tests.support.projector import projector_on
from tests.support.registry import registry_stub
from tickerwire.schemas.export import render
from tickerwire.schemas.models import entity_key
from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.cli import deadletters
from tickerwire.services.cli.admin import AdminError
from tickerwire.services.common import kafka
from tickerwire.services.projector.apply import ConsumedRecord
from tickerwire.services.projector.registry import RegistryUnavailable, SchemaRegistry

TOPIC = "t.posts.v1"
TP = TopicPartition(TOPIC, 0)


def serialized(url: str, post_id: int, version: int = 2) -> ConsumedRecord:
    """A version 2 post event as Confluent's JSON Schema serializer writes it (it registers the
    published post.v2 schema under the topic's value subject, then frames the JSON)."""
    serializer = JSONSerializer(
        render("post", 2).decode(), SchemaRegistryClient({"url": url}), conf={"auto.register.schemas": True}
    )
    event = post_ev(post_id)
    value = serializer(orjson.loads(encode_v2(event)), SerializationContext(TOPIC, MessageField.VALUE))
    assert value is not None and value[0] == 0
    return ConsumedRecord(0, entity_key(event).encode(), value)


def framed(schema_id: int, post_id: int) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + encode_v2(post_ev(post_id))


def at(offset: int, record: ConsumedRecord) -> ConsumedRecord:
    return ConsumedRecord(offset, record.key, record.value)


async def served_ids(pool) -> list[int]:
    return [r["id"] for r in await pool.fetch("SELECT id FROM posts ORDER BY id")]


async def test_a_serializers_record_is_applied_without_a_registry_configured(fresh_db):
    with registry_stub() as (url, state):
        record = serialized(url, 11)
    assert int.from_bytes(record.value[1:5], "big") in state.schemas  # a real frame, a real id
    async with projector_on(fresh_db) as (projector, pool, metrics):
        await projector.apply_records(TP, [record])
        assert await served_ids(pool) == [11]
        assert await pool.fetchval("SELECT count(*) FROM dead_letters") == 0


async def test_with_a_registry_an_id_it_does_not_know_is_a_dead_letter(fresh_db):
    with registry_stub() as (url, state):
        known = serialized(url, 21)
        schema_id = int.from_bytes(known.value[1:5], "big")
        async with projector_on(fresh_db, projector_schema_registry_url=url) as (projector, pool, metrics):
            records = [
                at(0, known),
                ConsumedRecord(1, b"post:22", framed(9999, 22)),
                ConsumedRecord(2, b"post:23", encode_v2(post_ev(23))),  # plain JSON: nothing to look up
                ConsumedRecord(3, b"post:24", framed(schema_id, 24)),
            ]
            await projector.apply_records(TP, records)
            assert await served_ids(pool) == [21, 23, 24]
            letters = await pool.fetch('SELECT "offset", reason_kind, reason, value FROM dead_letters')
            assert [(r["offset"], r["reason_kind"], r["value"]) for r in letters] == [
                (1, "unknown_schema_id", framed(9999, 22))
            ]
            assert (
                f"schema id 9999 of the record's schema-registry frame is not known to the schema registry {url}"
                in (letters[0]["reason"])
            )
            assert metrics_value(metrics, "unknown_schema_id") == 1
            # The known id was asked once (then cached); the unknown one is asked again each time.
            assert state.asked.count(f"/schemas/ids/{schema_id}") == 1
            assert state.asked.count("/schemas/ids/9999") == 1


def metrics_value(metrics, kind: str) -> float:
    return metrics.dead_lettered.labels(kind)._value.get()


async def test_retry_looks_a_framed_letter_up_in_the_registry_as_the_projector_does(
    fresh_db, kafka_bootstrap, topic_prefix
):
    """`dead-letters retry` reads a letter as the live projector reads a record: a framed value
    whose schema id the registry still does not know is refused, nothing published; once the
    schema is registered the letter is published again and applied."""
    tp = TopicPartition(topic_name(topic_prefix, POSTS), 0)
    settings = dict(kafka_bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix, topic_replication_factor=1)
    with registry_stub() as (url, state):
        async with projector_on(fresh_db, projector_schema_registry_url=url, **settings) as (projector, pool, _):
            await projector.apply_records(tp, [ConsumedRecord(0, b"post:61", framed(9999, 61))])
            async with pool.acquire() as conn:
                letters = await deadletters.list_letters(conn, kind=None, topic=None, limit=10)
                assert [letter.reason_kind for letter in letters] == ["unknown_schema_id"]
                with pytest.raises(AdminError, match="schema id 9999 .* is not known .* nothing was published"):
                    await deadletters.retry(projector.config, conn, letters)
                assert await deadletters.list_letters(conn, kind=None, topic=None, limit=10) == letters

                state.schemas[9999] = render("post", 2).decode()  # the schema is registered
                (done,) = await deadletters.retry(projector.config, conn, letters)
                assert await deadletters.list_letters(conn, kind=None, topic=None, limit=10) == []
            published = await record_at(projector.config, done)
            assert published.value == framed(9999, 61)
            await projector.apply_records(TopicPartition(tp.topic, published.partition), [published_record(published)])
            assert await served_ids(pool) == [61]
    # The live lookup, the refused retry, the retry, the projector applying the retried record.
    assert state.asked.count("/schemas/ids/9999") == 4


async def record_at(config, done: str):
    """The record a retry says it published ("... published again at TOPIC[P]@OFFSET")."""
    where = done.rsplit(" ", 1)[1]
    topic, rest = where.split("[", 1)
    partition, offset = (int(n) for n in rest.split("]@"))
    consumer = kafka.consumer(config, group_id=None, client_id="test-retried")
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, offset)
        return await asyncio.wait_for(consumer.getone(), 30)
    finally:
        await consumer.stop()


def published_record(record) -> ConsumedRecord:
    return ConsumedRecord(record.offset, record.key, record.value)


async def test_a_registry_that_does_not_answer_is_retried_never_skipped(fresh_db):
    with registry_stub() as (url, state):
        known = serialized(url, 31)
        state.failing = 503
        async with projector_on(fresh_db, projector_schema_registry_url=url) as (projector, pool, _):
            applying = asyncio.create_task(projector.apply_records(TP, [known]))
            await asyncio.sleep(1.0)
            assert not applying.done() and await served_ids(pool) == []
            assert "answered 503" in (projector.failing.why("schema registry lookup") or "")
            state.failing = None
            await asyncio.wait_for(applying, timeout=10)
            assert await served_ids(pool) == [31]


@contextlib.contextmanager
def silent_listener() -> Iterator[str]:
    """A port that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


async def test_a_lookup_is_bounded_in_time_and_the_cache_in_size():
    with silent_listener() as url:
        registry = SchemaRegistry(url, 0.3)
        started = time.monotonic()
        with pytest.raises(RegistryUnavailable):
            await registry.knows(1)
        assert time.monotonic() - started < 2.0
        await registry.close()
    with registry_stub() as (url, state):
        ids = [state.register(f'{{"title": "s{n}"}}') for n in range(3)]
        registry = SchemaRegistry(url, 2.0, cache_ids=2)
        try:
            for schema_id in [*ids, ids[2], ids[0]]:
                assert await registry.knows(schema_id)
        finally:
            await registry.close()
    # ids[2] was still cached; ids[0] had been dropped for ids[2] and was asked again.
    assert [p.rsplit("/", 1)[1] for p in state.asked] == [str(i) for i in (*ids, ids[0])]


async def test_against_apicurio_registry_a_known_id_is_applied_and_an_unknown_one_dead_lettered(fresh_db, tmp_path):
    with apicurio_registry(tmp_path) as url:
        known = serialized(url, 51)
        schema_id = int.from_bytes(known.value[1:5], "big")
        async with projector_on(fresh_db, projector_schema_registry_url=url) as (projector, pool, _):
            await projector.apply_records(
                TP, [at(0, known), ConsumedRecord(1, b"post:52", framed(schema_id + 999, 52))]
            )
            assert await served_ids(pool) == [51]
            assert [r["reason_kind"] for r in await pool.fetch("SELECT reason_kind FROM dead_letters")] == [
                "unknown_schema_id"
            ]
