"""The access gates (docs/api.md#access-gates), shared by the API and the stream: one rule, in Python.

Order: authentication (key known, not revoked), workspace suspended, badge missing or unknown
(:func:`gate`); the API then admits the request against the rate limit and the daily quota
(``services/api/admission.py``; the database only counts).

Each process keeps every key's principal in memory (:class:`Principals`, keyed by the key's
SHA-256 hash), loaded at start and reloaded whenever the projector bumps the ``access`` change
stamp (pushed by NOTIFY, polled every 0.5 s as a fallback; see :mod:`.stamps`). So a check costs
no database round trip, an unknown key is answered from memory (nothing is stored for it, so a
flood of random keys cannot grow memory: the map holds the keys that exist), and a suspension,
reinstatement, revocation or badge change applies within about a second on every process.
While the copy is not confirmed current (:meth:`.stamps.StampWatcher.fresh` is false), each check
reads the key's row from the database instead: never a stale answer served as current.

The key is hashed on arrival and only the hash is looked up; the key never reaches a log line,
a metric or an error message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import asyncpg

from ..common.db import storage_errors
from ..common.http.keys import hash_key, hashes_match, looks_like_key
from . import stamps as stamp
from .stamps import StampWatcher

#: Every key with its workspace's access state and limits (the read model's tables).
SELECT_PRINCIPALS = """
SELECT k.key_hash, k.revoked_at IS NOT NULL AS revoked, w.id AS workspace_id, w.status, w.badge_status,
       w.rate_limit_per_minute, w.daily_quota, w.stream_connection_limit
