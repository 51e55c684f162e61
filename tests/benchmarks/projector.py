"""2. Projector: events/s of post events with 3 locales each, from a filled topic to
committed rows, against the ceiling min(raw consume-and-discard of the same topic with
aiokafka, raw COPY of the same rows into an equivalent table with copy_records_to_table);
and event-to-row latency at a steady 100 events/s against produce-to-consume on a raw consumer.

Throughput is counted from the first committed batch to the last one (process start and
the group join are excluded): (events after the first observation) / (time between).
The equivalent table is post_translations plus the source text columns, with the
tsvector filled by a row trigger, so the ceiling pays the same text-search cost.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

import asyncpg
from aiokafka import TopicPartition

from tickerwire.schemas.models import encode_event, entity_key
from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.common import kafka
from tickerwire.services.readmodel.mapping import Taxonomy, translation_rows
from tickerwire.services.readmodel.migrate import migrate
from tickerwire.services.readmodel.upcast import post_v2

from .common import Context, Deadline, Result, RssSampler, catalog, log, percentile, posts

NAME = "projector"

EQUIVALENT = """
CREATE TABLE copy_posts (LIKE posts INCLUDING ALL);
CREATE TABLE copy_translations (LIKE post_translations INCLUDING ALL);
ALTER TABLE copy_translations ALTER tsv DROP NOT NULL,
    ADD ts_config text, ADD title text, ADD lede text, ADD body text;
CREATE FUNCTION copy_tsv() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.tsv := setweight(to_tsvector(NEW.ts_config::regconfig, NEW.title), 'A')
            || setweight(to_tsvector(NEW.ts_config::regconfig, NEW.lede), 'B')
            || setweight(to_tsvector(NEW.ts_config::regconfig, NEW.body), 'C');
    RETURN NEW;
