"""Several stream processes on one partner port (docs/operations.md#several-processes-on-one-port):
two stream processes share a port (``TICKERWIRE_PORT_SHARING``, SO_REUSEPORT), five resuming
clients of one workspace are spread across both, and one process is SIGKILLed while posts
flow. Its clients reconnect to the same address, reach the survivor, resume from their cursor
and miss nothing; a sixth client tries all along, and at no instant are more than five of the
workspace's connections open (its slot leases are shared in PostgreSQL)."""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import time
from datetime import datetime, timezone

import aiohttp
import orjson
import pytest

from tests.support import events
from tests.support.stack import BASE, ServiceStack, gauge, started_stack

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NOW = datetime.now(timezone.utc)
FIRST_ID = 810_000
POSTS = 120
LIMIT = 5
ENV = {"TICKERWIRE_STREAM_LEASE_TTL_S": "3", "TICKERWIRE_STREAM_LEASE_RENEW_S": "1"}


class Client:
    """A stream client of the workspace that processes post.created and resumes with the cursor
    of the last one after every disconnect; ``open`` counts the clients connected right now."""

    open = 0
    most_open = 0

    def __init__(self, http: aiohttp.ClientSession, url: str, key: str, resume: bool = True) -> None:
        self.http, self.url, self.key, self.resume = http, url, key, resume
        self.cursor: str | None = None
        self.got: collections.Counter[tuple[int, str]] = collections.Counter()
        self.connects = 0
        self.refusals = 0
        self.stopped = asyncio.Event()

    @classmethod
    def opened(cls, delta: int) -> None:
        cls.open += delta
        cls.most_open = max(cls.most_open, cls.open)

    async def run(self) -> None:
        while not self.stopped.is_set():
            query = f"?key={self.key}" + (f"&resume={self.cursor}" if self.cursor else "&cursors=true")
            try:
                ws = await self.http.ws_connect(self.url + query, timeout=aiohttp.ClientWSTimeout(ws_close=2))
            except aiohttp.WSServerHandshakeError as e:
                assert e.status == 429, e  # STREAM_LIMIT_REACHED: every slot is taken
                self.refusals += 1
                await asyncio.sleep(0.05)
                continue
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.05)
                continue
            Client.opened(+1)
            self.connects += 1
            try:
                if not self.resume:
                    continue  # the prober: in, and out at once
                await self._read(ws)
            finally:
                Client.opened(-1)
                await ws.close()

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        while not self.stopped.is_set():
            try:
                msg = await ws.receive(timeout=0.5)
            except asyncio.TimeoutError:
                continue
            if msg.type != aiohttp.WSMsgType.TEXT:
                return  # closed (the process was killed): reconnect and resume
            body = orjson.loads(msg.data)
            if body["type"] == "ready":
                self.cursor = self.cursor or body["cursor"]
                assert body.get("resumed") in (None, True), body
            elif body["type"] == "post.created":
                self.got[(body["data"]["id"], body["data"]["lang"])] += 1
                self.cursor = body["cursor"]


@pytest.fixture(scope="module")
async def stack(pg_dsn, kafka_bootstrap):
    async with started_stack(pg_dsn, kafka_bootstrap, f"shared{os.getpid()}", services=("projector",), **ENV) as s:
        yield s


async def test_a_killed_stream_process_leaves_its_clients_to_the_other_and_the_limit_holds(stack: ServiceStack):
    key = await stack.provision("ws_shared", stream_connection_limit=LIMIT)
    first = await stack.start("stream", TICKERWIRE_PORT_SHARING="true")
    second = await stack.start("stream", port=first.port, TICKERWIRE_PORT_SHARING="true")
    url = f"{first.url}{BASE}/stream"
    async with aiohttp.ClientSession() as http:
        # The kernel picks a process per connection (a hash of its addresses): connect the five
        # again until both processes hold some (all on one is 1 chance in 16 each time).
        for _ in range(10):
            clients = [Client(http, url, key) for _ in range(LIMIT)]
            tasks = [asyncio.create_task(c.run()) for c in clients]
            deadline = time.monotonic() + 30
            while Client.open < LIMIT or any(c.cursor is None for c in clients):
                assert time.monotonic() < deadline, f"{Client.open} of {LIMIT} connected"
                await asyncio.sleep(0.05)
            spread = [await gauge(s.admin_url, "tickerwire_stream_connections", http) for s in (first, second)]
            assert sum(spread) == LIMIT, spread
            if all(spread):
                break
            for c in clients:
                c.stopped.set()
            await asyncio.gather(*tasks)
            await asyncio.sleep(0.3)  # their leases are released on close
        prober = Client(http, url, key, resume=False)
        tasks.append(asyncio.create_task(prober.run()))

        victim = first if spread[0] else second
        async with stack.publisher() as send:
            for i in range(POSTS):
                await send([events.post_event(FIRST_ID + i, 1, ["en-US"], now=NOW)])
                if i == POSTS // 3:
                    victim.proc.send_signal(signal.SIGKILL)
                    victim.proc.wait()
                await asyncio.sleep(0.05)
        want = {(FIRST_ID + i, "en-US") for i in range(POSTS)}
        deadline = time.monotonic() + 60
        while any(set(c.got) < want for c in clients):
            assert time.monotonic() < deadline, [len(set(c.got) & want) for c in clients]
            await asyncio.sleep(0.1)
        for c in (*clients, prober):
            c.stopped.set()
        await asyncio.gather(*tasks)

    assert Client.most_open <= LIMIT, f"{Client.most_open} connections of one workspace open at once"
    for c in clients:
        assert set(c.got) == want and max(c.got.values()) == 1, c.got.most_common(3)
    assert sum(c.connects for c in clients) > LIMIT, "some clients reconnected after the kill"
    assert prober.refusals > 0
    assert spread[0] and spread[1], f"the kernel spread the connections across both processes: {spread}"
