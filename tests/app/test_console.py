"""The partner console over HTTP (docs/console.md), in process over a real read model: the page
and its assets with their security headers, sign-in and sign-out, a session's lifetime, its
binding to one workspace, its refusal once the key is revoked or the workspace suspended, and
CSRF (a cookie alone acts as nobody, and another site's form cannot act)."""

from __future__ import annotations

import asyncio
import logging
import re
from html.parser import HTMLParser

import aiohttp
import pytest

from tests.support.apps import api_served
from tests.support.console import ENDPOINT_B, ENDPOINTS_A, ConsoleClient, seed
from tickerwire.devstack.embedded.postgres import scratch_database
from tickerwire.services.api.settings import ApiConfig
from tickerwire.services.cli import admin
from tickerwire.services.common.http.keys import hash_key
from tickerwire.services.common.runtime.errors import ConfigError

POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


@pytest.fixture(scope="module")
async def console(pg_dsn):
    async with scratch_database(pg_dsn) as dsn:
        seeded = await seed(dsn)
        async with (
            api_served(dsn) as api,
            aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http,
        ):
            client = ConsoleClient(api.url, http)
            client.seeded = seeded  # type: ignore[attr-defined]
            yield client


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_text = ""

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        if self.tags and self.tags[-1][0] in ("script", "style") and data.strip():
            self.script_text += data


@pytest.mark.parametrize(
    "path,content_type",
    [("/console", "text/html"), ("/console/console.js", "text/javascript"), ("/console/console.css", "text/css")],
)
async def test_the_page_and_its_assets_carry_the_strict_policy_and_headers(console, path, content_type):
    async with console.http.get(console.url + path) as resp:
        await resp.read()
        assert resp.status == 200
        assert resp.content_type == content_type
        assert resp.headers["Content-Security-Policy"] == POLICY
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        assert resp.headers["Referrer-Policy"] == "no-referrer"


async def test_the_page_has_no_inline_script_or_style_and_loads_only_its_own_assets(console):
    async with console.http.get(console.url + "/console") as resp:
        html = await resp.text()
    tags = Tags()
    tags.feed(html)
    scripts = [attrs for tag, attrs in tags.tags if tag == "script"]
    assert scripts and all(a.get("src", "").startswith("/console/") for a in scripts)
    assert tags.script_text == "" and "<style" not in html
    handlers = [(tag, name) for tag, attrs in tags.tags for name in attrs if name.startswith("on") or name == "style"]
    assert handlers == []
    links = [a["href"] for tag, a in tags.tags if tag == "link"]
    assert links == ["/console/console.css"]
    assert re.search(r'<meta name="tw-api-base" content="/api/v1/developer">', html)
    # Every form field has its label.
    ids = {a["id"] for tag, a in tags.tags if tag in ("input", "select")}
    labelled = {a["for"] for tag, a in tags.tags if tag == "label"}
    assert ids <= labelled, ids - labelled


async def test_a_session_reads_its_own_workspace_and_never_another(console, caplog):
    caplog.set_level(logging.DEBUG)
    seeded = console.seeded
    async with console.http.post(
        console.url + "/console/sessions", headers={"Authorization": f"Bearer {seeded.key_a}"}
    ) as resp:
        body = await resp.json()
        assert resp.status == 201, body
        cookie = resp.cookies["tw_console"]
        assert list(body) == ["csrf_token", "workspace_id", "expires_at"]
        assert body["workspace_id"] == "ws_console_a"
        assert cookie["httponly"] and cookie["samesite"] == "Strict" and cookie["path"] == "/"
        assert not cookie["secure"]  # plain http here; https sets Secure
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        assert resp.headers["X-Quota-Limit"] == "1000000"
    session = await console.sign_in(seeded.key_a)
    resp, listed = await console.call("GET", "/webhooks/endpoints", session)
    assert resp.status == 200, listed
    assert sorted(e["id"] for e in listed["endpoints"]) == sorted(ENDPOINTS_A)
    assert resp.headers["X-Quota-Limit"] == "1000000" and "X-RateLimit-Remaining" in resp.headers
    resp, attempts = await console.call("GET", f"/webhooks/endpoints/{ENDPOINTS_A[0]}/attempts", session)
    assert resp.status == 200 and {a["webhook_id"] for a in attempts["attempts"]} == {
        "msg_console_ok",
        "msg_console_bad",
    }
    for path in (f"/webhooks/endpoints/{ENDPOINT_B}", f"/webhooks/endpoints/{ENDPOINT_B}/attempts"):
        resp, body = await console.call("GET", path, session)
        assert (resp.status, body["error"]["code"]) == (404, "NOT_FOUND"), path
    # A key in the Authorization header is always what judges the request, cookie or not.
    resp, other = await console.call("GET", "/webhooks/endpoints", session, Authorization=f"Bearer {seeded.key_b}")
    assert [e["id"] for e in other["endpoints"]] == [ENDPOINT_B]
    logged = "\n".join(r.getMessage() + str(r.__dict__) for r in caplog.records)
    for secret in (seeded.key_a, session.token, session.csrf, body.get("csrf_token", "x" * 20)):
        assert secret not in logged


