"""Re-checks the access of open connections: a key revoked, a workspace suspended or a
badge gone missing closes the affected connections within about a second.

One batched query per period covers every distinct key with an open connection; the
rules are those of ``common.access`` (revoked or unknown key -> NOT_AUTHENTICATED,
suspended -> WORKSPACE_SUSPENDED, badge missing or unknown -> BADGE_MISSING).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Iterable, Mapping

import asyncpg

from ..common.db import storage_errors
from ..common.errors import TransientError
from . import protocol, sql
from .hub import Hub

log = logging.getLogger(__name__)

RECHECK_EVERY_S = 1.0


def denial_code(row: Mapping | None) -> str | None:
    """The error code that now refuses a key, or None while it is still admitted."""
    if row is None or row["revoked"]:
        return "NOT_AUTHENTICATED"
    if row["status"] == "suspended":
        return "WORKSPACE_SUSPENDED"
    if row["badge_status"] in ("missing", "unknown"):
        return "BADGE_MISSING"
    return None


def denials(key_hashes: Iterable[str], rows: Iterable[Mapping]) -> dict[str, str]:
    """{key_hash: code} for every key that is no longer admitted."""
    by_key = {r["key_hash"]: r for r in rows}
    return {k: code for k in key_hashes if (code := denial_code(by_key.get(k))) is not None}


async def recheck(pool: asyncpg.Pool, hub: Hub) -> int:
    """One pass; returns how many connections it closed."""
    keys = {c.key_hash for c in hub.connections.values() if not c.closing}
    if not keys:
        return 0
    with storage_errors("recheck stream access"):
        rows = await pool.fetch(sql.SELECT_ACCESS, list(keys))
    denied = denials(keys, rows)
    closed = 0
    for conn in list(hub.connections.values()):
        if (code := denied.get(conn.key_hash)) is not None and not conn.closing:
            hub.close(conn, protocol.CLOSE_ACCESS_REVOKED, code)
            closed += 1
    if closed:
        log.info("closed %d stream connection(s) after an access change", closed)
    return closed


async def run_watchdog(pool: asyncpg.Pool, hub: Hub, every_s: float = RECHECK_EVERY_S) -> None:
    while True:
        await asyncio.sleep(every_s)
        try:
            await recheck(pool, hub)
        except TransientError as exc:
            log.warning("stream access recheck failed, retrying: %s", exc)
