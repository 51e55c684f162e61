"""Reads from PostgreSQL streaming replicas (``TICKERWIRE_DATABASE_READ_URLS``).

Each process that reads from replicas (the API; the stream only watches them) runs one
:class:`Replicas` monitor. Every ``tick_s`` it samples the primary's flushed WAL position
(``pg_current_wal_flush_lsn()``, one tiny statement) and asks each replica, in one statement,
how far it has replayed (``pg_last_wal_replay_lsn()``) and its stored positions of the posts
topic (the consistency mark of its data). From those:

- a replica's **lag** is how long ago the primary had flushed WAL the replica has not replayed
  yet (0 while it has replayed all the primary had): time, not bytes, so an idle primary shows
  no lag and a replica applying with a delay shows that delay;
- the **rotation**: a replica that answers and lags less than ``rejoin_below_s`` is in it; one
  that lags more than ``leave_after_s``, fails a probe (no answer within ``PROBE_TIMEOUT_S``:
  killed, frozen, cut off) or fails a read is taken out at once, with a WARNING line, the
  ``tickerwire_replica_in_rotation`` gauge at 0 and readiness naming it (the process stays
  ready: it reads from the primary); it comes back by itself, with an INFO line, once it
  answers and has caught up. With none in rotation, reads go to the primary;
- **freshness**: :meth:`Replicas.replica_for` picks a replica in rotation whose stored positions
  are at least a given mark (a client's ``X-Min-Log-Position``), waiting for one a bounded time;
  :meth:`Replicas.replica_at_lsn` one that has replayed a given primary WAL position (a change
  stamp's), polling the replicas for it a bounded time.

With no replica configured, nothing here runs and every statement goes to the primary.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping
from urllib.parse import urlsplit

import asyncpg
from prometheus_client import CollectorRegistry, Gauge

from ..runtime.config import Config
from ..runtime.errors import StorageUnavailable
from . import CONNECTION_ERRORS, BoundedReader, create_pool, open_connection

log = logging.getLogger(__name__)

#: How long one probe of a replica may take; a replica that does not answer within it is out.
PROBE_TIMEOUT_S = 0.5
#: How long the primary's WAL samples are kept: lags beyond it read as "at least this".
HISTORY_S = 60.0
#: How often a wait for a fresh enough replica polls it.
POLL_S = 0.01

#: One statement a replica answers each tick: its replay position and its posts-topic positions
#: (``{positions}``: the expression the wiring hands :class:`Replicas`, the topic its ``$1``).
PROBE_SQL = """
SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint AS lsn,
       {positions} AS marks
"""
#: The primary's WAL positions: what is flushed (what a replica can have), and where the next
#: record goes (at or after the end of every commit made so far).
FLUSH_SQL = "SELECT (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::bigint"
INSERT_LSN_SQL = "(pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint"

Marks = Mapping[int, int]

NOT_CHECKED = "not checked yet"
#: application_name of the probes' connections (pg_stat_activity on a replica shows them).
PROBE_NAME = "tickerwire-replica-probe"


def replica_name(url: str) -> str:
    """``host:port`` of a replica's URL: its name in logs and metrics (never the password)."""
    parts = urlsplit(url)
    return parts.netloc.rpartition("@")[2] or url.rpartition("@")[2]


@dataclass(eq=False)
class Replica:
    url: str = field(repr=False)
    name: str
    #: Its connections for reads (None where the process does not read from replicas: the stream)
    #: and, apart, the probes' own connection, so that reads exhausting the pool never fail a
    #: probe, and a probe that gets no answer drops its connection at once (waiting for nothing).
    pool: asyncpg.Pool | None = None
    probes: asyncpg.Connection | None = None
    #: One probe statement at a time on ``probes`` (the monitor's and the stream's asks).
    probing: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: Replayed WAL position at the last probe (-1: none yet) and the posts-topic positions then.
    replay_lsn: int = -1
    marks: dict[int, int] = field(default_factory=dict)
    lag_s: float = math.inf
    in_rotation: bool = False
    #: Why it is out of rotation ("" while in).
    reason: str = NOT_CHECKED
    #: Set when it leaves the rotation (a new one while it is in): statements in flight on it
    #: stop waiting for it then and go to the primary.
    left: asyncio.Event = field(default_factory=asyncio.Event)


