"""Requests aiohttp cannot parse still get the JSON error envelope, from every service."""

from __future__ import annotations

import orjson
import pytest

from tests.support.rawhttp import raw
from tests.support.stack import started_stack, BASE

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
async def stack(pg_dsn, kafka_bootstrap):
    async with started_stack(pg_dsn, kafka_bootstrap, "lowlevel") as s:
        yield s


BAD_REQUESTS = [
    b"GET " + BASE.encode() + b"/posts HTTP/1.1\r\nHost: x\r\nX-Bad: a\x00b\r\n\r\n",
    b"GET /" + b"a" * 200_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"NOT A REQUEST\r\n\r\n",
]


LISTENERS = [("api", "partner"), ("api", "admin"), ("stream", "partner"), ("stream", "admin"), ("projector", "admin")]


@pytest.mark.parametrize("service,listener", LISTENERS, ids=[f"{s}-{l}" for s, l in LISTENERS])
@pytest.mark.parametrize("request_bytes", BAD_REQUESTS, ids=["nul-in-header", "huge-request-line", "garbage"])
async def test_unparseable_requests_get_the_json_envelope(stack, service, listener, request_bytes):
    process = stack.of(service)[0]
    status, headers, body = await raw(process.port if listener == "partner" else process.admin_port, request_bytes)
    assert 400 <= status < 500
    assert headers["content-type"].startswith("application/json")
    assert headers["server"] == "tickerwire"
    error = orjson.loads(body)["error"]
    assert error["code"] and error["message"]
