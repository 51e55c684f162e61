"""The WebSocket stream over real processes: one projector, one API and two stream
processes sharing PostgreSQL and the broker; real aiohttp WebSocket clients.

Every test publishes its own posts (its own id range) and provisions its own workspaces;
clients see every post of the module, so each test filters on the ids it published.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import signal
import socket
import time

import aiohttp
import orjson
import pytest

from tests.support.events import fresh_post_ev, locale_ev
from tests.support.stack import BASE, ServiceStack, auth, started_stack
from tests.support.ws import accepted, upgrade_headers
from tickerwire.services.cli import admin
from tickerwire.services.common.http.keys import hash_key
from tickerwire.services.stream.hub import CLOSE_GRACE_S

pytestmark = pytest.mark.e2e

LOCALES = ("en-US", "de-DE", "fr-FR")
TS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
QUEUE_SIZE = 16
WAIT = 30.0  # generous upper bound for anything to arrive (a failure, not a measurement)


@pytest.fixture(scope="module")
async def stack(pg_dsn, kafka_bootstrap):
    env = {"TICKERWIRE_STREAM_PING_INTERVAL_S": "1", "TICKERWIRE_STREAM_QUEUE_SIZE": str(QUEUE_SIZE)}
    services = ("projector", "api", "stream", "stream")
    async with started_stack(pg_dsn, kafka_bootstrap, f"stream{os.getpid()}", services=services, **env) as s:
        await s.publish(
            [
                locale_ev("en-US", name="English", default=True),
                locale_ev("de-DE", name="German", country="DE"),
                locale_ev("fr-FR", name="French", country="FR"),
            ]
        )
        await s.wait_projected()
        yield s


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as session:
        yield session


def stream_url(service, key: str) -> str:
    return f"{service.url}{BASE}/stream?key={key}"


async def connect(http: aiohttp.ClientSession, service, key: str) -> tuple[aiohttp.ClientWebSocketResponse, dict]:
    return await accepted(http, stream_url(service, key), autoping=True)


async def connect_when_free(
    http: aiohttp.ClientSession, service, key: str, within: float
) -> aiohttp.ClientWebSocketResponse:
    """Connect, retrying while the workspace is at its limit (429) for at most ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        try:
            return (await connect(http, service, key))[0]
        except aiohttp.WSServerHandshakeError as exc:
            assert exc.status == 429
            assert time.monotonic() < deadline, f"no slot became free within {within} s"
            await asyncio.sleep(0.1)


async def next_post(ws: aiohttp.ClientWebSocketResponse, ids: set[int] | None = None) -> dict:
    """The next post.created (for one of ``ids``), skipping pings and other tests' posts."""
    deadline = time.monotonic() + WAIT
    while True:
        msg = await ws.receive(timeout=max(deadline - time.monotonic(), 0.01))
        assert msg.type == aiohttp.WSMsgType.TEXT, msg
        body = orjson.loads(msg.data)
        if body["type"] == "post.created" and (ids is None or body["data"]["id"] in ids):
            return body


async def until_closed(ws: aiohttp.ClientWebSocketResponse) -> aiohttp.WSMessage:
    while True:
        msg = await ws.receive(timeout=WAIT)
        if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
            return msg


async def listed(http: aiohttp.ClientSession, stack: ServiceStack, key: str, lang: str) -> dict[int, dict]:
    async with http.get(
        f"{stack.of('api')[0].url}{BASE}/posts", params={"lang": lang, "limit": "50"}, headers=auth(key)
    ) as resp:
        assert resp.status == 200
        return {p["id"]: p for p in (await resp.json())["posts"]}


async def wait_languages(http, stack, key) -> None:
    """The API refreshes its locale catalog shortly after a projected change."""
    for _ in range(100):
        async with http.get(f"{stack.of('api')[0].url}{BASE}/languages", headers=auth(key)) as resp:
            if len((await resp.json())["languages"]) == len(LOCALES):
                return
        await asyncio.sleep(0.1)
    raise AssertionError("locales never listed")


# ---------------------------------------------------------------------------------------------- formats


