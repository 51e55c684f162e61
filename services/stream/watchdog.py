"""Re-checks the access of open connections: a key revoked, a workspace suspended or a
badge gone missing closes the affected connections within about a second.

The rule is :func:`..readmodel.access.gate` over the process's in-memory principals; the check runs
right after every reload of the principals (pushed by the ``access`` change stamp) and every
``every_s`` seconds anyway (``TICKERWIRE_STREAM_ACCESS_RECHECK_S``; then reading the database
when the in-memory copy is not confirmed current).
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from ..common.runtime.errors import TransientError
from ..readmodel.access import Principals, gate
from . import protocol
from .hub import Hub

log = logging.getLogger(__name__)


async def recheck(principals: Principals, pool: asyncpg.Pool, hub: Hub, *, after_reload: bool = False) -> int:
    """One pass; returns how many connections it closed. ``after_reload``: called by the refresh
    that just reloaded the principals (so it must not wait for a refresh itself)."""
    keys = {c.key_hash for c in hub.connections.values() if not c.closing}
    if not keys:
        return 0
    found = await principals.find_many(pool, keys, wait=not after_reload)
    denied = {k: denial.code for k in keys if (denial := gate(found.get(k))) is not None}
    closed = 0
    for conn in list(hub.connections.values()):
        if (code := denied.get(conn.key_hash)) is not None and not conn.closing:
            hub.close(conn, protocol.CLOSE_ACCESS_REVOKED, code)
            closed += 1
    if closed:
        log.info("closed %d stream connection(s) after an access change", closed)
    return closed


async def run_watchdog(principals: Principals, pool: asyncpg.Pool, hub: Hub, every_s: float) -> None:
    while True:
        await asyncio.sleep(every_s)
        try:
            await recheck(principals, pool, hub)
        except TransientError as exc:
            log.warning("stream access recheck failed, retrying: %s", exc)