async def test_a_cookie_without_the_csrf_header_or_with_a_wrong_one_is_refused(console):
    session = await console.sign_in(console.seeded.key_a)
    for csrf in (None, "twcsrf_wrong", session.csrf + "x", ""):
        resp, body = await console.call("GET", "/webhooks/endpoints", session, csrf=csrf)
        assert (resp.status, body["error"]["code"]) == (401, "NOT_AUTHENTICATED"), csrf
        assert "X-Quota-Limit" not in resp.headers  # refused before the limits: counted nowhere
    # Another session's CSRF token does not open this one.
    other = await console.sign_in(console.seeded.key_a)
    resp, _ = await console.call("GET", "/webhooks/endpoints", session, csrf=other.csrf)
    assert resp.status == 401
    resp, _ = await console.call("GET", "/webhooks/endpoints", session)
    assert resp.status == 200


async def test_another_sites_form_post_cannot_act_and_sign_out_needs_the_csrf_token(console):
    session = await console.sign_in(console.seeded.key_a)
    form = {"Content-Type": "application/x-www-form-urlencoded", "Cookie": f"tw_console={session.token}"}
    for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        for method, path in (("POST", "/console/sessions"), ("DELETE", "/console/sessions/current")):
            async with console.http.request(method, console.url + path, headers={**form, **headers}) as resp:
                assert resp.status == 403, (method, path, headers)
                assert (await resp.json())["error"]["code"] == "NOT_AUTHENTICATED"
    # A same-site form post carries no key and no CSRF token: refused as well.
    async with console.http.post(console.url + "/console/sessions", headers=form, data="a=1") as resp:
        assert resp.status == 401
    resp, _ = await console.call("DELETE", "/console/sessions/current", session, csrf=None)
    assert resp.status == 401
    resp, _ = await console.call("GET", "/webhooks/endpoints", session)
    assert resp.status == 200  # none of the above ended or used the session
    resp, _ = await console.call("DELETE", "/console/sessions/current", session)
    assert resp.status == 204 and resp.cookies["tw_console"].value == ""
    resp, body = await console.call("GET", "/webhooks/endpoints", session)
    assert (resp.status, body["error"]["code"]) == (401, "NOT_AUTHENTICATED")


async def test_an_expired_session_is_refused(console):
    session = await console.sign_in(console.seeded.key_a)
    conn = await console.seeded.model.conn()
    try:
        lifetime = await conn.fetchval(
            "SELECT extract(epoch FROM expires_at - created_at) FROM console_sessions WHERE token_hash = $1",
            hash_key(session.token),
        )
        assert lifetime == 30 * 60
        await conn.execute(
            "UPDATE console_sessions SET expires_at = now() - interval '1 second' WHERE token_hash = $1",
            hash_key(session.token),
        )
    finally:
        await conn.close()
    resp, body = await console.call("GET", "/webhooks/endpoints", session)
    assert (resp.status, body["error"]["code"]) == (401, "NOT_AUTHENTICATED")
    # The next sign-in drops the ended row.
    await console.sign_in(console.seeded.key_a)
    conn = await console.seeded.model.conn()
    try:
        assert await conn.fetchval("SELECT count(*) FROM console_sessions WHERE expires_at < now()") == 0
    finally:
        await conn.close()


async def test_a_bad_key_opens_no_session(console):
    async with console.http.post(
        console.url + "/console/sessions", headers={"Authorization": "Bearer tw_live_not_a_real_key_at_all"}
    ) as resp:
        assert resp.status == 401 and "tw_console" not in resp.cookies
    async with console.http.post(console.url + "/console/sessions") as resp:
        assert resp.status == 401 and "tw_console" not in resp.cookies


async def test_a_session_is_refused_once_its_key_is_revoked_or_its_workspace_suspended(console):
    model = console.seeded.model
    key = console.seeded.key_c
    session = await console.sign_in(key)
    resp, _ = await console.call("GET", "/webhooks/endpoints", session)
    assert resp.status == 200
    conn = await model.conn()
    try:
        suspended = await admin.workspace_event(conn, "ws_console_c", status="suspended")
    finally:
        await conn.close()
    await model.project([suspended])
    resp, body = await _eventually(console, session, 403)
    assert body["error"]["code"] == "WORKSPACE_SUSPENDED"
    conn = await model.conn()
    try:
        reinstated = await admin.workspace_event(conn, "ws_console_c", status="active")
    finally:
        await conn.close()
    await model.project([reinstated])
    await _eventually(console, session, 200)
    conn = await model.conn()
    try:
        revoked = await admin.revoke_key_event(conn, "key_" + hash_key(key)[:16])
    finally:
        await conn.close()
    await model.project([revoked])
    resp, body = await _eventually(console, session, 401)
    assert body["error"]["code"] == "NOT_AUTHENTICATED"


async def _eventually(console, session, status: int, within_s: float = 10.0):
    """The answer once it has ``status`` (the API applies an access change within about a second)."""
    async with asyncio.timeout(within_s):
        while True:
            resp, body = await console.call("GET", "/webhooks/endpoints", session)
            if resp.status == status:
                return resp, body
            await asyncio.sleep(0.1)


async def test_without_a_stream_the_console_hands_out_no_ticket(console):
    session = await console.sign_in(console.seeded.key_a)
    resp, body = await console.call("POST", "/console/stream-tickets", session)
    assert (resp.status, body["error"]["code"]) == (404, "NOT_FOUND")
    assert "TICKERWIRE_CONSOLE_STREAM_URL" in body["error"]["message"]


def test_the_stream_url_must_be_a_websocket_url():
    with pytest.raises(ConfigError, match="TICKERWIRE_CONSOLE_STREAM_URL"):
        ApiConfig.from_env(
            {"TICKERWIRE_CONSOLE_STREAM_URL": "http://127.0.0.1:8081/stream"},
            database_url="postgresql:///x",
            kafka_bootstrap_servers="-",
        )
