"""Requests aiohttp cannot parse still get the JSON error envelope, from every service."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from tests.support.stack import started_stack, BASE

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
async def stack(pg_dsn, kafka_bootstrap):
    async with started_stack(pg_dsn, kafka_bootstrap, "lowlevel") as s:
        yield s


async def raw(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), timeout=10)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


BAD_REQUESTS = [
    b"GET " + BASE.encode() + b"/posts HTTP/1.1\r\nHost: x\r\nX-Bad: a\x00b\r\n\r\n",
    b"GET /" + b"a" * 200_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"NOT A REQUEST\r\n\r\n",
]


@pytest.mark.parametrize("service", ["api", "stream", "projector"])
@pytest.mark.parametrize("request_bytes", BAD_REQUESTS, ids=["nul-in-header", "huge-request-line", "garbage"])
async def test_unparseable_requests_get_the_json_envelope(stack, service, request_bytes):
    status, headers, body = await raw(stack.of(service)[0].port, request_bytes)
    assert 400 <= status < 500
    assert headers["content-type"].startswith("application/json")
    error = orjson.loads(body)["error"]
    assert error["code"] and error["message"]
