"""Applying one batch of one partition to the read model, in one transaction.

The batch's events, its dead letters and the partition's new position commit together, so
a crash at any point leaves either all of the batch or none of it. Every entity carries a
version: an event whose version is not newer than the stored one changes nothing, which
makes redelivery, duplicates and out-of-order replays harmless.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable

import asyncpg
import orjson

from tickerwire.schemas.models import (
    ApiKeyEvent,
    Category,
    CategoryEvent,
    EmbedEvent,
    HeartbeatEvent,
    InvalidEvent,
    LocaleEvent,
    Post,
    PostEvent,
    TokenEvent,
    WorkspaceEvent,
    decode_event,
    entity_key,
)
from tickerwire.schemas.readmodel import Taxonomy, translation_rows

from . import sql
from .derive import PostFacts, merge, sentiment_deltas, ticker_deltas

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Record:
    """One log record as the projector sees it (a thin copy of the consumer's record)."""

    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    offset: int
    key: bytes | None
    value: bytes | None
    kind: str
    reason: str


@dataclass(slots=True)
class BatchResult:
    """What a committed batch did, for metrics and for the caller's bookkeeping."""

    applied: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    stale: int = 0
    skipped_redelivered: int = 0
    dead: list[DeadLetter] = field(default_factory=list)
    newest_emitted_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Decoded:
    offset: int
    event: Any


def decode_records(records: Iterable[Record]) -> tuple[list[Decoded], list[DeadLetter]]:
    """Decode at the edge: typed events, and poison records set aside with their reason."""
    events: list[Decoded] = []
    dead: list[DeadLetter] = []
    for rec in records:
        if rec.value is None:
            dead.append(DeadLetter(rec.offset, rec.key, rec.value, "undecodable", "record has no value (tombstone)"))
            continue
        try:
            events.append(Decoded(rec.offset, decode_event(rec.value)))
        except InvalidEvent as exc:
            dead.append(DeadLetter(rec.offset, rec.key, rec.value, exc.kind, exc.reason))
    return events, dead


def latest_per_entity(events: Iterable[Decoded]) -> list[Decoded]:
    """Within one batch only the highest version of each entity matters (ties: the later offset)."""
    best: dict[str, Decoded] = {}
    for d in events:
        key = entity_key(d.event)
        cur = best.get(key)
        if cur is None or d.event.version >= cur.event.version:
            best[key] = d
    return sorted(best.values(), key=lambda d: d.offset)


async def apply_batch(
    conn: asyncpg.Connection, topic: str, partition: int, records: list[Record]
) -> BatchResult:
    """Apply ``records`` (consecutive offsets of one partition) and store the new position."""
    result = BatchResult()
    if not records:
        return result
    async with conn.transaction():
        await conn.execute(sql.LOCK_POSITION, topic, partition)
        stored = await conn.fetchval(sql.SELECT_POSITION_FOR_UPDATE, topic, partition)
        fresh = [r for r in records if r.offset >= stored]
        result.skipped_redelivered = len(records) - len(fresh)
        if not fresh:
            return result
        events, dead = decode_records(fresh)
        result.dead = dead
        if dead:
            await conn.executemany(
                sql.INSERT_DEAD_LETTER, [(topic, partition, d.offset, d.key, d.value, d.kind, d.reason) for d in dead]
            )
        by_type: dict[str, list[Decoded]] = defaultdict(list)
        for d in latest_per_entity(events):
            by_type[d.event.type].append(d)
            emitted = d.event.emitted_at
            if result.newest_emitted_at is None or emitted > result.newest_emitted_at:
                result.newest_emitted_at = emitted
        stamps: set[str] = set()
        # Catalog first, so posts in the same batch see the categories and locales before them.
        await _apply_locales(conn, by_type["locale"], result, stamps)
        await _apply_categories(conn, by_type["category"], result, stamps)
        await _apply_tokens(conn, by_type["token"], result, stamps)
        await _apply_posts(conn, partition, by_type["post"], result, stamps)
        await _apply_access(conn, by_type, result, stamps)
        if stamps:
            await conn.execute(sql.BUMP_STAMPS, sorted(stamps))
        await conn.execute(sql.SAVE_POSITION, topic, partition, fresh[-1].offset + 1)
    return result


# --------------------------------------------------------------------------- posts


async def load_taxonomy(conn: asyncpg.Connection) -> Taxonomy:
    rows = await conn.fetch(sql.SELECT_TAXONOMY)
    cats = {
        r["slug"]: Category(
            slug=r["slug"],
            is_group=r["is_group"],
            group_slug=r["group_slug"],
            position=r["position"],
            names=orjson.loads(r["names"]),
        )
        for r in rows
    }
    default = await conn.fetchval(sql.SELECT_DEFAULT_LOCALE) or "en-US"
    return Taxonomy(cats, default)


def _facts(post: Post) -> PostFacts:
    return PostFacts(post.status.value, post.published_at, post.sentiment.value, post.tickers)


async def _apply_posts(
    conn: asyncpg.Connection, partition: int, items: list[Decoded], result: BatchResult, stamps: set[str]
) -> None:
    if not items:
        return
    ids = [d.event.data.id for d in items]
    old = {r["id"]: r for r in await conn.fetch(sql.SELECT_POSTS_FOR_UPDATE, ids)}
    newer = [d for d in items if d.event.data.id not in old or old[d.event.data.id]["version"] < d.event.version]
    result.stale += len(items) - len(newer)
    if not newer:
        return
    ticker_delta: dict[str, int] = {}
    sentiment_delta: dict[tuple[datetime, str], int] = {}
    for d in newer:
        post: Post = d.event.data
        prev = old.get(post.id)
        prev_facts = (
            PostFacts(prev["status"], prev["published_at"], prev["sentiment"], tuple(prev["tickers"])) if prev else None
        )
        merge(ticker_delta, ticker_deltas(prev_facts, _facts(post)))
        merge(sentiment_delta, sentiment_deltas(prev_facts, _facts(post)))
    await conn.executemany(
        sql.UPSERT_POST,
        [
            (
                d.event.data.id,
                d.event.version,
                d.event.data.status.value,
                d.event.data.published_at,
                d.event.data.sentiment.value,
                d.event.data.importance,
                list(d.event.data.tickers),
                d.event.data.model_dump_json(),
            )
            for d in newer
        ],
    )
    await write_translations(conn, [(d.event.data, d.offset) for d in newer], partition, await load_taxonomy(conn))
    # Sorted, so that concurrent projectors lock shared counter rows in one order.
    if ticker_delta:
        await conn.executemany(sql.APPLY_TICKER_DELTA, sorted(ticker_delta.items()))
        stamps.add("tokens")
    if sentiment_delta:
        await conn.executemany(sql.APPLY_SENTIMENT_DELTA, [(b, s, n) for (b, s), n in sorted(sentiment_delta.items())])
    result.applied["post"] += len(newer)


async def write_translations(
    conn: asyncpg.Connection, posts: list[tuple[Post, int | None]], partition: int | None, taxonomy: Taxonomy
) -> None:
    """Upsert every locale row of each post; ``offset`` None means "re-render, announce nothing"."""
    rows = []
    kept_ids: list[int] = []
    kept_langs: list[str] = []
    for post, offset in posts:
        for r in translation_rows(post, taxonomy):
            announce = r.visible and offset is not None
            rows.append(
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
                    r.ts_config,
                    r.title,
                    r.lede,
                    r.body,
                    r.lean.decode(),
                    r.detail.decode(),
                    partition if announce else None,
                    offset if announce else None,
                )
            )
            kept_ids.append(r.post_id)
            kept_langs.append(r.lang)
    await conn.executemany(sql.UPSERT_TRANSLATION, rows)
    await conn.execute(sql.HIDE_DROPPED_TRANSLATIONS, [p.id for p, _ in posts], kept_ids, kept_langs)


