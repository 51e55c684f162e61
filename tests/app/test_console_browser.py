"""The partner console in a real browser: Debian's Chromium driven by Playwright (from PyPI,
``executable_path``: Playwright's own browser download is not used), against the API served in
process over a real read model. Sign-in, the endpoint list, the attempt log and its filter, the
usage, sign-out, another workspace's session seeing none of it, markup from the server shown as
text, and the page usable at 375 px. The browser may reach the test server only: every other
request is aborted (and would fail the test)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import standardwebhooks
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.support.apps import api_served, dispatcher_served, stream_served, writable_stack
from tests.support.console import ENDPOINT_B, ENDPOINTS_A, PAYLOAD, seed
from tests.support.stack import BASE
from tickerwire.devstack.embedded.postgres import scratch_database

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium installed (apt-get install chromium) to drive the console"
)
TIMEOUT_MS = 10_000


class Browser:
    """One page of a headless Chromium, every request off the test server aborted and recorded."""

    def __init__(self, url: str, page: Any) -> None:
        self.url, self.page = url, page
        self.problems: list[str] = []  # console errors, dialogs (an injected alert), stray requests
        page.on("console", self._console)
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        page.on("dialog", self._dialog)

    def _console(self, message: Any) -> None:
        # A refused request (a 401 or 404 the test asks for) is logged by Chromium, not a problem;
        # a script error or a CSP violation ("Refused to ...") is.
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            self.problems.append(f"console: {message.text}")

    async def _dialog(self, dialog: Any) -> None:
        self.problems.append(f"dialog: {dialog.message}")
        await dialog.dismiss()

    async def sign_in(self, key: str) -> None:
        page = self.page
        await page.goto(self.url + "/console")
        await page.get_by_label("API key").focus()
        await page.keyboard.type(key)
        await page.keyboard.press("Enter")  # the keyboard alone signs in
        await page.locator("#console").wait_for(state="visible")
        assert await page.get_by_label("API key").input_value() == ""

    async def endpoint_ids(self) -> list[str]:
        await self.page.locator("#endpoints li").first.wait_for()
        return await self.page.locator("#endpoints li").evaluate_all("items => items.map(i => i.dataset.id)")


@pytest.fixture(scope="module")
async def served(pg_dsn) -> AsyncIterator[tuple[str, Any]]:
    from playwright.async_api import async_playwright

    async with scratch_database(pg_dsn) as dsn:
        seeded = await seed(dsn)
        async with api_served(dsn) as api, async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], timeout=30_000)
            try:
                yield api.url, seeded, browser
            finally:
                await browser.close()


@pytest.fixture
async def browser(served) -> AsyncIterator[Browser]:
    url, _, chromium = served
    async for out in _browser(chromium, url):
        yield out


async def _browser(chromium: Any, url: str, also: str = "") -> AsyncIterator[Browser]:
    """A page of ``chromium`` that may reach ``url`` (and ``also``) only."""
    context = await chromium.new_context(viewport={"width": 375, "height": 800})
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    out = Browser(url, page)

    async def only_the_server(route: Any) -> None:
        if route.request.url.startswith(url) or (also and route.request.url.startswith(also)):
            await route.continue_()
        else:
            out.problems.append(f"request off the server: {route.request.url}")
            await route.abort()

    await page.route("**/*", only_the_server)
    try:
        yield out
    finally:
        await context.close()
    assert out.problems == []


async def test_sign_in_list_attempts_usage_and_sign_out(served, browser):
    _, seeded, _ = served
    page = browser.page
    await browser.sign_in(seeded.key_a)
    assert sorted(await browser.endpoint_ids()) == sorted(ENDPOINTS_A)
    assert "Workspace ws_console_a" == await page.locator("#who").text_content()
    assert " of 1000000 " in (await page.locator("#usage-day").text_content() or "")
    # The key is nowhere the page keeps anything; the session cookie is out of the script's reach.
    kept = await page.evaluate("JSON.stringify(sessionStorage) + JSON.stringify(localStorage) + document.cookie")
    assert seeded.key_a not in kept and "tw_console=" not in kept
    # Readable at 375 px: nothing wider than the window.
    assert await page.evaluate("document.documentElement.scrollWidth") <= 375

    item = page.locator(f'#endpoints li[data-id="{ENDPOINTS_A[0]}"]')
    await item.get_by_role("button", name="Details and attempts").click()
    await page.locator("#attempts li").nth(1).wait_for()
    assert await page.locator("#attempts li").count() == 2
    # The receiver's markup is text: shown as written, no element made of it, no alert.
    text = await page.locator("#attempts").text_content() or ""
    assert PAYLOAD in text
    assert await page.locator("#attempts img").count() == 0 and await page.locator("img").count() == 0
    await page.get_by_label("Outcome").select_option("failed")
    assert await page.locator("#attempts li").count() == 1
    assert "msg_console_bad" in (await page.locator("#attempts li").text_content() or "")

    await page.get_by_role("button", name="Sign out").click()
    await page.locator("#sign-in-section").wait_for(state="visible")
    assert await page.locator("#console").is_hidden()
    # The session is over on the server too: the endpoints are refused to the same browser.
    status = await page.evaluate(
        "fetch('/api/v1/developer/webhooks/endpoints', {headers: {'X-CSRF-Token': 'x'}}).then(r => r.status)"
    )
    assert status == 401


async def test_another_workspaces_session_sees_none_of_it(served, browser):
    _, seeded, _ = served
    await browser.sign_in(seeded.key_b)
    assert await browser.endpoint_ids() == [ENDPOINT_B]
    body = await browser.page.locator("body").text_content() or ""
    assert not any(e in body for e in ENDPOINTS_A) and "ws_console_a" not in body
    status = await browser.page.evaluate(
        f"""fetch('/api/v1/developer/webhooks/endpoints/{ENDPOINTS_A[0]}/attempts',
                  {{headers: {{'X-CSRF-Token': sessionStorage.getItem('tw_console_csrf')}}}}).then(r => r.status)"""
    )
    assert status == 404


async def test_a_wrong_key_is_refused_with_the_servers_message_as_text(served, browser):
    page = browser.page
    await page.goto(browser.url + "/console")
    await page.get_by_label("API key").fill("tw_live_" + "x" * 30)
    await page.get_by_role("button", name="Sign in").click()
    await page.locator("#status").get_by_text("Missing or invalid API key").wait_for()
    assert await page.locator("#console").is_hidden()


async def test_the_live_view_connects_to_the_stream_with_a_ticket(served, pg_dsn, kafka_bootstrap):
    """The page asks the API for a ticket and opens the stream (another origin, admitted by the
    policy's connect-src) with it and the chosen filters: the stream's ``ready`` is shown."""
    _, seeded, chromium = served
    prefix = f"consolebrowser{os.getpid()}"
    async with stream_served(seeded.model.dsn, kafka_bootstrap, prefix) as stream:
        stream_url = stream.url.replace("http://", "ws://") + BASE + "/stream"
        async with api_served(seeded.model.dsn, console_stream_url=stream_url) as api:
            async for browser in _browser(chromium, api.url, stream.url):
                page = browser.page
                await browser.sign_in(seeded.key_a)
                await page.locator("#live-locales").fill("en-US")
                await page.get_by_role("button", name="Watch").click()
                await page.locator("#live-state").get_by_text("Watching.").wait_for()
                await page.locator("#live-messages li", has_text="ready").wait_for()
                await page.get_by_role("button", name="Stop").click()
                await page.locator("#live-state").get_by_text("Stopped.").wait_for()
                # The key never reached the page's URLs: only the ticket did.
                assert seeded.key_a not in page.url


class Receiver:
    """A partner's receiver on loopback: records every request and answers 200 with markup of
    its own (which the attempt log must show as text)."""

    ANSWER = f"ok <script>alert(2)</script>{PAYLOAD}"

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.app = web.Application()
        self.app.router.add_post("/console-walk", self._hook)

    async def _hook(self, request: web.Request) -> web.Response:
        self.requests.append((dict(request.headers), await request.read()))
        return web.Response(text=self.ANSWER, content_type="text/html")

    async def next_request(self, seen: int) -> tuple[dict[str, str], bytes]:
        """The request after the first ``seen``."""
        deadline = time.monotonic() + TIMEOUT_MS / 1000
        while len(self.requests) <= seen:
            assert time.monotonic() < deadline, f"no request after {seen} within {TIMEOUT_MS} ms"
            await asyncio.sleep(0.05)
        return self.requests[seen]


@dataclass
class Writable:
    seeded: Any
    browser: Browser
    chromium: Any
    receiver: Receiver
    receiver_url: str


@pytest.fixture
async def writable(pg_dsn, kafka_bootstrap, topic_prefix) -> AsyncIterator[Writable]:
    """The console against an API that changes endpoints for real (a broker, a projector applying
    the access topic, a signing key) and a dispatcher delivering to a receiver on loopback."""
    from playwright.async_api import async_playwright

    receiver = Receiver()
    async with scratch_database(pg_dsn) as dsn:
        seeded = await seed(dsn)
        async with (
            writable_stack(dsn, kafka_bootstrap, topic_prefix, webhooks_retry_scale=0.01) as (config, api),
            dispatcher_served(
                dsn,
                kafka_bootstrap_servers=kafka_bootstrap,
                topic_prefix=topic_prefix,
                webhooks_open_targets="loopback",
                webhooks_signing_key=config.webhooks_signing_key,
                webhooks_retry_scale=0.01,
            ),
            served_on_loopback(receiver.app) as receiver_origin,
            async_playwright() as pw,
        ):
            chromium = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], timeout=30_000)
            try:
                async for page in _browser(chromium, api.url):
                    yield Writable(seeded, page, chromium, receiver, receiver_origin + "/console-walk")
            finally:
                await chromium.close()


@contextlib.asynccontextmanager
async def served_on_loopback(app: web.Application) -> AsyncIterator[str]:
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


async def _attempt_shown(page: Any, webhook_id: str) -> str:
    """The attempt log's entry for ``webhook_id``, reloading the log until it is there."""
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    entry = page.locator("#attempts li", has_text=webhook_id)
    while not await entry.count():
        assert time.monotonic() < deadline, f"{webhook_id} not in the attempt log within {TIMEOUT_MS} ms"
        await page.get_by_role("button", name="Reload attempts").click()
        await asyncio.sleep(0.2)
    return await entry.first.text_content() or ""


async def _queued_id(page: Any) -> str:
    status = page.locator("#status", has_text="test event queued")
    await status.wait_for()
    return re.search(r"\((msg_[^)]+)\)", await status.text_content() or "")[1]  # type: ignore[index]


async def test_create_test_pause_replay_rotate_delete(writable):
    """The walk a partner takes, against a dispatcher and a receiver: every step in the page."""
    w = writable
    page = w.browser.page
    await w.browser.sign_in(w.seeded.key_a)
    await page.get_by_label("URL", exact=True).first.fill(w.receiver_url)
    await page.locator("#create-description").fill(PAYLOAD)
    await page.locator("#create-tickers").fill("BTC, ETH")
    await page.get_by_role("button", name="Add endpoint").click()
    secret = page.locator("#secret")
    await secret.get_by_text("whsec_").wait_for()
    first_secret = await secret.text_content() or ""
    new = page.locator("#endpoints li", has_text="console-walk")
    assert PAYLOAD in (await new.text_content() or "") and await page.locator("img").count() == 0
    endpoint_id = await new.get_attribute("data-id") or ""
    await new.get_by_role("button", name="Details and attempts").click()

    # A test event: delivered, signed, and in the attempt log with status 200 and the receiver's
    # answer shown as text.
    await page.get_by_role("button", name="Send a test event").click()
    test_id = await _queued_id(page)
    headers, body = await w.receiver.next_request(0)
    assert headers["webhook-id"] == test_id
    assert standardwebhooks.Webhook(first_secret).verify(body, headers)["type"] == "webhook.test"
    entry = await _attempt_shown(page, test_id)
    assert entry.startswith("delivered 200") and Receiver.ANSWER in entry, entry
    assert await page.locator("img").count() == 0 and await page.locator("#attempts script").count() == 0

    # Another workspace's session, at the same time, sees none of it.
    async for other in _browser(w.chromium, w.browser.url):
        await other.sign_in(w.seeded.key_b)
        assert await other.endpoint_ids() == [ENDPOINT_B]
        text = await other.page.locator("body").text_content() or ""
        assert endpoint_id not in text and "console-walk" not in text and test_id not in text
        status = await other.page.evaluate(
            f"""fetch('/api/v1/developer/webhooks/endpoints/{endpoint_id}/attempts',
                      {{headers: {{'X-CSRF-Token': sessionStorage.getItem('tw_console_csrf')}}}}).then(r => r.status)"""
        )
        assert status == 404

    await page.get_by_role("button", name="Pause").click()
    await page.locator("#status").get_by_text("paused").wait_for()
    assert "paused" in (await new.text_content() or "")
    await page.get_by_label("Replay since (UTC)").fill("2026-01-01T00:00:00")
    await page.get_by_role("button", name="Replay").click()
    await page.locator("#status").get_by_text("replaying since 2026-01-01T00:00:00.000Z").wait_for()
    await page.get_by_role("button", name="Rotate secret").click()
    await page.locator("#status").get_by_text("secret rotated").wait_for()
    second_secret = await secret.text_content() or ""
    assert second_secret.startswith("whsec_") and second_secret != first_secret

    # Resumed, the next delivery verifies with the new secret (the reference implementation).
    await page.get_by_role("button", name="Resume").click()
    await page.locator("#status").get_by_text("resumed").wait_for()
    seen = len(w.receiver.requests)
    await page.get_by_role("button", name="Send a test event").click()
    after_rotation = await _queued_id(page)
    headers, body = await w.receiver.next_request(seen)
    assert headers["webhook-id"] == after_rotation
    assert standardwebhooks.Webhook(second_secret).verify(body, headers)["data"]["endpoint_id"] == endpoint_id

    await page.get_by_role("button", name="Delete").click()
    await page.locator("#status").get_by_text("deleted").wait_for()
    assert await page.locator("#endpoints li", has_text="console-walk").count() == 0


def test_the_page_is_in_the_package():
    assert (Path(__file__).parents[2] / "services" / "api" / "console" / "index.html").is_file()