async def test_messages_have_type_and_ts_and_data_equals_the_get_posts_item(stack: ServiceStack, http):
    key = await stack.provision("ws_formats")
    await wait_languages(http, stack, key)
    streams = stack.of("stream")
    assert len(streams) == 2
    clients = [await connect(http, s, key) for s in streams]
    for ws, ready in clients:
        assert set(ready) == {"type", "ts", "session_id"} and ready["type"] == "ready"
        assert TS.match(ready["ts"]) and ready["session_id"].startswith("ses_")
    assert clients[0][1]["session_id"] != clients[1][1]["session_id"]

    await stack.publish([fresh_post_ev(1001, langs=LOCALES)])
    for ws, _ in clients:
        got = [await next_post(ws, {1001}) for _ in LOCALES]
        assert sorted(m["data"]["lang"] for m in got) == sorted(LOCALES)  # one post.created per locale
        for message in got:
            assert set(message) == {"type", "ts", "log_position", "data"} and TS.match(message["ts"])
            assert message["data"] == (await listed(http, stack, key, message["data"]["lang"]))[1001]

    # An edit produces no post.created; the next post does.
    await stack.publish([fresh_post_ev(1001, langs=LOCALES, version=2, title="Edited title")])
    await stack.wait_projected()
    await stack.publish([fresh_post_ev(1002)])
    for ws, _ in clients:
        seen = []
        while not seen or seen[-1]["data"]["id"] != 1002:
            seen.append(await next_post(ws, {1001, 1002}))
        assert [m["data"]["id"] for m in seen] == [1002]

    # Pings (every second in this stack) are {type, ts} only.
    for ws, _ in clients:
        while (body := orjson.loads((await ws.receive(timeout=WAIT)).data))["type"] != "ping":
            pass
        assert set(body) == {"type", "ts"} and TS.match(body["ts"])
        await ws.close()


# ---------------------------------------------------------------------------------------------- consistency


async def test_a_post_is_pushed_only_after_the_projector_committed_it(stack: ServiceStack, http):
    key = await stack.provision("ws_consistency")
    clients = [(await connect(http, s, key))[0] for s in stack.of("stream")]
    projector = stack.of("projector")[0]
    ids = set(range(2001, 2011))
    projector.proc.send_signal(signal.SIGSTOP)
    try:
        await stack.publish([fresh_post_ev(i) for i in sorted(ids)])
        # While the projector is stopped, the streams read the records but push nothing:
        # several ping periods pass with only pings.
        pings = 0
        while pings < 3:
            body = orjson.loads((await clients[0].receive(timeout=WAIT)).data)
            assert body["type"] == "ping", body
            pings += 1
    finally:
        projector.proc.send_signal(signal.SIGCONT)
    for ws in clients:
        received = set()
        while received != ids:
            message = await next_post(ws, ids)
            post = message["data"]
            # Read-your-stream: on receipt the post's detail answers 200 and the list has it.
            detail_url = f"{stack.of('api')[0].url}{BASE}/posts/{post['id']}"
            async with http.get(detail_url, params={"lang": post["lang"]}, headers=auth(key)) as resp:
                assert resp.status == 200
                assert {k: v for k, v in (await resp.json()).items() if k in post} == post
            assert post["id"] in await listed(http, stack, key, post["lang"])
            received.add(post["id"])
        await ws.close()


# ---------------------------------------------------------------------------------------------- slow clients


