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
import logging
import os
import secrets
import socket
import time
from typing import Awaitable, Callable

import asyncpg

from ..common.db import BACKGROUND_ACQUIRE_TIMEOUT_S, BoundedReader, storage_errors
from ..common.runtime.errors import StorageUnavailable, TransientError
from . import sql

log = logging.getLogger(__name__)


#: What one queued handshake asks for: its session id and its workspace's limit at handshake time.
Ask = tuple[str, int]


class Grants:
    """Slot grants settled in groups, one workspace at a time: while one grant statement of a
    workspace is in flight, that workspace's other handshakes queue in memory, and the next
    statement settles all of them at once. A queued handshake waits at most ``timeout_s``
    before its statement starts (then :class:`StorageUnavailable`); once taken, its statement
    is bounded by the pool's acquire and statement bounds. A workspace's entry lives only while
    a handshake of it is queued or being settled.

    ``settle(workspace_id, asks)`` returns, per ask, whether it got a slot; ``undo(session_ids)``
    gives back the slots granted to handshakes that gave up (cancelled) while being settled."""

    def __init__(
        self,
        settle: Callable[[str, list[Ask]], Awaitable[list[bool]]],
        undo: Callable[[list[str]], Awaitable[None]],
    ) -> None:
        self._settle = settle
        self._undo = undo
        self._queued: dict[str, list[tuple[Ask, asyncio.Future[bool]]]] = {}
        self._settling: dict[str, asyncio.Task[None]] = {}

    def pending(self, workspace_id: str) -> int:
        """Handshakes of ``workspace_id`` queued, not yet taken into a statement."""
        return len(self._queued.get(workspace_id, ()))

    def active(self) -> int:
        """Workspaces with a handshake queued or being settled."""
        return len(self._settling)

    async def grant(self, workspace_id: str, ask: Ask, timeout_s: float | None) -> bool:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        queue = self._queued.setdefault(workspace_id, [])
        entry = (ask, future)
        queue.append(entry)
        if workspace_id not in self._settling:
            self._settling[workspace_id] = asyncio.create_task(
                self._drain(workspace_id), name=f"stream-grants-{workspace_id}"
            )
        try:
            async with asyncio.timeout(timeout_s):
                return await asyncio.shield(future)
        except TimeoutError:
            if self._take_back(workspace_id, queue, entry):
                raise StorageUnavailable(
                    f"acquire stream lease: the workspace's grant did not start within {timeout_s:g} s "
                    f"({len(queue) + 1} of its handshakes queued)"
                ) from None
            return await future  # taken: bounded by its statement's own bounds
        except asyncio.CancelledError:
            if not self._take_back(workspace_id, queue, entry):
                future.cancel()  # taken: the statement's outcome for it is undone if it was a slot
            raise

    def _take_back(self, workspace_id: str, queue: list, entry: tuple) -> bool:
        """Remove a handshake still queued (not yet taken into a statement); False if it was taken."""
        if self._queued.get(workspace_id) is queue and entry in queue:
            queue.remove(entry)
            return True
        return False

    async def _drain(self, workspace_id: str) -> None:
        """Settle the workspace's queue until it stays empty; every outcome, a failure included,
        goes to the handshakes it was for (this task never outlives its queue)."""
        queue: list[tuple[Ask, asyncio.Future[bool]]] | None = None
        try:
            while queue := self._queued.pop(workspace_id, None):
                try:
                    granted = await self._settle(workspace_id, [ask for ask, _ in queue])
                except Exception as exc:  # noqa: BLE001 - each handshake of this group answers with it
                    _fail(queue, exc)
                    continue
                gave_up = []
                for ((session_id, _), future), ok in zip(queue, granted, strict=True):
                    if not future.done():
                        future.set_result(ok)
                    elif ok:  # its handshake was cancelled while this statement ran
                        gave_up.append(session_id)
                if gave_up:
                    try:
                        await self._undo(gave_up)
                    except Exception:  # noqa: BLE001 - a defect (transient errors are handled there); the next handshakes still get served
                        log.exception(
                            "could not release %d slot(s) granted to handshakes that gave up; "
                            "they are freed when their leases expire",
                            len(gave_up),
                        )
        finally:  # cancelled (the stream stopping): nobody is left waiting
            stopping = StorageUnavailable("acquire stream lease: the stream is stopping")
            _fail(queue or [], stopping)
            _fail(self._queued.pop(workspace_id, []), stopping)
            del self._settling[workspace_id]

    async def stop(self) -> None:
        """Cancel the statements in flight (their handshakes get 503) and wait for them."""
        tasks = list(self._settling.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _fail(queue: list[tuple[Ask, asyncio.Future[bool]]], exc: BaseException) -> None:
    for _, future in queue:
        if not future.done():
            future.set_exception(exc)


class Leases:
    def __init__(
        self, pool: asyncpg.Pool, ttl_s: float, renew_every_s: float, *, acquire_timeout_s: float | None = None
    ) -> None:
        self.pool = pool
        self.acquire_timeout_s = acquire_timeout_s
        #: The renewals, releases and expiry sweeps: background work that a burst of handshakes
        #: on the shared pool delays, within a bound, rather than fails.
        self.db = BoundedReader(pool, BACKGROUND_ACQUIRE_TIMEOUT_S)
        self.ttl_s = ttl_s
        self.renew_every_s = renew_every_s
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.held: set[str] = set()
        self._grants = Grants(self._grant, self._release)

    async def acquire(self, workspace_id: str, session_id: str, limit: int) -> bool:
        """Take a slot of ``workspace_id`` for ``session_id``; False when all ``limit`` are taken.

        The grants of one workspace are serialized by its lock in PostgreSQL anyway, so this
        process settles them in groups (:class:`Grants`): a burst of one workspace's handshakes
        (a reconnect storm after a restart, a hostile client) costs a few statements on one
        pooled connection, never the pool that every other workspace's handshakes need."""
        granted = await self._grants.grant(workspace_id, (session_id, limit), self.acquire_timeout_s)
        if granted:
            self.held.add(session_id)
        return granted

    async def _grant(self, workspace_id: str, asks: list[Ask]) -> list[bool]:
        """One statement for a group of one workspace's handshakes, in their order: each is granted
        while the workspace's live leases plus the asks before it stay below its limit."""
        with storage_errors("acquire stream lease"):
            async with self.pool.acquire(timeout=self.acquire_timeout_s) as conn, conn.transaction():
                await conn.execute(sql.LOCK_WORKSPACE_SLOTS, workspace_id)
                await conn.execute(sql.DELETE_EXPIRED_OF_WORKSPACE, workspace_id)
                rows = await conn.fetch(
                    sql.INSERT_LEASES_IF_FREE,
                    workspace_id,
                    [s for s, _ in asks],
                    [n for _, n in asks],
                    self.holder,
                    self.ttl_s,
                )
        granted = {r["session_id"] for r in rows}
        return [s in granted for s, _ in asks]

    async def close(self) -> None:
        """Stop granting: the grant statements in flight are cancelled (their handshakes get 503)."""
        await self._grants.stop()

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
                await self.db.execute(sql.RELEASE_LEASES, ids)
        except TransientError as exc:  # the leases expire on their own
            log.warning("could not release %d stream lease(s), they will expire: %s", len(ids), exc)

    async def renew(self) -> set[str]:
        """Renew every held lease in one statement; returns the sessions whose lease was lost."""
        ids = list(self.held)
        if not ids:
            return set()
        with storage_errors("renew stream leases"):
            rows = await self.db.fetch(sql.RENEW_LEASES, ids, self.ttl_s)
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
                    await self.db.execute(sql.DELETE_EXPIRED_LEASES)
            except TransientError as exc:
                lost = set(self.held) if time.monotonic() - renewed_at >= self.ttl_s else set()
                log.warning(
                    "stream lease renewal failed%s: %s",
                    f"; {len(lost)} lease(s) expired unrenewed" if lost else ", retrying",
                    exc,
                )
            if lost:
                log.warning("%d stream lease(s) lost", len(lost))
                for s in lost:
                    self.held.discard(s)
                on_lost(lost)
