"""The access gates of spec section 5, shared by the API and the stream.

Order: authentication (key known, not revoked), workspace suspended, badge missing or
unknown. The key is hashed on arrival and only the hash is looked up; it never reaches a
log line. Access state is read from the read model on each check, so a suspension,
revocation or badge change is in force as soon as the projector has committed it.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from .db import storage_errors
from .keys import hash_key, hashes_match, looks_like_key

SELECT_PRINCIPAL = """
SELECT k.key_hash, k.revoked_at, w.id AS workspace_id, w.status, w.badge_status,
       w.rate_limit_per_minute, w.daily_quota, w.stream_connection_limit
FROM api_keys k JOIN workspaces w ON w.id = k.workspace_id
WHERE k.key_hash = $1
"""

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


async def check_access(pool: asyncpg.Pool, key: str | None) -> Principal:
    """Resolve a key to its workspace through the gates; raises :class:`AccessDenied`."""
    if key is None or not looks_like_key(key):
        raise AccessDenied(NOT_AUTHENTICATED)
    digest = hash_key(key)
    with storage_errors("authenticate"):
        row = await pool.fetchrow(SELECT_PRINCIPAL, digest)
    if row is None or row["revoked_at"] is not None or not hashes_match(row["key_hash"], digest):
        raise AccessDenied(NOT_AUTHENTICATED)
    if row["status"] == "suspended":
        raise AccessDenied(WORKSPACE_SUSPENDED)
    if row["badge_status"] in ("missing", "unknown"):
        raise AccessDenied(BADGE_MISSING)
    return Principal(
        row["workspace_id"], digest, row["rate_limit_per_minute"], row["daily_quota"], row["stream_connection_limit"]
    )
