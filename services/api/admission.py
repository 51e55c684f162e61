"""Admitting requests against the rate limit and the daily quota, group-committed.

Every API process gathers the admissions of all its concurrent requests (any workspaces) and
settles them in ONE statement (``tw_admit``, platform migration 0003) on one of its own two
connections: while a batch is in flight the next one gathers, so the batching window adapts to
the load (one round trip when idle, up to ``max_batch`` requests per round trip under load). The database
grants each workspace ``g`` of its ``n`` requests; the process hands the grants out in arrival
order (the k-th admitted request sees ``used = before + k``) and refuses the others with 429, so
the counters stay exact across any number of processes and a refused request counts nothing.

A workspace refused because its minute (or day) is full is then refused from memory until that
window resets, with the same headers and an exact ``Retry-After`` (on the database clock, as
estimated from the last batch), so an over-limit client costs no database work. The marks are
dropped whenever the principals reload (a workspace's limits may have changed).

A request waits at most ``timeout_s`` for its batch, then gets a 503 (queued: it was not
counted; in flight: it may have been); one watchdog checks the deadlines every
``WATCHDOG_S``, instead of a timer per request (a timer costs about as much as the rest of an
admission).

The connection runs with ``synchronous_commit = off``: see the migration for what a PostgreSQL
crash can forget (the grants of its last few hundred milliseconds).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, replace

import asyncpg

from ..common.db import CONNECTION_ERRORS, open_connection
from ..common.runtime.errors import StorageUnavailable
from ..common.runtime.retry import backoff_delays
from ..readmodel.access import Principal
from .limits import Usage
from .metrics import ApiMetrics

log = logging.getLogger(__name__)

SETTLE = "SELECT * FROM tw_admit($1::text[], $2::integer[], $3::integer[], $4::integer[])"
RATE_LIMITED = "RATE_LIMITED"
#: How often the watchdog looks for requests waiting past their deadline.
WATCHDOG_S = 0.1
#: An idle admission connection is looked at this often: one the server closed meanwhile (a
#: crash or a restart of PostgreSQL) is replaced before a request finds it closed.
IDLE_CHECK_S = 0.5
QUOTA_EXHAUSTED = "QUOTA_EXHAUSTED"


@dataclass(slots=True)
class _Pending:
    workspace_id: str
    rate: int
    quota: int
    future: asyncio.Future
    #: monotonic time after which the request gets a 503 instead of waiting on
    deadline: float


def _fail(p: _Pending, why: str) -> None:
    if not p.future.done():
        p.future.set_exception(StorageUnavailable(f"admission: {why}"))


def hand_out(row: asyncpg.Record | dict, pending: list[_Pending]) -> list[Usage]:
    """The usages of one workspace's requests (arrival order) from its ``tw_admit`` row."""
    granted, m0, d0 = row["granted"], row["minute_before"], row["day_before"]
    rate, quota = pending[-1].rate, pending[-1].quota
    out = []
    for i, _ in enumerate(pending):
        if i < granted:
            outcome, m, d = "OK", m0 + i + 1, d0 + i + 1
        else:
            m, d = m0 + granted, d0 + granted
            outcome = RATE_LIMITED if m >= rate else QUOTA_EXHAUSTED
        out.append(Usage(outcome, rate, m, row["minute_reset"], quota, d, row["day_reset"], row["db_now"]))
    return out


