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

The production shape (tests/chaos/harness.py: three Kafka nodes, two api and two stream
processes) has :data:`PRODUCTION_KINDS`: those above, a ``kill``/``pause`` of the api or the
stream hitting one of its two processes (the other keeps serving the shared port), and instead
of the lone node's restart, cut and slowdown:

- ``kill leader``: SIGKILL of the node leading a posts partition (one drawn at random), kept
  down :data:`NODE_DOWN_S` (past the brokers' session, so the controller moves leadership and
  shrinks the ISRs), then started again on its log;
- ``kill controller``: the same for the active controller (asked with DescribeQuorum);
- ``pause broker``: SIGSTOP of one node for :data:`BROKER_PAUSE_S`, then SIGCONT: past 4 s its
  broker session has expired and it is fenced, yet it wakes up believing it still leads what
  it led, until its first request to the quorum tells it otherwise (the nearest this machine
  comes to a leader cut off from its peers: the nodes share the loopback, so the links cut
  only what the services send);
- ``cut broker``, ``slow broker``: the services' link to one node cut or slowed, as for the
  lone node.

Each of the four ends only once every partition is fully replicated again (:data:`IN_SYNC_S`
at most, or a violation), so the next fault never takes a second replica of a partition:
two nodes of three down is outside what ``min.insync.replicas=2`` promises.

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
import asyncpg

