"""Consumer-group hand-over on Apache Kafka, with real projector processes.

Two and three projectors share one group while posts are published at a steady rate; one is
SIGKILLed. Its partitions move to the others (after the group's session timeout: a dead member
cannot say it left), and nothing is lost or doubled: every post is served and pushed once.
The hand-over time (kill to the first position moved on a partition the dead member held) is
measured and printed. A projector restarted with the same static-membership id
(``TICKERWIRE_PROJECTOR_GROUP_INSTANCE_ID``) takes its partitions back at once instead.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import re
import signal
import time

import aiohttp
import pytest

from tests.support.events import locale_ev, post_ev
from tests.support.stack import BASE, Service, ServiceStack, started_stack
from tests.support.ws import counting_pushes
from tickerwire.services.readmodel import positions

pytestmark = pytest.mark.e2e

#: Posts per second while the projectors are killed and restarted.
RATE = 25
#: The product's default session timeout: a dead dynamic member holds its partitions this long.
SESSION_MS = 10_000


def owned(service: Service) -> set[tuple[str, int]]:
    """The partitions a projector last said it was assigned (its log's last assignment)."""
    found = re.findall(r"assigned and seeked: (\{[^}]*\})", service.log())
    return {(t, int(p)) for t, p in re.findall(r"'([^'\[]+)\[(\d+)\]'", found[-1])} if found else set()


async def stored(stack: ServiceStack) -> dict[tuple[str, int], int]:
    conn = await stack.read_conn()
    try:
        return await positions.load(conn)
    finally:
        await conn.close()


async def moved_on(stack: ServiceStack, partitions: set[tuple[str, int]], since: dict, timeout: float) -> float:
    """Seconds until a position of ``partitions`` (with records waiting) moves past ``since``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        now = await stored(stack)
        if any(now.get(tp, 0) > since.get(tp, 0) for tp in partitions):
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    raise AssertionError(f"no position of {sorted(partitions)} moved within {timeout:g} s")


class Flow:
    """Posts published at RATE per second into the posts topic's every partition, and a stream
    connection counting what it pushes."""

    def __init__(self, stack: ServiceStack, key: str, first_id: int) -> None:
        self.stack, self.key, self.next_id = stack, key, first_id
        self.published: list[int] = []
        self.pushed: collections.Counter = collections.Counter()

    async def publish(self, send, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await send([post_ev(self.next_id)])
            self.published.append(self.next_id)
            self.next_id += 1
            await asyncio.sleep(1 / RATE)

    def pushes(self, http: aiohttp.ClientSession):
        return counting_pushes(http, f"{self.stack.of('stream')[0].url}{BASE}/stream?key={self.key}", self.pushed)

    async def check(self, http: aiohttp.ClientSession) -> None:
        """Every published post served, pushed exactly once, and one row each."""
        await self.stack.wait_projected(timeout=90)
        deadline = time.monotonic() + 30
        while set(self.published) - set(self.pushed) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # a second push would come now
        missing = sorted(set(self.published) - set(self.pushed))
        doubled = sorted(i for i, n in self.pushed.items() if n > 1)
        assert not missing and not doubled, f"missing {missing[:20]}, doubled {doubled[:20]}"
        conn = await self.stack.read_conn()
        try:
            rows = await conn.fetch("SELECT post_id, count(*) AS n FROM post_translations GROUP BY post_id")
        finally:
            await conn.close()
        assert {r["post_id"] for r in rows} >= set(self.published)
        assert all(r["n"] == 1 for r in rows)  # one locale each: never doubled
        api = self.stack.of("api")[0].url + BASE
        for post_id in self.published[:: max(1, len(self.published) // 20)]:
            async with http.get(f"{api}/posts/{post_id}", headers={"Authorization": f"Bearer {self.key}"}) as resp:
                assert resp.status == 200, post_id


@contextlib.asynccontextmanager
async def group_stack(
    pg_dsn: str, kafka_bootstrap: str, name: str, projectors: int, static: bool = False, session_ms: int = SESSION_MS
):
    prefix = f"{name}{os.getpid()}"
    async with started_stack(
        pg_dsn,
        kafka_bootstrap,
        prefix,
        services=(),
        TICKERWIRE_PROJECTOR_GROUP=f"{prefix}-projector",
        TICKERWIRE_KAFKA_SESSION_TIMEOUT_MS=str(session_ms),
        TICKERWIRE_KAFKA_HEARTBEAT_INTERVAL_MS="1000",
    ) as stack:
        for n in range(projectors):
            member = {"TICKERWIRE_PROJECTOR_GROUP_INSTANCE_ID": f"projector-{n}"} if static else {}
            await stack.start("projector", **member)
        await stack.publish([locale_ev("en-US", default=True)])
        key = await stack.provision(f"ws_{prefix}", rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000)
        await stack.start("api")
        await stack.start("stream")
        yield stack, key


@pytest.mark.parametrize("projectors", [2, 3])
async def test_a_killed_projectors_partitions_move_to_the_others_with_nothing_lost_or_doubled(
    pg_dsn, kafka_bootstrap, projectors
):
    async with group_stack(pg_dsn, kafka_bootstrap, f"handover{projectors}", projectors) as (stack, key):
        flow = Flow(stack, key, first_id=1000)
        async with aiohttp.ClientSession() as http, flow.pushes(http), stack.publisher() as send:
            await flow.publish(send, 3)
            victim = stack.of("projector")[0]
            held = owned(victim) & {tp for tp in await stored(stack) if tp[0].endswith(".posts.v1")}
            assert held, "the projector to kill holds no posts partition"
            publishing = asyncio.create_task(flow.publish(send, 8))
            await asyncio.sleep(1)
            before = await stored(stack)
            victim.proc.send_signal(signal.SIGKILL)
            handover = await moved_on(stack, held, before, timeout=SESSION_MS / 1000 + 30)
            await publishing
            print(f"{projectors} projectors: hand-over {handover:.2f} s after the SIGKILL (session {SESSION_MS} ms)")
            assert handover < SESSION_MS / 1000 + 15
            await flow.check(http)


#: A static member that leaves on purpose hands its partitions over within this (a dynamic one
#: that dies waits out the session timeout, twice this).
STATIC_WITHIN_S = SESSION_MS / 1000 / 2
#: The session of the restarted static member's test: long enough that the restarted process's
#: own start (1.1 s on an idle machine, 6.2 s seen with a test run's other workers busy on two
#: cores) stays far inside it, so delivering before it ends tells a static member (it takes
#: its partitions back at once) from a dynamic one (it waits the session out).
RESTART_SESSION_MS = 30_000


async def test_a_projector_restarted_with_its_static_membership_id_delivers_before_its_session_ends(
    pg_dsn, kafka_bootstrap
):
    async with group_stack(pg_dsn, kafka_bootstrap, "static", 2, static=True, session_ms=RESTART_SESSION_MS) as (
        stack,
        key,
    ):
        flow = Flow(stack, key, first_id=5000)
        async with aiohttp.ClientSession() as http, flow.pushes(http), stack.publisher() as send:
            await flow.publish(send, 2)
            victim = stack.of("projector")[0]
            held = owned(victim) & {tp for tp in await stored(stack) if tp[0].endswith(".posts.v1")}
            publishing = asyncio.create_task(flow.publish(send, 8))
            await asyncio.sleep(1)
            victim.proc.send_signal(signal.SIGKILL)
            victim.proc.wait()
            killed = time.monotonic()
            before = await stored(stack)
            stack.spawn("projector", TICKERWIRE_PROJECTOR_GROUP_INSTANCE_ID="projector-0")  # what a supervisor does
            await moved_on(stack, held, before, timeout=RESTART_SESSION_MS / 1000 + 30)
            delivering = time.monotonic() - killed
            await publishing
            print(f"static member: delivering {delivering:.2f} s after the SIGKILL (session {RESTART_SESSION_MS} ms)")
            assert delivering < RESTART_SESSION_MS / 1000 / 2, f"{delivering:.2f} s after the SIGKILL"
            await flow.check(http)


async def test_a_static_member_stopped_on_purpose_leaves_the_group_at_once(pg_dsn, kafka_bootstrap):
    """SIGTERM (a deploy, a scale-down): the stopping static member sends LeaveGroup v3, so its
    partitions move to the other member now, not after its session timeout."""
    async with group_stack(pg_dsn, kafka_bootstrap, "leave", 2, static=True) as (stack, key):
        flow = Flow(stack, key, first_id=8000)
        async with aiohttp.ClientSession() as http, flow.pushes(http), stack.publisher() as send:
            await flow.publish(send, 2)
            leaving = stack.of("projector")[0]
            held = owned(leaving) & {tp for tp in await stored(stack) if tp[0].endswith(".posts.v1")}
            publishing = asyncio.create_task(flow.publish(send, 8))
            await asyncio.sleep(1)
            before = await stored(stack)
            stack.stop(leaving, signal.SIGTERM)
            moved = await moved_on(stack, held, before, timeout=30)
            await publishing
            print(
                f"static member stopped: its partitions moved on {moved:.2f} s after SIGTERM (session {SESSION_MS} ms)"
            )
            assert "left consumer group" in leaving.log()
            assert moved < STATIC_WITHIN_S
            await flow.check(http)
