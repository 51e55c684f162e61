"""The partner ports serve partners only: operator endpoints live on each process's admin
listener, no response names a version, every partner request is logged once with its
request id, malformed requests are 400s (and at most one log line), and browsers are refused."""

from __future__ import annotations

import asyncio
import json
import random
import time
from datetime import datetime, timezone
from pathlib import Path

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.rawhttp import raw, raw_head
from tests.support.stack import BASE, Service, auth, started_stack
from tests.support.ws import session
from tickerwire.devstack.demo import dataset, trickle
from tickerwire.services.common.runtime.logs import LOG_BURST

pytestmark = pytest.mark.e2e

OPS = ("/metrics", "/healthz", "/readyz")
OPENAPI = Path(__file__).parents[2] / "schemas" / "openapi.json"
WS_KEY = "dGhlIHNhbXBsZSBub25jZQ=="


@pytest.fixture(scope="module")
async def stack(pg_dsn, kafka_bootstrap):
    async with started_stack(pg_dsn, kafka_bootstrap, "partnerports") as s:
        yield s


@pytest.fixture(scope="module")
async def key(stack) -> str:
    return await stack.provision("ports_ws")


def log_docs(service: Service) -> list[dict]:
    docs = []
    for line in service.log().splitlines():
        try:
            docs.append(json.loads(line))
        except ValueError:
            docs.append({"raw": line})
    return docs