# --------------------------------------------------------------------------- catalog


async def _apply_locales(conn, items: list[Decoded], result: BatchResult, stamps: set[str]) -> None:
    if not items:
        return
    await conn.executemany(
        sql.UPSERT_LOCALE,
        [
            (l.code, d.event.version, l.name, l.native_name, l.country_code, l.direction, l.active, l.web_channel,
             l.is_default, l.position)
            for d in items
            for l in [d.event.data]
        ],
    )
    result.applied["locale"] += len(items)
    stamps.add("locales")


async def _apply_categories(conn, items: list[Decoded], result: BatchResult, stamps: set[str]) -> None:
    if not items:
        return
    changed: list[str] = []
    for d in items:
        c = d.event.data
        slug = await conn.fetchval(
            sql.UPSERT_CATEGORY, c.slug, d.event.version, c.is_group, c.group_slug, c.position, orjson.dumps(c.names).decode()
        )
        if slug is not None:
            changed.append(slug)
    result.applied["category"] += len(changed)
    result.stale += len(items) - len(changed)
    if changed:
        stamps.add("categories")
        await rerender_posts_for_categories(conn, changed)


async def rerender_posts_for_categories(conn: asyncpg.Connection, changed: list[str]) -> None:
    """Localized category names and group membership are denormalized into post rows:
    re-render the posts that reference a changed category (or a leaf of a changed group)."""
    taxonomy = await load_taxonomy(conn)
    affected = set(changed) | {c.slug for c in taxonomy.categories.values() if c.group_slug in changed}
    rows = await conn.fetch(sql.SELECT_POST_SNAPSHOTS_BY_CATEGORY, sorted(affected))
    if rows:
        posts = [(Post.model_validate_json(r["snapshot"]), None) for r in rows]
        await write_translations(conn, posts, None, taxonomy)


