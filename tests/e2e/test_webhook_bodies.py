"""One webhook-id, one body (docs/webhooks.md#one-id-one-body), and test events
(docs/webhooks.md#test-events), over real processes: a projector and dispatchers on PostgreSQL
and the broker, a real HTTP receiver on 127.0.0.1, and the operator's commands.

A receiver fails the first attempts of a post's message; meanwhile the post is edited (a new
version of it through the broker, projected) and the dispatcher that made the first attempt is
SIGKILLed, so another takes the endpoint's lease. The redelivery carries the first attempt's
bytes under the same id (the post as it was then, the first attempt's ``ts``), no second
message is made for the edit, and a replay since a time carries the same bytes again.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import orjson
import pytest

from tests.support import events
from tests.support.receivers import Receiver, start_cursor
from tests.support.stack import ServiceStack, started_stack
from tickerwire.schemas.models import WebhookEndpoint, WebhookEndpointEvent
from tickerwire.services.common.db import connect
from tickerwire.services.common.http.signing import derive_secret

pytestmark = [pytest.mark.e2e]

SIGNING_KEY = base64.b64encode(bytes(range(32))).decode()
ENV = {
    "TICKERWIRE_WEBHOOKS_SIGNING_KEY": SIGNING_KEY,
    "TICKERWIRE_WEBHOOKS_OPEN_TARGETS": "loopback",
    # 5 s, 5 min, 30 min, ... become 10 ms, 0.6 s, 3.6 s, ...
    "TICKERWIRE_WEBHOOKS_RETRY_SCALE": "0.002",
    "TICKERWIRE_WEBHOOKS_ATTEMPT_TIMEOUT_S": "1",
    "TICKERWIRE_WEBHOOKS_LEASE_TTL_S": "3",
}
WAIT_S = 60.0
POST_ID = 880_001


def secret(endpoint_id: str) -> bytes:
    return derive_secret(base64.b64decode(SIGNING_KEY), endpoint_id, 1)


def endpoint_event(endpoint_id: str, url: str, start: str) -> WebhookEndpointEvent:
    data = WebhookEndpoint(
        id=endpoint_id,
        workspace_id="ws_bodies",
        url=url,
        status="active",
        start_cursor=start,
        created_at=datetime.now(timezone.utc),
    )
    return WebhookEndpointEvent(version=1, emitted_at=datetime.now(timezone.utc), data=data)


def webhooks(stack: ServiceStack, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tickerwire.services.cli.main", "webhooks", *args],
        env={**stack.env(), "TICKERWIRE_STATE_DIR": "/nonexistent"},
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )


async def until(predicate, what: str, stack: ServiceStack, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}\n{stack.logs()[-4000:]}"
        await asyncio.sleep(0.05)


@pytest.fixture(scope="module")
async def stack(pg_dsn, kafka_bootstrap):
    async with started_stack(pg_dsn, kafka_bootstrap, f"bodies{os.getpid()}", services=("projector",), **ENV) as s:
        await s.publish([events.locale_ev("en-US", default=True)])
        await s.wait_projected()
        await s.provision("ws_bodies")
        yield s


async def test_a_redelivery_and_a_replay_carry_the_first_attempts_bytes_though_the_post_was_edited(stack):
    edited = asyncio.Event()
    rx = await Receiver(secret("whe_bodies01"), lambda: None if edited.is_set() else "500").start()
    try:
        await stack.publish([endpoint_event("whe_bodies01", rx.url, await start_cursor(stack))])
        await stack.wait_projected()
        first_dispatcher = await stack.start("dispatcher")
        since = datetime.now(timezone.utc) - timedelta(seconds=1)
        await stack.publish([events.post_event(POST_ID, 1, ["en-US"], now=datetime.now(timezone.utc))])
        await until(lambda: len(rx.requests) >= 1, "the first attempt", stack)
        # The post is edited between the attempts; the dispatcher that made the first is killed.
        await stack.publish([events.post_event(POST_ID, 2, ["en-US"], now=datetime.now(timezone.utc))])
        await stack.wait_projected()
        async with connect(stack.database_url, schema="rm") as conn:
            lean = await conn.fetchval("SELECT lean::text FROM post_translations WHERE post_id = $1", POST_ID)
        assert f"Post {POST_ID} v2" in lean  # the read model serves the edit
        first_dispatcher.proc.send_signal(signal.SIGKILL)
        first_dispatcher.proc.wait()
        failed_before = len(rx.requests)
        await stack.start("dispatcher")
        edited.set()
        await until(lambda: rx.acked(), "the redelivery after the edit, from another dispatcher", stack)
        first, delivered = rx.requests[0], rx.acked()[0]
        assert first.answer == "500" and delivered.webhook_id == first.webhook_id
        assert delivered.body == first.body, (first.body, delivered.body)  # byte for byte
        assert delivered.message["data"]["title"] == f"Post {POST_ID} v1"  # the post as first sent
        assert all(r.body == first.body for r in rx.requests)
        assert failed_before >= 1 and len(rx.requests) > failed_before

        replayed = await asyncio.to_thread(webhooks, stack, "replay", "whe_bodies01", "--since", since.isoformat())
        assert replayed.returncode == 0, replayed.stderr
        await until(lambda: len(rx.acked()) >= 2, "the replay", stack)
        assert [r.webhook_id for r in rx.acked()] == [first.webhook_id] * 2  # the edit made no second message
        assert rx.acked()[1].body == first.body
        assert rx.bad_signatures == 0
    finally:
        await rx.stop()


async def test_a_test_event_goes_out_while_a_message_is_retried_once_and_leaves_the_cursor(stack):
    failing = {"on": True}
    rx = await Receiver(secret("whe_bodies02"), lambda: "500" if failing["on"] else None).start()
    try:
        await stack.publish([endpoint_event("whe_bodies02", rx.url, await start_cursor(stack))])
        await stack.wait_projected()
        if not stack.of("dispatcher"):
            await stack.start("dispatcher")
        await stack.publish([events.post_event(POST_ID + 1, 1, ["en-US"], now=datetime.now(timezone.utc))])
        await until(lambda: len(rx.requests) >= 3, "the post's message retried", stack)
        async with connect(stack.database_url, schema="rm") as conn:
            cursor_before = await conn.fetchval(
                "SELECT cursor FROM webhook_deliveries WHERE endpoint_id = 'whe_bodies02'"
            )
        asked = await asyncio.to_thread(webhooks, stack, "test", "whe_bodies02")
        assert asked.returncode == 0, asked.stderr
        test_id = asked.stdout.strip()
        assert test_id == "msg_test_whe_bodies02_1"
        await until(lambda: any(r.webhook_id == test_id for r in rx.requests), "the test event", stack)
        test = next(r for r in rx.requests if r.webhook_id == test_id)
        message = orjson.loads(test.body)
        assert list(message) == ["type", "ts", "data"]
        assert (message["type"], message["data"]) == ("webhook.test", {"endpoint_id": "whe_bodies02"})
        async with connect(stack.database_url, schema="rm") as conn:
            await asyncio.sleep(1.0)  # the attempt is stored just after the answer
            attempts = await conn.fetch(
                "SELECT webhook_id, type, attempt, outcome, status, response_excerpt FROM webhook_attempts"
                " WHERE endpoint_id = 'whe_bodies02' AND webhook_id = $1",
                test_id,
            )
            cursor_after = await conn.fetchval(
                "SELECT cursor FROM webhook_deliveries WHERE endpoint_id = 'whe_bodies02'"
            )
            sent = await conn.fetchval("SELECT sent_at FROM webhook_tests WHERE endpoint_id = 'whe_bodies02'")
        # Answered 500 like the post's attempts: recorded once, not retried, the cursor untouched.
        assert [tuple(a) for a in attempts] == [(test_id, "webhook.test", 1, "failed", 500, "flaky")]
        assert cursor_after == cursor_before and sent is not None
        assert [r.webhook_id for r in rx.requests].count(test_id) == 1
        failing["on"] = False
        await until(lambda: rx.acked(), "the post's message once the receiver answers", stack)
        assert rx.acked()[0].message["type"] == "post.created"
        paused = await asyncio.to_thread(webhooks, stack, "pause", "whe_bodies02")
        assert paused.returncode == 0, paused.stderr
        await stack.wait_projected()
        refused = await asyncio.to_thread(webhooks, stack, "test", "whe_bodies02")
        assert refused.returncode == 1 and "paused" in refused.stderr, refused.stderr
    finally:
        await rx.stop()
