"""Three Apache Kafka nodes (a KRaft quorum, each a broker and a controller): the leader of a
posts partition, then the active controller, SIGKILLed and restarted while posts are published
with ``acks=all``, the projector and a stream process running and a stream client connected.

Topics are as declared for production (replication factor 3, ``min.insync.replicas=2``), so
one node down refuses no write. What must hold: every acknowledged post projected exactly once
and pushed exactly once to the connected client, every process ready again within
``READY_WITHIN_S`` of each kill, and, while a node is down, the processes' logs naming it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import aiohttp
import pytest

from tests.support.brokers import TEST_KAFKA_SETTINGS, own_kafka
from tests.support.events import locale_ev, post_ev
from tests.support.stack import BASE, ServiceStack, started_stack
from tests.support.topics import posts_leader
from tests.support.ws import counting_pushes
from tickerwire.devstack.embedded.apache_cluster import ApacheKafkaCluster
from tickerwire.services.common import kafka

pytestmark = pytest.mark.e2e

#: How long each killed node stays down: past the consumers' session timeout and the brokers'
#: (4 s), so that the cluster and the services have noticed before it comes back.
DOWN_S = 10.0
#: Another node leads the partition, or is the active controller, within this of the kill
#: (measured 3.6-6.4 s and 1.6-2.8 s: a leader waits for the dead node's broker session, 4 s here).
TAKEOVER_WITHIN_S = 20.0
#: Every process is ready again within this of a kill (measured: none was ever unready, in
#: five runs: /readyz needs one bootstrap server to answer, and two of three always did).
READY_WITHIN_S = 30.0
#: A publish (one post, acks=all) that takes longer than this is retried with the same post.
PUBLISH_TIMEOUT_S = 15.0
#: The longest any acknowledgement may take from a kill on (the new leader elected, the producer's
#: metadata refreshed; measured 5.8 to 7.2 s).
PUBLISH_STALL_S = 20.0
#: Between two publishes of the steady flow.
PUBLISH_EVERY_S = 0.05


@pytest.fixture(scope="module")
def cluster():
    """Three nodes of this module's own (the session's broker is one node, shared)."""
    yield from own_kafka(ApacheKafkaCluster, "tickerwire-test-kafka3-", TEST_KAFKA_SETTINGS)


@dataclass
class Flow:
    """Posts published one at a time with acks=all; a failed or timed-out publish is retried with
    the same post (what a publisher does), so every id in ``acked`` was acknowledged once, at
    the time in ``acked_at``."""

    stack: ServiceStack
    acked: list[int] = field(default_factory=list)
    acked_at: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    async def run(self) -> None:
        n = 1
        async with self.stack.publisher() as send:
            while True:
                try:
                    async with asyncio.timeout(PUBLISH_TIMEOUT_S):
                        await send([post_ev(n)])
                except Exception as exc:  # noqa: BLE001 - a refused or lost publish: retried
                    self.failures.append(f"post {n}: {type(exc).__name__}: {exc}")
                    await asyncio.sleep(0.2)
                    continue
                self.acked.append(n)
                self.acked_at.append(time.monotonic())
                n += 1
                await asyncio.sleep(PUBLISH_EVERY_S)

    def longest_stall(self, since: float) -> float:
        """The longest wait for an acknowledgement from ``since`` on (seconds)."""
        times = [since, *(t for t in self.acked_at if t > since)]
        return max((b - a for a, b in zip(times, times[1:])), default=float("inf"))


@dataclass
class Readiness:
    """Every process's /readyz, sampled every 0.25 s: (monotonic time, process, status, body)."""

    stack: ServiceStack
    samples: list[tuple[float, str, int, str]] = field(default_factory=list)

    async def run(self, http: aiohttp.ClientSession) -> None:
        while True:
            for s in self.stack.services:
                status, body = 0, "no answer"
                with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                    async with http.get(f"{s.admin_url}/readyz", timeout=aiohttp.ClientTimeout(total=2)) as resp:
                        status, body = resp.status, await resp.text()
                self.samples.append((time.monotonic(), f"{s.name}:{s.admin_port}", status, body))
            await asyncio.sleep(0.25)

    def unready_until(self, since: float, until: float = float("inf")) -> dict[str, float]:
        """Per process: seconds from ``since`` to its last sample before ``until`` that was not
        ready (0: none was)."""
        out: dict[str, float] = {}
        for at, name, status, _ in self.samples:
            if since <= at < until:
                out.setdefault(name, 0.0)
                if status != 200:
                    out[name] = at - since
        return out

    def not_ready(self, since: float) -> list[str]:
        return [
            f"{name} {status} {body[:200]}" for at, name, status, body in self.samples if at >= since and status != 200
        ]


@dataclass
class Fault:
    """One node killed: which, when, and what the processes said while it was down."""

    what: str
    node: int
    killed: float
    #: Per process, the WARNING and ERROR lines it logged while the node was down.
    said: dict[str, list[str]]
    #: Seconds from the kill until another node held the role (leader or active controller).
    moved_after: float


async def kill_for_a_while(
    cluster: ApacheKafkaCluster, stack: ServiceStack, what: str, holder: Callable[[], Awaitable[int]]
) -> Fault:
    """SIGKILL the node ``holder()`` names, wait until another node holds its role (which also
    shows that the one killed held it), keep it down at least ``DOWN_S`` in all, start it again
    on its ports and log."""
    node_id = await holder()
    logged = {s.name: len(s.log()) for s in stack.services}
    cluster.node(node_id).kill()
    killed = time.monotonic()
    while True:
        with contextlib.suppress(Exception):  # no answer while the role moves: ask again
            if await holder() not in (node_id, -1):
                break
        assert time.monotonic() - killed < TAKEOVER_WITHIN_S, f"{what}: no other node took over from node {node_id}"
        await asyncio.sleep(0.2)
    moved_after = time.monotonic() - killed
    await asyncio.sleep(max(0.0, DOWN_S - moved_after))
    said = {s.name: loud_lines(s.log()[logged[s.name] :]) for s in stack.services}
    await asyncio.wait_for(asyncio.to_thread(cluster.node(node_id).start), timeout=120)
    return Fault(what, node_id, killed, said, moved_after)


