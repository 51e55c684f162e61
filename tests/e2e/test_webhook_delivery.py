"""Webhook deliveries over real processes (docs/webhooks.md): a projector and two dispatchers on
PostgreSQL and the broker, two real HTTP receivers.

One receiver fails at random (500s, resets, 429 with ``Retry-After``, answers slower than the
attempt timeout); the other is down for longer than several retry intervals (the schedule is
compressed by ``TICKERWIRE_WEBHOOKS_RETRY_SCALE``). While 2,000 posts in three locales are
published (late translations included) and a dispatcher is SIGKILLed every few seconds, each
receiver gets every announcement its filter admits, in cursor order, every request signed, and
a message twice only as a redelivery of the same ``webhook-id``.

The order check is what a dispatcher that does not store the acknowledged cursor with its
attempt fails: its successor starts from an older cursor, and a partition's positions go back.
"""

from __future__ import annotations

import asyncio
import base64
import os
import random
import signal
import time
from datetime import datetime, timezone

import pytest

from tests.support import events
from tests.support.receivers import Receiver, check_order, check_redeliveries, flaky, start_cursor
from tests.support.stack import ServiceStack, started_stack
from tickerwire.schemas.models import WebhookEndpoint, WebhookEndpointEvent
from tickerwire.services.common.db import connect
from tickerwire.services.common.http.signing import derive_secret

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NOW = datetime.now(timezone.utc)
LOCALES = ("en-US", "de-DE", "es-ES")
SIGNING_KEY = base64.b64encode(bytes(range(32))).decode()
POSTS = int(os.environ.get("TICKERWIRE_TEST_WEBHOOK_POSTS", "2000"))
FIRST_ID = 700_000
ENV = {
    "TICKERWIRE_WEBHOOKS_SIGNING_KEY": SIGNING_KEY,
    "TICKERWIRE_WEBHOOKS_OPEN_TARGETS": "loopback",
    # 5 s, 5 min, 30 min, ... become 10 ms, 0.6 s, 3.6 s, 14.4 s, ...
    "TICKERWIRE_WEBHOOKS_RETRY_SCALE": "0.002",
    "TICKERWIRE_WEBHOOKS_ATTEMPT_TIMEOUT_S": "1",
    "TICKERWIRE_WEBHOOKS_LEASE_TTL_S": "3",
}
#: The down receiver's outage: longer than its first three retry intervals (10 ms, 0.6 s, 3.6 s).
OUTAGE_S = 6.0
WAIT_S = 240.0


def endpoint_event(endpoint_id: str, url: str, start: str, langs: list[str] | None) -> WebhookEndpointEvent:
    data = WebhookEndpoint(
        id=endpoint_id,
        workspace_id="ws_hooks",
        url=url,
        locales=langs,
        status="active",
        start_cursor=start,
        created_at=NOW,
    )
    return WebhookEndpointEvent(version=1, emitted_at=NOW, data=data)


def secret(endpoint_id: str) -> bytes:
    return derive_secret(base64.b64decode(SIGNING_KEY), endpoint_id, 1)


def posts_plan(n: int) -> list[list]:
    """Batches of post events: every post in en-US, every other one in de-DE too, and every fifth
    one gets an es-ES translation in a later version, published a few batches after it."""
    batches: list[list] = []
    late: list = []
    for start in range(0, n, 100):
        batch = []
        for post_id in range(FIRST_ID + start, FIRST_ID + min(start + 100, n)):
            langs = ["en-US", "de-DE"] if post_id % 2 == 0 else ["en-US"]
            batch.append(events.post_event(post_id, 1, langs, now=NOW))
            if post_id % 5 == 0:
                late.append(events.post_event(post_id, 2, [*langs, "es-ES"], now=NOW))
        batch.extend(late[:-60] if len(late) > 60 else [])
        late = late[-60:] if len(late) > 60 else late
        batches.append(batch)
    batches.append(late)
    return batches


def expected(langs: set[str]) -> set[tuple[int, str]]:
    keys = set()
    for i in range(POSTS):
        post_id = FIRST_ID + i
        for lang in ["en-US", *(["de-DE"] if post_id % 2 == 0 else []), *(["es-ES"] if post_id % 5 == 0 else [])]:
            if lang in langs:
                keys.add((post_id, lang))
    return keys