class Admissions:
    def __init__(
        self,
        dsn: str,
        *,
        default_rate: int,
        default_quota: int,
        max_batch: int = 512,
        timeout_s: float = 5.0,
        metrics: ApiMetrics | None = None,
        connections: int = 2,
    ) -> None:
        self._connections = connections
        self._up: set[int] = set()
        self._metrics = metrics
        self._dsn = dsn
        self._default_rate = default_rate
        self._default_quota = default_quota
        self._max_batch = max_batch
        self._timeout_s = timeout_s
        self._queue: deque[_Pending] = deque()
        self._in_flight: dict[int, list[_Pending]] = {}  # worker -> its batch in flight
        self._wake = asyncio.Event()
        #: workspace -> the refusal that holds until its window resets
        self._exhausted: dict[str, Usage] = {}
        #: database clock minus local clock, as of the last batch
        self._offset = 0.0
        self.batches = 0
        self.refused_from_memory = 0

    @property
    def connected(self) -> bool:
        return bool(self._up)

    def forget_exhaustion(self) -> None:
        self._exhausted.clear()

    def _db_now(self) -> float:
        return time.time() + self._offset

    def _known_refusal(self, ws: str, rate: int, quota: int) -> Usage | None:
        known = self._exhausted.get(ws)
        if known is None:
            return None
        now = self._db_now()
        reset = known.minute_reset if known.outcome == RATE_LIMITED else known.day_reset
        if now >= reset or known.rate_limit != rate or known.quota != quota:
            del self._exhausted[ws]
            return None
        return replace(known, now=now)

    async def admit(self, principal: Principal) -> Usage:
        """The request's admission (``outcome`` OK, RATE_LIMITED or QUOTA_EXHAUSTED)."""
        ws = principal.workspace_id
        rate = self._default_rate if principal.rate_limit_per_minute is None else principal.rate_limit_per_minute
        quota = self._default_quota if principal.daily_quota is None else principal.daily_quota
        if (known := self._known_refusal(ws, rate, quota)) is not None:
            self.refused_from_memory += 1
            if self._metrics is not None:
                self._metrics.admissions.labels("memory").inc()
            return known
        if not self.connected:
            raise StorageUnavailable("admission: no connection to the usage counters")
        future = asyncio.get_running_loop().create_future()
        # No timer per request (one costs about as much as the rest of this method): the
        # watchdog fails what waits past its deadline (see _expire_overdue).
        self._queue.append(_Pending(ws, rate, quota, future, time.monotonic() + self._timeout_s))
        self._wake.set()
        return await future

    def _take(self) -> list[_Pending]:
        batch: list[_Pending] = []
        while self._queue and len(batch) < self._max_batch:
            p = self._queue.popleft()
            if not p.future.done():
                batch.append(p)
        return batch

    def _expire_overdue(self) -> None:
        """Fail every request waiting past its deadline: still queued (skipped by the next batch)
        or in flight (it may have been counted)."""
        now = time.monotonic()
        queue = self._queue
        while queue and queue[0].deadline <= now:  # the queue is in arrival order
            _fail(queue.popleft(), f"no answer within {self._timeout_s:g} s")
        for batch in self._in_flight.values():
            for p in batch:
                if p.deadline <= now:
                    _fail(p, f"no answer within {self._timeout_s:g} s")

    async def _watchdog(self) -> None:
        while True:
            await asyncio.sleep(WATCHDOG_S)
            self._expire_overdue()

    async def _settle(self, conn: asyncpg.Connection, batch: list[_Pending]) -> None:
        by_ws: dict[str, list[_Pending]] = {}
        for p in batch:
            by_ws.setdefault(p.workspace_id, []).append(p)
        ids = list(by_ws)
        rows = await conn.fetch(
            SETTLE,
            ids,
            [len(by_ws[w]) for w in ids],
            [by_ws[w][-1].rate for w in ids],
            [by_ws[w][-1].quota for w in ids],
            timeout=self._timeout_s,
        )
        self.batches += 1
        if self._metrics is not None:
            self._metrics.admission_batches.inc()
            self._metrics.admissions.labels("database").inc(len(batch))
        for row in rows:
            pending = by_ws[row["workspace_id"]]
            usages = hand_out(row, pending)
            for p, usage in zip(pending, usages):
                if not p.future.done():
                    p.future.set_result(usage)
            if usages[-1].outcome != "OK":
                self._exhausted[row["workspace_id"]] = usages[-1]
        if rows:
            self._offset = rows[0]["db_now"] - time.time()

    async def run(self) -> None:
        """``connections`` workers, each with its own connection (reconnecting with backoff),
        settle batches until cancelled: while one batch is in flight the other can start. A
        watchdog fails requests that waited longer than ``timeout_s``. One of them failing stops
        the others (a task group), so a restart by the supervisor never doubles the workers."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._watchdog())
            for i in range(self._connections):
                group.create_task(self._worker(i))

    async def _worker(self, number: int) -> None:
        delays = backoff_delays(0.1, 2.0)
        failing_since: float | None = None  # reconnects failing since then: said once, not every 2 s
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await open_connection(
                    self._dsn,
                    timeout=5,
                    settings={"synchronous_commit": "off", "application_name": "tickerwire-admission"},
                )
                self._up.add(number)
                delays = backoff_delays(0.1, 2.0)
                _said_up(number, failing_since)
                failing_since = None
                await self._serve(number, conn)
            except Exception as exc:  # connection lost (or a bug): what waited failed, reconnect with backoff
                failing_since = self._said_down(number, exc, failing_since)
            finally:
                self._up.discard(number)
                if conn is not None and not conn.is_closed():
                    conn.terminate()
            if not self._up:  # nobody left to settle what waits: 503 now rather than at the timeout
                for p in self._queue:
                    _fail(p, "no connection to the usage counters")
                self._queue.clear()
            await asyncio.sleep(next(delays))

    async def _serve(self, number: int, conn: asyncpg.Connection) -> None:
        """Settle batches on ``conn`` as requests arrive, until it fails; idle, until it is
        found closed (every :data:`IDLE_CHECK_S`: no statement, the socket's state)."""
        while True:
            try:
                async with asyncio.timeout(IDLE_CHECK_S):
                    await self._wake.wait()
            except TimeoutError:
                if conn.is_closed():
                    raise asyncpg.exceptions.ConnectionDoesNotExistError("the server closed it while idle") from None
                continue
            self._wake.clear()
            await asyncio.sleep(0)  # requests parsed in this loop turn join the batch
            batch = self._take()
            if self._queue:
                self._wake.set()
            if batch:
                await self._settle_in_flight(number, conn, batch)

    async def _settle_in_flight(self, number: int, conn: asyncpg.Connection, batch: list[_Pending]) -> None:
        """:meth:`_settle` one batch, in flight meanwhile (the watchdog sees it). A statement that
        fails fails this batch only; a lost connection (or a bug) fails it and is raised."""
        self._in_flight[number] = batch
        try:
            await self._settle(conn, batch)
        except Exception as exc:
            if isinstance(exc, CONNECTION_ERRORS) or not isinstance(exc, asyncpg.PostgresError):
                for p in batch:
                    _fail(p, "connection lost")
                raise
            # e.g. a statement timeout: this batch only
            log.error("settling %d admissions failed: %s: %s", len(batch), type(exc).__name__, exc)
            for p in batch:
                _fail(p, type(exc).__name__)
        finally:
            del self._in_flight[number]

    def _said_down(self, number: int, exc: Exception, failing_since: float | None) -> float | None:
        """Log why connection ``number`` is down, once per outage; returns since when it fails."""
        if not isinstance(exc, CONNECTION_ERRORS):
            log.exception("admission worker %d crashed; restarting", number)
            return failing_since
        cause = f"{type(exc).__name__}: {exc}" if str(exc) else f"{type(exc).__name__} (no answer in time)"
        if number in self._up:  # it was working: news
            log.error("admission connection %d lost: %s; reconnecting", number, cause)
            return time.monotonic()
        if failing_since is None:  # at start, or the first reconnect after a loss that was not news
            log.error("admission connection %d cannot connect: %s; retrying (said again when it is up)", number, cause)
            return time.monotonic()
        return failing_since


def _said_up(number: int, failing_since: float | None) -> None:
    """Log that connection ``number`` is up (again, after how long, when it was failing)."""
    if failing_since is None:
        log.info("admission connection %d up", number)
    else:
        log.warning("admission connection %d up again after %.1f s", number, time.monotonic() - failing_since)
