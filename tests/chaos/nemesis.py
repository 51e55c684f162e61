"""The nemesis: faults in a random order (``random.Random(seed)``), one after another with a
few seconds between them, each recorded as a span in the :class:`History`.

- ``kill <service>``: SIGKILL of the projector, the api or the stream (the harness's
  supervisor restarts it); the span lasts until the new process is ready;
- ``pause <service>``: SIGSTOP for 2 to 6 s, then SIGCONT;
- ``kill replica``: SIGKILL of the replica's processes, started again at once;
- ``pause replica``: SIGSTOP of the replica's processes for 2 to 6 s;
- ``restart primary``: the PostgreSQL primary stopped and started again (same port, same data);
- ``crash primary``: SIGKILL of the primary's postmaster and every process of it, then started
  again on the same data: crash recovery (what a commit made with ``synchronous_commit = off``
  had not written yet is gone);
- ``failover primary``: SIGKILL of the primary, the standby promoted, the services left to find
  it (their URL names both servers, ``target_session_attrs=read-write``), the old primary's data
  wiped and rebuilt as the new primary's standby; the span lasts until every service process is
  ready again, and its times are recorded (:class:`~tests.chaos.history.Failover`);
- ``failover lagging``: the same with a standby :data:`LAG_S` behind: it is frozen (SIGSTOP)
  that long, then killed with what it had not written of the WAL sent to it meanwhile, the
  primary killed, and the standby started again (its crash recovery) and promoted. Not among
  :data:`KINDS`: with synchronous replication the frozen standby holds every commit back, so
  it is for a run with ``synchronous_standby_names`` empty (what a failover loses then);
- ``restart kafka``: SIGKILL of the Apache Kafka node, started again on its log;
- ``cut primary|replica|kafka``: a partition between the services and that server for 2 to
  6 s (their connections dropped, new ones held: tests/support/links.py);
- ``slow primary|replica|kafka``: 50 to 400 ms added to every chunk each way between the
  services and that server, for 3 to 8 s.
- ``kill dispatcher``: SIGKILL of one of the two webhook dispatchers (the supervisor restarts
  it; the other takes its endpoints once their leases expire); the span lasts until the new
  process is ready;
- ``receiver outage``: one webhook receiver stops listening for :data:`OUTAGE_S` (longer than
  its endpoint's first three compressed retry intervals, 10 ms, 0.6 s and 3.6 s: the next one
  is 14.4 s), then listens again on the same port.

A fault on "primary" or "replica" hits the server that has that role when the fault starts.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from typing import Mapping

import aiohttp

from tests.chaos.harness import DISPATCHERS, ROLES, Cluster
from tests.chaos.history import RECENT_S, Failover, Fault, History, Key
from tests.chaos.workload import Hooks
from tests.support.replicas import signal_server
from tests.support.stack import BASE, auth

#: Each kind and its weight: the projector's SIGKILL (the slowest recovery) comes most often.
KINDS = {
    "kill projector": 3,
    "kill api": 2,
    "kill stream": 2,
    "pause projector": 1,
    "pause api": 1,
    "pause stream": 1,
    "kill replica": 1,
    "pause replica": 1,
    "restart primary": 1,
    "crash primary": 1,
    "failover primary": 1,
    "restart kafka": 1,
    "cut primary": 1,
    "cut replica": 1,
    "cut kafka": 1,
    "slow primary": 1,
    "slow replica": 1,
    "slow kafka": 1,
    "kill dispatcher": 2,
    "receiver outage": 1,
}
GAP_S = (3.0, 7.0)
PAUSE_S = (2.0, 6.0)
SLOW_S = (3.0, 8.0)
DELAY_S = (0.05, 0.4)
#: How long a receiver outage lasts.
OUTAGE_S = (5.0, 8.0)
#: How far behind the primary the standby of a ``failover lagging`` is (its replay lag).
LAG_S = 2.0
#: How long after a failover the API must answer, and every process be ready, before the
#: nemesis gives up waiting (the test states its own, tighter bound).
FAILOVER_WAIT_S = 60.0


class Nemesis:
    """``kinds``: each fault kind and its weight (:data:`KINDS` by default); ``gap_s``: the pause
    before each fault, drawn uniformly from that range (:data:`GAP_S` by default); ``hooks``:
    the webhook receivers a ``receiver outage`` stops."""

    def __init__(
        self,
        cluster: Cluster,
        history: History,
        rng: random.Random,
        kinds: Mapping[str, int] | None = None,
        gap_s: tuple[float, float] = GAP_S,
        hooks: Hooks | None = None,
    ) -> None:
        self.cluster, self.history, self.rng, self.hooks = cluster, history, rng, hooks
        self.kinds = dict(kinds or KINDS)
        self.gap_s = gap_s

    async def run(self, stop: asyncio.Event) -> None:
        kinds, weights = list(self.kinds), list(self.kinds.values())
        while not stop.is_set():
            await asyncio.sleep(self.rng.uniform(*self.gap_s))
            if stop.is_set():
                return
            kind = self.rng.choices(kinds, weights)[0]
            start = self.history.now()
            await self.inject(kind)
            self.history.faults.append(Fault(kind, start, self.history.now()))

    async def inject(self, kind: str) -> None:
        verb, _, target = kind.partition(" ")
        if target in ("projector", "api", "stream", "dispatcher"):
            await self.process(verb, self.rng.choice(DISPATCHERS) if target == "dispatcher" else target)
        elif kind == "receiver outage" and self.hooks is not None:
            endpoint_id = self.rng.choice(sorted(self.hooks.receivers))
            await self.hooks.outage(endpoint_id, self.rng.uniform(*OUTAGE_S))
        elif kind == "kill replica":
            replica = self.cluster.replica
            await asyncio.to_thread(signal_server, replica, signal.SIGKILL)
            await asyncio.to_thread(replica.stop)
            await asyncio.to_thread(replica.start)
        elif kind == "pause replica":
            await asyncio.to_thread(signal_server, self.cluster.replica, signal.SIGSTOP)
            try:
                await asyncio.sleep(self.rng.uniform(*PAUSE_S))
            finally:
                await asyncio.to_thread(signal_server, self.cluster.replica, signal.SIGCONT)
        elif kind == "restart primary":
            primary = self.cluster.primary
            await asyncio.to_thread(primary.stop)
            await asyncio.to_thread(primary.start)
        elif kind == "crash primary":
            await asyncio.to_thread(self.cluster.crash_primary)
        elif kind == "failover primary":
            await self.fail_over()
        elif kind == "failover lagging":
            await self.fail_over(lag_s=LAG_S)
        elif kind == "restart kafka":
            await asyncio.to_thread(self.cluster.kafka.kill)
            await asyncio.to_thread(self.cluster.kafka.start)
        elif verb in ("cut", "slow") and target in ("primary", "replica", "kafka"):
            link = self.cluster.link(target)
            if verb == "cut":
                await asyncio.to_thread(link.cut)
                span = self.rng.uniform(*PAUSE_S)
            else:
                link.slow(self.rng.uniform(*DELAY_S))
                span = self.rng.uniform(*SLOW_S)
            try:
                await asyncio.sleep(span)
            finally:
                await asyncio.to_thread(link.heal)
        else:
            raise ValueError(f"unknown fault {kind!r}")

    async def process(self, verb: str, role: str) -> None:
        """SIGKILL of the process of ``role`` (``verb`` "kill"), until its successor is ready; or
        SIGSTOP for a while, then SIGCONT."""
        service = self.cluster.current[role]
        if verb == "kill":
            service.proc.kill()
            await asyncio.sleep(0.5)  # the supervisor sees it within a quarter of a second
            await self.cluster.ready(role)
        else:
            os.kill(service.proc.pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(self.rng.uniform(*PAUSE_S))
            finally:
                os.kill(service.proc.pid, signal.SIGCONT)

    async def fail_over(self, lag_s: float = 0.0) -> None:
        """Kill the primary, promote the standby; while the old primary is rebuilt as the new
        standby, wait for the API to answer; then for every process to be ready. Recorded.
        ``lag_s``: the standby frozen that long first, and what it had not written lost."""
        if lag_s:
            await asyncio.to_thread(signal_server, self.cluster.replica, signal.SIGSTOP)
            await asyncio.sleep(lag_s)
        killed = self.history.now()
        pushed = {d.key for got in self.history.deliveries.values() for d in got if d.at >= killed - RECENT_S}
        old = await asyncio.to_thread(self.cluster.kill_primary)
        if lag_s:
            await asyncio.to_thread(self.cluster.lose_standby_tail)
        await asyncio.to_thread(self.cluster.promote_standby)
        promoted = self.history.now()
        rebuilding = asyncio.create_task(asyncio.to_thread(self.cluster.rebuild, old))
        try:
            async with aiohttp.ClientSession() as http:
                answered = await self.api_answers(http)
                unreadable = await self.unreadable(http, pushed)
        finally:
            await rebuilding
        rebuilt = self.history.now()
        for role in ROLES:
            await self.cluster.ready(role, timeout=FAILOVER_WAIT_S)
        failover = Failover(killed, promoted, answered, self.history.now(), rebuilt, len(pushed), len(unreadable))
        self.history.failovers.append(failover)

    async def api_answers(self, http: aiohttp.ClientSession) -> float:
        """When (in the history's time) the API first served ``GET /posts`` (its key checked and
        admitted on the primary) since now, asking every 0.1 s, each ask bounded to 1 s."""
        deadline = time.monotonic() + FAILOVER_WAIT_S
        while time.monotonic() < deadline:
            if await self.get(http, "/posts", {"limit": "1"}) == 200:
                return self.history.now()
            await asyncio.sleep(0.1)
        raise TimeoutError(f"the API did not answer within {FAILOVER_WAIT_S:.0f} s of a failover")

    async def unreadable(self, http: aiohttp.ClientSession, pushed: set[Key]) -> set[Key]:
        """Those of ``pushed`` that ``GET /posts/{id}?lang=`` does not serve (8 asks at a time)."""
        gate = asyncio.Semaphore(8)

        async def status(key: Key) -> int | None:
            async with gate:
                return await self.get(http, f"/posts/{key[0]}", {"lang": key[1]})

        keys = sorted(pushed)
        return {k for k, s in zip(keys, await asyncio.gather(*(status(k) for k in keys))) if s != 200}

    async def get(self, http: aiohttp.ClientSession, path: str, params: dict[str, str]) -> int | None:
        """The status of one ``GET`` of the API (None: no answer within a second)."""
        try:
            async with http.get(
                f"{self.cluster.api_url}{BASE}{path}",
                params=params,
                headers=auth(self.cluster.key),
                timeout=aiohttp.ClientTimeout(total=1.0),
            ) as resp:
                await resp.read()
                return resp.status
        except (aiohttp.ClientError, OSError, TimeoutError):
            return None