END $$;
CREATE TRIGGER copy_tsv BEFORE INSERT ON copy_translations FOR EACH ROW EXECUTE FUNCTION copy_tsv();
"""
#: The columns the projector writes with tracing off (the trace context columns stay NULL).
POST_COLUMNS = ["id", "version", "status", "published_at", "sentiment", "importance", "tickers", "snapshot"]
TR_COLUMNS = [
    "post_id",
    "lang",
    "slug",
    "published_at",
    "importance",
    "sentiment",
    "visible",
    "category_slugs",
    "tickers",
    "hashtags",
    "lean",
    "detail",
    "announced_partition",
    "announced_offset",
    "ts_config",
    "title",
    "lede",
    "body",
]


def copy_rows(events, taxonomy: Taxonomy) -> tuple[list[tuple], list[tuple]]:
    post_rows, tr_rows = [], []
    for offset, event in enumerate(events):
        p = post_v2(event.data)  # what the projector maps (services/readmodel/upcast.py)
        post_rows.append(
            (
                p.id,
                event.version,
                p.status.value,
                p.published_at,
                p.sentiment.value,
                p.importance,
                list(p.symbols),
                p.model_dump_json(),
            )
        )
        for r in translation_rows(p, taxonomy):
            tr_rows.append(
                (
                    r.post_id,
                    r.lang,
                    r.slug,
                    r.published_at,
                    r.importance,
                    r.sentiment,
                    r.visible,
                    list(r.category_slugs),
                    list(r.tickers),
                    list(r.hashtags),
                    r.lean,
                    r.detail,
                    0,
                    offset,
                    r.ts_config,
                    r.title,
                    r.lede,
                    r.body,
                )
            )
    return post_rows, tr_rows


async def posts_end(ctx: Context, stack) -> dict[TopicPartition, int]:
    consumer = kafka.consumer(stack.config, group_id=None, client_id="bench")
    await consumer.start()
    try:
        tps = [TopicPartition(topic_name(stack.topic_prefix, POSTS), p) for p in range(POSTS.partitions)]
        return await consumer.end_offsets(tps)
    finally:
        await consumer.stop()


#: The fetch wait of both the projector and the raw consumer in the latency phase.
LATENCY_FETCH_WAIT_MS = 5


async def projected(conn: asyncpg.Connection, topic: str) -> int:
    return int(await conn.fetchval("SELECT coalesce(sum(next_offset), 0) FROM positions WHERE topic = $1", topic) or 0)


async def product_throughput(
    ctx: Context, stack, total: int, rss: RssSampler, commit: str = "on"
) -> tuple[float, tuple, str]:
    """Project the filled topic into a fresh database with a fresh consumer group, its batches
    committed with ``synchronous_commit = commit``.
    Returns (events/s, (the running projector, a connection, the database context), topic)."""
    topic = topic_name(stack.topic_prefix, POSTS)
    db = ctx.database()
    dsn = await db.__aenter__()
    conn = await asyncpg.connect(dsn)
    await migrate(conn, "rm")
    await conn.execute("SET search_path TO rm, public")
    # The projector polls with the same fetch wait as the raw-consumer baseline, so that a
    # broker holding a fetch open is charged to both alike.
    service = await stack.start(
        "projector",
        TICKERWIRE_DATABASE_URL=dsn,
        TICKERWIRE_PROJECTOR_GROUP=f"bench-{uuid.uuid4().hex[:8]}",
        TICKERWIRE_KAFKA_FETCH_MAX_WAIT_MS=str(LATENCY_FETCH_WAIT_MS),
        TICKERWIRE_PROJECTOR_SYNCHRONOUS_COMMIT=commit,
    )
    rss.watch("projector", service.proc.pid)
    seen = await committed(conn, topic, total, Deadline(120 + total / 20, f"projecting {total:,} events"), service.proc)
    return seen.rate(), (service, conn, db), topic


@dataclass(frozen=True, slots=True)
class Committed:
    """The first and the last look at a topic's committed positions while it was projected."""

    first: int
    first_at: float
    last: int
    last_at: float

    def rate(self) -> float:
        """Events/s from the first committed batch to the last (nan when seen only once)."""
        if self.last_at > self.first_at and self.last > self.first:
            return (self.last - self.first) / (self.last_at - self.first_at)
        return float("nan")


async def committed(conn: asyncpg.Connection, topic: str, total: int, deadline: Deadline, process=None) -> Committed:
    """Looks every 10 ms until ``total`` events of ``topic`` are committed; process start and
    group joins come before the first look that sees any."""
    first: tuple[int, float] | None = None
    while True:
        deadline.check(process)
        done = await projected(conn, topic)
        now = time.perf_counter()
        if done and first is None:
            first = (done, now)
        if done >= total:
            assert first is not None
            return Committed(first[0], first[1], done, now)
        await asyncio.sleep(0.01)


async def raw_consume(stack, ends: dict[TopicPartition, int]) -> float:
    consumer = kafka.consumer(stack.config, group_id=None, client_id="bench-raw")
    await consumer.start()
    try:
        consumer.assign(list(ends))
        await consumer.seek_to_beginning()
        left = dict(ends)
        count = 0
        started = last = time.perf_counter()
        while any(v > 0 for v in left.values()) and time.perf_counter() - last < 2.0:
            batch = await consumer.getmany(timeout_ms=200, max_records=10_000)
            for tp, records in batch.items():
                if records:
                    count += len(records)
                    last = time.perf_counter()
                    left[tp] = ends[tp] - (records[-1].offset + 1)
        return count / (last - started)
    finally:
        await consumer.stop()


async def raw_copy(conn: asyncpg.Connection, post_rows, tr_rows) -> float:
    await conn.execute("TRUNCATE copy_posts, copy_translations")
    started = time.perf_counter()
    async with conn.transaction():
        await conn.copy_records_to_table("copy_posts", records=post_rows, columns=POST_COLUMNS, schema_name="rm")
        await conn.copy_records_to_table("copy_translations", records=tr_rows, columns=TR_COLUMNS, schema_name="rm")
    return len(post_rows) / (time.perf_counter() - started)


