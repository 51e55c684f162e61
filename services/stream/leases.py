"""Connection slots per workspace, shared by every stream process through PostgreSQL.

Each accepted connection holds a lease row (``public.stream_leases``) that expires
``TICKERWIRE_STREAM_LEASE_TTL_S`` seconds after its last renewal. A process renews all of its
leases in one statement every ``TICKERWIRE_STREAM_LEASE_RENEW_S`` seconds and deletes a lease
when its connection closes; the leases of a crashed process simply expire, which frees their
slots within seconds. A new lease is granted under a per-workspace advisory lock, so concurrent
handshakes on several processes never exceed the limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from typing import AsyncIterator, Callable

import asyncpg

from ..common.db import storage_errors
from ..common.errors import StorageUnavailable, TransientError
from . import sql

log = logging.getLogger(__name__)


class Turns:
    """One holder at a time per key, the others queued in memory for a bounded time; a key's
    entry lives only while someone holds or waits for it (keys: workspace ids)."""

    def __init__(self) -> None:
        self._keys: dict[str, tuple[asyncio.Lock, list[int]]] = {}  # key -> (its lock, [holders and waiters])

    def waiting(self, key: str) -> int:
        """Holders and waiters of ``key`` (0: no entry)."""
        entry = self._keys.get(key)
        return entry[1][0] if entry else 0

    @contextlib.asynccontextmanager
    async def turn(self, key: str, timeout_s: float | None) -> AsyncIterator[None]:
        """``key``'s turn; :class:`StorageUnavailable` when it does not come within ``timeout_s``."""
        lock, count = self._keys.setdefault(key, (asyncio.Lock(), [0]))
        count[0] += 1
        try:
            try:
                async with asyncio.timeout(timeout_s):
                    await lock.acquire()
            except TimeoutError:
                raise StorageUnavailable(f"acquire stream lease: the workspace's turn did not come within {timeout_s:g} s "
                                         f"({count[0]} of its handshakes holding or waiting for it)") from None
            try:
                yield
            finally:
                lock.release()
        finally:
            count[0] -= 1
            if count[0] == 0:
                del self._keys[key]


class Leases:
    def __init__(
        self, pool: asyncpg.Pool, ttl_s: float, renew_every_s: float, *, acquire_timeout_s: float | None = None
    ) -> None:
        self.pool = pool
        self.acquire_timeout_s = acquire_timeout_s
        self.ttl_s = ttl_s
        self.renew_every_s = renew_every_s
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.held: set[str] = set()
        self._turns = Turns()

    async def acquire(self, workspace_id: str, session_id: str, limit: int) -> bool:
        """Take a slot of ``workspace_id`` for ``session_id``; False when all ``limit`` are taken.

        One grant per workspace at a time in this process: the grants of one workspace are
        serialized by its lock in PostgreSQL anyway, so its other handshakes wait here, in
        memory, for at most ``acquire_timeout_s`` (then 503), instead of each holding a pooled
        connection blocked on that lock. A burst of one workspace's handshakes (a reconnect
        storm, a hostile client) so takes one pooled connection, never the pool that every
        other workspace's handshakes need."""
        async with self._turns.turn(workspace_id, self.acquire_timeout_s):
            with storage_errors("acquire stream lease"):
                async with self.pool.acquire(timeout=self.acquire_timeout_s) as conn, conn.transaction():
                    await conn.execute(sql.LOCK_WORKSPACE_SLOTS, workspace_id)
                    await conn.execute(sql.DELETE_EXPIRED_OF_WORKSPACE, workspace_id)
                    granted = await conn.fetchval(sql.INSERT_LEASE_IF_FREE, workspace_id, session_id, self.holder, self.ttl_s, limit)
        if granted is None:
            return False
        self.held.add(session_id)
        return True

    async def release(self, session_id: str) -> None:
        if session_id not in self.held:
            return
        self.held.discard(session_id)
        await self._release([session_id])

    async def release_all(self) -> None:
        ids = list(self.held)
        self.held.clear()
        if ids:
            await self._release(ids)

    async def _release(self, ids: list[str]) -> None:
        try:
            with storage_errors("release stream leases"):
                await self.pool.execute(sql.RELEASE_LEASES, ids)
        except TransientError as exc:  # the leases expire on their own
            log.warning("could not release %d stream lease(s), they will expire: %s", len(ids), exc)

    async def renew(self) -> set[str]:
        """Renew every held lease in one statement; returns the sessions whose lease was lost."""
        ids = list(self.held)
        if not ids:
            return set()
        with storage_errors("renew stream leases"):
            rows = await self.pool.fetch(sql.RENEW_LEASES, ids, self.ttl_s)
        renewed = {r["session_id"] for r in rows}
        return {s for s in ids if s not in renewed and s in self.held}

    async def run(self, on_lost: Callable[[set[str]], None]) -> None:
        """Renew every few seconds until cancelled; ``on_lost`` closes connections that lost their slot.

        A lease that could not be renewed before it expired (the database unreachable for
        longer than the lease) is lost too: its slot may already be someone else's, so the
        connection is closed rather than left running over the workspace's limit."""
        renewed_at = time.monotonic()
        while True:
            await asyncio.sleep(self.renew_every_s)
            try:
                lost = await self.renew()
                renewed_at = time.monotonic()
                with storage_errors("purge expired stream leases"):
                    await self.pool.execute(sql.DELETE_EXPIRED_LEASES)
            except TransientError as exc:
                lost = set(self.held) if time.monotonic() - renewed_at >= self.ttl_s else set()
                log.warning("stream lease renewal failed%s: %s",
                            f"; {len(lost)} lease(s) expired unrenewed" if lost else ", retrying", exc)
            if lost:
                log.warning("%d stream lease(s) lost", len(lost))
                for s in lost:
                    self.held.discard(s)
                on_lost(lost)
