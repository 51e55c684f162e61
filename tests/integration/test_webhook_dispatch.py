"""The dispatcher's rules, in process, on a real PostgreSQL with real HTTP receivers
(docs/webhooks.md): 410 disables and an operator's resume goes on from the cursor, a rotation
signs with both secrets for its window, ``Retry-After`` is honoured, an endpoint failing past
the bound is disabled, a replay re-sends with the same ids, redirects are not followed, a name
that resolves to a loopback address is refused at connect time, two dispatchers never hold
one endpoint at once, and the database failing under a worker's walk is a retry, not a crash."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import asyncpg
import pytest
from aiohttp import web

from tests.support.dispatching import (
    Log,
    acked,
    config,
    delivery,
    dispatcher,
    frontier,
    secret,
    started_log,
    until,
)
from tests.support.receivers import Receiver, expected_signature


@pytest.fixture
async def log(conn: asyncpg.Connection) -> Log:
    return await started_log(conn)


def ids(rx: Receiver) -> list[int]:
    return [r.key[0] for r in rx.acked()]


async def test_a_410_disables_the_endpoint_and_a_resume_goes_on_from_its_cursor(conn, fresh_db, log):
    answers = iter(["ok", "ok", "410"])
    rx = await Receiver(secret("whe_gone1"), lambda: None if next(answers, "ok") == "ok" else "410").start()
    try:
        await log.endpoint("whe_gone1", rx.url)
        async with dispatcher(config(fresh_db)):
            await log.posts(1, 5)
            await until(lambda: _disabled(conn, "whe_gone1"), "disabled after the 410")
            row = await delivery(conn, "whe_gone1")
            assert row["disabled_reason"] == "the endpoint answered 410 Gone"
            assert ids(rx) == [1, 2]
            await log.posts(6, 2)  # published while disabled: kept for the resume
            await asyncio.sleep(1.0)
            assert ids(rx) == [1, 2]
            await log.endpoint("whe_gone1", rx.url, version=2, start_cursor=row["cursor"])  # an operator's resume
            await until(lambda: acked(rx, 7), "every post after the resume")
        assert ids(rx) == [1, 2, 3, 4, 5, 6, 7]  # post 3 (answered 410) again first: nothing lost
        assert (await delivery(conn, "whe_gone1"))["state"] == "active"
    finally:
        await rx.stop()


async def _disabled(conn: asyncpg.Connection, endpoint_id: str) -> bool:
    row = await delivery(conn, endpoint_id)
    return row is not None and row["state"] == "disabled"


async def test_a_rotation_signs_with_both_secrets_for_its_window_then_with_the_new_one(conn, fresh_db, log):
    old = await Receiver(secret("whe_rot01", 1)).start()
    new = Receiver(secret("whe_rot01", 2), port=old.port)
    try:
        await log.endpoint("whe_rot01", old.url)
        async with dispatcher(config(fresh_db, TICKERWIRE_WEBHOOKS_ROTATION_WINDOW_S="3")):
            await log.posts(1, 1)
            await until(lambda: acked(old, 1), "the first post")
            await log.endpoint(
                "whe_rot01", old.url, version=2, secret_generation=2, rotated_at=datetime.now(timezone.utc)
            )
            await asyncio.sleep(1.2)  # the next round reads the rotation
            await log.posts(2, 1)
            await until(lambda: acked(old, 2), "a post signed with the old secret too")
            await old.stop()
            await new.start()
            await asyncio.sleep(3.0)  # the window passes
            await log.posts(3, 1)
            await until(lambda: acked(new, 1), "a post signed with the new secret")
        both, only_new = old.requests[1], new.requests[-1]
        assert len(both.signatures) == 2 and len(only_new.signatures) == 1
        assert only_new.signatures[0] == expected_signature(
            secret("whe_rot01", 2), only_new.webhook_id, str(only_new.timestamp), only_new.body
        )
        assert old.bad_signatures == 0 and new.bad_signatures == 0
    finally:
        await old.stop()
        await new.stop()


async def test_retry_after_is_honoured_and_the_retries_are_stored(conn, fresh_db, log):
    answers = iter(["429"])
    rx = await Receiver(secret("whe_ra001"), lambda: next(answers, None), retry_after="2").start()
    try:
        await log.endpoint("whe_ra001", rx.url)
        async with dispatcher(config(fresh_db)):
            await log.posts(1, 1)
            await until(lambda: acked(rx, 1), "the post after its 429")
            # The receiver has answered; the dispatcher stores the attempt just after.
            await until(lambda: _attempts(conn, "whe_ra001", 1, "delivered"), "the delivery stored")
        first, second = rx.requests
        assert first.answer == "429" and second.answer == "ok"
        assert second.received_at - first.received_at >= 1.9  # the compressed schedule alone says 0.01 s
        assert first.webhook_id == second.webhook_id
        attempts = await conn.fetch("SELECT * FROM webhook_attempts WHERE endpoint_id = 'whe_ra001' ORDER BY id")
        assert [(a["attempt"], a["outcome"], a["status"]) for a in attempts] == [
            (1, "failed", 429),
            (2, "delivered", 200),
        ]
        assert attempts[0]["next_attempt_at"] - attempts[0]["attempted_at"] >= timedelta(seconds=2)
    finally:
        await rx.stop()


async def test_an_endpoint_failing_past_the_bound_is_disabled_with_the_reason(conn, fresh_db, log):
    rx = await Receiver(secret("whe_fail1"), lambda: "500").start()
    try:
        await log.endpoint("whe_fail1", rx.url)
        # 5 days times the scale: 0.864 s of failing
        async with dispatcher(config(fresh_db, TICKERWIRE_WEBHOOKS_RETRY_SCALE="0.000002")):
            await log.posts(1, 1)
            await until(lambda: _disabled(conn, "whe_fail1"), "disabled after failing for the bound")
        row = await delivery(conn, "whe_fail1")
        assert row["disabled_reason"].startswith("failing for ") and "HTTP 500" in row["disabled_reason"]
        assert len(rx.requests) >= 3 and not rx.acked()
    finally:
        await rx.stop()


async def test_a_replay_sends_again_from_its_cursor_with_the_same_ids(conn, fresh_db, log):
    rx = await Receiver(secret("whe_rep01")).start()
    try:
        start = await frontier(conn)
        await log.endpoint("whe_rep01", rx.url, start_cursor=start)
        async with dispatcher(config(fresh_db)):
            await log.posts(1, 3)
            await until(lambda: acked(rx, 3), "three posts")
            first = [r.webhook_id for r in rx.acked()]
            await log.endpoint("whe_rep01", rx.url, version=2, start_cursor=start, replay_from=start, replay_seq=1)
            await until(lambda: _count(rx, 6), "the replay")
        assert [r.webhook_id for r in rx.acked()] == first + first
        assert (await delivery(conn, "whe_rep01"))["replay_seq"] == 1
    finally:
        await rx.stop()


async def _count(rx: Receiver, n: int) -> bool:
    return len(rx.acked()) >= n


async def test_a_redirect_is_not_followed_and_a_loopback_name_is_refused_at_connect_time(conn, fresh_db, log):
    hit: list[str] = []

    async def redirect(request: web.Request) -> web.Response:
        hit.append(request.path)
        if request.path == "/moved":
            raise web.HTTPFound("/target")
        return web.Response(text="reached")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", redirect)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        await log.endpoint("whe_redir", f"http://127.0.0.1:{port}/moved")
        async with dispatcher(config(fresh_db), "test:1"):
            await log.posts(1, 1)
            await until(lambda: _attempts(conn, "whe_redir", 2), "two attempts at the redirecting endpoint")
        # Registered behind the operator's back (the command refuses them): the dispatcher refuses them too.
        await log.endpoint("whe_local", f"http://localhost:{port}/local")
        await log.endpoint("whe_metad", "http://169.254.169.254/latest/meta-data")
        await log.posts(2, 1)
        async with dispatcher(config(fresh_db, TICKERWIRE_WEBHOOKS_OPEN_TARGETS=""), "test:2"):
            await until(lambda: _attempts(conn, "whe_local", 2, outcome="refused"), "refused at connect time")
            await until(lambda: _attempts(conn, "whe_metad", 1, outcome="refused"), "the metadata address refused")
        assert "/target" not in hit and hit.count("/moved") >= 2
        assert "/local" not in hit
        errors = await conn.fetch(
            "SELECT endpoint_id, error FROM webhook_attempts WHERE outcome = 'refused' ORDER BY id"
        )
        assert any("localhost now resolves to 127.0.0.1, a loopback address" in e["error"] for e in errors), errors
        assert any("169.254.169.254 is a link-local address" in e["error"] for e in errors), errors
    finally:
        await runner.cleanup()


async def _attempts(conn: asyncpg.Connection, endpoint_id: str, n: int, outcome: str = "failed") -> bool:
    found = await conn.fetchval(
        "SELECT count(*) FROM webhook_attempts WHERE endpoint_id = $1 AND outcome = $2", endpoint_id, outcome
    )
    return found >= n


async def test_two_dispatchers_never_hold_one_endpoint_and_share_several(conn, fresh_db, log):
    receivers = [await Receiver(secret(f"whe_shr{i:02d}")).start() for i in range(6)]
    try:
        for i, rx in enumerate(receivers):
            await log.endpoint(f"whe_shr{i:02d}", rx.url)
        async with dispatcher(config(fresh_db), "test:a") as a, dispatcher(config(fresh_db), "test:b") as b:
            await log.posts(1, 3)
            for rx in receivers:
                await until(lambda rx=rx: acked(rx, 3), "every endpoint's posts")
            held_a, held_b = set(a.workers), set(b.workers)
        assert not held_a & held_b
        assert len(held_a | held_b) == 6
        for rx in receivers:
            assert [r.key[0] for r in rx.requests] == [1, 2, 3]  # each sent once: one holder at a time
    finally:
        for rx in receivers:
            await rx.stop()


async def test_a_crashed_worker_is_logged_counted_and_started_again(conn, fresh_db, log, caplog):
    rx = await Receiver(secret("whe_crash")).start()
    try:
        await log.endpoint("whe_crash", rx.url)
        async with dispatcher(config(fresh_db)) as d:
            real, calls = d.context.sender.attempt, []

            async def broken_once(*args):
                calls.append(args)
                if len(calls) == 1:
                    raise RuntimeError("a defect in an attempt")
                return await real(*args)

            d.context.sender.attempt = broken_once  # type: ignore[method-assign]
            await log.posts(1, 2)
            await until(lambda: acked(rx, 2), "both posts, after the worker started again")
            assert d.context.metrics.worker_crashes._value.get() == 1
        crashed = [r for r in caplog.records if "its worker crashed" in r.getMessage()]
        assert crashed and crashed[0].levelname == "ERROR" and "a defect in an attempt" in str(crashed[0].exc_info)
        assert [r.key[0] for r in rx.acked()] == [1, 2]
    finally:
        await rx.stop()


class Unreachable:
    """The store's pool, whose first read of the locales times out as a connect to an unreachable
    PostgreSQL does (asyncpg raises TimeoutError when its bound runs out)."""

    def __init__(self, pool) -> None:
        self.pool, self.failed = pool, False

    def __getattr__(self, name: str):
        return getattr(self.pool, name)

    async def fetch(self, statement: str, *args):
        if "FROM locales" in statement and not self.failed:
            self.failed = True
            raise TimeoutError
        return await self.pool.fetch(statement, *args)


async def test_the_database_failing_under_a_walk_is_a_warning_and_a_retry_not_a_crash(conn, fresh_db, log, caplog):
    # The dispatcher's connect to PostgreSQL timing out while its worker reads the locales (a
    # link cut under the walk) is a storage outage: warned about and retried by the worker, which
    # is not restarted as crashed.
    rx = await Receiver(secret("whe_outage")).start()
    try:
        await log.endpoint("whe_outage", rx.url)
        async with dispatcher(config(fresh_db)) as d:
            d.context.store.pool = Unreachable(d.context.store.pool)  # type: ignore[assignment]
            await log.posts(1, 2)
            await until(lambda: acked(rx, 2), "both posts, after the retry")
            assert d.context.store.pool.failed and d.context.metrics.worker_crashes._value.get() == 0
        warned = [r for r in caplog.records if "whe_outage" in r.getMessage() and "retrying" in r.getMessage()]
        assert warned and warned[0].levelname == "WARNING" and "gave up waiting" in warned[0].getMessage()
        assert not [r for r in caplog.records if "its worker crashed" in r.getMessage()]
    finally:
        await rx.stop()
