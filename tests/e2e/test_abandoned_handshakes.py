"""A stream handshake its client abandons is the client's business, not an alarm: over a real
stream process, clients that send the upgrade request and go away (at once, with a reset, or
while the process is paused with SIGSTOP and so answers only after they left; plain and resume
handshakes) leave no ERROR line, no traceback and no 500 in the access log, and the process
serves the next client as before.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct

import aiohttp
import orjson
import pytest

from tests.support.stack import BASE, ServiceStack, started_stack
from tests.support.ws import accepted, upgrade_headers

pytestmark = pytest.mark.e2e

WAIT = 30.0


@pytest.fixture(scope="module")
async def stack(pg_dsn, kafka_bootstrap):
    async with started_stack(pg_dsn, kafka_bootstrap, f"abandoned{os.getpid()}", services=("projector", "stream")) as s:
        yield s


@pytest.fixture(scope="module")
async def key(stack: ServiceStack) -> str:
    return await stack.provision("ws_abandoned", stream_connection_limit=1000)


def upgrade(key: str, query: str) -> bytes:
    lines = [f"GET {BASE}/stream?key={key}{query} HTTP/1.1", "Host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in upgrade_headers().items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def send_and_leave(port: int, request: bytes, *, reset: bool) -> None:
    """Send ``request`` and go away without reading: with a TCP reset, or a plain close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    if reset:
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()
    await writer.wait_closed()


def alarms(log: str) -> list[str]:
    """The lines an operator is told to chase: ERROR or worse, a traceback, a 500 answered."""
    found = []
    for line in log.splitlines():
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError:
            found.append(line)  # not a log line: a traceback or a library's print
            continue
        if doc.get("level") in ("error", "critical") or doc.get("exc") or doc.get("status", 0) >= 500:
            found.append(line)
    return found


async def fresh_cursor(stack: ServiceStack, key: str) -> str:
    """A handshake served as ever: the ``ready`` cursor of a new connection."""
    async with aiohttp.ClientSession() as http:
        ws, ready = await accepted(http, f"{stack.of('stream')[0].url}{BASE}/stream?key={key}&cursors=true")
        await asyncio.wait_for(ws.close(), WAIT)
    return ready["cursor"]


async def settle(stack: ServiceStack, key: str) -> str:
    """The stream's log once every abandoned handshake has been handled (and logged)."""
    await fresh_cursor(stack, key)
    await asyncio.sleep(1.0)
    return stack.of("stream")[0].log()


@pytest.mark.parametrize("reset", [True, False], ids=["reset", "close"])
@pytest.mark.parametrize("query", ["", "&cursors=true", "&resume="], ids=["plain", "cursors", "resume"])
async def test_a_client_gone_right_after_its_upgrade_request_is_no_alarm(stack, key, reset, query):
    stream = stack.of("stream")[0]
    if query == "&resume=":
        query += await fresh_cursor(stack, key)
    before = len(stream.log())
    for _ in range(20):
        await send_and_leave(stream.port, upgrade(key, query), reset=reset)
    log = (await settle(stack, key))[before:]
    assert alarms(log) == [], "\n".join(alarms(log))


@pytest.mark.parametrize("query", ["&cursors=true", "&resume="], ids=["cursors", "resume"])
async def test_a_handshake_abandoned_while_the_process_was_paused_is_no_alarm(stack, key, query):
    stream = stack.of("stream")[0]
    if query == "&resume=":
        query += await fresh_cursor(stack, key)
    before = len(stream.log())
    os.kill(stream.proc.pid, signal.SIGSTOP)
    try:
        for reset in (True, False, True):
            await send_and_leave(stream.port, upgrade(key, query), reset=reset)
        await asyncio.sleep(0.2)
    finally:
        os.kill(stream.proc.pid, signal.SIGCONT)
    log = (await settle(stack, key))[before:]
    assert alarms(log) == [], "\n".join(alarms(log))
    abandoned = [orjson.loads(line) for line in log.splitlines() if "abandoned" in line]
    assert abandoned and all(doc["level"] == "info" for doc in abandoned), log  # said once, with its cause
    statuses = {orjson.loads(line).get("status") for line in log.splitlines() if '"tickerwire.access"' in line}
    assert 499 in statuses, statuses  # the access log says the client went away
