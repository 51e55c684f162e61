"""``tickerwire projector rebuild``: replay every topic from the start into a fresh schema, then
switch the readers over in one transaction.

How it runs beside the live system:

1. ``<schema>_next`` (normally ``rm_next``) is dropped if a failed run left it, and migrated.
2. A consumer without a group assigns itself every partition, seeks to the beginning, measures
   the end offsets *once* (``end_offsets``; ``seek_to_end`` is not trusted) and applies batches
   with the projector's own :func:`~.apply.apply_batch` until every partition's position has
   reached its measured end. The API keeps reading the live schema all along.
   A partition whose live position the log does not hold (a log reset) is read to the log's
   end instead of to that position (:mod:`.logread`); no read waits silently.
3. It catches up with the live projector's stored positions, first without any lock, then under
   ``pg_advisory_lock(SWITCH_LOCK)``, taken exclusively on one session. Every live write (each
   projector batch, each badge sweep) takes that lock *shared* at the start of its transaction,
   so once the rebuild holds it no live transaction is running or can start: the live positions
   are frozen, the rebuild applies (on the locking session itself) up to them, and switches.
4. The switch, one transaction: copy the live badge statuses (they are sweeper ticks, not log
   events, and must not fall back to ``unknown``), raise every change stamp above the live one
   (so API caches reload), ``ALTER SCHEMA rm RENAME TO rm_old``, ``ALTER SCHEMA rm_next RENAME
   TO rm``, ``DROP SCHEMA rm_old CASCADE``, and move the ``readmodel:rm_next`` bookkeeping rows
   of ``public.tw_migrations`` to ``readmodel:rm``.
5. The lock is released. Blocked live batches resume; their connections resolve ``rm`` by
   search_path, so they now write the rebuilt tables, whose stored positions are at or past the
   live ones: records already replayed are skipped as redelivered, nothing is lost, nothing is
   applied twice. The API's prepared statements are re-planned by PostgreSQL against the new
   tables (same definitions, same result types), so it keeps answering.

Decision recorded: the live projector is never paused or stopped; the advisory lock only holds
its writes for the few milliseconds of the final catch-up and the switch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Collection

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition

from tickerwire.schemas.topics import POSTS, topic_name

from ..common import kafka
from ..common.db import connect, create_pool, is_migrated, storage_errors
from ..common.kafka.declaration import declared_topics
from ..common.kafka.topicgate import require_safe_topics
from ..common.runtime.errors import TickerwireError
from ..common.runtime.logs import setup_logging
from ..common.runtime.process import command_failed
from ..common.runtime.retry import retry_transient
from ..readmodel import cursors, positions
from ..readmodel.migrate import MIGRATION_LOCK, forget, migrate, renamed
from . import bulk as bulk_mod
from .apply import SWITCH_LOCK, ConsumedRecord, apply_batch
from .bulk import BulkReport, NotBulkable
from .logread import discontinuities, read_until
from .registry import registry_of
from .settings import ProjectorConfig

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RebuildReport:
    schema: str
    records: int = 0
    batches: int = 0
    seconds: float = 0.0
    ends: dict[str, int] = field(default_factory=dict)
    bulk: BulkReport | None = None


def _tps(config: ProjectorConfig) -> list[TopicPartition]:
    return [TopicPartition(d.name, p) for d in declared_topics(config) for p in range(d.partitions)]


class Replayer:
    """A group-less consumer over every partition that applies what it reads into one schema."""

    def __init__(
        self,
        config: ProjectorConfig,
        pool: asyncpg.Pool,
        report: RebuildReport,
        tps: list[TopicPartition] | None = None,
    ) -> None:
        self.config = config
        self.pool = pool
        self.report = report
        self.tps = tps if tps is not None else _tps(config)
        self.consumer: AIOKafkaConsumer | None = None
        #: Post events this replayer applied (the bulk path expects none outside the posts topic).
        self.posts_applied = 0
        #: Per partition, the position this replayer started from or last stored: each batch is
        #: applied only on top of it (a crash of PostgreSQL that lost commits fails the rebuild).
        self.expected: dict[TopicPartition, int] = {}

    async def start(self, positions: dict[TopicPartition, int] | None = None) -> dict[TopicPartition, int]:
        """Assign every partition from the beginning (or from ``positions``); the end offsets."""
        await require_safe_topics(self.config, create=True)  # a rebuild is what lost history would break
        self.consumer = kafka.consumer(
            self.config, group_id=None, client_id="tickerwire-rebuild", max_poll_records=self.config.projector_batch_max
        )
        await self.consumer.start()
        self.consumer.assign(self.tps)
        await self.consumer.seek_to_beginning(*self.tps)
        for tp, offset in (positions or {}).items():
            if offset > 0:
                self.consumer.seek(tp, offset)
                self.expected[tp] = offset
        return await self.consumer.end_offsets(self.tps)

    async def stop(self) -> None:
        if self.consumer is not None:
            await self.consumer.stop()

    async def until(self, targets: dict[TopicPartition, int], conn: asyncpg.Connection | None = None) -> None:
        """Apply until each partition's consumer position reaches its target offset.

        ``conn`` None applies through the pool; the final catch-up passes the session that
        holds the switch lock (its own shared lock does not conflict with it)."""
        assert self.consumer is not None
        wanted = {tp: targets.get(tp, 0) for tp in self.tps}
        registry = registry_of(
            self.config.projector_schema_registry_url, self.config.projector_schema_registry_timeout_s
        )
        try:
            async for tp, records in read_until(
                self.consumer, wanted, max_records=self.config.projector_batch_max, registry=registry
            ):
                await self._apply(tp, records, conn)
        finally:
            if registry is not None:
                await registry.close()

    async def _apply(self, tp: TopicPartition, records: list[ConsumedRecord], conn: asyncpg.Connection | None) -> None:
        expected = self.expected.get(tp)

        async def attempt():
            with storage_errors(f"rebuild {tp.topic}[{tp.partition}]"):
                if conn is not None:
                    return await apply_batch(conn, tp.topic, tp.partition, records, expected=expected)
                async with self.pool.acquire() as c:
                    return await apply_batch(c, tp.topic, tp.partition, records, expected=expected)

        try:
            result = await retry_transient(attempt, what=f"rebuild {tp.topic}[{tp.partition}]")
        except positions.PositionMovedBack as exc:
            raise TickerwireError(f"{exc}; nothing was switched: run the rebuild again") from None
        if result.position is not None:
            self.expected[tp] = result.position
        self.posts_applied += result.applied.get("post", 0)
        self.report.records += len(records)
        self.report.batches += 1


async def _live_positions(
    conn: asyncpg.Connection,
    live: str,
    tps: list[TopicPartition],
    lost: Collection[TopicPartition] = (),
) -> dict[TopicPartition, int]:
    """The live schema's stored positions, as targets to catch up with: 0 for the ``lost``
    partitions, whose stored positions the log does not hold."""
    stored = await positions.load(conn, schema=live)
    return {tp: 0 if tp in lost else stored.get((tp.topic, tp.partition), 0) for tp in tps}


async def _lost(config: ProjectorConfig, live: str, tps: list[TopicPartition]) -> set[TopicPartition]:
    """The partitions whose live position the log does not hold (a log reset, a re-created
    topic, records deleted unread). A rebuild is a way out of that state, so it reads them to
    the log's end instead of catching up with positions that will never come."""
    async with connect(config.direct_url) as conn:
        stored = await _live_positions(conn, live, tps)
    gaps = await discontinuities(config, stored)
    for gap in gaps.values():
        log.warning("rebuild: %s; that partition is rebuilt from the log as it is now", gap.reason)
    return set(gaps)


