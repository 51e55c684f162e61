"""An Apache Kafka broker SIGKILLed and restarted with its log: the most common Kafka incident.

While the broker is gone, the projector and the stream wait loudly: their readiness names the
broker, and each says so in an ERROR line within a bounded time. When the broker is back with
its log, they go on from their stored positions: nothing lost, nothing doubled, no
``accept-log`` (the log is the same log: no discontinuity is reported).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import time

import aiohttp
import pytest

from tests.support.brokers import TEST_KAFKA_SETTINGS, own_kafka
from tests.support.events import locale_ev, post_ev
from tests.support.stack import BASE, ServiceStack, started_stack
from tests.support.ws import counting_pushes
from tickerwire.devstack.embedded.apache_kafka import ApacheKafka

pytestmark = pytest.mark.e2e

#: How long the broker stays away: past the services' ERROR bound (10 s after the first failure).
AWAY_S = 20.0
#: Readiness names the broker within this of its death; the ERROR line comes within AWAY_S.
NOTICED_WITHIN_S = 10.0


@pytest.fixture(scope="module")
def own_broker():
    """A broker of this module's own (the session's is shared): killed and restarted here."""
    yield from own_kafka(ApacheKafka, "tickerwire-test-kafka-restart-", TEST_KAFKA_SETTINGS)


async def readiness(http: aiohttp.ClientSession, admin_url: str) -> tuple[int, str]:
    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
        async with http.get(f"{admin_url}/readyz", timeout=aiohttp.ClientTimeout(total=5)) as resp:
            return resp.status, await resp.text()
    return 0, "no answer"


def error_lines(text: str) -> list[str]:
    """The product's own ERROR lines (aiokafka's connection errors are not what an operator reads)."""
    return [line for line in text.splitlines() if '"level":"error"' in line and '"logger":"tickerwire.' in line]


async def test_a_broker_killed_and_restarted_with_its_log_is_waited_for_loudly_and_loses_nothing(pg_dsn, own_broker):
    async with started_stack(pg_dsn, own_broker.bootstrap_servers, "restart") as stack:
        await stack.publish([locale_ev("en-US", default=True)])
        key = await stack.provision("ws_restart", rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000)
        pushed: collections.Counter = collections.Counter()
        async with aiohttp.ClientSession() as http, pushes(http, stack, key, pushed):
            await stack.publish([post_ev(i) for i in range(1, 21)])
            await stack.wait_projected()
            errors_before = {s.name: len(error_lines(s.log())) for s in stack.services}

            own_broker.kill()
            killed = time.monotonic()
            watched = [s for s in stack.services if s.name in ("projector", "stream")]
            named: dict[str, float] = {}
            while len(named) < len(watched) and time.monotonic() - killed < NOTICED_WITHIN_S:
                for s in watched:
                    status, body = await readiness(http, s.admin_url)
                    if s.name not in named and status == 503 and "broker" in body:
                        named[s.name] = time.monotonic() - killed
                await asyncio.sleep(0.2)
            assert set(named) == {s.name for s in watched}, f"readiness named the broker only for {named}"
            await asyncio.sleep(max(0.0, AWAY_S - (time.monotonic() - killed)))
            for s in watched:
                new = error_lines(s.log())[errors_before[s.name] :]
                assert any("broker" in line or "Kafka" in line for line in new), f"{s.name}: no ERROR line: {new}"

            own_broker.start()  # the same folder and port: the log as it was
            back = time.monotonic()
            await stack.publish([post_ev(i) for i in range(21, 41)])
            await stack.wait_projected(timeout=90)
            for s in stack.services:
                deadline = time.monotonic() + 60
                while (await readiness(http, s.admin_url))[0] != 200:
                    assert time.monotonic() < deadline, f"{s.name} not ready 60 s after the broker came back"
                    await asyncio.sleep(0.2)
            print(
                f"readiness named the broker after {json.dumps({k: round(v, 2) for k, v in named.items()})} s; "
                f"every process ready {time.monotonic() - back:.1f} s after the restart"
            )
            deadline = time.monotonic() + 30
            while set(range(1, 41)) - set(pushed) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)
        assert sorted(pushed) == list(range(1, 41)) and set(pushed.values()) == {1}, pushed
        said = [line for line in stack.logs().splitlines() if "discontinuity" in line or "accept-log" in line]
        assert not said, said
        conn = await stack.read_conn()
        try:
            assert await conn.fetchval("SELECT count(*) FROM posts") == 40
        finally:
            await conn.close()


def pushes(http: aiohttp.ClientSession, stack: ServiceStack, key: str, pushed: collections.Counter):
    """A stream connection that resumes with its cursor whenever it drops, counting pushed posts."""
    return counting_pushes(http, f"{stack.of('stream')[0].url}{BASE}/stream?key={key}", pushed, resuming=True)
