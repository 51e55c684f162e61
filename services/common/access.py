"""The access gates of spec section 5, shared by the API and the stream.

Order: authentication (key known, not revoked), workspace suspended, badge missing or
unknown; the API then admits the request against the rate limit and the daily quota
(``services/api/limits.py``). All of it is one call of the SQL function ``tw_access``
(platform migration 0002): one database round trip per request, on the database clock.

The key is hashed on arrival and only the SHA-256 hash is looked up; the key never reaches a
log line, a metric or an error message. Access state is read from the read model on each
check (no cache), so a suspension, reinstatement, revocation or badge change is in force on
every process as soon as the projector or the sweeper has committed it.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from .db import storage_errors
from .keys import hash_key, hashes_match, looks_like_key

#: Gates and (when ``$2`` is true) both counters, atomically. See the migration for the rules.
CALL_ACCESS = "SELECT * FROM tw_access($1, $2, $3, $4)"

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


NOT_AUTHENTICATED = Denial(401, "NOT_AUTHENTICATED", "Missing or invalid API key. Send the header 'Authorization: Bearer <API_KEY>'.")
WORKSPACE_SUSPENDED = Denial(403, "WORKSPACE_SUSPENDED", "This workspace has been suspended by an administrator. Contact support to reinstate it.")
BADGE_MISSING = Denial(403, "BADGE_MISSING", BADGE_RECOVERY)

_DENIALS = {d.code: d for d in (NOT_AUTHENTICATED, WORKSPACE_SUSPENDED, BADGE_MISSING)}


@dataclass(frozen=True, slots=True)
class Principal:
    workspace_id: str
    key_hash: str
    rate_limit_per_minute: int | None
    daily_quota: int | None
    stream_connection_limit: int | None


class AccessDenied(Exception):
    def __init__(self, denial: Denial) -> None:
        super().__init__(denial.code)
        self.denial = denial


def bearer_key(header: str | None) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header, or None when malformed."""
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    value = value.strip()
    return value if looks_like_key(value) else None


async def resolve(
    db: asyncpg.Pool | asyncpg.Connection,
    key: str | None,
    *,
    count: bool,
    default_rate: int | None = None,
    default_quota: int | None = None,
) -> tuple[Principal, asyncpg.Record]:
    """Run the gates (and, with ``count``, admit against the limits) in one round trip.

    Raises :class:`AccessDenied` for a 401/403 gate; otherwise returns the principal and the
    row of ``tw_access`` (its ``outcome`` is ``OK``, ``RATE_LIMITED`` or ``QUOTA_EXHAUSTED``).
    """
    if key is None or not looks_like_key(key):
        raise AccessDenied(NOT_AUTHENTICATED)
    digest = hash_key(key)
    with storage_errors("authenticate"):
        row = await db.fetchrow(CALL_ACCESS, digest, count, default_rate, default_quota)
    # The lookup is by digest (an index probe reveals nothing about the key); the stored
    # digest is compared again here in constant time.
    if row is None or row["key_hash"] is None or not hashes_match(row["key_hash"], digest):
        raise AccessDenied(NOT_AUTHENTICATED)
    if denial := _DENIALS.get(row["outcome"]):
        raise AccessDenied(denial)
    principal = Principal(
        row["workspace_id"], digest, row["rate_limit_per_minute"], row["daily_quota"], row["stream_connection_limit"]
    )
    return principal, row


async def check_access(pool: asyncpg.Pool | asyncpg.Connection, key: str | None) -> Principal:
    """Resolve a key to its workspace through the three gates, counting nothing (the stream);
    raises :class:`AccessDenied`."""
    principal, _ = await resolve(pool, key, count=False)
    return principal