async def _switch(conn: asyncpg.Connection, live: str, target: str) -> None:
    old = f"{live}_old"
    async with conn.transaction():
        await conn.execute("SET LOCAL lock_timeout = '30s'")
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)  # no migrate() meanwhile
        live_exists = await is_migrated(conn, live)
        if live_exists:
            await conn.execute(f"""
                UPDATE "{target}".workspaces n SET badge_status = o.badge_status, badge_swept_at = o.badge_swept_at
                FROM "{live}".workspaces o WHERE o.id = n.id""")
            await conn.execute(f"""
                UPDATE "{target}".change_stamps n SET stamp = n.stamp + o.stamp + 1
                FROM "{live}".change_stamps o WHERE o.name = n.name""")
            await conn.execute(f'DROP SCHEMA IF EXISTS "{old}" CASCADE')
            await conn.execute(f'ALTER SCHEMA "{live}" RENAME TO "{old}"')
        await conn.execute(f'ALTER SCHEMA "{target}" RENAME TO "{live}"')
        if live_exists:
            await conn.execute(f'DROP SCHEMA "{old}" CASCADE')
        await renamed(conn, target, live)


async def prepare_schema(conn: asyncpg.Connection, schema: str) -> None:
    """A brand-new, migrated ``schema`` (whatever a failed earlier run left is dropped)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await forget(conn, schema)
    await migrate(conn, schema)


async def replay_into(
    config: ProjectorConfig,
    schema: str,
    *,
    switch_from: str | None = None,
    catch_up_with: str | None = None,
    bulk: bool = False,
) -> RebuildReport:
    """Replay the whole log into a fresh ``schema``; with ``catch_up_with``, also until the stored
    positions of that schema; with ``switch_from``, catch up with that live schema under the
    switch lock and take its place. ``bulk`` loads the posts topic with COPY (:mod:`.bulk`)
    instead of event by event; the result is the same read model."""
    if bulk:
        try:
            return await _replay_into(config, schema, switch_from, catch_up_with, bulk=True)
        except NotBulkable as exc:
            log.error("rebuild: the bulk load does not apply (%s); replaying event by event instead", exc)
    return await _replay_into(config, schema, switch_from, catch_up_with, bulk=False)


async def _replay_into(
    config: ProjectorConfig, schema: str, switch_from: str | None, catch_up_with: str | None, *, bulk: bool
) -> RebuildReport:
    report = RebuildReport(schema)
    started = time.perf_counter()
    async with connect(config.direct_url) as admin:
        await prepare_schema(admin, schema)
    pool = await create_pool(config.direct_url, schema, min_size=1, max_size=bulk_mod.LOADERS)
    replayer = Replayer(config, pool, report)
    try:
        live = switch_from or catch_up_with
        lost = await _lost(config, live, replayer.tps) if live else set()
        if bulk:
            async with connect(config.direct_url) as conn:
                floor = await _live_positions(conn, live, replayer.tps, lost) if live else {}
            await _bulk(config, pool, schema, report, floor, live)
            async with pool.acquire() as conn:
                stored = await _live_positions(conn, schema, replayer.tps)
            ends = await replayer.start(stored)
        else:
            ends = await replayer.start()
        report.ends = {f"{tp.topic}[{tp.partition}]": end for tp, end in ends.items()}
        log.info("rebuild: replaying %d records into %s", sum(ends.values()), schema)
        await replayer.until(ends)
        if catch_up_with is not None:
            async with connect(config.direct_url) as conn:
                await replayer.until(await _live_positions(conn, catch_up_with, replayer.tps, lost))
        if switch_from is not None:
            async with connect(config.direct_url, schema=schema) as conn:
                await replayer.until(
                    await _live_positions(conn, switch_from, replayer.tps, lost)
                )  # unlocked, most of the gap
                # Records applied from here on are applied alike to both schemas.
                if not await cursors.carry_epoch(conn, switch_from, schema):
                    log.warning(
                        "rebuild: announcement positions differ from the live read model's (a reset or "
                        "trimmed log); resume cursors of the old epoch will be refused after the switch"
                    )
                await conn.execute("SELECT pg_advisory_lock($1)", SWITCH_LOCK)
                try:
                    await replayer.until(await _live_positions(conn, switch_from, replayer.tps, lost), conn)
                    await _switch(conn, switch_from, schema)
                finally:
                    await conn.execute("SELECT pg_advisory_unlock($1)", SWITCH_LOCK)
            report.schema = switch_from
    finally:
        await replayer.stop()
        await pool.close()
    report.seconds = time.perf_counter() - started
    return report


async def _bulk(
    config: ProjectorConfig,
    pool: asyncpg.Pool,
    schema: str,
    report: RebuildReport,
    floor: dict[TopicPartition, int],
    live: str | None,
) -> None:
    """The catalog and access topics event by event, then the posts topic bulk-loaded up to its
    end offsets, or to the live positions (``floor``) where those are further (a broker's end
    offsets can lag behind what it has served)."""
    posts = topic_name(config.topic_prefix, POSTS)
    tps = _tps(config)
    others = Replayer(config, pool, report, [tp for tp in tps if tp.topic != posts])
    try:
        ends = await others.start()
        post_tps = [tp for tp in tps if tp.topic == posts]
        measured = await others.consumer.end_offsets(post_tps)  # type: ignore[union-attr]
        post_ends = {tp: max(measured.get(tp, 0), floor.get(tp, 0)) for tp in post_tps}
        await others.until(ends)
        if others.posts_applied:
            raise NotBulkable(f"{others.posts_applied} post events outside {posts}")
    finally:
        await others.stop()
    loaded = await bulk_mod.bulk_load_posts(config, pool, schema, post_tps, post_ends, reuse_from=live)
    report.records += loaded.records
    report.bulk = loaded


async def rebuild(config: ProjectorConfig, *, bulk: bool = True) -> RebuildReport:
    live = config.read_model_schema
    return await replay_into(config, f"{live}_next", switch_from=live, bulk=bulk)


def rebuild_main(config: ProjectorConfig) -> int:
    setup_logging("rebuild", config.log_level)
    try:
        report = asyncio.run(rebuild(config))
    except Exception as exc:  # one line, never a traceback: 2 a setting, 1 the rest
        return command_failed("projector rebuild", exc)
    loaded = f", {report.bulk.rows} translation rows bulk-loaded" if report.bulk else ""
    print(f"rebuilt {report.schema} from {report.records} records{loaded} ({report.seconds:.1f}s); switched")
    return 0
