"""Partner console sessions (docs/console.md), stored in the platform table ``console_sessions``.

A session stands for one API key of one workspace for a fixed lifetime (absolute, never
renewed). The browser holds its token in a cookie and its CSRF token in memory; this table
holds only their SHA-256 hashes, and the hash of the key (never the key). A session opens a
stream connection with a single-use ticket (:func:`issue_ticket`, by the API), which the
stream redeems (:func:`redeem_ticket`): here because both processes use it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from ..common.db import storage_errors
from ..common.http.keys import hash_key, hashes_match

TOKEN_PREFIX = "twcs_"
CSRF_PREFIX = "twcsrf_"
TICKET_PREFIX = "twst_"

#: Up to 100 expired rows are dropped on the way (each insert at most 100, none another insert
#: holds: concurrent sign-ins never wait on each other), so the table holds live sessions and
#: little else.
OPEN = """
WITH gone AS (
    DELETE FROM console_sessions WHERE token_hash IN (
        SELECT token_hash FROM console_sessions WHERE expires_at < now()
        ORDER BY expires_at LIMIT 100 FOR UPDATE SKIP LOCKED))
INSERT INTO console_sessions (token_hash, csrf_hash, key_hash, workspace_id, expires_at)
VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))
RETURNING expires_at"""
FIND = """
SELECT csrf_hash, key_hash, workspace_id, expires_at FROM console_sessions
WHERE token_hash = $1 AND expires_at > now()"""
CLOSE = "DELETE FROM console_sessions WHERE token_hash = $1"
ISSUE = """
WITH gone AS (
    DELETE FROM console_stream_tickets WHERE ticket_hash IN (
        SELECT ticket_hash FROM console_stream_tickets WHERE expires_at < now()
        ORDER BY expires_at LIMIT 100 FOR UPDATE SKIP LOCKED))
INSERT INTO console_stream_tickets (ticket_hash, token_hash, expires_at)
VALUES ($1, $2, now() + make_interval(secs => $3))
RETURNING expires_at"""
#: Deleted on use: a ticket opens one connection, and only while it and its session last.
REDEEM = """
WITH used AS (DELETE FROM console_stream_tickets WHERE ticket_hash = $1 RETURNING token_hash, expires_at)
SELECT s.key_hash, s.workspace_id FROM used JOIN console_sessions s USING (token_hash)
WHERE used.expires_at > now() AND s.expires_at > now()"""


@dataclass(frozen=True, slots=True)
class Opened:
    """A new session: its two secrets (said once, to the browser) and its end."""

    token: str
    csrf_token: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class Session:
    token_hash: str
    csrf_hash: str
    key_hash: str
    workspace_id: str
    expires_at: datetime

    def csrf_matches(self, presented: str | None) -> bool:
        """Whether ``presented`` is this session's CSRF token (hashes compared in constant time)."""
        return presented is not None and hashes_match(self.csrf_hash, hash_key(presented))


def looks_like_token(value: str, prefix: str = TOKEN_PREFIX) -> bool:
    return value.startswith(prefix) and len(value) <= 128 and value.isascii() and value.isprintable()


async def open_session(
    pool: asyncpg.Pool, key_hash: str, workspace_id: str, lifetime_s: float, timeout_s: float
) -> Opened:
    token, csrf = TOKEN_PREFIX + secrets.token_urlsafe(32), CSRF_PREFIX + secrets.token_urlsafe(32)
    with storage_errors("open a console session"):
        async with pool.acquire(timeout=timeout_s) as conn:
            expires_at = await conn.fetchval(
                OPEN, hash_key(token), hash_key(csrf), key_hash, workspace_id, lifetime_s, timeout=timeout_s
            )
    return Opened(token, csrf, expires_at)


async def find_session(pool: asyncpg.Pool, token: str | None, timeout_s: float) -> Session | None:
    """The live session of this cookie value; None when unknown, malformed or expired."""
    if token is None or not looks_like_token(token):
        return None
    digest = hash_key(token)
    with storage_errors("find a console session"):
        async with pool.acquire(timeout=timeout_s) as conn:
            row = await conn.fetchrow(FIND, digest, timeout=timeout_s)
    if row is None:
        return None
    return Session(digest, row["csrf_hash"], row["key_hash"], row["workspace_id"], row["expires_at"])


async def close_session(pool: asyncpg.Pool, token_hash: str, timeout_s: float) -> None:
    with storage_errors("close a console session"):
        async with pool.acquire(timeout=timeout_s) as conn:
            await conn.execute(CLOSE, token_hash, timeout=timeout_s)


async def issue_ticket(pool: asyncpg.Pool, session: Session, lifetime_s: float, timeout_s: float) -> Opened:
    """A single-use stream ticket of ``session`` (its ``token``; no CSRF token)."""
    ticket = TICKET_PREFIX + secrets.token_urlsafe(32)
    with storage_errors("issue a console stream ticket"):
        async with pool.acquire(timeout=timeout_s) as conn:
            expires_at = await conn.fetchval(ISSUE, hash_key(ticket), session.token_hash, lifetime_s, timeout=timeout_s)
    return Opened(ticket, "", expires_at)


async def redeem_ticket(pool: asyncpg.Pool, ticket: str, timeout_s: float) -> tuple[str, str] | None:
    """The key hash and workspace of a live ticket's live session, the ticket used up; else None."""
    if not looks_like_token(ticket, TICKET_PREFIX):
        return None
    with storage_errors("redeem a console stream ticket"):
        async with pool.acquire(timeout=timeout_s) as conn:
            row = await conn.fetchrow(REDEEM, hash_key(ticket), timeout=timeout_s)
    return None if row is None else (row["key_hash"], row["workspace_id"])
