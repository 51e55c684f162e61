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


@pytest.mark.parametrize(
    "request_bytes,status,code",
    [
        (b"GET " + BASE.encode() + b"/posts?q=" + b"a" * 140_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "URI_TOO_LONG"),
        (b"GET " + BASE.encode() + b"/posts HTTP/1.1\r\nHost: x\r\nX-Big: " + b"x" * 9_000 + b"\r\n\r\n", 431, "HEADERS_TOO_LARGE"),
        (b"GET " + BASE.encode() + b"/posts HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(200)) + b"\r\n",
         431, "HEADERS_TOO_LARGE"),
    ],
    ids=["request-line-over-128-kib", "header-over-8-kib", "200-headers"],
)
async def test_the_api_says_which_part_of_a_request_was_too_large(stack, request_bytes, status, code):
    # The API's partner listener reads request lines up to 128 KiB (long filter lists) and header
    # lines up to 8 KiB, so the parser's refusal says which bound was crossed.
    got, headers, body = await raw(stack.of("api")[0].port, request_bytes)
    assert (got, orjson.loads(body)["error"]["code"]) == (status, code)
    assert headers["content-type"].startswith("application/json")