@pytest.fixture(scope="module")
async def stack(pg_dsn, kafka_bootstrap):
    async with started_stack(pg_dsn, kafka_bootstrap, f"hooks{os.getpid()}", services=("projector",), **ENV) as s:
        await s.publish([events.locale_ev(code, default=code == "en-US") for code in LOCALES])
        await s.wait_projected()
        yield s


async def failed_attempts(stack: ServiceStack, endpoint_id: str) -> int:
    """Failed attempts of the message at the endpoint's head, as the dispatchers stored them."""
    async with connect(stack.database_url, schema="rm") as conn:
        return await conn.fetchval("SELECT attempt FROM webhook_deliveries WHERE endpoint_id = $1", endpoint_id)


async def kill_dispatchers(stack: ServiceStack, stop: asyncio.Event, rng: random.Random) -> int:
    """SIGKILL a running dispatcher every 3 to 5 s and start another; how many were killed."""
    kills = 0
    while not stop.is_set():
        try:
            async with asyncio.timeout(rng.uniform(3.0, 5.0)):
                await stop.wait()
        except TimeoutError:
            pass
        if stop.is_set():
            break
        victim = rng.choice(stack.of("dispatcher"))
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        kills += 1
        stack.spawn("dispatcher")
    return kills


async def test_two_receivers_get_every_post_in_order_through_faults_and_dispatcher_kills(stack: ServiceStack):
    flaky_rx = await Receiver(secret("whe_flaky1"), flaky(seed=45)).start()
    down_rx = await Receiver(secret("whe_down01")).start()
    try:
        await stack.provision("ws_hooks")
        start = await start_cursor(stack)
        await stack.publish(
            [
                endpoint_event("whe_flaky1", flaky_rx.url, start, None),
                endpoint_event("whe_down01", down_rx.url, start, ["en-US", "de-DE"]),
            ]
        )
        await stack.wait_projected()
        for _ in range(2):
            await stack.start("dispatcher")

        stop = asyncio.Event()
        killer = asyncio.create_task(kill_dispatchers(stack, stop, random.Random(45)))
        batches = posts_plan(POSTS)
        outage_at = len(batches) // 3
        outage_ended, retried_in_outage = 0.0, 0
        async with stack.publisher() as send:
            for i, batch in enumerate(batches):
                if i == outage_at:
                    await down_rx.stop()
                    outage_started = time.monotonic()
                if i > outage_at and not outage_ended and time.monotonic() - outage_started >= OUTAGE_S:
                    retried_in_outage = await failed_attempts(stack, "whe_down01")
                    await down_rx.start()
                    outage_ended = time.monotonic()
                await send(batch)
                await asyncio.sleep(0.25)
        if not outage_ended:
            await asyncio.sleep(max(0.0, OUTAGE_S - (time.monotonic() - outage_started)))
            retried_in_outage = await failed_attempts(stack, "whe_down01")
            await down_rx.start()
        await stack.wait_projected(timeout=120)

        want = {flaky_rx: expected(set(LOCALES)), down_rx: expected({"en-US", "de-DE"})}
        deadline = time.monotonic() + WAIT_S
        while any({r.key for r in rx.acked()} != keys for rx, keys in want.items()):
            assert time.monotonic() < deadline, (
                f"flaky got {len({r.key for r in flaky_rx.acked()})} of {len(want[flaky_rx])}, "
                f"down got {len({r.key for r in down_rx.acked()})} of {len(want[down_rx])}\n{stack.logs()[-6000:]}"
            )
            await asyncio.sleep(0.5)
        stop.set()
        kills = await killer

        for rx, keys in want.items():
            assert rx.bad_signatures == 0
            assert {r.key for r in rx.acked()} == keys
            assert {r.key for r in rx.requests} == keys  # nothing outside the filter, nothing unknown
            check_order(rx.requests)
            check_redeliveries(rx.requests)
        answers = {r.answer for r in flaky_rx.requests}
        assert {"500", "reset", "429", "slow"} <= answers, answers
        assert kills >= 5, kills
        assert retried_in_outage >= 3, "the outage spanned several retries of one message"
        print(
            f"\nwebhooks: {len(flaky_rx.requests)} requests to the flaky receiver for {len(want[flaky_rx])} messages,"
            f" {len(down_rx.requests)} to the down one for {len(want[down_rx])}; {kills} dispatcher kills"
        )
    finally:
        await flaky_rx.stop()
        await down_rx.stop()
