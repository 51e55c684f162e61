"""Keeping a process's in-memory copies current: the change stamps, pushed and polled.

The projector bumps a row of ``change_stamps`` in the transaction that changes what the row names
(``access``, ``posts``, ``tokens``, ...); a trigger turns every bump into ``NOTIFY tw_stamps``
(read-model migration 0003), delivered at commit. A :class:`StampWatcher` LISTENs on a dedicated
connection and runs the process's ``refresh`` at once on each notification, and at least every
``poll_s`` seconds anyway, so a lost notification (or a listener that is down) delays a change by
at most ``poll_s``.

Two things make the copies safe to serve from:

- :meth:`StampWatcher.fresh`: the last successful refresh started less than ``stale_after_s`` ago.
  When it did not (the database is unreachable, the loop is stuck), callers must not serve what
  they hold as current: access falls back to the database per request, and readiness says 503.
- :meth:`StampWatcher.caught_up`: a notification for a stamp (``access`` for access checks,
  ``posts`` for the page cache) that arrived but is not applied yet makes the caller wait for the
  refresh that applies it (bounded), so a request that reaches the process after the change was
  pushed is answered from the new state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Awaitable, Callable

import asyncpg

from ..common.db import CONNECTION_ERRORS, open_connection
from ..common.runtime.errors import TransientError
from ..common.runtime.retry import backoff_delays

log = logging.getLogger(__name__)

#: The change stamps, rows of ``change_stamps`` (created by the migrations), and what a bump
#: of each says: the projector bumps them in the transaction of the change, the API and the
#: stream reload what depends on them.
ACCESS = "access"  # keys, workspaces and badges: each process's principals
POSTS = "posts"  # any post: the API's page cache
TOKENS = "tokens"  # tokens and their post counts
CATEGORIES = "categories"
LOCALES = "locales"
WEBHOOKS = "webhooks"  # webhook endpoints: each dispatcher's endpoints

CHANNEL = "tw_stamps"
#: application_name of the listening connection (pg_stat_activity shows who listens)
LISTENER_NAME = "tickerwire-stamps"
#: The bound of one refresh (reading the stamps and reloading what moved: principals, the
#: catalog). Its statements are bounded by the pool's statement timeout; this also bounds the
#: waits for a pooled connection, so a pool held by stuck work cannot stall the refreshes.
REFRESH_TIMEOUT_S = 10.0


class StampWatcher:
    def __init__(
        self,
        dsn: str,
        refresh: Callable[[], Awaitable[None]],
        *,
        poll_s: float = 0.5,
        stale_after_s: float = 2.0,
        ping_s: float = 5.0,
        on_listening: Callable[[bool], None] | None = None,
    ) -> None:
        self._dsn = dsn
        self._refresh = refresh
        self.poll_s = poll_s
        self.stale_after_s = stale_after_s
        self._ping_s = ping_s
        self._on_listening = on_listening
        self._wake = asyncio.Event()
        self._seen: dict[str, int] = {}  # notifications received, per stamp name
        self._applied: dict[str, int] = {}  # ... of which a completed refresh started after their arrival
        self._refreshed = asyncio.Event()  # replaced (and the old one set) after every refresh
        #: monotonic start of the last successful refresh (0: none yet)
        self.confirmed_at = 0.0
        self.listening = False

    # ------------------------------------------------------------------ state for callers

    def fresh(self) -> bool:
        return self.confirmed_at > 0 and time.monotonic() - self.confirmed_at < self.stale_after_s

    def status(self) -> tuple[bool, str]:
        """Readiness: the copies are confirmed current and pushes arrive."""
        if self.confirmed_at == 0:
            return False, "loading"
        if not self.fresh():
            return False, f"change stamps not confirmed for over {self.stale_after_s:g} s"
        if not self.listening:
            return False, "change-stamp listener down (polling only)"
        return True, "ok"

    def behind(self, name: str) -> bool:
        """A ``name`` notification arrived that no completed refresh has applied yet."""
        return self._applied.get(name, 0) < self._seen.get(name, 0)

    async def caught_up(self, name: str, timeout: float = 1.0) -> None:
        """Return once every ``name`` notification received so far is applied (or after ``timeout``)."""
        target = self._seen.get(name, 0)
        if self._applied.get(name, 0) >= target:
            return
        deadline = time.monotonic() + timeout
        while self._applied.get(name, 0) < target:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                async with asyncio.timeout(left):  # not wait_for: see _refresh_loop
                    await self._refreshed.wait()
            except TimeoutError:
                return

    async def refreshed_now(self, timeout: float) -> bool:
        """Ask for a refresh at once and wait, at most ``timeout``, until one that started after
        this call has completed; whether one did."""
        asked = time.monotonic()
        self._wake.set()
        deadline = asked + timeout
        while self.confirmed_at < asked:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._refreshed.wait()
        return True

    # ------------------------------------------------------------------ the two loops

    def _notified(self, _conn, _pid, _channel, payload: str) -> None:
        name = payload.rsplit(":", 2)[-2] if payload.count(":") >= 2 else ""
        self._seen[name] = self._seen.get(name, 0) + 1
        self._wake.set()

    async def run(self) -> None:
        """Refresh on every push and every ``poll_s``; listen in a sibling task. Until cancelled."""
        listener = asyncio.create_task(self._listen(), name="stamp-listener")
        try:
            await self._refresh_loop(listener)
        finally:
            listener.cancel()
            try:
                await listener
            except BaseException:  # noqa: BLE001 - cancelled or crashed; we are stopping either way
                pass

    async def _refresh_loop(self, listener: asyncio.Task) -> None:
        while True:
            if listener.done():  # the listener loop never ends by itself: surface its crash
                listener.result()
                raise RuntimeError("stamp listener stopped")
            self._wake.clear()
            started, seen = time.monotonic(), dict(self._seen)
            try:
                async with asyncio.timeout(REFRESH_TIMEOUT_S):
                    await self._refresh()
            except TimeoutError:
                log.warning("refreshing from the change stamps took over %g s; retrying", REFRESH_TIMEOUT_S)
            except TransientError as exc:
                log.warning("refreshing from the change stamps failed: %s", exc)
            except asyncpg.UndefinedTableError:
                log.info("read model not migrated yet; waiting")
            except Exception:  # a bug or an unexpected database error: loud, then the next poll retries
                log.exception("refreshing from the change stamps crashed; retrying in %g s", self.poll_s)
            else:
                self.confirmed_at = started
                self._applied.update(seen)
                done, self._refreshed = self._refreshed, asyncio.Event()
                done.set()
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
            # races the wake-up, and then the watcher never stops (a shutdown that hangs).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_s):
                    await self._wake.wait()

    def _set_listening(self, value: bool, cause: str = "") -> None:
        if value != self.listening:
            self.listening = value
            if value:
                log.info("change-stamp listener up")
            else:
                log.error(
                    "change-stamp listener down%s; polling every %g s and reconnecting",
                    f" ({cause})" if cause else "",
                    self.poll_s,
                )
            if self._on_listening is not None:
                self._on_listening(value)
        elif cause:
            log.debug("change-stamp listener still down: %s", cause)

    async def _listen(self) -> None:
        delays = backoff_delays(0.1, 2.0)
        while True:
            conn: asyncpg.Connection | None = None
            cause = ""
            try:
                conn = await open_connection(self._dsn, timeout=5, settings={"application_name": LISTENER_NAME})
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _c: lost.set())
                async with asyncio.timeout(self._ping_s):  # LISTEN is a statement too: bounded
                    await conn.add_listener(CHANNEL, self._notified)
                self._set_listening(True)
                delays = backoff_delays(0.1, 2.0)
                self._wake.set()  # changes made while nobody listened: read them now
                while not lost.is_set():
                    try:
                        async with asyncio.timeout(self._ping_s):
                            await lost.wait()
                    except TimeoutError:
                        await conn.execute("SELECT 1", timeout=self._ping_s)  # a silent dead link
            except CONNECTION_ERRORS as exc:
                cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            except asyncio.CancelledError:
                self.listening = False  # stopping: not an outage
                raise
            except Exception as exc:
                log.exception("change-stamp listener crashed; restarting")
                cause = f"crashed: {type(exc).__name__}"
            finally:
                if conn is not None and not conn.is_closed():
                    conn.terminate()
            self._set_listening(False, cause or "connection closed")
            await asyncio.sleep(next(delays))
