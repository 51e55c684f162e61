"""No key in any log line: a stack of every process, run at DEBUG level, is exercised with
valid, revoked, unknown and malformed keys over HTTP and the stream's ``?key=`` query string,
through admitted requests, 401s, 403s, 404s, 422s and 429s; then every line every process
wrote is scanned for every key it was shown."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest

from tests.support.stack import BASE, ServiceStack, auth, started_stack
from tickerwire.services.cli import admin
from tickerwire.services.common.http.keys import KEY_PREFIX, generate_key, hash_key

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
async def stack(pg_dsn, kafka_bootstrap):
    services = ("projector", "api", "api", "stream")
    async with started_stack(
        pg_dsn, kafka_bootstrap, "access-nokeys", services=services, TICKERWIRE_LOG_LEVEL="DEBUG"
    ) as s:
        yield s


async def exercise(stack: ServiceStack) -> list[str]:
    """Everything a partner (or an attacker) might send with a key in it; returns every key used."""
    key = await stack.provision("nokeys_ok", rate_limit_per_minute=5)
    revoked = await stack.provision("nokeys_revoked")
    suspended = await stack.provision("nokeys_suspended")
    conn = await stack.read_conn()
    try:
        events = [
            await admin.revoke_key_event(conn, "key_" + hash_key(revoked)[:16]),
            await admin.workspace_event(conn, "nokeys_suspended", status="suspended"),
        ]
    finally:
        await conn.close()
    await stack.publish(events)
    await stack.wait_projected()
    unknown = generate_key()
    malformed = KEY_PREFIX + "short!"
    keys = [key, revoked, suspended, unknown, malformed]

    statuses = set()
    async with aiohttp.ClientSession() as http:
        for api in stack.of("api"):
            base = f"{api.url}{BASE}"
            for k in keys:
                for path in ("/languages", "/posts?limit=abc", f"/posts?key={k}", f"/posts/{k}", f"/{k}"):
                    for headers in (auth(k), {"Authorization": k}, {"X-Api-Key": k}):
                        async with http.get(base + path, headers=headers) as resp:
                            statuses.add(resp.status)
            async with http.post(f"{base}/languages?key={key}", headers=auth(key), data=key) as resp:
                statuses.add(resp.status)
        stream = stack.of("stream")[0]
        for k in keys:
            url = f"{stream.url}{BASE}/stream?key={k}"
            with contextlib.suppress(aiohttp.WSServerHandshakeError):
                async with http.ws_connect(url) as ws:
                    assert k == key
                    await ws.receive(timeout=10)
            async with http.get(url) as resp:  # a plain GET, no upgrade
                statuses.add(resp.status)
    assert {200, 401, 403, 404, 422, 429} <= statuses  # every kind of answer was provoked
    for service in stack.of("api") + stack.of("stream"):
        await malformed_request(service.port, f"{BASE}/stream?key={key}", "Broken header line")
        await malformed_request(
            service.port, f"{BASE}/posts", f"Authorization Bearer {key}"
        )  # echoed in the parser's error
    return keys


async def malformed_request(port: int, target: str, bad_line: str) -> None:
    """A request the HTTP parser rejects (aiohttp's own error path, which logs the bad line)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {target} HTTP/1.1\r\nHost: x\r\n{bad_line}\r\n\r\n".encode())
    await writer.drain()
    status_line = await reader.readline()
    assert status_line.split()[1] == b"400"
    writer.close()
    await writer.wait_closed()


def leaks(text: str, keys: list[str]) -> list[str]:
    """Every way a key could show up in a log line: whole, its random part, the stream's query string."""
    found = [k for k in keys if k in text or k[len(KEY_PREFIX) :] in text]
    if "key=" + KEY_PREFIX in text:
        found.append("key=" + KEY_PREFIX)
    return found


async def test_no_process_logs_any_key(stack: ServiceStack):
    keys = await exercise(stack)
    stack.stop_all()  # flush and close every log
    logs = {s.log_path.name: s.log_path.read_text(errors="replace") for s in stack.services}
    assert len(logs) == 4 and all(logs.values()), "every process wrote log lines"
    assert leaks(f"GET /x?key={keys[0]}", keys)  # the scan sees a key when there is one
    assert {name: leaks(text, keys) for name, text in logs.items()} == {name: [] for name in logs}
