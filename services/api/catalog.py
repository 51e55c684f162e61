"""Small, rarely changing read-model data cached in each API process.

A background task polls ``change_stamps`` (one tiny query) every ``poll_s`` seconds and
reloads only what the projector changed, so a change is served within that interval.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import asyncpg
import orjson

from ..common.db import storage_errors
from ..common.errors import TransientError
from . import queries

log = logging.getLogger(__name__)

FALLBACK_LOCALE = "en-US"


@dataclass(frozen=True, slots=True)
class Languages:
    codes: frozenset[str] = frozenset()
    default: str = FALLBACK_LOCALE
    body: bytes = b'{"languages":[]}'

    def resolve(self, lang: str | None) -> str:
        """Spec 4: a ``lang`` outside the supported list, or none, falls back to the default."""
        return lang if lang in self.codes else self.default


def _languages(rows: list[asyncpg.Record]) -> Languages:
    flagged = [r["code"] for r in rows if r["is_default"]]
    codes = [r["code"] for r in rows]
    default = flagged[0] if flagged else (FALLBACK_LOCALE if FALLBACK_LOCALE in codes else (codes[0] if codes else FALLBACK_LOCALE))
    items = [
        {
            "code": r["code"],
            "name": r["name"],
            "native_name": r["native_name"],
            "country_code": r["country_code"],
            "direction": r["direction"],
            "is_default": r["code"] == default,
        }
        for r in rows
    ]
    return Languages(frozenset(codes), default, orjson.dumps({"languages": items}))


@dataclass(slots=True)
class Catalog:
    languages: Languages = field(default_factory=Languages)
    stamps: dict[str, int] = field(default_factory=dict)
    loaded: asyncio.Event = field(default_factory=asyncio.Event)

    async def refresh(self, pool: asyncpg.Pool) -> None:
        with storage_errors("catalog refresh"):
            stamps = {r["name"]: r["stamp"] for r in await pool.fetch(queries.SELECT_STAMPS)}
            if stamps.get("locales") != self.stamps.get("locales") or not self.loaded.is_set():
                self.languages = _languages(await pool.fetch(queries.SELECT_LANGUAGES))
        self.stamps = stamps
        self.loaded.set()

    async def run(self, pool: asyncpg.Pool, poll_s: float = 0.5) -> None:
        while True:
            try:
                await self.refresh(pool)
            except TransientError as exc:
                log.warning("catalog refresh failed: %s", exc)
            except asyncpg.UndefinedTableError:
                log.info("read model not migrated yet; waiting")
            await asyncio.sleep(poll_s)
