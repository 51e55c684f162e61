"""The stream app in process (``create_app`` on aiohttp's test server) over a real PostgreSQL
read model and the real broker: the handshake's gates and refusals. Fan-out, leases across
processes, kills and shutdown are tested over real processes in tests/e2e."""

from __future__ import annotations

import asyncio
import contextlib
import os

import aiohttp
import pytest
from multidict import CIMultiDict

from tests.support.apps import ReadModel, config_for, stream_served
from tests.support.events import locale_ev, post_ev
from tests.support.stack import BASE, auth, gauge
from tests.support.ws import handshake, refusal, upgrade_headers
from tickerwire.devstack.embedded.postgres import scratch_database
from tickerwire.services.cli.publish import publish


@pytest.fixture(scope="module")
async def world(pg_dsn, kafka_bootstrap):
    prefix = f"streamapp{os.getpid()}"
    async with scratch_database(pg_dsn) as dsn:
        model = ReadModel(dsn, prefix)
        await model.project([locale_ev("en-US", default=True), locale_ev("de-DE")])
        key = await model.provision("ws_streamapp", stream_connection_limit=20)
        async with stream_served(dsn, kafka_bootstrap, prefix) as stream:
            yield stream, key


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as session:
        yield session


def stream_url(world, query: str = "") -> str:
    stream, _ = world
    return f"{stream.url}{BASE}/stream" + (f"?{query}" if query else "")


async def test_handshake_refusals_and_unknown_routes_are_json_envelopes(world, http):
    stream, key = world
    cases = [
        ("GET", f"{BASE}/stream?key=tw_live_not-a-real-key", upgrade_headers(), 401, "NOT_AUTHENTICATED"),
        ("GET", f"{BASE}/stream", upgrade_headers(), 401, "NOT_AUTHENTICATED"),
        ("GET", f"{BASE}/stream?key={key}", {}, 426, "UPGRADE_REQUIRED"),
        ("GET", f"{BASE}/nope", {}, 404, "NOT_FOUND"),
        ("POST", f"{BASE}/stream?key={key}", {}, 405, "METHOD_NOT_ALLOWED"),
    ]
    for method, path, headers, status, code in cases:
        async with http.request(method, stream.url + path, headers=headers) as resp:
            assert resp.status == status, (path, status)
            assert resp.content_type == "application/json"
            body = await resp.json()
            assert body["error"]["code"] == code and body["error"]["message"]


async def test_the_stream_accepts_a_bearer_header_with_the_same_gates_and_errors(world, http):
    _, key = world
    ws = await handshake(http, stream_url(world), headers=auth(key))
    await ws.close()
    bad_key = "tw_live_" + "x" * 43
    by_query = await refusal(http, stream_url(world, f"key={bad_key}"))
    by_header = await refusal(http, stream_url(world), headers=auth(bad_key))
    assert by_query == by_header and by_query[0] == 401 and by_query[1]["error"]["code"] == "NOT_AUTHENTICATED"
    for header in ({}, {"Authorization": f"Basic {key}"}, {"Authorization": "Bearer"}):
        assert (await refusal(http, stream_url(world), headers=header))[0] == 401
    # Two Authorization headers authenticate nobody, whichever comes first.
    for pair in ((key, bad_key), (bad_key, key)):
        twice = CIMultiDict([("Authorization", f"Bearer {pair[0]}"), ("Authorization", f"Bearer {pair[1]}")])
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(stream_url(world), headers=twice)
        assert refused.value.status == 401


async def test_filter_values_breaking_the_posts_grammar_refuse_the_handshake_with_422(world, http):
    _, key = world
    too_many = ",".join(f"T{i}" for i in range(21))
    for name, value in (("tickers", too_many), ("categories", too_many), ("lang", too_many)):
        status, body = await refusal(http, stream_url(world, f"key={key}&{name}={value}"))
        assert status == 422 and body["error"]["code"] == "VALIDATION_FAILED" and body["error"]["field"] == name
    # The access gates come first, as on HTTP.
    status, body = await refusal(http, stream_url(world, f"tickers={too_many}"))
    assert status == 401


