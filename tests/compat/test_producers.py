"""Producer compatibility: records as other teams' producers write them, read through the real
processes (projector, API, stream) on the session's broker.

Producers: librdkafka (the ``confluent-kafka`` package, the client behind most non-Java
producers) and aiokafka. Cases: every codec (gzip, snappy, lz4, zstd), idempotence on,
transactions committed and aborted, record headers, null keys and keys that do not follow
``post:<id>``, a value near the broker's ``max.message.bytes``, a value written by Confluent's
JSON Schema serializer (against a registry stub: tests/support/registry.py) followed on its
partition by a plain record, and version 1 and version 2 events of the same posts in either
order of their entity versions (librdkafka and Kafka's Java producer). Each case is checked on
the read API (served, in its newest version, or not) and on the stream (pushed exactly once,
or never); then ``tickerwire projector rebuild`` must give the same rows.

Also the operators' side of a bad record (an event of a ``schema_version`` this release does
not know): ``tickerwire dead-letters list | show | retry``.
"""

from __future__ import annotations

import asyncio
import collections
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

import aiohttp
import orjson
import pytest
from aiokafka.errors import KafkaError

from tests.support.events import encode_v2, locale_ev, post_ev
from tests.support.producers import Raw, java_producer, kafkajs, kafkajs_unavailable, librdkafka
from tests.support.readmodel import comparable, read_model
from tests.support.registry import registry_stub
from tests.support.stack import BASE, ServiceStack, auth, started_stack
from tests.support.ws import counting_pushes
from tickerwire.schemas.models import encode_event, entity_key
from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.common import kafka

pytestmark = pytest.mark.e2e

CODECS = ("gzip", "snappy", "lz4", "zstd")
#: Posts published after the last case are served within this (the issue's bound is 5 s; the
#: test allows for a loaded machine, and prints what it measured).
SERVED_WITHIN_S = 15.0
#: What librdkafka's producers run with by default in the field: idempotent, acks=all.
IDEMPOTENT = {"enable.idempotence": True, "acks": "all"}
#: Kafka's default max.message.bytes is 1048588; librdkafka's message.max.bytes 1000000.
NEAR_MAX_BYTES = 950_000


def raw(post_id: int, *, key: bytes | None | str = "entity", version: int = 1, **kw) -> Raw:
    event = post_ev(post_id, version)
    return Raw(encode_event(event), entity_key(event).encode() if key == "entity" else key, **kw)  # type: ignore[arg-type]