FROM api_keys k JOIN workspaces w ON w.id = k.workspace_id"""
SELECT_PRINCIPALS_BY_HASH = SELECT_PRINCIPALS + "\nWHERE k.key_hash = ANY($1::text[])"
SELECT_ACCESS_STAMP = f"SELECT stamp FROM change_stamps WHERE name = '{stamp.ACCESS}'"

BADGE_RECOVERY = (
    "No badge heartbeat has been received from this workspace's embed for over 72 hours, or never. "
    "To restore service: confirm the page loads the embed script and sends the heartbeat; re-paste the "
    "snippet if it is missing; allow the service domain in CSP, ad-blocker or Cross-Origin-Opener-Policy "
    "settings if it is blocked. Serving resumes at the next badge check (at most one hour) after a "
    "heartbeat lands; the onboarding page shows live heartbeat status."
)


@dataclass(frozen=True, slots=True)
class Denial:
    status: int
    code: str
    message: str


NOT_AUTHENTICATED = Denial(
    401,
    "NOT_AUTHENTICATED",
    "Missing or invalid API key. Send the header 'Authorization: Bearer <API_KEY>' (on the stream, the query parameter key=<API_KEY> works too).",
)
WORKSPACE_SUSPENDED = Denial(
    403,
    "WORKSPACE_SUSPENDED",
    "This workspace has been suspended by an administrator. Contact support to reinstate it.",
)
BADGE_MISSING = Denial(403, "BADGE_MISSING", BADGE_RECOVERY)


@dataclass(frozen=True, slots=True)
class Principal:
    key_hash: str
    workspace_id: str
    revoked: bool
    workspace_status: str
    badge_status: str
    rate_limit_per_minute: int | None
    daily_quota: int | None
    stream_connection_limit: int | None

    @classmethod
    def from_row(cls, r: asyncpg.Record) -> "Principal":
        return cls(
            r["key_hash"],
            r["workspace_id"],
            r["revoked"],
            r["status"],
            r["badge_status"],
            r["rate_limit_per_minute"],
            r["daily_quota"],
            r["stream_connection_limit"],
        )


def gate(principal: Principal | None) -> Denial | None:
    """THE access rule (docs/api.md#access-gates, in order): None when the key's requests may be served."""
    if principal is None or principal.revoked:
        return NOT_AUTHENTICATED
    if principal.workspace_status == "suspended":
        return WORKSPACE_SUSPENDED
    if principal.badge_status in ("missing", "unknown"):
        return BADGE_MISSING
    return None


class AccessDenied(Exception):
    def __init__(self, denial: Denial) -> None:
        super().__init__(denial.code)
        self.denial = denial


class Principals:
    """key hash -> :class:`Principal` for every key, kept current by a :class:`StampWatcher`."""

    def __init__(self, on_fallback: Callable[[], None] | None = None, acquire_timeout_s: float | None = None) -> None:
        self._acquire_timeout_s = acquire_timeout_s
        self.by_hash: dict[str, Principal] = {}
        self.stamp: int | None = None
        self._watcher: StampWatcher | None = None
        self.fallback_lookups = 0
        self._on_fallback = on_fallback

    def follow(self, watcher: StampWatcher) -> StampWatcher:
        """Keep current with ``watcher``: a copy it has not confirmed current is checked against
        the database (:meth:`authorize`). Returns the watcher, for its owner to start."""
        self._watcher = watcher
        return watcher

    @property
    def loaded(self) -> bool:
        return self.stamp is not None

    async def refresh(self, pool: asyncpg.Pool, stamp: int | None = None) -> bool:
        """Reload every principal when the ``access`` stamp (read here unless given) moved; True
        when it did. The stamp is read before the rows, so a change committed in between is
        loaded now and again at the next refresh, never missed."""
        with storage_errors("load principals"):
            if stamp is None:
                stamp = await pool.fetchval(SELECT_ACCESS_STAMP)
            if stamp == self.stamp:
                return False
            rows = await pool.fetch(SELECT_PRINCIPALS)
        self.by_hash = {r["key_hash"]: Principal.from_row(r) for r in rows}
        self.stamp = stamp
        return True

    def _current(self) -> bool:
        return self.loaded and (self._watcher is None or self._watcher.fresh())

    async def find_many(self, pool: asyncpg.Pool, digests: Iterable[str], *, wait: bool = True) -> dict[str, Principal]:
        """The principals of these key hashes (unknown ones absent): from memory while it is
        confirmed current, else from the database (one statement). ``wait``: first let a pushed
        but unapplied access change be applied (never from within the refresh itself)."""
        digests = list(digests)
        if self._current():
            if wait and self._watcher is not None:
                await self._watcher.caught_up(stamp.ACCESS)
            return {d: p for d in digests if (p := self.by_hash.get(d)) is not None}
        self.fallback_lookups += 1
        if self._on_fallback is not None:
            self._on_fallback()
        with storage_errors("authenticate"):
            async with pool.acquire(timeout=self._acquire_timeout_s) as conn:
                rows = await conn.fetch(SELECT_PRINCIPALS_BY_HASH, digests)
        return {r["key_hash"]: Principal.from_row(r) for r in rows}

    async def authorize(self, pool: asyncpg.Pool, key: str | None) -> Principal:
        """The principal of a presented key that passes the three gates; raises :class:`AccessDenied`."""
        if key is None or not looks_like_key(key):
            raise AccessDenied(NOT_AUTHENTICATED)
        return await self.authorize_hash(pool, hash_key(key))

    async def authorize_hash(self, pool: asyncpg.Pool, digest: str) -> Principal:
        """The principal of the key with this hash (a console session's key) that passes the
        three gates now; raises :class:`AccessDenied`."""
        watcher = self._watcher
        if self.loaded and (watcher is None or (watcher.fresh() and not watcher.behind(stamp.ACCESS))):
            principal = self.by_hash.get(digest)  # the common case: memory, no await
        else:
            principal = (await self.find_many(pool, [digest])).get(digest)
        if principal is not None and not hashes_match(principal.key_hash, digest):
            principal = None
        if (denial := gate(principal)) is not None:
            raise AccessDenied(denial)
        assert principal is not None
        return principal