async def feed_readiness(http, stream) -> tuple[int, dict]:
    async with http.get(f"{stream.admin_url}/readyz") as resp:
        return resp.status, (await resp.json())["checks"]["feed"]


async def test_a_feed_paused_by_back_pressure_says_so_in_a_gauge_and_readiness_until_it_resumes(
    pg_dsn, kafka_bootstrap, http
):
    """More posts waiting for the projector than TICKERWIRE_STREAM_MAX_PENDING pause the feed's
    reading: visible, and the process stays ready (it still serves, only late)."""
    prefix = f"streampause{os.getpid()}"
    posts = [post_ev(n) for n in range(1, 5)]
    async with scratch_database(pg_dsn) as dsn:
        model = ReadModel(dsn, prefix)
        await model.project([locale_ev("en-US", default=True)])
        settings = dict(topic_posts_partitions=1, stream_max_pending=3)
        async with stream_served(dsn, kafka_bootstrap, prefix, **settings) as stream:
            assert await gauge(stream.admin_url, "tickerwire_stream_feed_paused") == 0
            # Published, not yet projected: the feed holds them and stops reading at 3.
            await publish(
                config_for(dsn, kafka_bootstrap_servers=kafka_bootstrap, topic_prefix=prefix, **settings), posts
            )
            for _ in range(200):
                if await gauge(stream.admin_url, "tickerwire_stream_feed_paused") == 1:
                    break
                await asyncio.sleep(0.05)
            assert await gauge(stream.admin_url, "tickerwire_stream_feed_paused") == 1
            assert await gauge(stream.admin_url, "tickerwire_stream_feed_pending") >= 3
            status, feed = await feed_readiness(http, stream)
            assert status == 200 and feed["ok"] and "paused" in feed["detail"] and "late" in feed["detail"]
            # The projector commits them (same partition, same offsets): announced, and reading resumes.
            await model.project(posts)
            for _ in range(200):
                if await gauge(stream.admin_url, "tickerwire_stream_feed_paused") == 0:
                    break
                await asyncio.sleep(0.05)
            assert await gauge(stream.admin_url, "tickerwire_stream_feed_paused") == 0
            status, feed = await feed_readiness(http, stream)
            assert status == 200 and feed == {"ok": True, "detail": "ok"}


async def test_a_client_that_stops_answering_is_closed_and_frees_its_slot(pg_dsn, kafka_bootstrap, http):
    """A client whose network vanished answers no WebSocket ping: it is closed after the
    heartbeat and half of it, and the workspace's only slot is free again for a new connection.
    A client that answers stays connected."""
    prefix = f"streamheartbeat{os.getpid()}"
    async with scratch_database(pg_dsn) as dsn:
        model = ReadModel(dsn, prefix)
        await model.project([locale_ev("en-US", default=True)])
        key = await model.provision("ws_heartbeat", stream_connection_limit=1)
        async with stream_served(dsn, kafka_bootstrap, prefix, stream_heartbeat_s=1.0) as stream:
            url = f"{stream.url}{BASE}/stream"
            answering = await handshake(http, url, headers=auth(key))
            started = asyncio.get_running_loop().time()
            while asyncio.get_running_loop().time() - started < 3.0:  # reading answers the pings
                with contextlib.suppress(asyncio.TimeoutError):
                    await answering.receive(timeout=0.2)
            assert not answering.closed
            await answering.close()

            async def once_free(connect):
                """``connect()`` once the workspace's slot is free: 429 until then."""
                while True:
                    try:
                        return await connect()
                    except aiohttp.WSServerHandshakeError as exc:
                        assert exc.status == 429
                        await asyncio.sleep(0.05)

            async with asyncio.timeout(1):  # the slot is freed as the server ends the closed connection
                silent = await once_free(
                    lambda: http.ws_connect(url, headers=auth(key), autoping=False)
                )  # never answers a ping
            connected = asyncio.get_running_loop().time()
            async with asyncio.timeout(10):  # taken until the server gives the silent client up
                again = await once_free(lambda: handshake(http, url, headers=auth(key)))
            waited = asyncio.get_running_loop().time() - connected
            await again.close()
            await silent.close()
            assert 1.0 <= waited < 5.0  # given up after the heartbeat (1 s) and half of it, not before
