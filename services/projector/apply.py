"""Applying one batch of one partition to the read model, in one transaction.

The batch's events, its dead letters and the partition's new position commit together, so
a crash at any point leaves either all of the batch or none of it. Every entity carries a
version: an event whose version is not newer than the stored one changes nothing, which
makes redelivery, duplicates and out-of-order replays harmless.

The result never depends on how the log was cut into batches: within a batch an entity's
events are reduced to the chain a one-by-one replay would have applied (each version higher
than everything before it), and a translation's announcement is the first event of that
chain that made it visible, exactly as if every event were its own batch.

Two advisory locks order concurrent writers (several projectors, the sweeper, a rebuild):

* ``SWITCH_LOCK``, taken shared by every read-model transaction and exclusively by
  ``tickerwire projector rebuild`` while it swaps schemas (see :mod:`.rebuild`);
* ``TAXONOMY_LOCK``, taken exclusively by a batch that changes categories or locales and
  shared by a batch that writes posts, before any post row is locked. Post rows embed
  localized category names, so a post written concurrently with a category change would
  otherwise keep the old names (the re-render would not see the uncommitted post).
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Collection, Generic, Iterable, TypeVar

import asyncpg
import orjson

from tickerwire.schemas.models import (
    ApiKeyEvent,
    CategoryEvent,
    EmbedEvent,
    HeartbeatEvent,
    InvalidEvent,
    LocaleEvent,
    PostEventV2,
    PostV2,
    TokenEvent,
    WebhookEndpointEvent,
    WorkspaceEvent,
    decode_event,
    entity_key,
)

from ..common.db import begin_local
from ..readmodel import positions, stamps as stamp
from ..readmodel.mapping import Taxonomy, is_visible, translation_rows
from ..readmodel.taxonomy import load_default_locale
from ..readmodel.upcast import ProjectedEvent, stored_post, upcast
from . import sql
from .catalog import load_taxonomy
from .derive import CounterDeltas, PostFacts, merge, sentiment_deltas, ticker_deltas
from .event_rows import (
    api_key_row,
    embed_row,
    heartbeat_row,
    locale_row,
    post_row,
    token_row,
    webhook_endpoint_row,
    workspace_row,
)
from .rows import (
    ApiKeyRow,
    EmbedRow,
    HeartbeatRow,
    LocaleRow,
    PostRow,
    TokenRow,
    TranslationRow,
    WebhookEndpointRow,
    WorkspaceRow,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """One log record as the projector sees it (a thin copy of the consumer's record)."""

    offset: int
    key: bytes | None
    value: bytes | None
    #: (reason kind, reason) of a record the consumer could not decode (:func:`..common.kafka.fetch`):
    #: it has no key nor value, and is dead-lettered as such.
    fault: tuple[str, str] | None = None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    offset: int
    key: bytes | None
    value: bytes | None
    kind: str
    reason: str

    def row(self, topic: str, partition: int) -> tuple:
        """The arguments of ``sql.INSERT_DEAD_LETTER`` for this letter of ``topic[partition]``."""
        return (topic, partition, self.offset, self.key, self.value, self.kind, self.reason)


@dataclass(slots=True)
class BatchResult:
    """What a committed batch did, for metrics and for the caller's bookkeeping."""

    applied: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    stale: int = 0
    skipped_redelivered: int = 0
    dead: list[DeadLetter] = field(default_factory=list)
    newest_emitted_at: datetime | None = None
    #: The partition's stored position after the batch (None for an empty batch).
    position: int | None = None


E = TypeVar("E", bound=ProjectedEvent)


@dataclass(frozen=True, slots=True)
class Decoded(Generic[E]):
    offset: int
    event: E


def of_type(events: Iterable[Decoded[ProjectedEvent]], model: type[E]) -> list[Decoded[E]]:
    """The events of one type, typed as such."""
    out: list[Decoded[E]] = []
    for d in events:
        event = d.event
        if isinstance(event, model):
            out.append(Decoded(d.offset, event))
    return out


def decode_records(
    records: Iterable[ConsumedRecord], topic: str | None
) -> tuple[list[Decoded[ProjectedEvent]], list[DeadLetter]]:
    """Decode at the edge: typed events in the one version the projector maps (every older
    version upcast, :mod:`..readmodel.upcast`), and poison records set aside with their reason.

    ``topic``: the records' topic; an event whose type travels on another topic (the registry
    in ``schemas/models.py``) is set aside as ``wrong_topic``: applied, a post there would be
    listed but never pushed (the stream reads only the posts topic), and a rebuild could not
    bulk-load it. None skips that check (the bulk load refuses such records itself)."""
    events: list[Decoded[ProjectedEvent]] = []
    dead: list[DeadLetter] = []
    for rec in records:
        if rec.fault is not None:
            dead.append(DeadLetter(rec.offset, rec.key, rec.value, *rec.fault))
            continue
        if rec.value is None:
            dead.append(DeadLetter(rec.offset, rec.key, rec.value, "undecodable", "record has no value (tombstone)"))
            continue
        try:
            event = upcast(decode_event(rec.value))
        except InvalidEvent as exc:
            dead.append(DeadLetter(rec.offset, rec.key, rec.value, exc.kind, exc.reason))
            continue
        home = type(event).topic.suffix
        if topic is not None and not topic.endswith("." + home):
            dead.append(
                DeadLetter(
                    rec.offset,
                    rec.key,
                    rec.value,
                    "wrong_topic",
                    f"a {event.type} event belongs on the {home} topic, not on {topic}",
                )
            )
            continue
        events.append(Decoded(rec.offset, event))
    return events, dead


def latest_per_entity(events: Iterable[Decoded[E]]) -> list[Decoded[E]]:
    """Within one batch only the highest version of each entity matters (ties: the later offset)."""
    best: dict[str, Decoded[E]] = {}
    for d in events:
        key = entity_key(d.event)
        cur = best.get(key)
        # Strictly greater: of two events with one version the first wins, as one by one.
        if cur is None or d.event.version > cur.event.version:
            best[key] = d
    return sorted(best.values(), key=lambda d: d.offset)


def applied_chain(events: Iterable[Decoded[E]], stored_version: int) -> list[Decoded[E]]:
    """The events (offset order) that a one-by-one replay would apply over ``stored_version``."""
    chain: list[Decoded[E]] = []
    high = stored_version
    for d in sorted(events, key=lambda d: d.offset):
        if d.event.version > high:
            chain.append(d)
            high = d.event.version
    return chain


@dataclass(frozen=True, slots=True)
class Rendering:
    """Translation rows to write from one post snapshot: all its locales (``langs`` None) or
    some, ``hidden`` forcing them invisible; ``announce`` maps a locale to the offset that
    first showed it (empty: announce nothing)."""

    post: PostV2
    announce: dict[str, int] = field(default_factory=dict)
    langs: frozenset[str] | None = None
    hidden: bool = False


def chain_renderings(chain: list[Decoded[PostEventV2]]) -> list[Rendering]:
    """What a one-by-one replay of ``chain`` leaves in post_translations: the last snapshot's
    rows, plus a hidden row (from the last snapshot that had it) for each locale shown earlier
    in the chain and dropped since, so its announcement is remembered as it would have been."""
    final: PostV2 = chain[-1].event.data
    final_langs = {tr.lang for tr in final.translations}
    dropped: dict[int, tuple[PostV2, set[str]]] = {}
    for lang in sorted({tr.lang for d in chain for tr in d.event.data.translations} - final_langs):
        source = next(d for d in reversed(chain) if any(tr.lang == lang for tr in d.event.data.translations))
        dropped.setdefault(source.offset, (source.event.data, set()))[1].add(lang)
    return renderings_of(final, first_visible_offsets(chain), [dropped[o] for o in sorted(dropped)])


def renderings_of(final: PostV2, announce: dict[str, int], dropped: list[tuple[PostV2, set[str]]]) -> list[Rendering]:
    """The final snapshot's rows, and hidden rows of each dropped locale from ``dropped``
    (source snapshot, its locales), in offset order; ``announce`` covers every locale."""
    out = [Rendering(final, announce)]
    for source, langs in dropped:
        out.append(Rendering(source, {l: announce[l] for l in langs if l in announce}, frozenset(langs), True))
    return out


def first_visible_offsets(chain: list[Decoded[PostEventV2]]) -> dict[str, int]:
    """Per locale, the offset of the first event of ``chain`` that showed that translation."""
    out: dict[str, int] = {}
    for d in chain:
        post: PostV2 = d.event.data
        if is_visible(post):
            for tr in post.translations:
                out.setdefault(tr.lang, d.offset)
    return out


SWITCH_LOCK = 0x7477_7377  # "twsw"
TAXONOMY_LOCK = 0x7477_7478  # "twtx"


async def apply_batch(
    conn: asyncpg.Connection,
    topic: str,
    partition: int,
    records: list[ConsumedRecord],
    *,
    expected: int | None = None,
) -> BatchResult:
    """Apply ``records`` (consecutive offsets of one partition) and store the new position.

    ``expected``: the stored position the records were fetched from; a stored position behind
    it raises :class:`~..readmodel.positions.PositionMovedBack` and nothing is written."""
    result = BatchResult()
    if not records:
        return result
    async with conn.transaction():
        await begin_local(conn)
        await conn.execute(sql.ADVISORY_XACT_LOCK_SHARED, SWITCH_LOCK)
        stored = await positions.lock(conn, topic, partition, expected=expected)
        fresh = [r for r in records if r.offset >= stored]
        result.skipped_redelivered = len(records) - len(fresh)
        result.position = stored
        if not fresh:
            return result
        events, dead = decode_records(fresh, topic)
        result.dead = dead
        if dead:
            await conn.executemany(sql.INSERT_DEAD_LETTER, [d.row(topic, partition) for d in dead])
        posts: dict[int, list[Decoded[PostEventV2]]] = defaultdict(list)
        for p in of_type(events, PostEventV2):
            posts[p.event.data.id].append(p)
        latest = latest_per_entity(d for d in events if d.event.type != "post")
        locales, categories = of_type(latest, LocaleEvent), of_type(latest, CategoryEvent)
        for d in events:
            emitted = d.event.emitted_at
            if result.newest_emitted_at is None or emitted > result.newest_emitted_at:
                result.newest_emitted_at = emitted
        stamps: set[str] = set()
        # Catalog first, so posts in the same batch see the categories and locales before them.
        if locales or categories:
            await conn.execute(sql.ADVISORY_XACT_LOCK, TAXONOMY_LOCK)
        elif posts:
            await conn.execute(sql.ADVISORY_XACT_LOCK_SHARED, TAXONOMY_LOCK)
        default_changed = await _apply_locales(conn, locales, result, stamps)
        await _rerender_for_catalog(conn, default_changed, await _apply_categories(conn, categories, result, stamps))
        await _apply_tokens(conn, of_type(latest, TokenEvent), result, stamps)
        counters = CounterDeltas()
        await _apply_posts(conn, partition, posts, result, stamps, counters)
        await _apply_access(conn, latest, result, stamps)
        # Last, and in one statement right before the commit: the rows that batches of other
        # partitions write too (counters, change stamps), so their row locks are held for
        # one statement and the commit, not across round trips of this batch.
        result.position = fresh[-1].offset + 1
        await conn.execute(sql.FINISH_BATCH, topic, partition, result.position, *counters.columns(), sorted(stamps))
    return result


# --------------------------------------------------------------------------- posts


async def reject_record(
    conn: asyncpg.Connection,
    topic: str,
    partition: int,
    record: ConsumedRecord,
    reason: str,
    *,
    expected: int | None = None,
) -> bool:
    """Set aside one record the read model refuses (a constraint violation) and move past it
    (``expected`` as for :func:`apply_batch`).

    Returns False if the position had already passed it (nothing to do)."""
    async with conn.transaction():
        await begin_local(conn)
        await conn.execute(sql.ADVISORY_XACT_LOCK_SHARED, SWITCH_LOCK)
        stored = await positions.lock(conn, topic, partition, expected=expected)
        if record.offset < stored:
            return False
        await conn.execute(
            sql.INSERT_DEAD_LETTER, topic, partition, record.offset, record.key, record.value, "rejected", reason
        )
        await positions.save(conn, topic, partition, record.offset + 1)
    return True


def post_facts(post: PostV2) -> PostFacts:
    return PostFacts(post.status.value, post.published_at, post.sentiment.value, post.symbols)


async def _apply_posts(
    conn: asyncpg.Connection,
    partition: int,
    chains: dict[int, list[Decoded[PostEventV2]]],
    result: BatchResult,
    stamps: set[str],
    counters: CounterDeltas,
) -> None:
    if not chains:
        return
    old = {r["id"]: r for r in await conn.fetch(sql.SELECT_POSTS_FOR_UPDATE, sorted(chains))}
    newer: list[Decoded[PostEventV2]] = []
    renderings: list[Rendering] = []
    for post_id in sorted(chains):
        events = chains[post_id]
        chain = applied_chain(events, old[post_id]["version"] if post_id in old else 0)
        result.stale += len(events) - len(chain)
        if chain:
            newer.append(chain[-1])
            renderings.extend(chain_renderings(chain))
    if not newer:
        return
    for d in newer:
        post: PostV2 = d.event.data
        prev = old.get(post.id)
        prev_facts = (
            PostFacts(prev["status"], prev["published_at"], prev["sentiment"], tuple(prev["tickers"])) if prev else None
        )
        facts = post_facts(post)
        merge(counters.tickers, ticker_deltas(prev_facts, facts))
        merge(counters.sentiment, sentiment_deltas(prev_facts, facts))
    await conn.execute(sql.UPSERT_POSTS, *PostRow.batch_arrays([post_record(d) for d in newer]))
    # A post without a stored row has no stored locale rows either: none to hide.
    await write_translations(conn, renderings, partition, await load_taxonomy(conn), stored=old.keys())
    if counters.tickers:
        stamps.add(stamp.TOKENS)
    result.applied["post"] += len(newer)
    stamps.add(stamp.POSTS)  # the API's page cache drops what it holds


def post_record(d: Decoded[PostEventV2]) -> tuple:
    """The posts row of one post event (the columns of ``sql.UPSERT_POSTS``)."""
    return post_row(d.event).values()


async def write_translations(
    conn: asyncpg.Connection,
    renderings: list[Rendering],
    partition: int | None,
    taxonomy: Taxonomy,
    *,
    stored: Collection[int] | None = None,
) -> None:
    """Upsert the locale rows of each rendering, then hide the rows of locales a post no longer
    has (``stored``: the posts that may have stored rows; None: every post rendered). A stored
    announcement always wins over a new one. One statement writes every row (a post's
    translations have distinct locales, and a post is rendered once per call)."""
    rows, kept = translation_records(renderings, partition, taxonomy)
    if rows:
        await conn.execute(sql.UPSERT_TRANSLATIONS, *TranslationRow.batch_arrays(rows))
    hide = sorted(kept.items() if stored is None else ((p, langs) for p, langs in kept.items() if p in stored))
    if hide:
        await conn.executemany(sql.HIDE_DROPPED_TRANSLATIONS, hide)


def translation_records(
    renderings: list[Rendering], partition: int | None, taxonomy: Taxonomy
) -> tuple[list[tuple], dict[int, list[str]]]:
    """The values of ``sql.UPSERT_TRANSLATIONS`` for each locale row of ``renderings``, and
    per post the locales that stay visible (every rendered post is a key)."""
    rows = []
    kept: dict[int, list[str]] = {}
    for rendering in renderings:
        for r in translation_rows(rendering.post, taxonomy):
            if rendering.langs is not None and r.lang not in rendering.langs:
                continue
            offset = rendering.announce.get(r.lang)
            announce = offset is not None
            rows.append(
                TranslationRow.written(
                    r,
                    visible=r.visible and not rendering.hidden,
                    announced_partition=partition if announce else None,
                    announced_offset=offset if announce else None,
                    text_hash=text_hash(r.ts_config, r.title, r.lede, r.body),
                ).values()
            )
            if not rendering.hidden:
                kept.setdefault(r.post_id, []).append(r.lang)
        kept.setdefault(rendering.post.id, [])
    return rows, kept


def text_hash(config: str, title: str, lede: str, body: str) -> bytes:
    """What the stored tsvector was computed from: equal hashes, equal vectors."""
    h = hashlib.blake2b(digest_size=16)
    for part in (config, title, lede, body):
        data = part.encode()
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.digest()


# --------------------------------------------------------------------------- catalog


async def _apply_locales(
    conn: asyncpg.Connection, items: list[Decoded[LocaleEvent]], result: BatchResult, stamps: set[str]
) -> bool:
    """Returns whether the default locale changed."""
    if not items:
        return False
    default_before = await load_default_locale(conn)
    codes = await conn.fetch(sql.UPSERT_LOCALE, *LocaleRow.arrays([locale_row(d.event) for d in items]))
    _count(result, "locale", len(items), len(codes))
    if not codes:
        return False
    stamps.add(stamp.LOCALES)
    await conn.execute(sql.ENSURE_SEARCH_INDEXES, sorted(r["code"] for r in codes))
    return await load_default_locale(conn) != default_before


async def _rerender_for_catalog(conn: asyncpg.Connection, default_changed: bool, categories: list[str]) -> None:
    """Re-render, once and after the whole catalog part of a batch is written, the posts whose
    rows it changed: every post with a category when the default locale changed (category names
    fall back to its name), else those referencing a changed category (or a leaf of a changed group)."""
    if default_changed:
        await rerender_posts(conn, await conn.fetch(sql.SELECT_POST_SNAPSHOTS_WITH_CATEGORIES))
    elif categories:
        await rerender_posts_for_categories(conn, categories)


async def _apply_categories(
    conn: asyncpg.Connection, items: list[Decoded[CategoryEvent]], result: BatchResult, stamps: set[str]
) -> list[str]:
    """Returns the slugs of the categories written."""
    if not items:
        return []
    changed: list[str] = []
    for d in items:
        c = d.event.data
        slug = await conn.fetchval(
            sql.UPSERT_CATEGORY,
            c.slug,
            d.event.version,
            c.is_group,
            c.group_slug,
            c.position,
            orjson.dumps(c.names).decode(),
        )
        if slug is not None:
            changed.append(slug)
    _count(result, "category", len(items), len(changed))
    if changed:
        stamps.add(stamp.CATEGORIES)
    return changed


async def rerender_posts_for_categories(conn: asyncpg.Connection, changed: list[str]) -> None:
    """Localized category names and group membership are denormalized into post rows:
    re-render the posts that reference a changed category (or a leaf of a changed group)."""
    taxonomy = await load_taxonomy(conn)
    affected = set(changed) | {c.slug for c in taxonomy.categories.values() if c.group_slug in changed}
    await rerender_posts(conn, await conn.fetch(sql.SELECT_POST_SNAPSHOTS_BY_CATEGORY, sorted(affected)), taxonomy)


async def rerender_posts(
    conn: asyncpg.Connection, rows: list[asyncpg.Record], taxonomy: Taxonomy | None = None
) -> None:
    if rows:
        posts = [Rendering(stored_post(r["snapshot"])) for r in rows]
        await write_translations(conn, posts, None, taxonomy or await load_taxonomy(conn))


async def _apply_tokens(
    conn: asyncpg.Connection, items: list[Decoded[TokenEvent]], result: BatchResult, stamps: set[str]
) -> None:
    if not items:
        return
    changed = await conn.fetch(sql.UPSERT_TOKEN, *TokenRow.arrays([token_row(d.event) for d in items]))
    _count(result, "token", len(items), len(changed))
    if changed:
        stamps.add(stamp.TOKENS)


def _count(result: BatchResult, kind: str, offered: int, changed: int) -> None:
    if changed:
        result.applied[kind] += changed
    result.stale += offered - changed


# --------------------------------------------------------------------------- access


async def _apply_access(
    conn: asyncpg.Connection, latest: list[Decoded[ProjectedEvent]], result: BatchResult, stamps: set[str]
) -> None:
    workspaces = [d.event for d in of_type(latest, WorkspaceEvent)]
    keys = [d.event for d in of_type(latest, ApiKeyEvent)]
    embeds = [d.event for d in of_type(latest, EmbedEvent)]
    beats = [d.event for d in of_type(latest, HeartbeatEvent)]
    hooks = [d.event for d in of_type(latest, WebhookEndpointEvent)]
    statements = [
        (
            "workspace",
            sql.UPSERT_WORKSPACE,
            len(workspaces),
            WorkspaceRow.arrays([workspace_row(e) for e in workspaces]),
        ),
        ("api_key", sql.UPSERT_API_KEY, len(keys), ApiKeyRow.arrays([api_key_row(e) for e in keys])),
        ("embed", sql.UPSERT_EMBED, len(embeds), EmbedRow.arrays([embed_row(e) for e in embeds])),
        ("heartbeat", sql.UPSERT_HEARTBEAT, len(beats), HeartbeatRow.arrays([heartbeat_row(e) for e in beats])),
        (
            "webhook_endpoint",
            sql.UPSERT_WEBHOOK_ENDPOINT,
            len(hooks),
            WebhookEndpointRow.arrays([webhook_endpoint_row(e) for e in hooks]),
        ),
    ]
    for kind, statement, offered, cols in statements:
        if offered:
            changed = await conn.fetch(statement, *cols)
            _count(result, kind, offered, len(changed))
            if changed and kind == "webhook_endpoint":
                stamps.add(stamp.WEBHOOKS)  # the dispatchers' endpoints
            if changed and kind in ("workspace", "api_key"):
                stamps.add(
                    stamp.ACCESS
                )  # what the API and stream hold per key (embeds and heartbeats act via the sweeper)
