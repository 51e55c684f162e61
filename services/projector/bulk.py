"""The bulk path of ``tickerwire projector rebuild``: the posts topic, read to its measured end,
reduced to what a one-by-one replay would leave, and loaded with COPY.

Two passes over each posts partition, so memory holds small integers per post, not the posts:

1. **Reduce.** Every record is decoded as the projector would (poison records become the same
   dead letters). Per post it keeps what a one-by-one replay would apply: the highest version
   and the offset of its event, the offset of the first applied event that showed each locale
   (the announcement), and the offset of the last applied event that had each locale (a locale
   dropped later keeps a hidden row rendered from that snapshot).
2. **Load.** The records at those offsets are decoded again and rendered with the projector's
   own functions (:func:`.apply.renderings_of`, :func:`.apply.translation_records`) into
   ``posts`` rows and translation rows, which go by ``copy_records_to_table`` into ``posts``
   and ``post_translations``, each translation with its tsvector computed by one statement per
   chunk exactly as the live upsert computes it, so every row is written once. Two sessions
   load concurrently while the next chunk is decoded.

Posts never span partitions, so the partitions are shared out to worker processes (one per
core, spawned, each with its own consumer and connections) that run both passes over their
own partitions; this process shows their progress, totals the derived counters and builds
the indexes. A failing or vanished worker stops the others and fails the rebuild.

A translation whose text the live schema already holds a vector for (same text hash) takes
that vector instead of parsing the text again, the rule the live projector follows within its
schema. The derived counters are the sum of each final post's contribution, the positions are the
measured ends, and the secondary indexes (dropped before the load) are built after it. The
catalog and access topics are small and are replayed event by event before the load, so posts
are rendered with the final taxonomy, as every category change re-renders them live.

Refused loudly (:class:`NotBulkable`; the rebuild then replays event by event): a posts
partition carrying another event type, or another topic carrying a post event.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import multiprocessing
import os
import signal
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from multiprocessing.connection import Connection
from typing import Any, AsyncIterator

import asyncpg
from aiokafka import TopicPartition

from tickerwire.schemas.models import PostEventV2, PostV2

from ..common import kafka
from ..common.db import create_pool, quote_ident
from ..common.runtime.errors import TickerwireError
from ..common.runtime.logs import setup_logging
from ..readmodel import positions, stamps as stamp
from ..readmodel.mapping import is_visible
from . import sql
from .apply import (
    ConsumedRecord,
    DeadLetter,
    Decoded,
    decode_records,
    of_type,
    post_facts,
    post_record,
    renderings_of,
    translation_records,
)
from .catalog import load_taxonomy
from .derive import merge, sentiment_deltas, ticker_deltas
from .logread import read_until
from .registry import registry_of
from .rows import TranslationRow
from .settings import ProjectorConfig

log = logging.getLogger(__name__)

#: Translation rows per COPY chunk.
CHUNK_ROWS = 5000
#: Sessions loading chunks concurrently (the machine's cores do the tsvector work).
LOADERS = 2
#: The cyclic collector's thresholds in a worker process. Decoding and rendering allocate
#: millions of short-lived objects that reference counting frees, and the reduce pass leaves
#: one long-lived plan per post; with the default thresholds (700, 10, 10) the collector
#: rescanned them over and over (about 8 % of a worker's CPU in a perf profile of a 20,000-post
#: rebuild). The plans are frozen after the reduce pass, and collections are rarer.
WORKER_GC_THRESHOLDS = (100_000, 50, 100)

#: The bound of one index build or ANALYZE after the load. At 1.1M translation rows the
#: largest build takes tens of seconds on two cores, beyond the pool's statement timeout
#: (which bounds the chunk statements); a larger read model takes minutes.
MAINTENANCE_TIMEOUT_S = 3600


class NotBulkable(Exception):
    """The log holds something the bulk path does not reduce; replay it event by event."""


@dataclass(slots=True)
class PostPlan:
    """What a one-by-one replay of one post's events leaves, as offsets into its partition."""

    version: int
    final: int
    announce: dict[str, int] = field(default_factory=dict)
    last_with: dict[str, int] = field(default_factory=dict)

    def sources(self) -> dict[int, set[str]]:
        """Offsets of earlier snapshots holding dropped locales, with those locales."""
        out: dict[int, set[str]] = defaultdict(set)
        for lang, offset in self.last_with.items():
            if offset != self.final:
                out[offset].add(lang)
        return out