async def wait_for_line(service: Service, match, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        found = [d for d in log_docs(service) if match(d)]
        if found:
            return found[-1]
        assert time.monotonic() < deadline, f"no such log line in:\n{service.log()[-3000:]}"
        await asyncio.sleep(0.1)


def partner_requests(metrics_text: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(metrics_text)
        if family.name == "tickerwire_api_requests"
        for sample in family.samples
        if sample.name == "tickerwire_api_requests_total"
    )


async def test_operator_endpoints_are_only_on_the_admin_listeners(stack):
    async with aiohttp.ClientSession() as http:
        for service in stack.of("api") + stack.of("stream"):
            for path in OPS:
                async with http.get(service.url + path) as resp:
                    assert resp.status == 404, (service.name, path)
                    assert (await resp.json())["error"]["code"] == "NOT_FOUND"
                    assert resp.headers["Server"] == "tickerwire"
        for service in stack.of("api") + stack.of("stream") + stack.of("projector"):
            for path in OPS:
                async with http.get(service.admin_url + path) as resp:
                    if path == "/readyz":  # served; whether ready is the process's business
                        assert resp.status in (200, 503) and (await resp.json())["status"] in ("ready", "not_ready")
                    else:
                        assert resp.status == 200, (service.name, path, await resp.text())
                    assert resp.headers["Server"] == "tickerwire"


async def test_scrapes_are_not_partner_traffic(stack, key):
    api = stack.of("api")[0]
    async with aiohttp.ClientSession() as http:

        async def scrape() -> str:
            async with http.get(api.admin_url + "/metrics") as resp:
                return await resp.text()

        async with http.get(f"{api.url}{BASE}/languages", headers=auth(key)) as resp:
            assert resp.status == 200
        before = await scrape()
        for path in OPS:
            async with http.get(api.admin_url + path):
                pass
        after = await scrape()
    assert partner_requests(before) > 0  # partner requests are counted
    assert partner_requests(after) == partner_requests(before)


async def test_no_response_names_a_version(stack, key):
    api, stream = stack.of("api")[0], stack.of("stream")[0]
    async with aiohttp.ClientSession() as http:
        for url, headers in [
            (f"{api.url}{BASE}/languages", auth(key)),
            (f"{api.url}{BASE}/languages", {}),
            (f"{api.url}/nope", {}),
            (f"{stream.url}{BASE}/stream", {}),
        ]:
            async with http.get(url, headers=headers) as resp:
                assert resp.headers["Server"] == "tickerwire", url
    status, headers = await raw_head(stream.port, handshake(f"{BASE}/stream?key={key}"))
    assert status == 101 and headers["server"] == "tickerwire" and headers["x-request-id"].startswith("req_")
    status, headers, _ = await raw(api.port, b"NOT A REQUEST\r\n\r\n")
    assert status == 400 and headers["server"] == "tickerwire"


async def test_every_partner_request_has_an_access_line_with_its_request_id(stack, key):
    api, stream = stack.of("api")[0], stack.of("stream")[0]
    async with aiohttp.ClientSession() as http:
        url = f"{api.url}{BASE}/posts/1?key={key}&lang=de-DE"
        async with http.get(url, headers={**auth(key), "X-Request-Id": "trace-abc.1"}) as resp:
            assert resp.status == 404 and resp.headers["X-Request-Id"] == "trace-abc.1"
        async with http.get(f"{api.url}{BASE}/languages", headers={"X-Request-Id": "no spaces allowed"}) as resp:
            assert resp.status == 401
            generated = resp.headers["X-Request-Id"]
            assert generated.startswith("req_") and generated != "no spaces allowed"
        async with session(http, f"{stream.url}{BASE}/stream?key={key}", headers={"X-Request-Id": "trace-ws"}):
            pass

    line = await wait_for_line(
        api, lambda d: d.get("request_id") == "trace-abc.1" and d.get("logger") == "tickerwire.access"
    )
    assert (line["method"], line["route"], line["status"], line["workspace_id"]) == (
        "GET",
        BASE + "/posts/{id_or_slug}",
        404,
        "ports_ws",
    )
    assert isinstance(line["duration_ms"], (int, float))
    line = await wait_for_line(api, lambda d: d.get("request_id") == generated)
    assert (line["route"], line["status"], line["workspace_id"]) == (BASE + "/languages", 401, None)
    line = await wait_for_line(
        stream, lambda d: d.get("request_id") == "trace-ws" and d.get("logger") == "tickerwire.access"
    )
    assert (line["route"], line["status"], line["workspace_id"]) == (BASE + "/stream", 101, "ports_ws")
    for service in (api, stream):
        text = service.log()
        assert key not in text and "key=" not in text and "lang=de-DE" not in text


async def test_an_unparseable_request_is_at_most_one_log_line_without_a_traceback(stack):
    api, stream = stack.of("api")[0], stack.of("stream")[0]
    before = len(log_docs(stream))  # no test before sent the stream's listener an unparseable request
    status, _, body = await raw(stream.port, b"NOT A REQUEST\r\n\r\n")
    assert status == 400 and orjson.loads(body)["error"]["code"] == "VALIDATION_FAILED"
    await asyncio.sleep(0.5)
    new = log_docs(stream)[before:]
    assert len(new) == 1, new
    assert new[0]["msg"].startswith("unparseable request") and "exc" not in new[0] and "Traceback" not in stream.log()

    before = len(log_docs(api))

    started = time.monotonic()
    for _ in range(200):  # a flood is rate-limited
        await raw(api.port, b"\x16\x03\x01 not http\r\n\r\n")
    # The line the limiter lets through once it has a token again says how many it held back
    # (on a busy machine the flood may end before that token: one more request after it).
    await asyncio.sleep(1.1)
    await raw(api.port, b"\x16\x03\x01 not http\r\n\r\n")
    await asyncio.sleep(0.5)
    flood = log_docs(api)[before:]
    assert len(flood) <= LOG_BURST + time.monotonic() - started + 1, len(flood)
    assert any(d.get("suppressed", 0) > 0 for d in flood), flood
    assert "Traceback" not in api.log()


def handshake(
    target: str,
    *extra: bytes,
    version: bytes = b"13",
    key: bytes | None = WS_KEY.encode(),
    upgrade: bytes = b"websocket",
) -> bytes:
    lines = [
        b"GET " + target.encode() + b" HTTP/1.1",
        b"Host: x",
        b"Connection: Upgrade",
        b"Upgrade: " + upgrade,
        b"Sec-WebSocket-Version: " + version,
        *extra,
    ]
    if key is not None:
        lines.append(b"Sec-WebSocket-Key: " + key)
    return b"\r\n".join(lines) + b"\r\n\r\n"


@pytest.mark.parametrize(
    "case", ["upgrade-not-utf8", "other-header-not-utf8", "version-12", "key-short", "key-missing"]
)
async def test_malformed_handshakes_are_400_with_the_envelope(stack, key, case):
    target = f"{BASE}/stream?key={key}"
    request = {
        "upgrade-not-utf8": handshake(target, upgrade=b"websocket\xff\xfe"),
        "other-header-not-utf8": handshake(target, b"User-Agent: \xc3\x28"),
        "version-12": handshake(target, version=b"12"),
        "key-short": handshake(target, key=b"abc"),
        "key-missing": handshake(target, key=None),
    }[case]
    status, headers, body = await raw(stack.of("stream")[0].port, request)
    assert status == 400, body
    assert headers["content-type"].startswith("application/json")
    assert orjson.loads(body)["error"]["code"] == "VALIDATION_FAILED"
    if case == "version-12":
        assert headers["sec-websocket-version"] == "13"


async def test_api_headers_that_are_not_utf8_are_400(stack, key):
    request = (
        f"GET {BASE}/languages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
    ).encode() + b"X-Name: \xff\xfe\r\n\r\n"
    status, headers, body = await raw(stack.of("api")[0].port, request)
    assert status == 400 and orjson.loads(body)["error"]["code"] == "VALIDATION_FAILED"
    # An Authorization header that is not UTF-8 is an invalid one: 401 (docs/api.md#access-gates), not 400.
    request = (
        f"GET {BASE}/languages HTTP/1.1\r\nHost: x\r\n"
    ).encode() + b"Authorization: Bearer tw_live_\xff\xfe\r\n\r\n"
    status, headers, body = await raw(stack.of("api")[0].port, request)
    assert (
        status == 401 and orjson.loads(body)["error"]["code"] == "NOT_AUTHENTICATED" and "www-authenticate" in headers
    )


async def test_empty_csv_items_are_skipped_as_the_document_says(stack, key):
    """The document allows an empty value and empty items (skipped); so does the server."""
    parameters = orjson.loads(OPENAPI.read_bytes())["components"]["parameters"]
    for name in ("hashtag", "ticker", "category", "sentiment"):
        schema = parameters[name]["schema"]
        assert schema.get("minItems", 0) == 0 and schema["items"].get("minLength", 0) == 0, name
        assert "" in schema["items"].get("enum", [""]) and "skipped" in parameters[name]["description"]
    # Posts to filter: with none, every query below would equal the empty page whatever it did.
    now = datetime.now(timezone.utc)
    await stack.publish(
        [
            *dataset.catalog_events(now=now, tokens=40),
            *(
                trickle.next_post(random.Random(i), post_id=700_000 + i, now=now, locales=dataset.LISTED_LOCALES)
                for i in range(12)
            ),
        ]
    )
    await stack.wait_projected()
    url = f"{stack.of('api')[0].url}{BASE}/posts"
    async with aiohttp.ClientSession() as http:
        deadline = time.monotonic() + 10  # the API picks up the new catalog shortly after it is projected
        while True:
            async with http.get(url, headers=auth(key)) as resp:
                everything = await resp.json()
            if everything.get("posts") or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert everything.get("posts"), everything
        for query in ("hashtag=", "ticker=,", "category=,,", "sentiment=,BULLISH,,NEUTRAL,BEARISH,"):
            async with http.get(f"{url}?{query}", headers=auth(key)) as resp:
                assert resp.status == 200, query
                assert await resp.json() == everything, query


async def test_browsers_are_refused_clearly(stack, key):
    """No CORS (keys are secrets): a preflight is a 405 saying so; no Access-Control-* header anywhere."""
    url = f"{stack.of('api')[0].url}{BASE}/posts"
    origin = {"Origin": "https://partner.example"}
    async with aiohttp.ClientSession() as http:
        preflight = {
            **origin,
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "authorization",
        }
        async with http.options(url, headers=preflight) as resp:
            assert resp.status == 405
            error = (await resp.json())["error"]
            assert error["code"] == "METHOD_NOT_ALLOWED" and "CORS" in error["message"]
            assert not [h for h in resp.headers if h.lower().startswith("access-control-")]
        async with http.get(url, headers={**origin, **auth(key)}) as resp:
            assert resp.status == 200
            assert not [h for h in resp.headers if h.lower().startswith("access-control-")]
