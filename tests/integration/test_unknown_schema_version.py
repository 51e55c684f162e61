"""An event of a ``schema_version`` this release does not know is a dead letter of its own
kind; after an upgrade whose models know that version, ``dead-letters retry`` applies it, and
the entity version rule keeps the order right: a retried event older than what the post
holds now changes nothing (docs/publishing.md#unknown-versions-and-retry).

On the session's broker and a real PostgreSQL; the projector is run in process, so the test can
teach its models a version 3 of the post event, as an upgrade would."""

from __future__ import annotations

from typing import ClassVar, Literal

import orjson
import pytest
from aiokafka import TopicPartition

from tests.support.events import encode_event, encode_v2, post_ev
from tests.support.stack import ServiceStack
from tickerwire.schemas import models
from tickerwire.schemas.models import PostEventV2, PostV2, entity_key
from tickerwire.schemas.topics import POSTS, TopicSpec, topic_name
from tickerwire.services.cli import deadletters
from tickerwire.services.cli.admin import AdminError
from tickerwire.services.common import kafka
from tickerwire.services.projector.apply import apply_batch
from tickerwire.services.projector.logread import read_until
from tickerwire.services.readmodel.migrate import migrate


class PostV3(PostV2):
    """What a later release might call version 3: version 2 and a summary."""

    summary: str | None = None


class PostEventV3(PostEventV2):
    topic: ClassVar[TopicSpec] = POSTS
    schema_version: Literal[3] = 3  # type: ignore[assignment]
    data: PostV3


def v3(post_id: int, version: int) -> bytes:
    doc = orjson.loads(encode_v2(post_ev(post_id, version)))
    doc["schema_version"] = 3
    doc["data"]["summary"] = "A short summary."
    return orjson.dumps(doc)


async def project(stack: ServiceStack, conn) -> None:
    """Apply the posts topic from the stored positions to its end, as the projector does."""
    topic = topic_name(stack.topic_prefix, POSTS)
    tps = [TopicPartition(topic, p) for p in range(POSTS.partitions)]
    consumer = kafka.consumer(stack.config, group_id=None, client_id="test-project")
    await consumer.start()
    try:
        consumer.assign(tps)
        stored = {
            r["partition"]: r["next_offset"]
            for r in await conn.fetch("SELECT partition, next_offset FROM positions WHERE topic = $1", topic)
        }
        for tp in tps:
            consumer.seek(tp, stored.get(tp.partition, 0))
        ends = await consumer.end_offsets(tps)
        async for tp, records in read_until(consumer, ends, max_records=500):
            await apply_batch(conn, tp.topic, tp.partition, [r for r in records if r.offset < ends[tp]])
    finally:
        await consumer.stop()


async def post_version(conn, post_id: int) -> int | None:
    return await conn.fetchval("SELECT version FROM posts WHERE id = $1", post_id)


async def test_an_unknown_version_is_a_dead_letter_that_retry_applies_after_the_upgrade(
    fresh_db, kafka_bootstrap, topic_prefix, monkeypatch
):
    stack = ServiceStack(fresh_db, kafka_bootstrap, topic_prefix)
    await stack.prepare()
    topic = topic_name(stack.topic_prefix, POSTS)
    async with kafka.started_producer(stack.config) as producer:
        for post_id, version, value in [
            (41, 1, encode_event(post_ev(41, 1))),
            (41, 5, v3(41, 5)),  # newer than anything after it
            (41, 3, encode_event(post_ev(41, 3))),
            (42, 2, v3(42, 2)),  # older than what follows it
            (42, 4, encode_v2(post_ev(42, 4))),
        ]:
            await (await producer.send(topic, value=value, key=entity_key(post_ev(post_id, version)).encode()))

    conn = await stack.read_conn()
    try:
        await migrate(conn, "rm")
        await project(stack, conn)
        assert (await post_version(conn, 41), await post_version(conn, 42)) == (3, 4)
        # (the two posts may be on two partitions, applied in either order)
        letters = sorted(
            await deadletters.list_letters(conn, kind=None, topic=None, limit=10), key=lambda x: x.key or b""
        )
        assert [(letter.key, letter.reason_kind) for letter in letters] == [
            (b"post:41", "unknown_schema_version"),
            (b"post:42", "unknown_schema_version"),
        ]
        assert "post: schema_version 3 is not known to this release (known: 1, 2)" in letters[0].reason
        with pytest.raises(AdminError, match="schema_version 3 is not known.*nothing was published"):
            await deadletters.retry(stack.config, conn, letters)  # this release: refused, nothing published

        # The upgrade: the models learn version 3 (a version 2 with a summary).
        monkeypatch.setitem(models.EVENT_VERSIONS["post"], 3, PostEventV3)
        done = await deadletters.retry(stack.config, conn, letters)
        assert len(done) == 2 and await deadletters.list_letters(conn, kind=None, topic=None, limit=10) == []
        await project(stack, conn)
        # Post 41's version 5 was the newest: applied, though published before version 3.
        # Post 42's version 2 was older than the version 4 it holds: it changes nothing.
        assert (await post_version(conn, 41), await post_version(conn, 42)) == (5, 4)
        detail = orjson.loads(await conn.fetchval("SELECT detail FROM post_translations WHERE post_id = 41"))
        assert detail["title"] == "Bitcoin rallies 41 v5"
        assert await conn.fetchval("SELECT count(*) FROM dead_letters") == 0
    finally:
        await conn.close()