def large(post_id: int) -> Raw:
    """A post whose value is just under NEAR_MAX_BYTES: five long translations."""
    event = post_ev(post_id, langs=("en-US", "de-DE", "fr-FR", "es-ES", "it-IT"))
    body = "Markets moved as traders weighed the news. " * 5_000
    data = event.data.model_copy(
        update={
            "translations": tuple(
                tr.model_copy(update={"body": body[: (NEAR_MAX_BYTES - 5_000) // 5]}) for tr in event.data.translations
            )
        }
    )
    value = encode_event(event.model_copy(update={"data": data}))
    assert NEAR_MAX_BYTES - 10_000 < len(value) < NEAR_MAX_BYTES, len(value)
    return Raw(value, entity_key(event).encode())


def registry_serialized(post_id: int, topic: str) -> Raw:
    """The post's version 2 as Confluent's JSON Schema serializer writes it (magic byte 0, the
    schema id the registry gave the published post.v2 schema, the JSON)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from tickerwire.schemas.export import render

    event = post_ev(post_id)
    with registry_stub() as (url, _):
        serializer = JSONSerializer(
            render("post", 2).decode(), SchemaRegistryClient({"url": url}), conf={"auto.register.schemas": True}
        )
        value = serializer(orjson.loads(encode_v2(event)), SerializationContext(topic, MessageField.VALUE))
    assert value is not None and value[0] == 0
    return Raw(value, entity_key(event).encode())


def in_version(post_id: int, version: int, schema_version: int) -> Raw:
    """Version ``version`` of the post, written as ``schema_version`` 1, 2 or 3 (3: unknown here)."""
    event = post_ev(post_id, version)
    if schema_version == 1:
        return Raw(encode_event(event), entity_key(event).encode())
    doc = orjson.loads(encode_v2(event))
    doc["schema_version"] = schema_version
    return Raw(orjson.dumps(doc), entity_key(event).encode())


#: Posts published in both versions: each post's entity versions in publishing order, with the
#: schema_version each is written in (the newest entity version wins whatever its schema_version).
MIXED = {0: [(1, 1), (2, 2)], 1: [(1, 2), (2, 1)], 2: [(2, 2), (1, 1)], 3: [(2, 1), (1, 2)]}


def mixed_versions(first_id: int) -> tuple[list[Raw], dict[int, int]]:
    """The records of :data:`MIXED` for posts ``first_id``..., and each post's newest version."""
    raws, newest = [], {}
    for n, history in MIXED.items():
        for version, schema_version in history:
            raws.append(in_version(first_id + n, version, schema_version))
        newest[first_id + n] = max(v for v, _ in history)
    return raws, newest


@dataclass
class World:
    stack: ServiceStack
    key: str
    #: case -> the post ids it published that must be served and pushed once.
    served: dict[str, list[int]] = field(default_factory=dict)
    #: case -> post ids that must never be served nor pushed.
    never: dict[str, list[int]] = field(default_factory=dict)
    pushed: collections.Counter = field(default_factory=collections.Counter)
    #: Seconds from the last publish until every post to serve was served.
    took: float = 0.0
    #: producer -> why its cases did not run (its runtime is missing here).
    missing: dict[str, str] = field(default_factory=dict)
    #: post id -> the entity version it must be served in (the others: version 1).
    newest: dict[int, int] = field(default_factory=dict)

    @property
    def api(self) -> str:
        return self.stack.of("api")[0].url + BASE

    async def status(self, http: aiohttp.ClientSession, post_id: int) -> int:
        async with http.get(f"{self.api}/posts/{post_id}", headers=auth(self.key)) as resp:
            await resp.read()
            return resp.status


def pushes(http: aiohttp.ClientSession, stack: ServiceStack, key: str, pushed: collections.Counter):
    """A stream connection for the length of the block, counting the posts pushed by id into ``pushed``."""
    return counting_pushes(http, f"{stack.of('stream')[0].url}{BASE}/stream?key={key}", pushed)


async def _publish_cases(world: World, bootstrap: str, topic: str) -> None:
    served, never = world.served, world.never
    for n, codec in enumerate(CODECS):
        ids = [100 + 10 * n + i for i in range(1, 5)]
        await librdkafka(bootstrap, topic, [raw(i) for i in ids], **IDEMPOTENT, **{"compression.type": codec})
        served[f"librdkafka {codec}"] = ids
    await librdkafka(
        bootstrap, topic, [raw(141)], transaction="commit", **IDEMPOTENT, **{"transactional.id": "compat-commit"}
    )
    served["librdkafka transaction committed"] = [141]
    await librdkafka(
        bootstrap, topic, [raw(151)], transaction="abort", **IDEMPOTENT, **{"transactional.id": "compat-abort"}
    )
    never["librdkafka transaction aborted"] = [151]
    await librdkafka(
        bootstrap,
        topic,
        [raw(161, headers=[("trace-id", b"abc"), ("content-type", b"application/json")])],
        **IDEMPOTENT,
    )
    served["librdkafka headers"] = [161]
    await librdkafka(bootstrap, topic, [raw(172, key=b"not-a-post-key"), raw(173, key=b"\x00\xff\xfe")], **IDEMPOTENT)
    served["librdkafka odd keys"] = [172, 173]
    # Apache Kafka refuses a record without a key on a compacted topic (every topic of ours is
    # compacted: docs/publishing.md) with INVALID_RECORD: the producer is told; nothing is lost unseen.
    with pytest.raises(AssertionError, match="INVALID_RECORD"):
        await librdkafka(bootstrap, topic, [raw(171, key=None)], **IDEMPOTENT)
    never["librdkafka null key, refused by the compacted topic"] = [171]
    await librdkafka(bootstrap, topic, [large(181)], **IDEMPOTENT, **{"compression.type": "lz4"})
    served["librdkafka value near max.message.bytes"] = [181]
    await librdkafka(bootstrap, topic, [registry_serialized(191, topic)], **IDEMPOTENT)
    await librdkafka(bootstrap, topic, [raw(191)], **IDEMPOTENT)
    served["librdkafka record of Confluent's JSON Schema serializer, then a plain one"] = [191]
    # A dead letter (a schema_version unknown here), then a plain record of the same post: it must not wait.
    await librdkafka(bootstrap, topic, [in_version(192, 2, 3)], **IDEMPOTENT)
    await librdkafka(bootstrap, topic, [raw(192)], **IDEMPOTENT)
    served["librdkafka plain record after one of an unknown schema_version"] = [192]
    records, newest = mixed_versions(701)
    await librdkafka(bootstrap, topic, records, **IDEMPOTENT)
    served["librdkafka version 1 and 2 events of the same posts"] = sorted(newest)
    world.newest.update(newest)

    config = world.stack.config
    for n, codec in enumerate(CODECS):
        ids = [200 + 10 * n + i for i in range(1, 5)]
        async with kafka.started_producer(config, compression_type=codec, enable_idempotence=True) as producer:
            for r in [raw(i) for i in ids]:
                await producer.send(topic, value=r.value, key=r.key)
        served[f"aiokafka {codec}"] = ids
    for outcome, post_id in (("commit", 241), ("abort", 251)):
        async with kafka.started_producer(config, transactional_id=f"compat-aiokafka-{outcome}") as producer:
            await producer.begin_transaction()
            r = raw(post_id)
            await (await producer.send(topic, value=r.value, key=r.key))
            await (producer.commit_transaction() if outcome == "commit" else producer.abort_transaction())
        (served if outcome == "commit" else never)[f"aiokafka transaction {outcome}ed"] = [post_id]
    await _publish_foreign(world, bootstrap, topic)
    async with kafka.started_producer(config) as producer:
        r = raw(261)
        await (await producer.send(topic, value=r.value, key=r.key, headers=[("source", b"compat")]))
        served["aiokafka headers"] = [261]
        r = raw(271, key=None)
        with pytest.raises(KafkaError):
            await (await producer.send(topic, value=r.value, key=None))
        never["aiokafka null key, refused by the compacted topic"] = [271]


#: The foreign producers' cases: (producer, mode, codec) -> the case's name and its posts.
JAVA_CASES = {
    ("plain", "none"): ("java defaults (idempotent, acks=all)", [501, 502, 503]),
    ("plain", "zstd"): ("java zstd", [511, 512, 513]),
    ("commit", "none"): ("java transaction committed", [521, 522]),
    ("abort", "none"): ("java transaction aborted", [531, 532]),
}
KAFKAJS_CASES = {
    ("idempotent", "none"): ("kafkajs idempotent", [601, 602, 603]),
    ("idempotent", "gzip"): ("kafkajs idempotent gzip", [611, 612]),
    ("commit", "none"): ("kafkajs transaction committed", [621, 622]),
    ("abort", "none"): ("kafkajs transaction aborted", [631, 632]),
}


async def _publish_foreign(world: World, bootstrap: str, topic: str) -> None:
    """Kafka's Java producer and KafkaJS, where they can run."""
    for who, unavailable, publish, cases in (
        ("java", None, java_producer, JAVA_CASES),
        ("kafkajs", kafkajs_unavailable(), kafkajs, KAFKAJS_CASES),
    ):
        if unavailable is not None:
            world.missing[who] = unavailable
            continue
        for (mode, codec), (case, ids) in cases.items():
            await publish(bootstrap, topic, [raw(i) for i in ids], mode, codec)
            (world.never if mode == "abort" else world.served)[case] = ids
        if who == "java":
            records, newest = mixed_versions(801)
            await publish(bootstrap, topic, records, "plain", "none")
            world.served["java version 1 and 2 events of the same posts"] = sorted(newest)
            world.newest.update(newest)


@pytest.fixture(scope="module")
async def world(pg_dsn, kafka_bootstrap):
    async with started_stack(pg_dsn, kafka_bootstrap, f"compat{os.getpid()}") as stack:
        key = await stack.provision("ws_compat", rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000)
        await stack.publish([locale_ev("en-US", default=True)])
        await stack.wait_projected()
        world = World(stack, key)
        topic = topic_name(stack.topic_prefix, POSTS)
        async with aiohttp.ClientSession() as http:
            async with pushes(http, stack, key, world.pushed):
                await _publish_cases(world, kafka_bootstrap, topic)
                published = time.monotonic()
                waiting = {i for ids in world.served.values() for i in ids}
                while waiting:
                    waiting = {i for i in waiting if await world.status(http, i) != 200}
                    assert time.monotonic() - published < 60, (
                        f"not served in 60 s: {sorted(waiting)}\n{stack.logs()[-4000:]}"
                    )
                    await asyncio.sleep(0.1)
                world.took = time.monotonic() - published
                print(f"every post served {world.took:.2f} s after the last publish")
                expected = {i for ids in world.served.values() for i in ids}
                deadline = time.monotonic() + 30
                while not expected <= set(world.pushed) and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                await asyncio.sleep(1.0)  # a second push would come now
            yield world


async def test_every_producers_committed_posts_are_served_and_pushed_once(world: World):
    assert world.took < SERVED_WITHIN_S, f"served {world.took:.1f} s after the last publish"
    async with aiohttp.ClientSession() as http:
        for case, ids in world.served.items():
            assert [await world.status(http, i) for i in ids] == [200] * len(ids), case
            assert [world.pushed[i] for i in ids] == [1] * len(ids), f"{case}: pushed {[world.pushed[i] for i in ids]}"
    assert set(world.pushed) == {i for ids in world.served.values() for i in ids}


async def test_posts_published_in_both_versions_are_served_in_their_newest_version(world: World):
    assert {701, 702, 703, 704} <= set(world.newest)
    if "java" not in world.missing:
        assert {801, 802, 803, 804} <= set(world.newest)
    async with aiohttp.ClientSession() as http:
        for post_id, version in sorted(world.newest.items()):
            async with http.get(f"{world.api}/posts/{post_id}", headers=auth(world.key)) as resp:
                detail = await resp.json() if resp.status == 200 else {}
            assert detail.get("title") == f"Bitcoin rallies {post_id} v{version}", post_id
            assert detail["source_url"] == "https://src.example/a" and detail["byline"] == "Desk"


async def test_an_aborted_transactions_post_is_never_served_nor_pushed(world: World):
    assert world.never
    async with aiohttp.ClientSession() as http:
        for case, ids in world.never.items():
            assert [await world.status(http, i) for i in ids] == [404] * len(ids), case
            assert not any(world.pushed[i] for i in ids), case


@pytest.mark.parametrize("who, cases", [("java", JAVA_CASES), ("kafkajs", KAFKAJS_CASES)], ids=["java", "kafkajs"])
async def test_kafkas_java_producer_and_kafkajs_publish_posts_served_and_pushed_once(world: World, who, cases):
    """Idempotent by default, compressed, and in transactions: committed posts served and pushed
    once, aborted ones never (the producer's own defaults, as a platform team runs it)."""
    if who in world.missing:
        pytest.skip(world.missing[who])
    async with aiohttp.ClientSession() as http:
        for (mode, _), (case, ids) in cases.items():
            want_status, want_pushes = (404, 0) if mode == "abort" else (200, 1)
            assert [await world.status(http, i) for i in ids] == [want_status] * len(ids), case
            assert [world.pushed[i] for i in ids] == [want_pushes] * len(ids), case


async def test_an_unknown_schema_version_is_a_dead_letter_naming_it(world: World):
    conn = await world.stack.read_conn()
    try:
        letters = await conn.fetch("SELECT reason_kind, reason, key FROM dead_letters")
    finally:
        await conn.close()
    assert [(r["reason_kind"], r["key"]) for r in letters] == [("unknown_schema_version", b"post:192")]
    assert "post: schema_version 3 is not known to this release (known: 1, 2)" in letters[0]["reason"]


def cli(stack: ServiceStack, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tickerwire.services.cli.main", "dead-letters", *args],
        env=stack.env(),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


async def test_dead_letters_are_listed_shown_and_retried_as_the_projector_applies_records(world: World):
    stack = world.stack
    listed = await asyncio.to_thread(cli, stack, "list")
    assert listed.returncode == 0, listed.stderr
    ((letter_id, where, kind, _, reason),) = [line.split("\t") for line in listed.stdout.splitlines()]
    assert kind == "unknown_schema_version" and where.startswith(topic_name(stack.topic_prefix, POSTS))
    shown = await asyncio.to_thread(cli, stack, "show", letter_id)
    assert shown.returncode == 0 and "schema_version 3 is not known" in shown.stdout
    refused = await asyncio.to_thread(cli, stack, "retry", letter_id)
    assert (
        refused.returncode == 1 and len(refused.stderr.splitlines()) == 1 and "nothing was published" in refused.stderr
    )

    # Letters of a post that today's contract accepts (as after a widened contract): its
    # version 2, and its version 1 set aside later; then the post's version 2 set aside again.
    topic = topic_name(stack.topic_prefix, POSTS)
    conn = await stack.read_conn()
    try:
        ids = [
            await conn.fetchval(
                'INSERT INTO dead_letters (topic, partition, "offset", key, value, reason_kind, reason) '
                "VALUES ($1, 0, $2, $3, $4, 'schema', 'refused by an older contract') RETURNING id",
                topic,
                1_000_000 + n,
                r.key,
                r.value,
            )
            for n, r in enumerate((raw(301, version=2), raw(301, version=1), raw(301, version=2)))
        ]
    finally:
        await conn.close()
    async with aiohttp.ClientSession() as http:
        pushed: collections.Counter = collections.Counter()
        async with pushes(http, stack, world.key, pushed):
            retried = await asyncio.to_thread(cli, stack, "retry", str(ids[0]), str(ids[1]))
            assert retried.returncode == 0, retried.stderr
            assert len(retried.stdout.splitlines()) == 2
            again = await asyncio.to_thread(cli, stack, "retry", str(ids[2]))  # the same version once more
            assert again.returncode == 0, again.stderr
            deadline = time.monotonic() + 30
            while await world.status(http, 301) != 200 or not pushed[301]:
                assert time.monotonic() < deadline, f"the retried post not served and pushed within 30 s: {pushed}"
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.5)  # a second push would come now
        async with http.get(f"{world.api}/posts/301", headers=auth(world.key)) as resp:
            assert b"Bitcoin rallies 301 v2" in await resp.read()  # the newest version won
    assert pushed[301] == 1  # announced once, whatever the order and the repeats of the retries
    gone = await asyncio.to_thread(cli, stack, "retry", str(ids[0]))
    assert (
        gone.returncode == 2
        and gone.stderr.strip()
        == f"tickerwire dead-letters: no dead letter with id {ids[0]} (see tickerwire dead-letters list)"
    )


async def settled_rows(stack: ServiceStack, within_s: float = 30.0) -> dict:
    """The read model once two reads a second apart agree (transaction markers end some
    partitions, so the stored positions never reach the producers' marks)."""
    conn = await stack.read_conn()
    try:
        deadline = time.monotonic() + within_s
        last = comparable(await read_model(conn, "rm"))
        while True:
            await asyncio.sleep(1.0)
            now = comparable(await read_model(conn, "rm"))
            if now == last:
                return now
            assert time.monotonic() < deadline, "the read model kept changing"
            last = now
    finally:
        await conn.close()


async def test_a_rebuild_gives_the_same_rows(world: World):
    """Last in this module: nothing is published meanwhile. ``tickerwire projector rebuild``
    reads the log of both versions from offset 0 (the bulk path) and switches schemas."""
    stack = world.stack
    before = await settled_rows(stack)
    rebuilt = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "tickerwire.services.cli.main", "projector", "rebuild"],
        env=stack.env(),
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    conn = await stack.read_conn()
    try:
        after = comparable(await read_model(conn, "rm"))
    finally:
        await conn.close()
    assert {701, 702, 703, 704} <= {r["id"] for r in after["posts"]}
    for table in before:
        assert after[table] == before[table], table
