"""The walking skeleton over real processes: an event on the log reaches a partner's HTTP
read and WebSocket push."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import aiohttp
import orjson
import pytest

from tests.support.events import fresh_post_ev, locale_ev, post_ev
from tests.support.stack import BASE, ServiceStack, auth, started_stack
from tests.support.ws import session

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
async def stack(pg_dsn, kafka_bootstrap):
    async with started_stack(pg_dsn, kafka_bootstrap, "skeleton") as s:
        yield s


async def test_event_reaches_http_and_websocket(stack: ServiceStack):
    key = await stack.provision("ws_skeleton")
    now = datetime.now(timezone.utc)
    await stack.publish(
        [
            locale_ev("en-US", default=True, name="English (United States)"),
            post_ev(1, at=now - timedelta(minutes=2), emitted_at=now),
            post_ev(2, at=now - timedelta(minutes=1), emitted_at=now),
        ]
    )
    await stack.wait_projected()
    api, stream = stack.of("api")[0], stack.of("stream")[0]
    async with aiohttp.ClientSession() as http:
        # The API refreshes its locale cache within half a second of a projected change.
        for _ in range(50):
            async with http.get(f"{api.url}{BASE}/languages", headers=auth(key)) as resp:
                assert resp.status == 200
                codes = [l["code"] for l in (await resp.json())["languages"]]
            if codes:
                break
            await asyncio.sleep(0.1)
        assert codes == ["en-US"]
        async with http.get(f"{api.url}{BASE}/posts", headers=auth(key)) as resp:
            listed = await resp.json()
            assert [p["id"] for p in listed["posts"]] == [2, 1]  # newest first

        async with session(http, f"{stream.url}{BASE}/stream?key={key}") as (ws, ready):
            assert ready["session_id"]
            await stack.publish([fresh_post_ev(3)])
            pushed = orjson.loads((await ws.receive(timeout=15)).data)
        assert pushed["type"] == "post.created"
        async with http.get(f"{api.url}{BASE}/posts", headers=auth(key)) as resp:
            assert (await resp.json())["posts"][0] == pushed["data"]


async def test_partner_errors_are_json_envelopes(stack: ServiceStack):
    api = stack.of("api")[0]
    async with aiohttp.ClientSession() as http:
        for method, path, status, code in [
            ("GET", f"{BASE}/posts", 401, "NOT_AUTHENTICATED"),
            ("GET", f"{BASE}/nope", 404, "NOT_FOUND"),
            ("POST", f"{BASE}/posts", 405, "METHOD_NOT_ALLOWED"),
        ]:
            async with http.request(method, api.url + path) as resp:
                assert resp.status == status
                assert resp.content_type == "application/json"
                assert (await resp.json())["error"]["code"] == code


async def test_stream_refuses_a_bad_key_with_the_envelope(stack: ServiceStack):
    stream = stack.of("stream")[0]
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as exc:
            await http.ws_connect(f"{stream.url}{BASE}/stream?key=tw_live_not-a-real-key")
        assert exc.value.status == 401
        async with http.get(f"{stream.url}{BASE}/stream?key=tw_live_not-a-real-key") as resp:
            assert (await resp.json())["error"]["code"] == "NOT_AUTHENTICATED"