def reduce_event(plans: dict[int, PostPlan], d: Decoded[PostEventV2]) -> None:
    """Fold one post event (in offset order) into its post's plan, as ``applied_chain`` would."""
    post: PostV2 = d.event.data
    plan = plans.get(post.id)
    if plan is None:
        if d.event.version <= 0:  # not above the absent post's version 0
            return
        plan = plans[post.id] = PostPlan(d.event.version, d.offset)
    elif d.event.version > plan.version:
        plan.version, plan.final = d.event.version, d.offset
    else:
        return
    visible = is_visible(post)
    for tr in post.translations:
        if visible:
            plan.announce.setdefault(tr.lang, d.offset)
        plan.last_with[tr.lang] = d.offset


@dataclass(slots=True)
class Progress:
    """Records read, rows loaded and an ETA on the terminal, at most once a second."""

    total: int
    read: int = 0
    loaded: int = 0
    phase: str = "reduce"
    started: float = field(default_factory=time.monotonic)
    shown: float = 0.0

    @property
    def out(self):
        return sys.stderr

    def show(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.shown < 1.0:
            return
        self.shown = now
        elapsed = now - self.started
        work = 2 * max(self.total, 1)  # two passes
        eta = f"{elapsed / self.read * (work - self.read):.0f} s" if self.read else "?"
        line = (
            f"rebuild: {self.phase}: {self.read:,}/{work:,} records read (two passes), "
            f"{self.loaded:,} rows loaded, {elapsed:.0f} s elapsed, ETA {eta}"
        )
        tty = self.out.isatty()
        print(("\r" + line + "\x1b[K") if tty else line, end="" if tty else "\n", file=self.out, flush=True)

    def done(self, what: str) -> None:
        self.phase = what
        self.show(force=True)
        if self.out.isatty():
            print(file=self.out)


async def _read(
    config: ProjectorConfig, tps: list[TopicPartition], ends: dict[TopicPartition, int]
) -> AsyncIterator[tuple[TopicPartition, list[ConsumedRecord]]]:
    """Every record of ``tps`` from the beginning up to (not including) the measured ends."""
    consumer = kafka.consumer(
        config, group_id=None, client_id="tickerwire-rebuild-bulk", max_poll_records=config.projector_batch_max
    )
    registry = registry_of(config.projector_schema_registry_url, config.projector_schema_registry_timeout_s)
    try:
        await consumer.start()
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        targets = {tp: ends.get(tp, 0) for tp in tps}
        async for tp, read in read_until(consumer, targets, max_records=config.projector_batch_max, registry=registry):
            records = [r for r in read if r.offset < targets[tp]]
            if records:
                yield tp, records
    finally:
        await consumer.stop()
        if registry is not None:
            await registry.close()


@dataclass(slots=True)
class BulkReport:
    records: int = 0
    posts: int = 0
    rows: int = 0
    dead_letters: int = 0
    seconds_reduce: float = 0.0
    seconds_load: float = 0.0
    seconds_index: float = 0.0


@dataclass(slots=True)
class PartitionLoad:
    """What one worker process reduced and loaded, for the parent to total and finish."""

    records: int = 0
    posts: int = 0
    rows: int = 0
    seconds_reduce: float = 0.0
    #: The poison records of each partition, in offset order.
    letters: dict[TopicPartition, list[DeadLetter]] = field(default_factory=dict)
    ticker_delta: dict[str, int] = field(default_factory=dict)
    sentiment_delta: dict[tuple[datetime, str], int] = field(default_factory=dict)


def workers_for(partitions: int) -> int:
    """Worker processes for the posts partitions: one per core this process may run on, at
    most one per partition."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(partitions, cores))


async def bulk_load_posts(
    config: ProjectorConfig,
    pool: asyncpg.Pool,
    schema: str,
    tps: list[TopicPartition],
    ends: dict[TopicPartition, int],
    reuse_from: str | None = None,
) -> BulkReport:
    """Load the posts partitions ``tps`` up to ``ends`` into the (empty, migrated) ``schema`` of ``pool``.

    The partitions are shared out to :func:`workers_for` worker processes, each reducing and
    loading its own partitions on its own connections (posts never span partitions), so the
    decoding and rendering use every core; this process totals their counters, then builds
    the indexes. With ``reuse_from`` (the live schema), a translation whose text that schema
    already holds a vector for (same text hash: configuration, title, lede, body) takes that
    vector instead of parsing the text again."""
    report = BulkReport()
    async with pool.acquire() as conn:
        indexes = await conn.fetch(sql.SELECT_SECONDARY_INDEXES, ["post_translations", "posts"])
        for index in indexes:
            await conn.execute(f'DROP INDEX "{index["name"]}"')
        vectors = sql.TRANSLATION_VECTORS
        if reuse_from is not None and await conn.fetchval(sql.SCHEMA_HAS_TEXT_HASH, reuse_from):
            vectors = sql.TRANSLATION_VECTORS_REUSING.replace("{live}", quote_ident(reuse_from))

    started = time.perf_counter()
    workers = workers_for(len(tps))
    progress = Progress(sum(ends.get(tp, 0) for tp in tps), phase=f"reduce and load ({workers} processes)")
    shares = [[(tp, ends.get(tp, 0)) for tp in tps[i::workers]] for i in range(workers)]
    loads = await _run_workers(config, schema, [share for share in shares if share], vectors, progress)
    ticker_delta: dict[str, int] = {}
    sentiment_delta: dict[tuple[datetime, str], int] = {}
    letters: dict[TopicPartition, list[DeadLetter]] = {}
    for load in loads:
        report.records += load.records
        report.posts += load.posts
        letters.update(load.letters)
        merge(ticker_delta, load.ticker_delta)
        merge(sentiment_delta, load.sentiment_delta)
    report.rows = sum(load.rows for load in loads)
    report.seconds_reduce = max((load.seconds_reduce for load in loads), default=0.0)
    report.seconds_load = time.perf_counter() - started - report.seconds_reduce

    started = time.perf_counter()
    progress.phase = "index"
    progress.show(force=True)
    async with pool.acquire() as conn:
        async with conn.transaction():
            if ticker_delta:
                await conn.copy_records_to_table("ticker_post_counts", records=sorted(ticker_delta.items()))
            if sentiment_delta:
                await conn.copy_records_to_table(
                    "sentiment_buckets", records=[(b, s, n) for (b, s), n in sorted(sentiment_delta.items())]
                )
            rows = [d.row(tp.topic, tp.partition) for tp in tps for d in letters.get(tp, [])]
            if rows:
                await conn.executemany(sql.INSERT_DEAD_LETTER, rows)
            report.dead_letters = len(rows)
            await conn.execute(sql.BUMP_STAMPS, [stamp.TOKENS])
    await build_indexes(pool, [r["definition"] for r in indexes])
    await _analyze(pool, ["posts", "post_translations"])
    async with pool.acquire() as conn:
        # Last: a stored position says the rows before it are in place.
        await positions.save_many(conn, {(tp.topic, tp.partition): ends.get(tp, 0) for tp in tps})
    report.seconds_index = time.perf_counter() - started
    progress.done("loaded")
    return report


#: How often the parent looks at its workers (and refreshes the progress line).
_POLL_S = 0.2

#: A worker's progress in shared memory: [records read, rows loaded], written by that worker
#: alone and read by the parent without a lock. (A lock is what a worker terminated inside it
#: would hold for ever, and the parent, reading the counts as it stops the others, would wait
#: on it for ever.)
Counts = Any
READ, LOADED = 0, 1


async def _run_workers(
    config: ProjectorConfig,
    schema: str,
    shares: list[list[tuple[TopicPartition, int]]],
    vectors: str,
    progress: Progress,
) -> list[PartitionLoad]:
    """Run one worker process per share and wait for all of them, showing their progress. The
    first failure (an error a worker reports, or a worker that dies without a word) stops the
    others and is raised here; so does this coroutine's cancellation."""
    context = multiprocessing.get_context("spawn")  # never fork a process holding sockets and a loop
    running: list[tuple[multiprocessing.process.BaseProcess, Connection, Counts]] = []  # (worker, its pipe, its counts)
    results: dict[int, PartitionLoad] = {}

    def tally() -> None:
        progress.read = sum(counts[READ] for _, _, counts in running)
        progress.loaded = sum(counts[LOADED] for _, _, counts in running)

    try:
        for share in shares:
            receiver, sender = context.Pipe(duplex=False)
            counts = context.RawArray("q", 2)
            process = context.Process(
                target=_worker,
                args=(config, schema, share, vectors, counts, sender),
                name=f"tickerwire-rebuild-{'-'.join(str(tp.partition) for tp, _ in share)}",
                daemon=True,
            )
            process.start()
            sender.close()
            running.append((process, receiver, counts))
        while len(results) < len(running):
            await asyncio.sleep(_POLL_S)
            for i, (worker, receiver, _) in enumerate(running):
                if i in results:
                    continue
                if receiver.poll():
                    try:
                        outcome, value = receiver.recv()
                    except EOFError:  # its end closed without a word: it died
                        worker.join(timeout=10)
                        raise TickerwireError(_died(worker)) from None
                    if outcome == "error":
                        raise value
                    results[i] = value
                elif not worker.is_alive():
                    raise TickerwireError(_died(worker))
            tally()
            progress.show()
        return [results[i] for i in range(len(running))]
    finally:
        for worker, receiver, _ in running:
            if worker.is_alive():
                worker.terminate()
            worker.join(timeout=10)
            receiver.close()
        tally()


def _died(process: multiprocessing.process.BaseProcess) -> str:
    return f"rebuild worker {process.name} exited with status {process.exitcode} before reporting"


def _worker(
    config: ProjectorConfig,
    schema: str,
    share: list[tuple[TopicPartition, int]],
    vectors: str,
    counts: Counts,
    pipe: Connection,
) -> None:
    """A worker process: reduce and load ``share``, then send ("ok", PartitionLoad) or
    ("error", exception) to the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles an interrupt and stops its workers
    gc.set_threshold(*WORKER_GC_THRESHOLDS)
    setup_logging("rebuild", config.log_level)
    try:
        pipe.send(("ok", asyncio.run(_load_share(config, schema, share, vectors, counts))))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        try:
            pipe.send(("error", exc))
        except Exception:  # noqa: BLE001 - an exception that does not pickle
            pipe.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}")))
    finally:
        pipe.close()


async def _reduce_share(
    config: ProjectorConfig,
    tps: list[TopicPartition],
    ends: dict[TopicPartition, int],
    result: PartitionLoad,
    counts: Counts,
) -> dict[TopicPartition, dict[int, PostPlan]]:
    """The reduce pass over ``tps``: every post's plan, per partition; the poison records go to
    ``result.letters``."""
    started = time.perf_counter()
    plans: dict[TopicPartition, dict[int, PostPlan]] = {tp: {} for tp in tps}
    async for tp, records in _read(config, tps, ends):
        events, poison = decode_records(records, None)  # other types: NotBulkable below
        result.letters.setdefault(tp, []).extend(poison)
        for decoded in events:
            if decoded.event.type != "post":
                raise NotBulkable(
                    f"{tp.topic}[{tp.partition}] offset {decoded.offset} carries a {decoded.event.type} event"
                )
        for p in of_type(events, PostEventV2):
            reduce_event(plans[tp], p)
        result.records += len(records)
        counts[READ] += len(records)
    result.seconds_reduce = time.perf_counter() - started
    result.posts = sum(len(p) for p in plans.values())
    gc.freeze()  # the plans live until the end of the load: never scan them again
    return plans


async def _load_share(
    config: ProjectorConfig, schema: str, share: list[tuple[TopicPartition, int]], vectors: str, counts: Counts
) -> PartitionLoad:
    result = PartitionLoad()
    tps, ends = [tp for tp, _ in share], dict(share)
    plans = await _reduce_share(config, tps, ends, result, counts)

    pool = await create_pool(config.direct_url, schema, min_size=1, max_size=LOADERS)
    try:
        async with pool.acquire() as conn:
            taxonomy = await load_taxonomy(conn)
        queue: asyncio.Queue = asyncio.Queue(maxsize=LOADERS)
        loaders = [asyncio.create_task(_loader(pool, queue, counts, vectors)) for _ in range(LOADERS)]
        try:
            posts_rows: list[tuple] = []
            rows: list[tuple] = []
            for tp in tps:
                by_offset = _wanted(plans[tp])
                held: dict[int, Decoded[PostEventV2]] = {}
                async for _, records in _read(config, [tp], ends):
                    counts[READ] += len(records)
                    wanted = [r for r in records if r.offset in by_offset]
                    events, _ = decode_records(wanted, None)
                    for d in of_type(events, PostEventV2):
                        post_id = by_offset[d.offset]
                        plan = plans[tp][post_id]
                        if d.offset != plan.final:
                            held[d.offset] = d
                            continue
                        post: PostV2 = d.event.data
                        dropped = [(held.pop(o).event.data, langs) for o, langs in sorted(plan.sources().items())]
                        rendered, _ = translation_records(
                            renderings_of(post, plan.announce, dropped), tp.partition, taxonomy
                        )
                        rows.extend(rendered)
                        posts_rows.append(post_record(d))
                        facts = post_facts(post)
                        merge(result.ticker_delta, ticker_deltas(None, facts))
                        merge(result.sentiment_delta, sentiment_deltas(None, facts))
                        if len(rows) >= CHUNK_ROWS:
                            await _put(queue, loaders, (posts_rows, rows))
                            posts_rows, rows = [], []
            if rows or posts_rows:
                await _put(queue, loaders, (posts_rows, rows))
            for _ in loaders:
                await _put(queue, loaders, None)
            await asyncio.gather(*loaders)
            result.rows = counts[LOADED]
        finally:
            for task in loaders:
                task.cancel()
            await asyncio.gather(*loaders, return_exceptions=True)
    finally:
        await pool.close()
    return result


def _wanted(plans: dict[int, PostPlan]) -> dict[int, int]:
    """Offset -> post id of every record the load pass decodes."""
    out: dict[int, int] = {}
    for post_id, plan in plans.items():
        out[plan.final] = post_id
        for offset in plan.sources():
            out[offset] = post_id
    return out


async def _put(queue: asyncio.Queue, loaders: list[asyncio.Task], item) -> None:
    """Queue a chunk, surfacing a loader's failure instead of waiting on a full queue forever."""
    put = asyncio.ensure_future(queue.put(item))
    while not put.done():
        await asyncio.wait([put, *loaders], return_when=asyncio.FIRST_COMPLETED)
        for task in loaders:
            if task.done() and task.exception() is not None:
                put.cancel()
                raise task.exception()  # type: ignore[misc]


#: Where the vector statement's inputs and the copied columns sit in a translation row.
_VECTOR_AT = [TranslationRow.columns().index(c) for c in sql.VECTOR_INPUTS]
_STORED_AT = [TranslationRow.columns().index(c) for c in sql.TRANSLATION_COPY_COLUMNS[:-1]]


def _same(value: bytes) -> bytes:
    return value


async def _loader(pool: asyncpg.Pool, queue: asyncio.Queue, counts: Counts, vectors: str) -> None:
    """Copy chunks in: the posts, then the translations with the vectors ``vectors`` computes
    (or takes from the live schema), each row written once. The vectors pass through this
    process in PostgreSQL's binary form, untouched."""
    async with pool.acquire() as conn:
        await conn.set_type_codec("tsvector", schema="pg_catalog", encoder=_same, decoder=_same, format="binary")
        try:
            while (item := await queue.get()) is not None:
                posts_rows, rows = item
                inputs = [list(range(len(rows)))] + [[row[i] for row in rows] for i in _VECTOR_AT]
                async with conn.transaction():
                    if posts_rows:
                        await conn.copy_records_to_table("posts", records=posts_rows, columns=sql.POST_COLUMNS)
                    computed = await conn.fetch(vectors, *inputs)
                    records = [(*(row[i] for i in _STORED_AT), v["tsv"]) for row, v in zip(rows, computed, strict=True)]
                    await conn.copy_records_to_table(
                        "post_translations", records=records, columns=sql.TRANSLATION_COPY_COLUMNS
                    )
                counts[LOADED] += len(rows)
        finally:
            await conn.reset_type_codec("tsvector", schema="pg_catalog")


@contextlib.asynccontextmanager
async def _maintenance(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    """A session for the work after the load: more sort memory, and statements bounded by
    :data:`MAINTENANCE_TIMEOUT_S` instead of the pool's chunk-statement bound (restored after)."""
    async with pool.acquire() as conn:
        await conn.execute(f"SET maintenance_work_mem = '256MB'; SET statement_timeout = '{MAINTENANCE_TIMEOUT_S}s'")
        try:
            yield conn
        finally:
            await conn.execute("RESET maintenance_work_mem; RESET statement_timeout")


async def build_indexes(pool: asyncpg.Pool, definitions: list[str]) -> None:
    """Build the indexes, ``LOADERS`` at a time, each bounded by :data:`MAINTENANCE_TIMEOUT_S`."""
    pending = list(definitions)

    async def worker() -> None:
        async with _maintenance(pool) as conn:
            while pending:
                definition = pending.pop(0)
                started = time.perf_counter()
                await conn.execute(definition, timeout=MAINTENANCE_TIMEOUT_S)
                if (took := time.perf_counter() - started) >= 10:
                    log.info("rebuild: %s took %.1f s", definition.split(" ON ")[0], took)

    await asyncio.gather(*(worker() for _ in range(LOADERS)))


async def _analyze(pool: asyncpg.Pool, tables: list[str]) -> None:
    async with _maintenance(pool) as conn:
        for table in tables:
            await conn.execute(f"ANALYZE {table}", timeout=MAINTENANCE_TIMEOUT_S)
