"""The console's live view (docs/console.md): a console session opens a stream connection with a
single-use ticket from the API, never the key. The API and the stream in process over one real
read model and the real broker: the ticket needs the session and its CSRF token, opens exactly
one connection, ends with its 30 seconds or its session, and the policy admits the stream."""

from __future__ import annotations

import os

import aiohttp
import pytest

from tests.support.apps import api_served, stream_served
from tests.support.console import ConsoleClient, seed
from tests.support.stack import BASE
from tests.support.ws import handshake, refusal
from tickerwire.devstack.embedded.postgres import scratch_database
from tickerwire.services.common.http.keys import hash_key


@pytest.fixture(scope="module")
async def world(pg_dsn, kafka_bootstrap):
    prefix = f"consolestream{os.getpid()}"
    async with scratch_database(pg_dsn) as dsn:
        seeded = await seed(dsn)
        async with stream_served(dsn, kafka_bootstrap, prefix) as stream:
            stream_url = stream.url.replace("http://", "ws://") + BASE + "/stream"
            async with (
                api_served(dsn, console_stream_url=stream_url) as api,
                aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http,
            ):
                yield ConsoleClient(api.url, http), seeded, stream_url


async def ticket(console: ConsoleClient, session, **kw) -> tuple[int, dict]:
    resp, body = await console.call("POST", "/console/stream-tickets", session, **kw)
    return resp.status, body


async def test_the_page_may_connect_to_the_stream_and_knows_where_it_is(world):
    console, _, stream_url = world
    async with console.http.get(console.url + "/console") as resp:
        page = await resp.text()
        policy = resp.headers["Content-Security-Policy"]
    origin = stream_url.split(BASE)[0]
    assert f"connect-src 'self' {origin};" in policy
    assert f'<meta name="tw-stream-url" content="{stream_url}">' in page


async def test_a_ticket_opens_one_connection_as_the_sessions_key(world):
    console, seeded, _ = world
    session = await console.sign_in(seeded.key_a)
    status, granted = await ticket(console, session)
    assert status == 201, granted
    assert list(granted) == ["ticket", "url", "expires_at"] and granted["ticket"].startswith("twst_")
    url = f"{granted['url']}?ticket={granted['ticket']}&locales=en-US"
    ws = await handshake(console.http, url)
    await ws.close()
    status, body = await refusal(console.http, url)  # used up
    assert (status, body["error"]["code"]) == (401, "NOT_AUTHENTICATED")
    status, body = await refusal(console.http, f"{granted['url']}?ticket=twst_{'x' * 43}")
    assert status == 401


async def test_a_ticket_needs_the_session_and_its_csrf_token(world):
    console, seeded, _ = world
    session = await console.sign_in(seeded.key_a)
    for csrf in (None, "twcsrf_wrong"):
        status, body = await ticket(console, session, csrf=csrf)
        assert (status, body["error"]["code"]) == (401, "NOT_AUTHENTICATED")
    status, _ = await ticket(console, None)
    assert status == 401
    # A key alone gets no ticket: tickets are the console session's.
    status, _ = await ticket(console, None, Authorization=f"Bearer {seeded.key_a}")
    assert status == 401
    status, _ = await ticket(console, session, Origin="http://evil.example")
    assert status == 403


async def test_a_ticket_ends_with_its_lifetime_and_with_its_session(world):
    console, seeded, _ = world
    session = await console.sign_in(seeded.key_b)
    _, stale = await ticket(console, session)
    _, orphan = await ticket(console, session)
    conn = await seeded.model.conn()
    try:
        await conn.execute(
            "UPDATE console_stream_tickets SET expires_at = now() - interval '1 second' WHERE ticket_hash = $1",
            hash_key(stale["ticket"]),
        )
    finally:
        await conn.close()
    status, _ = await refusal(console.http, f"{stale['url']}?ticket={stale['ticket']}")
    assert status == 401
    resp, _ = await console.call("DELETE", "/console/sessions/current", session)
    assert resp.status == 204
    status, _ = await refusal(console.http, f"{orphan['url']}?ticket={orphan['ticket']}")
    assert status == 401