class RawClient:
    """A WebSocket client on a plain socket with a tiny receive buffer, which reads only when told."""

    def __init__(self, port: int, key: str) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.settimeout(WAIT)
        self.sock.connect(("127.0.0.1", port))
        handshake = (
            f"GET {BASE}/stream?key={key} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(handshake.encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.sock.recv(4096)
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed without a close frame")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def frames_until_close(self) -> tuple[int, int, str]:
        """Read everything; returns (text frames read, close code, close reason)."""
        texts = 0
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = int.from_bytes(self._read(2), "big")
            elif n == 127:
                n = int.from_bytes(self._read(8), "big")
            payload = self._read(n)
            if b0 & 0x0F == 0x8:
                return texts, int.from_bytes(payload[:2], "big"), payload[2:].decode()
            texts += 1

    def close(self) -> None:
        self.sock.close()


async def metric(service, name: str) -> int:
    """One unlabelled metric of the service, from its /metrics (0 while it is not there)."""
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{service.admin_url}/metrics") as resp:
            text = await resp.text()
    m = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
    return int(float(m.group(1))) if m else 0


async def slow_clients_closed(service) -> int:
    return await metric(service, "tickerwire_stream_slow_clients_closed_total")


async def test_a_client_that_stops_reading_is_closed_with_4008_and_the_others_keep_receiving(stack: ServiceStack, http):
    key = await stack.provision("ws_slow")
    service = stack.of("stream")[0]
    closed_before = await slow_clients_closed(service)
    good, _ = await connect(http, service, key)
    slow = await asyncio.to_thread(RawClient, service.port, key)  # never reads until it has been dropped
    ids = list(range(3001, 3201))
    expected = {(i, lang) for i in ids for lang in LOCALES}

    async def read_all() -> set:
        got = set()
        while got != expected:
            m = await next_post(good, set(ids))
            got.add((m["data"]["id"], m["data"]["lang"]))
        return got

    async def read_slow_once_dropped() -> tuple[int, int, str]:
        while await slow_clients_closed(service) == closed_before:
            await asyncio.sleep(0.05)
        return await asyncio.to_thread(slow.frames_until_close)

    reader = asyncio.create_task(read_all())  # the good client reads all along
    dropped = asyncio.create_task(read_slow_once_dropped())
    try:
        big = "Long lede. " * 180  # ~2 KB per translation; 200 posts x 3 locales ~ 1.3 MB
        for chunk in range(0, len(ids), 50):
            await stack.publish([fresh_post_ev(i, langs=LOCALES, lede=big) for i in ids[chunk : chunk + 50]])
        # The good client gets every message; the stuck one is closed with 4008 after what it was sent.
        assert await reader == expected
        texts, code, reason = await asyncio.wait_for(dropped, WAIT)
        assert (code, reason) == (4008, "SLOW_CONSUMER")
        assert texts < len(expected)
    finally:
        reader.cancel()
        dropped.cancel()
        slow.close()
        await good.close()


async def open_connections(service) -> int:
    return await metric(service, "tickerwire_stream_connections")


async def test_a_client_closed_as_slow_that_never_reads_again_frees_its_slot(stack: ServiceStack, http):
    """The close frame of a client that stopped reading cannot be delivered; within the close
    grace period (10 s) its socket is dropped, and its slot and connection are freed, so the
    workspace's reconnect is admitted. Before: held until the client read again (minutes)."""
    key = await stack.provision("ws_stuck")
    service = stack.of("stream")[0]
    closed_before = await slow_clients_closed(service)
    before = await open_connections(service)
    stuck = await asyncio.to_thread(RawClient, service.port, key)  # never reads again
    try:
        ids = list(range(3301, 3461))
        big = "Long lede. " * 180
        for chunk in range(0, len(ids), 40):
            await stack.publish([fresh_post_ev(i, langs=LOCALES, lede=big) for i in ids[chunk : chunk + 40]])
        deadline = time.monotonic() + WAIT
        while await slow_clients_closed(service) == closed_before:
            assert time.monotonic() < deadline, "the stuck client was never closed as slow"
            await asyncio.sleep(0.1)
        closed_at = time.monotonic()
        while await open_connections(service) > before:
            assert time.monotonic() - closed_at < CLOSE_GRACE_S + 10, (
                "the stuck client's connection outlived the close grace period"
            )
            await asyncio.sleep(0.2)
        # Its slot is free: the workspace's five connections are all admitted at once.
        reconnected = [(await connect(http, service, key))[0] for _ in range(5)]
        for ws in reconnected:
            await ws.close()
    finally:
        stuck.close()


# ---------------------------------------------------------------------------------------------- access changes


async def test_access_changes_close_open_connections_with_4003(stack: ServiceStack, http):
    key_s = await stack.provision("ws_to_suspend")
    key_r = await stack.provision("ws_to_revoke")
    key_ok = await stack.provision("ws_unaffected")
    a, b = stack.of("stream")
    suspended = [(await connect(http, s, key_s))[0] for s in (a, b)]
    revoked = [(await connect(http, s, key_r))[0] for s in (a, b)]
    unaffected = [(await connect(http, s, key_ok))[0] for s in (a, b)]

    conn = await stack.read_conn()
    try:
        suspend = await admin.workspace_event(conn, "ws_to_suspend", status="suspended")
        revoke = await admin.revoke_key_event(conn, "key_" + hash_key(key_r)[:16])
    finally:
        await conn.close()
    await stack.publish([suspend, revoke])

    for ws in suspended:
        msg = await until_closed(ws)
        assert (msg.type, msg.data, msg.extra) == (aiohttp.WSMsgType.CLOSE, 4003, "WORKSPACE_SUSPENDED")
    for ws in revoked:
        msg = await until_closed(ws)
        assert (msg.type, msg.data, msg.extra) == (aiohttp.WSMsgType.CLOSE, 4003, "NOT_AUTHENTICATED")
    # New handshakes are refused with the HTTP status and envelope; other workspaces keep their stream.
    for key, status, code in ((key_s, 403, "WORKSPACE_SUSPENDED"), (key_r, 401, "NOT_AUTHENTICATED")):
        async with http.get(stream_url(a, key), headers=upgrade_headers()) as resp:
            assert resp.status == status and (await resp.json())["error"]["code"] == code
    await stack.publish([fresh_post_ev(4001)])
    for ws in unaffected:
        assert (await next_post(ws, {4001}))["data"]["id"] == 4001
        await ws.close()


async def test_losing_the_badge_closes_open_connections_with_4003(stack: ServiceStack, http):
    key = await stack.provision("ws_loses_badge")
    a, b = stack.of("stream")
    sockets = [(await connect(http, s, key))[0] for s in (a, b)]
    # A badge is lost only when a sweeper tick finds the newest heartbeat over 72 h old; a test
    # cannot wait 72 h, so it records that tick's outcome in the read model directly, bumping the
    # access change stamp in the same transaction as the sweeper does.
    conn = await stack.read_conn()
    try:
        async with conn.transaction():
            await conn.execute("UPDATE workspaces SET badge_status = 'missing' WHERE id = 'ws_loses_badge'")
            await conn.execute("UPDATE change_stamps SET stamp = stamp + 1 WHERE name = 'access'")
        committed = time.monotonic()
    finally:
        await conn.close()
    for ws in sockets:
        msg = await until_closed(ws)
        assert (msg.type, msg.data, msg.extra) == (aiohttp.WSMsgType.CLOSE, 4003, "BADGE_MISSING")
    assert time.monotonic() - committed < 1.0  # pushed to both processes, not found by a later poll
    async with http.get(stream_url(a, key), headers=upgrade_headers()) as resp:
        assert resp.status == 403 and (await resp.json())["error"]["code"] == "BADGE_MISSING"


# ---------------------------------------------------------------------------------------------- connection limit


async def test_five_connections_per_workspace_across_processes_and_slots_of_a_killed_process_recover(
    stack: ServiceStack, http
):
    key = await stack.provision("ws_limit")
    a, b = stack.of("stream")
    on_a = [(await connect(http, a, key))[0] for _ in range(3)]
    on_b = [(await connect(http, b, key))[0] for _ in range(2)]
    for service in (a, b):  # a sixth, on either process, is refused
        async with http.get(stream_url(service, key), headers=upgrade_headers()) as resp:
            assert resp.status == 429
            assert resp.headers["Retry-After"] == "10"
            body = await resp.json()
            assert body["error"]["code"] == "STREAM_LIMIT_REACHED" and body["error"]["retry_after_sec"] == 10
        with pytest.raises(aiohttp.WSServerHandshakeError) as exc:
            await http.ws_connect(stream_url(service, key))
        assert exc.value.status == 429

    # Closing a connection frees its slot (released as the server finishes the close handshake).
    await on_a.pop().close()
    on_a.append(await connect_when_free(http, b, key, within=5))

    # SIGKILL the process holding 2 of them: their leases expire and the slots come back.
    stack.stop(b, signal.SIGKILL)
    try:
        # b's leases expire within one lease lifetime (the newest may outlive the others by one
        # renewal interval): all 3 of its slots come back, and no more.
        regained = [await connect_when_free(http, a, key, within=60) for _ in range(3)]
        async with http.get(stream_url(a, key), headers=upgrade_headers()) as resp:
            assert resp.status == 429
        on_a += regained
    finally:
        for ws in on_a + on_b:
            await ws.close()
        await stack.start("stream")


async def test_a_per_workspace_override_changes_the_limit(stack: ServiceStack, http):
    key = await stack.provision("ws_limit2", stream_connection_limit=2)
    a, b = stack.of("stream")
    clients = [(await connect(http, a, key))[0], (await connect(http, b, key))[0]]
    async with http.get(stream_url(a, key), headers=upgrade_headers()) as resp:
        assert resp.status == 429 and (await resp.json())["error"]["code"] == "STREAM_LIMIT_REACHED"
    for ws in clients:
        await ws.close()


# ---------------------------------------------------------------------------------------------- shutdown


async def test_graceful_shutdown_closes_with_1001(stack: ServiceStack, http):
    key = await stack.provision("ws_shutdown")
    service = stack.of("stream")[0]
    ws, _ = await connect(http, service, key)
    service.proc.send_signal(signal.SIGTERM)
    try:
        msg = await until_closed(ws)
        assert (msg.type, msg.data, msg.extra) == (aiohttp.WSMsgType.CLOSE, 1001, "SERVER_SHUTTING_DOWN")
    finally:
        stack.stop(service)
        await stack.start("stream")