async def _watch_rows(conn: asyncpg.Connection, ids: range, seen: dict[int, float], done: asyncio.Event) -> None:
    """Note when each post's row is committed. Partitions commit independently, so ids do not
    arrive in order: look at all of them."""
    while not done.is_set():
        for r in await conn.fetch("SELECT id FROM rm.posts WHERE id BETWEEN $1 AND $2", ids[0], ids[-1]):
            seen.setdefault(r["id"], time.perf_counter())
        if len(seen) >= len(ids):
            done.set()
        await asyncio.sleep(0.002)


async def _watch_log(
    stack, ends: dict, ids: range, seen: dict[int, float], done: asyncio.Event, ready: asyncio.Event
) -> None:
    """Note when each post's record reaches a raw consumer tailing the log from ``ends``."""
    consumer = kafka.consumer(
        stack.config, group_id=None, client_id="bench-tail", fetch_max_wait_ms=LATENCY_FETCH_WAIT_MS
    )
    await consumer.start()
    try:
        consumer.assign(list(ends))
        for tp, end in ends.items():
            consumer.seek(tp, end)
        ready.set()
        while not done.is_set():
            for records in (await consumer.getmany(timeout_ms=50)).values():
                for rec in records:
                    seen.setdefault(int(rec.key.split(b":")[1]), time.perf_counter())
            if len(seen) >= len(ids):
                done.set()
    finally:
        await consumer.stop()


async def steady_latency(
    stack, conn: asyncpg.Connection | None, first_id: int, seconds: float, rate: float = 100.0
) -> list[float]:
    """Publish posts at ``rate``/s; latency to the committed row (conn given) or to a raw consumer (conn None)."""
    events = posts(first_id, int(seconds * rate))
    ids = range(first_id, first_id + len(events))
    sent: dict[int, float] = {}
    seen: dict[int, float] = {}
    ends = await posts_end(None, stack)
    topic = next(iter(ends)).topic
    done, ready = asyncio.Event(), asyncio.Event()
    if conn is None:
        watcher = asyncio.create_task(_watch_log(stack, ends, ids, seen, done, ready))
        await ready.wait()
    else:
        watcher = asyncio.create_task(_watch_rows(conn, ids, seen, done))
    async with kafka.started_producer(stack.config, linger_ms=0) as producer:
        t0 = time.perf_counter()
        for i, event in enumerate(events):
            delay = t0 + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sent[event.data.id] = time.perf_counter()
            await producer.send(topic, value=encode_event(event), key=entity_key(event).encode())
        await asyncio.wait_for(done.wait(), timeout=60)
    watcher.cancel()
    return [(seen[i] - sent[i]) * 1000 for i in sent if i in seen]


