"""The partner console under test: two workspaces with webhook endpoints and attempts (seeded as
tests/app/test_api_webhooks.py does: projected endpoint events, attempt rows written as the
dispatcher would), and a client that signs in and calls as a console session."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import aiohttp
import orjson

from tests.support.apps import ReadModel
from tests.support.events import webhook_endpoint_ev
from tests.support.stack import BASE
from tickerwire.devstack.demo import dataset

NOW = datetime.now(timezone.utc).replace(microsecond=0)
#: What a hostile receiver (or description) could hold: shown as text, never run.
PAYLOAD = "<img src=x onerror=alert(1)>"
ENDPOINTS_A = ["whe_consolea1", "whe_consolea2"]
ENDPOINT_B = "whe_consoleb1"
ATTEMPT = """
INSERT INTO webhook_attempts (endpoint_id, webhook_id, attempt, attempted_at, outcome, status, latency_ms, error,
                              next_attempt_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
"""


@dataclass
class Seeded:
    model: ReadModel
    key_a: str
    key_b: str
    #: a workspace of its own, for a test to suspend or revoke
    key_c: str


def _endpoint(endpoint_id: str, workspace: str, version: int, **data: Any):
    # Loopback URLs only: nothing here is ever delivered, and nothing may leave the machine.
    url = f"http://127.0.0.1:9/{endpoint_id}"
    return webhook_endpoint_ev(endpoint_id, workspace, version, now=NOW, url=url, **data)


async def seed(dsn: str) -> Seeded:
    """Workspace A with two endpoints (one paused) and attempts (one failure carrying
    :data:`PAYLOAD`); workspace B with one endpoint and an attempt of its own; workspace C with
    nothing (all three provisioned before the API starts, so its first answer knows them)."""
    model = ReadModel(dsn)
    await model.project([*dataset.catalog_events(3, now=NOW, tokens=5)])
    key_a = await model.provision("ws_console_a", rate_limit_per_minute=100_000, daily_quota=1_000_000)
    key_b = await model.provision("ws_console_b", rate_limit_per_minute=100_000, daily_quota=1_000_000)
    key_c = await model.provision("ws_console_c", rate_limit_per_minute=1000, daily_quota=1000)
    await model.project(
        [
            _endpoint(ENDPOINTS_A[0], "ws_console_a", 2, locales=["en-US"], tickers=["BTC"]),
            _endpoint(ENDPOINTS_A[1], "ws_console_a", 1, status="paused"),
            _endpoint(ENDPOINT_B, "ws_console_b", 3),
        ]
    )
    conn = await model.conn()
    try:
        at = NOW - timedelta(minutes=5)
        await conn.executemany(
            ATTEMPT,
            [
                (ENDPOINTS_A[0], "msg_console_ok", 1, at, "delivered", 200, 12.5, None, None),
                (ENDPOINTS_A[0], "msg_console_bad", 1, at, "failed", 500, 8.0, f"HTTP 500: {PAYLOAD}", at),
                (ENDPOINT_B, "msg_console_b", 1, at, "delivered", 204, 3.0, None, None),
            ],
        )
    finally:
        await conn.close()
    return Seeded(model, key_a, key_b, key_c)


@dataclass
class Signed:
    """A console session as the browser holds it: the cookie's value and the CSRF token."""

    token: str
    csrf: str
    workspace_id: str
    expires_at: str


class ConsoleClient:
    def __init__(self, url: str, http: aiohttp.ClientSession) -> None:
        self.url, self.http = url, http

    async def sign_in(self, key: str) -> Signed:
        async with self.http.post(f"{self.url}/console/sessions", headers={"Authorization": f"Bearer {key}"}) as resp:
            body = orjson.loads(await resp.read())
            assert resp.status == 201, body
            token = resp.cookies["tw_console"].value
        return Signed(token, body["csrf_token"], body["workspace_id"], body["expires_at"])

    async def call(
        self, method: str, path: str, session: Signed | None, *, csrf: str | None = "same", **headers: str
    ) -> tuple[aiohttp.ClientResponse, Any]:
        """``path`` (under the API's base path unless it starts with /console) as ``session``;
        ``csrf``: "same" (the session's), None (no header) or another value."""
        if session is not None:
            headers.setdefault("Cookie", f"tw_console={session.token}")
            if csrf is not None:
                headers["X-CSRF-Token"] = session.csrf if csrf == "same" else csrf
        url = self.url + (path if path.startswith("/console") else BASE + path)
        async with self.http.request(method, url, headers=headers) as resp:
            raw = await resp.read()
            return resp, (orjson.loads(raw) if raw else None)