class Replicas:
    """The replicas of one process and their rotation (see the module's docstring).

    ``leave_after_s``/``rejoin_below_s``: the lag bounds of this process's rotation. The API uses
    the configured ``replica_max_lag_s`` and a quarter of it; the stream, which waits for every
    replica the API may read from, 1.5 times and half of it, so its set holds the API's.

    ``positions_sql``: the SQL expression of ``topic``'s stored positions (the topic its ``$1``)
    as an array of ``[partition, next offset]`` pairs, and ``covers``, whether data at some
    positions reflects everything data at others does. The read model's tables and rules are
    the read-model room's to know, so the wiring hands them in
    (``tickerwire.services.readmodel.positions.marks_array_sql``,
    ``tickerwire.services.readmodel.logposition.covers``)."""

    def __init__(
        self,
        config: Config,
        topic: str,
        *,
        positions_sql: str,
        covers: Callable[[Marks, Marks], bool],
        leave_after_s: float,
        rejoin_below_s: float,
        registry: CollectorRegistry | None = None,
        tick_s: float = 0.1,
        reads: bool = True,
    ) -> None:
        self.config = config
        #: Whether this process reads from the replicas (the API) or only watches them (the stream).
        self.reads = reads
        self.topic = topic
        self._probe_sql = PROBE_SQL.format(positions=positions_sql)
        self.covers = covers
        self.leave_after_s = leave_after_s
        self.rejoin_below_s = rejoin_below_s
        self.tick_s = tick_s
        self.replicas = [Replica(url, replica_name(url)) for url in config.read_urls]
        self._samples: collections.deque[tuple[float, int]] = collections.deque()
        self._next = 0
        #: Probe rounds completed.
        self.rounds = 0
        self._probed = asyncio.Event()  # replaced (and the old one set) after every round
        self.in_rotation = Gauge(
            "tickerwire_replica_in_rotation",
            "1 while the replica serves reads (it answers and is within the lag bound), else 0",
            ["replica"],
            registry=registry,
        )
        self.lag = Gauge(
            "tickerwire_replica_lag_seconds",
            "How long ago the primary had flushed WAL this replica has "
            "not replayed yet (+Inf while it does not answer)",
            ["replica"],
            registry=registry,
        )
        for replica in self.replicas:
            self.in_rotation.labels(replica.name).set(0)
            self.lag.labels(replica.name).set(math.inf)

    def __bool__(self) -> bool:
        return bool(self.replicas)

    # ------------------------------------------------------------------ choosing

    def rotation(self) -> list[Replica]:
        return [r for r in self.replicas if r.in_rotation]

    def pick(self, want: Marks | None = None) -> Replica | None:
        """The next replica in rotation (round robin) whose last probe showed data at ``want``
        or later; None when there is none."""
        members = [r for r in self.rotation() if want is None or self.covers(r.marks, want)]
        if not members:
            return None
        self._next = (self._next + 1) % len(members)
        return members[self._next]

    async def replica_for(self, want: Marks, wait_s: float) -> Replica | None:
        """A replica in rotation whose data is at ``want`` or later, waiting for the probes to
        show one at most ``wait_s``; None (read the primary) when none gets there in time."""
        if (replica := self.pick(want)) is not None or not self.rotation():
            return replica
        deadline = time.monotonic() + wait_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                async with asyncio.timeout(left):
                    await self._probed.wait()
            except TimeoutError:
                break
            if (replica := self.pick(want)) is not None or not self.rotation():
                return replica
        return None

    async def replica_at_lsn(self, lsn: int, wait_s: float) -> Replica | None:
        """A replica in rotation that has replayed the primary's WAL up to ``lsn``, asking the
        replicas themselves every ``POLL_S`` for at most ``wait_s``; None when none gets there."""
        deadline = time.monotonic() + wait_s
        while True:
            candidates = self.rotation()
            if not candidates:
                return None
            for replica in candidates:
                if replica.replay_lsn >= lsn:
                    return replica
            await asyncio.gather(*(self.ask(r) for r in candidates))
            for replica in candidates:
                if replica.replay_lsn >= lsn:
                    return replica
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(POLL_S)

    async def ask(self, replica: Replica) -> bool:
        """Bring ``replica``'s replay position and posts-topic positions up to date with one
        statement on it; False (and out of rotation) when it does not answer."""
        try:
            return await self._query(replica)
        except (*CONNECTION_ERRORS, StorageUnavailable, asyncpg.PostgresError) as exc:
            self.failed(replica, exc)
            return False

    async def _query(self, replica: Replica) -> bool:
        """The probe statement on ``replica`` (its connections made first when missing), within
        ``PROBE_TIMEOUT_S``: whether it is a replica; its replay position and stored positions
        are recorded. A probe that fails drops its connection (the next one connects anew)."""
        async with replica.probing:
            try:
                async with asyncio.timeout(PROBE_TIMEOUT_S):
                    if replica.probes is None:
                        replica.probes = await open_connection(
                            replica.url,
                            schema=self.config.read_model_schema,
                            timeout=PROBE_TIMEOUT_S,
                            settings={"application_name": PROBE_NAME},
                        )
                    row = await replica.probes.fetchrow(self._probe_sql, self.topic)
            except BaseException:
                if replica.probes is not None:
                    replica.probes.terminate()
                    replica.probes = None
                raise
        if replica.pool is None and self.reads:
            replica.pool = await self._pool(replica, self.config.db_pool_max)
        assert row is not None
        if row["lsn"] is None:  # not in recovery: a primary, not a replica
            return False
        replica.replay_lsn = max(replica.replay_lsn, row["lsn"])
        replica.marks = {int(p): int(o) for p, o in row["marks"]}
        return True

    async def _pool(self, replica: Replica, size: int) -> asyncpg.Pool:
        return await create_pool(
            replica.url,
            self.config.read_model_schema,
            min_size=1,
            max_size=size,
            stateless=True,
            statement_timeout_s=self.config.db_statement_timeout_s,
            connect_timeout_s=min(self.config.db_connect_timeout_s, 1.0),
        )

    def failed(self, replica: Replica, exc: BaseException) -> None:
        """A statement on ``replica`` failed for want of the server: out of rotation now (the
        probes bring it back once it answers and has caught up)."""
        self._leave(replica, f"failed: {type(exc).__name__}: {exc}" if str(exc) else f"failed: {type(exc).__name__}")

    # ------------------------------------------------------------------ the monitor

    def check(self) -> tuple[bool, str]:
        """Readiness: ready once every replica was probed (whatever the answers: the primary
        serves what the replicas cannot), saying which are out of rotation and why."""
        if not self.rounds:
            return False, "probing the replicas"
        out = [f"{r.name} out of rotation ({r.reason})" for r in self.replicas if not r.in_rotation]
        return True, "; ".join(out) if out else f"{len(self.replicas)} of {len(self.replicas)} in rotation"

    async def run(self, primary: asyncpg.Pool) -> None:
        """Probe every ``tick_s`` until cancelled; the replicas' pools are closed when it ends."""
        try:
            while True:
                started = time.monotonic()
                await self.probe_once(primary)
                await asyncio.sleep(max(0.0, self.tick_s - (time.monotonic() - started)))
        finally:
            for replica in self.replicas:
                if replica.pool is not None:
                    replica.pool.terminate()
                if replica.probes is not None:
                    replica.probes.terminate()
                replica.pool, replica.probes = None, None

    async def probe_once(self, primary: asyncpg.Pool) -> None:
        try:
            async with primary.acquire(timeout=PROBE_TIMEOUT_S) as conn:
                self.sample(time.monotonic(), await conn.fetchval(FLUSH_SQL, timeout=PROBE_TIMEOUT_S))
        except (*CONNECTION_ERRORS, asyncpg.PostgresError) as exc:
            log.debug("replica monitor: the primary's WAL position unavailable: %s", exc)
        await asyncio.gather(*(self._probe(replica) for replica in self.replicas))
        self.rounds += 1
        done, self._probed = self._probed, asyncio.Event()
        done.set()

    def sample(self, now: float, flushed: int) -> None:
        """Record the primary's flushed WAL position at ``now`` (kept for ``HISTORY_S``)."""
        if not self._samples or self._samples[-1][1] != flushed:
            self._samples.append((now, flushed))
        while len(self._samples) > 1 and self._samples[1][0] < now - HISTORY_S:
            self._samples.popleft()

    async def _warm(self, replica: Replica) -> bool:
        """Whether a read connection of a replica coming back answers within ``PROBE_TIMEOUT_S``
        (made now if need be), so its first reads do not wait for one."""
        assert replica.pool is not None
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                async with replica.pool.acquire() as conn:
                    await conn.fetchval("SELECT 1")
        except (*CONNECTION_ERRORS, asyncpg.PostgresError):
            return False
        return True

    def lag_of(self, replayed: int, now: float) -> float:
        """Seconds since the primary first had WAL past ``replayed`` flushed (0: none)."""
        for at, flushed in self._samples:
            if flushed > replayed:
                return max(0.0, now - at)
        return 0.0

    async def _probe(self, replica: Replica) -> None:
        try:
            is_replica = await self._query(replica)
        except (*CONNECTION_ERRORS, StorageUnavailable, asyncpg.PostgresError) as exc:
            replica.lag_s = math.inf
            self.lag.labels(replica.name).set(math.inf)
            self._leave(replica, "no answer" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}")
            return
        if not is_replica:
            self._leave(replica, "not a replica (pg_last_wal_replay_lsn() is NULL): promoted, or misconfigured")
            return
        if not replica.in_rotation and replica.pool is not None and not await self._warm(replica):
            return  # its reads would wait for a connection: not back yet
        self.judge(replica, self.lag_of(replica.replay_lsn, time.monotonic()))

    def judge(self, replica: Replica, lag_s: float) -> None:
        """Record a replica's lag as a probe found it, and take it out of (or back into) the rotation."""
        replica.lag_s = lag_s
        self.lag.labels(replica.name).set(replica.lag_s)
        if replica.lag_s > self.leave_after_s:
            self._leave(
                replica, f"{replica.lag_s:.1f} s behind the primary, over the bound of {self.leave_after_s:g} s"
            )
        elif not replica.in_rotation and replica.lag_s < self.rejoin_below_s:
            replica.in_rotation, replica.reason, replica.left = True, "", asyncio.Event()
            self.in_rotation.labels(replica.name).set(1)
            log.info("replica %s in the read rotation (%.2f s behind the primary)", replica.name, replica.lag_s)

    def _leave(self, replica: Replica, reason: str) -> None:
        if replica.in_rotation:
            log.warning(
                "replica %s out of the read rotation: %s; reads go to the other replicas or the primary "
                "until it has caught up",
                replica.name,
                reason,
            )
        elif replica.reason == NOT_CHECKED:
            log.warning(
                "replica %s not in the read rotation from the start: %s; reads go to the other replicas or "
                "the primary until it answers and has caught up",
                replica.name,
                reason,
            )
        replica.in_rotation, replica.reason = False, reason
        replica.left.set()
        self.in_rotation.labels(replica.name).set(0)