async def _apply_tokens(conn, items: list[Decoded], result: BatchResult, stamps: set[str]) -> None:
    if not items:
        return
    await conn.executemany(
        sql.UPSERT_TOKEN,
        [
            (
                t.ticker,
                d.event.version,
                t.name,
                t.logo_url,
                t.market_cap_rank,
                list(t.exchange_listings),
                list(t.categories),
                t.genesis_date,
                t.primary_ecosystem.model_dump_json() if t.primary_ecosystem else None,
                t.homepage_url,
                t.description,
            )
            for d in items
            for t in [d.event.data]
        ],
    )
    result.applied["token"] += len(items)
    stamps.add("tokens")


# --------------------------------------------------------------------------- access


async def _apply_access(conn, by_type: dict[str, list[Decoded]], result: BatchResult, stamps: set[str]) -> None:
    statements: list[tuple[str, str, list[tuple]]] = [
        (
            "workspace",
            sql.UPSERT_WORKSPACE,
            [
                (w.id, d.event.version, w.name, w.status, w.rate_limit_per_minute, w.daily_quota,
                 w.stream_connection_limit)
                for d in by_type["workspace"]
                for w in [d.event.data]
            ],
        ),
        (
            "api_key",
            sql.UPSERT_API_KEY,
            [
                (k.id, d.event.version, k.workspace_id, k.key_hash, k.display_prefix, k.issued_at, k.revoked_at)
                for d in by_type["api_key"]
                for k in [d.event.data]
            ],
        ),
        (
            "embed",
            sql.UPSERT_EMBED,
            [
                (e.id, d.event.version, e.workspace_id, e.kind, e.created_at)
                for d in by_type["embed"]
                for e in [d.event.data]
            ],
        ),
        (
            "heartbeat",
            sql.UPSERT_HEARTBEAT,
            [(h.embed_id, h.workspace_id, h.landed_at) for d in by_type["heartbeat"] for h in [d.event.data]],
        ),
    ]
    for kind, statement, rows in statements:
        if rows:
            await conn.executemany(statement, rows)
            result.applied[kind] += len(rows)
            stamps.add("access")