from tests.chaos.harness import Cluster
from tests.chaos.history import RECENT_S, Failover, Fault, History, Key
from tests.chaos.workload import Hooks
from tests.support.links import Link
from tests.support.replicas import signal_server
from tests.support.stack import BASE, auth
from tests.support.topics import posts_leader
from tickerwire.devstack.embedded.apache_kafka import ApacheKafka
from tickerwire.services.common import kafka

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
#: The production shape's faults: the lone Kafka node's restart, cut and slowdown give way to
#: the cluster's (a leader or the controller killed, a node paused, cut or slowed).
PRODUCTION_KINDS = {
    **{k: w for k, w in KINDS.items() if not k.endswith(" kafka")},
    "kill leader": 1,
    "kill controller": 1,
    "pause broker": 1,
    "cut broker": 1,
    "slow broker": 1,
}
GAP_S = (3.0, 7.0)
PAUSE_S = (2.0, 6.0)
SLOW_S = (3.0, 8.0)
DELAY_S = (0.05, 0.4)
#: How long a receiver outage lasts.
OUTAGE_S = (5.0, 8.0)
#: How far behind the primary the standby of a ``failover lagging`` is (its replay lag).
LAG_S = 2.0
#: How long a killed node stays down.
NODE_DOWN_S = (5.0, 10.0)
#: How long a paused node is frozen (past the brokers' 4 s session from 4 s on).
BROKER_PAUSE_S = (2.0, 8.0)
#: How long after a node's fault every partition must be fully replicated again.
IN_SYNC_S = 90.0
#: How long another node may take to lead a killed leader's partition, or to become the controller.
TAKEOVER_S = 30.0
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
            await self.process(verb, self.rng.choice(self.cluster.processes(target)))
        elif kind in ("kill leader", "kill controller", "pause broker", "cut broker", "slow broker"):
            await self.node_fault(verb, target)
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
            await self.break_link(verb, self.cluster.link(target))
        else:
            raise ValueError(f"unknown fault {kind!r}")

    async def node_fault(self, verb: str, target: str) -> None:
        """One of the cluster's faults (the module's docstring), then every partition in sync."""
        nodes = self.cluster.nodes
        if target == "leader":
            partitions = self.cluster.stack.config.topic_posts_partitions
            node = nodes[await posts_leader(self.cluster.stack.config, self.rng.randrange(partitions), TAKEOVER_S) - 1]
        elif target == "controller":
            node = nodes[await asyncio.to_thread(self.cluster.kafka.active_controller) - 1]
        else:
            node = self.rng.choice(nodes)
        if verb == "kill":
            await self.kill_node(node, target)
        elif verb == "pause":
            assert node.pid is not None
            os.kill(node.pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(self.rng.uniform(*BROKER_PAUSE_S))
            finally:
                os.kill(node.pid, signal.SIGCONT)
        else:
            await self.break_link(verb, self.cluster.node_link(node))
        await self.in_sync()

    async def break_link(self, verb: str, link: Link) -> None:
        """``link`` cut for 2 to 6 s, or slowed for 3 to 8 s (``verb``), then healed."""
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

    async def kill_node(self, node: ApacheKafka, role: str) -> None:
        """SIGKILL of ``node``; once another node holds its ``role`` (a partition's leadership:
        any other leader of it; the controller: another active one) and it has been down
        :data:`NODE_DOWN_S`, started again on its log."""
        down_s = self.rng.uniform(*NODE_DOWN_S)
        killed = time.monotonic()
        await asyncio.to_thread(node.kill)
        if role == "controller":
            deadline = killed + TAKEOVER_S
            while time.monotonic() < deadline:
                try:
                    if await asyncio.to_thread(self.cluster.kafka.active_controller) not in (node.node_id, -1):
                        break
                except Exception:  # noqa: BLE001 - no answer while the quorum elects: ask again
                    pass
                await asyncio.sleep(0.2)
            else:
                self.history.violation(f"no other node became the active controller within {TAKEOVER_S:.0f} s")
        await asyncio.sleep(max(0.0, killed + down_s - time.monotonic()))
        await asyncio.to_thread(node.start)

    async def in_sync(self) -> None:
        """Wait until every partition of every topic has all its replicas in sync (a violation
        after :data:`IN_SYNC_S`)."""
        deadline = time.monotonic() + IN_SYNC_S
        lagging: list[str] = []
        while time.monotonic() < deadline:
            try:
                async with asyncio.timeout(10.0), kafka.started_admin(self.cluster.stack.config) as admin:
                    topics = await admin.describe_topics(await admin.list_topics())
            except Exception as exc:  # noqa: BLE001 - the cluster is still settling: ask again
                lagging = [f"{type(exc).__name__}: {exc}"]
            else:
                lagging = [
                    f"{t['topic']}[{p['partition']}]"
                    for t in topics
                    for p in t["partitions"]
                    if len(p["isr"]) < len(p["replicas"])
                ]
                if not lagging:
                    return
            await asyncio.sleep(0.5)
        self.history.violation(f"partitions not fully replicated {IN_SYNC_S:.0f} s after a node fault: {lagging[:5]}")

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
        missing: set[Key] = set()
        if lag_s:
            await asyncio.to_thread(self.cluster.lose_standby_tail)
            missing = await self.not_on_standby(pushed)
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
        for role in self.cluster.roles:
            await self.cluster.ready(role, timeout=FAILOVER_WAIT_S)
        failover = Failover(
            killed, promoted, answered, self.history.now(), rebuilt, len(pushed), len(unreadable), len(missing)
        )
        self.history.failovers.append(failover)

    async def not_on_standby(self, pushed: set[Key]) -> set[Key]:
        """Those of ``pushed`` the standby (still in recovery: nothing can write to it) holds no
        visible translation of, read from it directly."""
        conn = await asyncpg.connect(
            self.cluster.replica.dsn, server_settings={"search_path": "rm,public"}, timeout=10.0
        )
        try:
            rows = await conn.fetch(
                "SELECT post_id, lang FROM post_translations WHERE visible"
                " AND (post_id, lang) IN (SELECT * FROM unnest($1::bigint[], $2::text[]))",
                [k[0] for k in pushed],
                [k[1] for k in pushed],
                timeout=10.0,
            )
        finally:
            await conn.close(timeout=5.0)
        return pushed - {(r["post_id"], r["lang"]) for r in rows}

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
