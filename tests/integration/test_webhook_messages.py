"""What a webhook message is and what its attempt records, in process on a real PostgreSQL with
real HTTP receivers on 127.0.0.1 (docs/webhooks.md): the order across the partitions of the posts
topic (each partition's log order, the rest as the endpoint's walk from its cursor met it), the
stored bodies' retention (a replay past it sends a body made anew under the same id, stored in
turn), and the attempt log's ``response_excerpt``, read with its bound."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import orjson
import pytest
from aiohttp import web

from tests.support.dispatching import (
    POSTS_TOPIC,
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
from tests.support.events import post_ev, records
from tests.support.receivers import Receiver, check_order
from tickerwire.services.common.db import create_pool
from tickerwire.services.common.http.targets import OpenTargets
from tickerwire.services.projector.apply import apply_batch
from tickerwire.services.readmodel import cursors
from tickerwire.services.readmodel.taxonomy import served_locales
from tickerwire.services.readmodel.walk import Page, walk
from tickerwire.services.webhooks.sender import EXCERPT_BYTES, Sender
from tickerwire.services.webhooks.store import Store


@pytest.fixture
async def log(conn: asyncpg.Connection) -> Log:
    return await started_log(conn)


async def on_partitions(written: Log, batches: dict[int, list[int]]) -> None:
    """Posts applied to several partitions of the posts topic in one transaction (visible at once)."""
    async with written.conn.transaction():
        for partition, post_ids in batches.items():
            start = written.next.get(f"{POSTS_TOPIC}/{partition}", 0)
            await apply_batch(written.conn, POSTS_TOPIC, partition, records([post_ev(i) for i in post_ids], start))
            written.next[f"{POSTS_TOPIC}/{partition}"] = start + len(post_ids)


async def test_each_partition_arrives_in_log_order_and_the_partitions_as_the_endpoints_walk_met_them(
    conn, fresh_db, log
):
    rx = await Receiver(secret("whe_order1")).start()
    try:
        start = await frontier(conn)
        await log.endpoint("whe_order1", rx.url, start_cursor=start)
        async with dispatcher(config(fresh_db)):
            await on_partitions(log, {0: [1, 2, 3]})
            await until(lambda: acked(rx, 3), "partition 0's first posts")
            after_three = (await delivery(conn, "whe_order1"))["cursor"]
            # Then partition 1 gets six posts and partition 0 two more, committed together.
            await on_partitions(log, {1: [4, 5, 6, 7, 8, 9], 0: [10, 11]})
            await until(lambda: acked(rx, 11), "every post")
        got = [r.key[0] for r in rx.acked()]
        check_order(rx.requests)  # each partition in log order
        served = await served_locales(conn)
        # The rest: in the order the endpoint's walk from its cursor read them (offset, then partition).
        rest = await walk(conn, POSTS_TOPIC, cursors.decode(after_three), served, limit=100)
        assert isinstance(rest, Page)
        assert (
            got
            == [1, 2, 3] + [orjson.loads(item.lean)["id"] for item in rest.items]
            == [1, 2, 3, 4, 5, 6, 10, 7, 11, 8, 9]
        )
        # Not the order of one walk of everything (GET /changes from the start, now): across
        # partitions there is no order to promise.
        everything = await walk(conn, POSTS_TOPIC, cursors.decode(start), served, limit=100)
        assert isinstance(everything, Page)
        walked = [orjson.loads(item.lean)["id"] for item in everything.items]
        assert sorted(walked) == sorted(got) and walked != got
        # The last message's cursor resumes after everything delivered, on every partition.
        last_cursor = rx.acked()[-1].message["cursor"]
        after = await walk(conn, POSTS_TOPIC, cursors.decode(last_cursor), served, limit=100)
        assert isinstance(after, Page) and after.items == []
    finally:
        await rx.stop()


async def test_a_body_past_the_retention_is_made_anew_under_its_id_and_the_head_is_kept(conn, fresh_db, log):
    rx = await Receiver(secret("whe_keep01")).start()
    try:
        start = await frontier(conn)
        await log.endpoint("whe_keep01", rx.url, start_cursor=start)
        async with dispatcher(config(fresh_db)) as d:
            await log.posts(1, 2)
            await until(lambda: acked(rx, 2), "two posts")
            store: Store = d.context.store
            first, second = rx.acked()
            # The second is pretended to be the head being retried: its body is kept.
            await conn.execute(
                "UPDATE webhook_deliveries SET head_id = $2 WHERE endpoint_id = $1", "whe_keep01", second.webhook_id
            )
            await asyncio.sleep(0.01)
            assert await store.prune_messages(0.0) == 1
            kept = await conn.fetch("SELECT webhook_id, body FROM webhook_messages WHERE endpoint_id = 'whe_keep01'")
            assert [(k["webhook_id"], bytes(k["body"])) for k in kept] == [(second.webhook_id, second.body)]
            await conn.execute("UPDATE webhook_deliveries SET head_id = NULL WHERE endpoint_id = 'whe_keep01'")
            await asyncio.sleep(0.01)  # the next ts differs by a millisecond at least
            await log.endpoint("whe_keep01", rx.url, version=2, start_cursor=start, replay_from=start, replay_seq=1)
            await until(lambda: _countacked(rx, 4), "the replay")
        again_first, again_second = rx.acked()[2:4]
        assert again_second.body == second.body  # still stored: the same bytes
        assert again_first.webhook_id == first.webhook_id and again_first.body != first.body  # forgotten: made anew
        assert again_first.message["log_position"] == first.message["log_position"]
        assert again_first.message["data"] == first.message["data"]
        stored = await conn.fetchval(
            "SELECT body FROM webhook_messages WHERE endpoint_id = 'whe_keep01' AND webhook_id = $1", first.webhook_id
        )
        assert bytes(stored) == again_first.body  # the new body is the id's from now on
    finally:
        await rx.stop()


# --------------------------------------------------------------------------- response_excerpt


class Answering:
    """A real HTTP server on 127.0.0.1 answering every request with ``handler``."""

    def __init__(self, handler) -> None:
        self.handler = handler
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> "Answering":
        app = web.Application()
        app.router.add_post("/hook", self.handler)
        self.runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/hook"
        return self

    async def __aexit__(self, *exc) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


async def test_the_excerpt_is_the_first_1024_bytes_read_with_that_bound_and_null_without_an_answer():
    streamed = {"bytes": 0, "ended": ""}

    async def endless(request: web.Request) -> web.StreamResponse:
        # An answer that never ends: read to its end, the attempt would run into its timeout.
        response = web.StreamResponse(status=200)
        await response.prepare(request)
        try:
            while True:
                await response.write(b"x" * 65_536)
                streamed["bytes"] += 65_536
                await asyncio.sleep(0.001)
        except (ConnectionError, RuntimeError) as e:
            streamed["ended"] = type(e).__name__
        return response

    async def cut_character(request: web.Request) -> web.Response:
        return web.Response(status=503, body=b"a" * (EXCERPT_BYTES - 1) + "é".encode() + b"b" * 5_000)

    async def reset(request: web.Request) -> web.Response:
        assert request.transport is not None
        request.transport.abort()
        return web.Response()

    sender = Sender(timeout_s=10.0, max_connections=4, opened=OpenTargets.parse("loopback"))
    try:
        async with Answering(endless) as server:
            started = time.monotonic()
            result = await sender.attempt(server.url, {}, b"{}")
            took = time.monotonic() - started
            assert result.outcome == "delivered" and result.excerpt == "x" * EXCERPT_BYTES
            assert took < 5.0, took  # the bound, not the attempt's timeout, ended the read
            deadline = time.monotonic() + 5.0
            while not streamed["ended"] and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert streamed["ended"], "the dispatcher kept the connection of an unread answer open"
        async with Answering(cut_character) as server:
            result = await sender.attempt(server.url, {}, b"{}")
            assert result.outcome == "failed" and result.status == 503
            assert result.excerpt == "a" * (EXCERPT_BYTES - 1) + "\ufffd"  # the character cut at the bound
        async with Answering(reset) as server:
            result = await sender.attempt(server.url, {}, b"{}")
            assert result.outcome == "failed" and result.status is None and result.excerpt is None
    finally:
        await sender.close()


async def test_the_attempt_log_records_the_type_and_the_excerpt(conn, fresh_db, log):
    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=200, body=b'{"received":true}' + b" " * 4_000)

    async with Answering(answer) as server:
        await log.endpoint("whe_excpt1", server.url)
        async with dispatcher(config(fresh_db)):
            await log.posts(1, 1)

            async def stored() -> bool:
                return bool(
                    await conn.fetchval("SELECT count(*) FROM webhook_attempts WHERE endpoint_id = 'whe_excpt1'")
                )

            await until(stored, "the attempt stored")
    row = await conn.fetchrow("SELECT type, response_excerpt FROM webhook_attempts WHERE endpoint_id = 'whe_excpt1'")
    assert row["type"] == "post.created"
    assert row["response_excerpt"] == ('{"received":true}' + " " * 4_000)[:EXCERPT_BYTES]


async def test_a_stored_body_survives_a_pool_of_its_own(fresh_db, conn):
    # The body is committed before it is sent: another connection reads it at once.
    pool = await create_pool(config(fresh_db).database_url, "rm", min_size=1, max_size=2, stateless=True)
    try:
        store = Store(pool, "test:1", 30.0)
        body = await store.message_body("whe_store1", "msg_x", b'{"a":1}')
        again = await store.message_body("whe_store1", "msg_x", b'{"a":2}')
        assert body == again == b'{"a":1}'
        assert bytes(await conn.fetchval("SELECT body FROM webhook_messages WHERE webhook_id = 'msg_x'")) == body
        assert orjson.loads(await store.message_body("whe_store2", "msg_x", b'{"a":3}')) == {"a": 3}  # per endpoint
    finally:
        await pool.close()


async def _countacked(rx: Receiver, n: int) -> bool:
    return len(rx.acked()) >= n