#: How long a read wanting data at least as fresh as a client's mark waits for a replica to
#: show it (about one probe round); then it reads the primary.
FRESH_WAIT_S = 0.25


class ReplicaReader:
    """A request's statements: on a replica in rotation (at ``want`` or later), else, or when the
    replica fails under it, on the primary (``primary``, a bounded reader of its pool). A
    replica that fails is out of rotation at once, so the next request does not try it."""

    __slots__ = ("replicas", "primary", "want")

    def __init__(self, replicas: Replicas, primary: BoundedReader, want: Marks | None) -> None:
        self.replicas, self.primary, self.want = replicas, primary, want

    async def _replica(self) -> Replica | None:
        if self.want:
            return await self.replicas.replica_for(self.want, FRESH_WAIT_S)
        return self.replicas.pick()

    async def fetch(self, query: str, *args: object, timeout: float | None = None) -> list:
        replica = await self._replica()
        if replica is not None and replica.pool is not None:
            # The statement, abandoned when the replica leaves the rotation meanwhile (a probe
            # found it frozen or gone): the request goes on to the primary then, not after the
            # statement's own bound.
            statement = asyncio.ensure_future(self._on(replica.pool, query, args, timeout))
            left = asyncio.ensure_future(replica.left.wait())
            await asyncio.wait((statement, left), return_when=asyncio.FIRST_COMPLETED)
            left.cancel()
            if not statement.done():
                statement.cancel()
                statement.add_done_callback(_retrieve)
            else:
                try:
                    return statement.result()
                except _Busy:
                    pass  # its pool is exhausted, not the replica: the primary takes this one
                except CONNECTION_ERRORS as exc:
                    self.replicas.failed(replica, exc)
        return await self.primary.fetch(query, *args, timeout=timeout)

    async def _on(self, pool: asyncpg.Pool, query: str, args: tuple, timeout: float | None) -> list:
        try:
            conn = await pool.acquire(timeout=self.primary.timeout_s)
        except TimeoutError:
            raise _Busy from None
        try:
            return await conn.fetch(query, *args, timeout=timeout)
        finally:
            await pool.release(conn)

    async def fetchrow(self, query: str, *args: object, timeout: float | None = None) -> asyncpg.Record | None:
        rows = await self.fetch(query, *args, timeout=timeout)
        return rows[0] if rows else None


class _Busy(Exception):
    """No free pooled connection to a replica within the bound."""


def _retrieve(task: asyncio.Future) -> None:
    """Done callback of an abandoned statement: its outcome is nobody's (no 'never retrieved')."""
    if not task.cancelled():
        task.exception()
