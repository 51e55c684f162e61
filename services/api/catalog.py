"""Small, rarely changing read-model data cached in each API process.

The process's :class:`..readmodel.stamps.StampWatcher` calls :meth:`Catalog.refresh` on every pushed
stamp change and every 0.5 s: one tiny query of ``change_stamps``, then a reload of only what
the projector changed.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any, Mapping

import asyncpg
import orjson

from ..common.db import storage_errors
from ..common.db.replicas import Replicas
from ..common.http.querystring import bcp47_case
from ..readmodel import stamps as stamp
from ..readmodel.logposition import LogPosition
from ..readmodel.mapping import FALLBACK_LOCALE, MAX_LISTED_LOCALES, default_locale
from ..readmodel.taxonomy import listed_locales, load_categories
from . import partner, queries

log = logging.getLogger(__name__)

#: How long a refresh waits for a replica to replay the changes it reloads; then it reads the primary.
STAMP_WAIT_S = 0.5


@dataclass(frozen=True, slots=True)
class Languages:
    codes: frozenset[str] = frozenset()
    default: str = FALLBACK_LOCALE
    body: bytes = b'{"languages":[]}'
    etag: str = ""
    #: Each supported code by its BCP 47 casing: a code published as ``pt-br`` is found by
    #: ``pt-BR`` and ``PT-BR`` too.
    by_case: Mapping[str, str] = field(default_factory=dict)

    def resolve(self, lang: str | None) -> str:
        """docs/api.md#lang-fallback: a ``lang`` outside the supported list, or none, falls back to the default.
        Tags compare case-insensitively, as BCP 47 says (``de-de`` is ``de-DE``)."""
        if lang in self.codes:
            return lang
        if lang:
            return self.by_case.get(bcp47_case(lang), self.default)
        return self.default


def languages_of(rows: list[asyncpg.Record]) -> Languages:
    """The supported languages from the listed locales' rows (:func:`..readmodel.taxonomy.listed_locales`).

    More than 14 are listed all the same, with an ERROR (docs/api.md#languages): the platform's
    data breaks the rule, and hiding a locale whose posts ``?lang=`` serves would make it worse."""
    if len(rows) > MAX_LISTED_LOCALES:
        log.error(
            "%d locales are listed (active on the web channel); the spec allows at most %d, so /languages "
            "breaks its documented maxItems until the platform deactivates %d: %s",
            len(rows),
            MAX_LISTED_LOCALES,
            len(rows) - MAX_LISTED_LOCALES,
            ", ".join(r["code"] for r in rows),
        )
    default = default_locale((r["code"], r["is_default"]) for r in rows)
    body = orjson.dumps(partner.language_list(rows, default))
    codes = frozenset(r["code"] for r in rows)
    return Languages(codes, default, body, etag_of(body), {bcp47_case(code): code for code in codes})


def etag_of(body: bytes) -> str:
    """A strong entity tag: the quoted hash of the exact body bytes."""
    return '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"'


@dataclass(frozen=True, slots=True)
class Body:
    """A pre-serialized response body and its entity tag."""

    data: bytes
    etag: str

    @classmethod
    def of(cls, doc: Any) -> "Body":
        data = orjson.dumps(doc)
        return cls(data, etag_of(data))


@dataclass(frozen=True, slots=True)
class Categories:
    """The ``CategoryTree`` and ``Category`` bodies (schemas/openapi.json) for every listed locale: the tree, and each category by slug."""

    tree: dict[str, Body] = field(default_factory=dict)
    by_slug: dict[tuple[str, str], Body] = field(default_factory=dict)

    def tree_for(self, lang: str) -> Body:
        return self.tree.get(lang) or Body.of({"groups": []})


def _categories(rows: list[dict[str, Any]], languages: Languages) -> Categories:
    cats = partner.CategoryShapes(rows, languages.default)
    tree: dict[str, Body] = {}
    by_slug: dict[tuple[str, str], Body] = {}
    for lang in set(languages.codes) | {languages.default}:
        tree[lang] = Body.of(cats.tree(lang))
        for r in rows:
            by_slug[(r["slug"], lang)] = Body.of(cats.category(r["slug"], lang))
    return Categories(tree, by_slug)


@dataclass(frozen=True, slots=True)
class Tokens:
    """The ``TokenList`` as one body, and the ``TokenDetail`` shape (schemas/openapi.json) of each token by upper-case ticker."""

    listing: Body = field(default_factory=lambda: Body.of({"tokens": []}))
    by_ticker: dict[str, Body] = field(default_factory=dict)


def _tokens(rows: list[asyncpg.Record]) -> Tokens:
    decoded = [
        {**r, "primary_ecosystem": orjson.loads(r["primary_ecosystem"]) if r["primary_ecosystem"] else None}
        for r in rows
    ]
    by_ticker = {r["ticker"].upper(): Body.of(partner.token_detail(r)) for r in decoded}
    return Tokens(Body.of(partner.token_list([partner.token_item(r) for r in decoded])), by_ticker)


@dataclass(slots=True)
class Catalog:
    #: The posts topic, whose stored positions make up the consistency mark.
    log_topic: str = ""
    languages: Languages = field(default_factory=Languages)
    categories: Categories = field(default_factory=Categories)
    tokens: Tokens = field(default_factory=Tokens)
    stamps: dict[str, int] = field(default_factory=dict)
    loaded: asyncio.Event = field(default_factory=asyncio.Event)
    #: The mark every cached body is current for: read with the stamps of the last completed
    #: refresh. A body whose stamp did not move is what that snapshot would give; a reloaded
    #: one was read after it. So the mark may lag the bodies (by up to ``poll_s``), never lead.
    log_position: LogPosition = field(default_factory=LogPosition)

    def _changed(self, stamps: dict[str, int], *names: str) -> bool:
        return not self.loaded.is_set() or any(stamps.get(n) != self.stamps.get(n) for n in names)

    async def refresh(
        self, pool: asyncpg.Pool, replicas: Replicas | None = None, access_held: int | None = None
    ) -> asyncpg.Pool:
        """Read the stamps (on ``pool``, the primary), reload what moved, and return where that
        was read: a replica in rotation that has replayed the stamps' WAL position (waited for
        at most ``STAMP_WAIT_S``), else ``pool``. ``access_held``: the access stamp of the
        principals the caller holds (it reloads them from the returned pool when it moved)."""
        with storage_errors("catalog refresh"):
            rows = await pool.fetch(queries.SELECT_STAMPS, self.log_topic)
            stamps = {r["name"]: r["stamp"] for r in rows}
            moved = stamps.get(stamp.ACCESS) != access_held or self._changed(
                stamps, stamp.LOCALES, stamp.CATEGORIES, stamp.TOKENS
            )
            if replicas and rows and moved:
                replica = await replicas.replica_at_lsn(rows[0]["lsn"], STAMP_WAIT_S)
                if replica is not None and replica.pool is not None:
                    pool = replica.pool
            if self._changed(stamps, stamp.LOCALES):
                self.languages = languages_of(await listed_locales(pool))
            if self._changed(stamps, stamp.LOCALES, stamp.CATEGORIES):
                self.categories = _categories(await load_categories(pool), self.languages)
            if self._changed(stamps, stamp.TOKENS):
                self.tokens = _tokens(await pool.fetch(queries.SELECT_TOKENS))
        self.stamps = stamps
        if rows:
            self.log_position = LogPosition.stored(rows[0]["log_position"])
        self.loaded.set()
        return pool