async def run(ctx: Context) -> Result:
    s = ctx.settings
    result = Result(NAME)
    total = s.pick(400, 10_000)
    result.notes.append(
        f"projector and raw-consumer baseline both poll with fetch_max_wait_ms {LATENCY_FETCH_WAIT_MS} "
        "(a broker's wait is charged to both alike)"
    )
    result.notes.append(
        f"{total} post events x 3 locales; ceiling = min(raw aiokafka consume-and-discard, raw COPY into an equivalent table)"
    )
    result.notes.append(
        "the projector's batches commit with synchronous_commit = on, its default (docs/api.md#durability); the rows "
        "'synchronous_commit off' are the same projector with TICKERWIRE_PROJECTOR_SYNCHRONOUS_COMMIT=off in the same "
        "run, and their ratio is the cost of durable commits; the raw COPY ceiling commits with the server's setting"
    )
    throughput = result.metric(
        "events/s (topic -> committed rows)",
        "events/s",
        target=">= 0.8x ceiling",
        check=lambda p, r: r is not None and r >= 0.8,
    )
    consume = result.metric("raw consume-and-discard (ceiling part)", "events/s")
    copy = result.metric("raw COPY of the same rows (ceiling part)", "events/s")
    latency = result.metric(
        "event-to-row p99 @ 100 ev/s", "ms", higher_is_better=False, target="< 100 ms", check=lambda p, r: p < 100
    )
    latency50 = result.metric("event-to-row p50 @ 100 ev/s", "ms", higher_is_better=False)
    # The same projector with asynchronous commits, against the durable default: the cost of durability.
    async_throughput = result.metric("events/s, synchronous_commit off (baseline: on)", "events/s")
    async_latency = result.metric(
        "event-to-row p99 @ 100 ev/s, synchronous_commit off (baseline: on)", "ms", higher_is_better=False
    )
    events = posts(1, total)
    cat = catalog(tokens=0)
    taxonomy = Taxonomy({e.data.slug: e.data for e in cat if e.type == "category"})
    post_rows, tr_rows = copy_rows(events, taxonomy)
    next_id = total + 1
    async with ctx.stack() as stack:
        await stack.publish([*cat, *events])
        async with ctx.database() as copy_dsn:
            copy_conn = await asyncpg.connect(copy_dsn)
            await migrate(copy_conn, "rm")
            await copy_conn.execute("SET search_path TO rm, public")
            await copy_conn.execute(EQUIVALENT)
            try:
                with RssSampler() as rss:
                    for _ in range(s.runs):
                        # The log's end now, after every earlier round's steady events: the
                        # latency phase must start with the projector caught up, not draining.
                        ends = await posts_end(ctx, stack)
                        rate, (service, conn, db), _topic = await product_throughput(
                            ctx, stack, sum(ends.values()), rss
                        )
                        throughput.product.append(rate)
                        log.info("projector: %.0f events/s; steady latency next", rate)
                        try:
                            lat = await steady_latency(stack, conn, next_id, s.pick(1.0, 5.0))
                            next_id += 1000
                            latency.product.append(percentile(lat, 99))
                            latency50.product.append(percentile(lat, 50))
                        finally:
                            stack.stop(service)
                            await conn.close()
                            await db.__aexit__(None, None, None)
                        ends = await posts_end(ctx, stack)
                        rate, p99 = await _asynchronous(ctx, stack, sum(ends.values()), rss, next_id, s)
                        next_id += 1000
                        async_throughput.product.append(rate)
                        async_throughput.baseline.append(throughput.product[-1])
                        async_latency.product.append(p99)
                        async_latency.baseline.append(latency.product[-1])
                        ends = await posts_end(ctx, stack)
                        log.info("projector: raw consume and copy")
                        c, k = await raw_consume(stack, ends), await raw_copy(copy_conn, post_rows, tr_rows)
                        consume.baseline.append(c)
                        copy.baseline.append(k)
                        throughput.baseline.append(min(c, k))
                        log.info("projector: raw tail latency")
                        lat = await steady_latency(stack, None, next_id, s.pick(1.0, 5.0))
                        next_id += 1000
                        latency.baseline.append(percentile(lat, 99))
                        latency50.baseline.append(percentile(lat, 50))
                ctx.record_rss(rss, "projector load: ")
            finally:
                await copy_conn.close()
    return result


async def _asynchronous(ctx: Context, stack, total: int, rss: RssSampler, first_id: int, s) -> tuple[float, float]:
    """Events/s and the steady p99 of the projector with ``synchronous_commit = off``."""
    rate, (service, conn, db), _topic = await product_throughput(ctx, stack, total, rss, commit="off")
    log.info("projector (synchronous_commit off): %.0f events/s; steady latency next", rate)
    try:
        return rate, percentile(await steady_latency(stack, conn, first_id, s.pick(1.0, 5.0)), 99)
    finally:
        stack.stop(service)
        await conn.close()
        await db.__aexit__(None, None, None)