def loud_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if '"level":"error"' in line or '"level":"warning"' in line]


def names_node(line: str, node_id: int, port: int) -> bool:
    """Whether a log line names the node: its id (aiokafka: "node with id N", "fetch messages
    from N") or its address."""
    return f"node with id {node_id}:" in line or f"from {node_id}:" in line or f"127.0.0.1:{port}" in line


async def test_posts_ride_through_a_killed_partition_leader_and_active_controller(pg_dsn, cluster):
    began = time.monotonic()
    # Topics as declared for production: 3 replicas, min.insync.replicas=2 (not the tests' usual 1).
    async with started_stack(
        pg_dsn, cluster.bootstrap_servers, "kafka3", TICKERWIRE_TOPIC_REPLICATION_FACTOR="3"
    ) as stack:
        assert await kafka.check_topics(stack.config) == []
        await stack.publish([locale_ev("en-US", default=True)])
        key = await stack.provision("ws_kafka3", rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000)
        pushed: collections.Counter = collections.Counter()
        flow, readiness = Flow(stack), Readiness(stack)
        faults: list[Fault] = []
        url = f"{stack.of('stream')[0].url}{BASE}/stream?key={key}"
        async with aiohttp.ClientSession() as http, counting_pushes(http, url, pushed, resuming=True):
            tasks = [asyncio.create_task(flow.run()), asyncio.create_task(readiness.run(http))]
            try:
                await asyncio.sleep(3.0)
                faults.append(
                    await kill_for_a_while(
                        cluster, stack, "leader of posts partition 0", lambda: posts_leader(stack.config)
                    )
                )
                await settled(readiness, flow, faults[-1])
                controller = functools.partial(asyncio.to_thread, cluster.active_controller)
                faults.append(await kill_for_a_while(cluster, stack, "active controller", controller))
                await settled(readiness, flow, faults[-1])
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            await stack.wait_projected(timeout=60)
            deadline = time.monotonic() + 30
            while set(flow.acked) - set(pushed) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # a doubled push would come now
        conn = await stack.read_conn()
        try:
            projected = collections.Counter(r["id"] for r in await conn.fetch("SELECT id FROM posts"))
        finally:
            await conn.close()

    ends = [f.killed for f in faults[1:]] + [float("inf")]
    for fault, end in zip(faults, ends):
        print(
            f"{fault.what}: node {fault.node} killed for {DOWN_S:g} s, another took over after "
            f"{fault.moved_after:.1f} s; not ready for "
            f"{readiness.unready_until(fault.killed, end)} s after the kill; longest wait for an ack "
            f"{flow.longest_stall(fault.killed):.2f} s; {sum(map(len, fault.said.values()))} ERROR/WARNING lines"
        )
    print(
        f"{len(flow.acked)} posts acknowledged ({len(flow.failures)} publishes retried), {len(projected)} projected, "
        f"{sum(pushed.values())} pushed; test took {time.monotonic() - began:.0f} s"
    )
    acked = set(flow.acked)
    lost = sorted((acked - set(projected)) | (acked - set(pushed)))
    doubled = sorted(k for k, v in (pushed | projected).items() if v > 1)
    # The publish in flight when the flow stopped may have reached the log unacknowledged.
    unknown = sorted((set(projected) | set(pushed)) - acked - {max(acked, default=0) + 1})
    assert (lost, doubled, unknown) == ([], [], []), (
        f"lost {lost[:20]}, doubled {doubled[:20]}, never acked {unknown[:20]}"
    )
    assert len(acked) > 200, f"only {len(acked)} posts acknowledged: the flow stalled"
    for fault, end in zip(faults, ends):
        unready = readiness.unready_until(fault.killed, end)
        assert set(unready) == {f"{s.name}:{s.admin_port}" for s in stack.services}, unready
        assert max(unready.values()) <= READY_WITHIN_S, (fault.what, readiness.not_ready(fault.killed))
        assert flow.longest_stall(fault.killed) <= PUBLISH_STALL_S, (fault.what, flow.failures[:5])
        port = cluster.node(fault.node).port
        for name in ("projector", "stream"):
            lines = fault.said[name]
            unready_said = [line for line in readiness.not_ready(fault.killed) if line.startswith(name)]
            assert any(names_node(line, fault.node, port) for line in lines) or any(
                "broker" in line for line in unready_said
            ), (
                f"{fault.what}: the {name} never named node {fault.node} while it was down: {lines[:5]} {unready_said[:5]}"
            )


async def settled(readiness: Readiness, flow: Flow, fault: Fault) -> None:
    """Until every process answered ready for a second and posts are acknowledged again (bounded)."""
    deadline = time.monotonic() + READY_WITHIN_S
    acked = len(flow.acked)
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        now = time.monotonic()
        recent = [s for s in readiness.samples if s[0] > now - 1.0]
        if recent and all(s[2] == 200 for s in recent) and len(flow.acked) > acked + 10:
            return
    raise AssertionError(f"{fault.what}: not settled {READY_WITHIN_S:g} s after node {fault.node} came back")
