"""Requests aiohttp cannot parse still get the JSON error envelope, from every service."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from tests.support.rawhttp import raw
from tests.support.stack import BASE, started_stack

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
async def stack(pg_dsn, kafka_bootstrap):
    async with started_stack(pg_dsn, kafka_bootstrap, "lowlevel") as s:
        yield s


BAD_REQUESTS = [
    b"GET " + BASE.encode() + b"/posts HTTP/1.1\r\nHost: x\r\nX-Bad: a\x00b\r\n\r\n",
    b"GET /" + b"a" * 200_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"NOT A REQUEST\r\n\r\n",
    # aiohttp answers these itself, before any middleware: 417 in plain text, CONNECT as a body.
    b"GET " + BASE.encode() + b"/languages HTTP/1.1\r\nHost: x\r\nExpect: something\r\n\r\n",
    b"CONNECT 127.0.0.1:80 HTTP/1.1\r\nHost: 127.0.0.1:80\r\n\r\n",
]


LISTENERS = [("api", "partner"), ("api", "admin"), ("stream", "partner"), ("stream", "admin"), ("projector", "admin")]


@pytest.mark.parametrize("service,listener", LISTENERS, ids=[f"{s}-{l}" for s, l in LISTENERS])
@pytest.mark.parametrize(
    "request_bytes", BAD_REQUESTS, ids=["nul-in-header", "huge-request-line", "garbage", "unknown-expect", "connect"]
)
async def test_unparseable_requests_get_the_json_envelope(stack, service, listener, request_bytes):
    process = stack.of(service)[0]
    status, headers, body = await raw(process.port if listener == "partner" else process.admin_port, request_bytes)
    assert 400 <= status < 500
    assert headers["content-type"].startswith("application/json")
    assert headers["server"] == "tickerwire"
    error = orjson.loads(body)["error"]
    assert error["code"] and error["message"]
    if listener == "partner":  # "every response carries X-Request-Id" (OpenAPI), refusals included
        assert headers.get("x-request-id", "").startswith("req_"), headers


PATHS = {("api", "partner"): BASE + "/languages", ("stream", "partner"): BASE + "/stream"}


@pytest.mark.parametrize("service,listener", LISTENERS, ids=[f"{s}-{l}" for s, l in LISTENERS])
@pytest.mark.parametrize("version", ["HTTP/2.0", "HTTP/0.9"])
async def test_a_request_line_of_another_http_version_gets_505_and_the_connection_is_closed(
    stack, service, listener, version
):
    # aiohttp's parser accepts these request lines; without the refusal the API answered
    # "HTTP/2.0 200 OK" with the partner's data.
    process = stack.of(service)[0]
    path = PATHS.get((service, listener), "/readyz")
    request = f"GET {path} {version}\r\nHost: x\r\nAuthorization: Bearer tw_live_unknownunknown\r\nX-Request-Id: mine-505\r\n\r\n".encode()
    status, headers, body = await raw(process.port if listener == "partner" else process.admin_port, request)
    assert status == 505
    assert headers["content-type"].startswith("application/json")
    assert headers["x-request-id"] == "mine-505"
    assert headers["connection"] == "close"
    assert orjson.loads(body)["error"]["code"] == "HTTP_VERSION_NOT_SUPPORTED"


@pytest.mark.parametrize(
    "request_bytes,status,code",
    [
        (
            b"GET " + BASE.encode() + b"/posts?q=" + b"a" * 140_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
            414,
            "URI_TOO_LONG",
        ),
        (
            b"GET " + BASE.encode() + b"/posts HTTP/1.1\r\nHost: x\r\nX-Big: " + b"x" * 9_000 + b"\r\n\r\n",
            431,
            "HEADERS_TOO_LARGE",
        ),
        (
            b"GET "
            + BASE.encode()
            + b"/posts HTTP/1.1\r\nHost: x\r\n"
            + b"".join(b"X-%d: y\r\n" % i for i in range(200))
            + b"\r\n",
            431,
            "HEADERS_TOO_LARGE",
        ),
    ],
    ids=["request-line-over-128-kib", "header-over-8-kib", "200-headers"],
)
async def test_the_api_says_which_part_of_a_request_was_too_large(stack, request_bytes, status, code):
    # The API's partner listener reads request lines up to 128 KiB (long filter lists) and header
    # lines up to 8 KiB, so the parser's refusal says which bound was crossed.
    got, headers, body = await raw(stack.of("api")[0].port, request_bytes)
    assert (got, orjson.loads(body)["error"]["code"]) == (status, code)
    assert headers["content-type"].startswith("application/json")
    assert headers["x-request-id"].startswith("req_")


BODIES = [
    b"Content-Length: 200000000\r\n\r\n" + b"x" * 1000,  # announced far over the bound, mostly unsent
    b"Transfer-Encoding: chunked\r\n\r\n400\r\n" + b"x" * 1024 + b"\r\n",  # a body of unknown length
]


@pytest.mark.parametrize("service", ["api", "stream"])
@pytest.mark.parametrize("body", BODIES, ids=["content-length-200-mb", "chunked"])
async def test_a_request_body_over_the_bound_gets_413_and_the_connection_is_closed(stack, service, body):
    """No route reads a body: one over TICKERWIRE_MAX_BODY_BYTES (16 KiB), or of unknown length,
    is refused before the access gates, and the connection closed instead of read to its end."""
    path = b"/posts" if service == "api" else b"/stream"
    reader, writer = await asyncio.open_connection("127.0.0.1", stack.of(service)[0].port)
    try:
        writer.write(b"GET " + BASE.encode() + path + b" HTTP/1.1\r\nHost: x\r\n" + body)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
        lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        payload = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), timeout=10)
        closed = await asyncio.wait_for(reader.read(), timeout=5)  # b"": the server closed it
    finally:
        writer.close()
    assert lines[0].split()[1] == "413" and headers["connection"].lower() == "close"
    assert orjson.loads(payload)["error"]["code"] == "PAYLOAD_TOO_LARGE"
    assert closed == b""
