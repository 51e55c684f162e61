"""10. Webhooks (docs/webhooks.md): publish -> webhook receipt p50 and p99, against publish ->
stream push of the same posts in the same run; and deliveries per second draining a backlog,
against a stream client resuming over the same backlog from the same cursor.

Over the real processes (a projector, a stream, one dispatcher) and a local receiver in this
process that answers 200 at once and records when each request arrived:

- **Latency.** A fresh active endpoint and one WebSocket client; posts published one every
  100 ms (a fixed rate, not waiting for the previous one), each timed from just before it is
  produced to its webhook receipt and to its stream push. The baseline is the stream.
- **Drain.** Fresh endpoints registered paused at the frontier, a backlog of posts published
  and projected, then the endpoints resumed: deliveries per second from the first receipt to
  the last, for one endpoint and for four at once. An endpoint has one request in flight and
  stores its acknowledged cursor with the attempt in one commit before the next, so one
  endpoint's rate is bounded by a round trip plus a PostgreSQL commit. The baseline is a
  stream client (one per endpoint) resuming from the same cursor over the same backlog; a
  second row compares one endpoint's rate with that bound measured bare (a loop of one POST to
  the same receiver and one committed UPDATE, one at a time).

Every endpoint is removed after its phase, so each phase's receipts are its own.
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections import defaultdict
from datetime import datetime, timezone

import aiohttp
import orjson
from aiohttp import web

from tests.support.stack import BASE, ServiceStack
from tickerwire.devstack.embedded.ports import free_ports
from tickerwire.schemas.models import WebhookEndpoint, WebhookEndpointEvent, encode_event, entity_key
from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.common import kafka
from tickerwire.services.common.db import connect
from tickerwire.services.readmodel.taxonomy import served_locales
from tickerwire.services.readmodel.walk import Page, walk

from .common import (
    Context,
    Deadline,
    Result,
    RssSampler,
    catalog,
    percentile,
    posts,
    proc_cpu_seconds,
    provision_wide_open,
)

NAME = "webhooks"

WORKSPACE = "ws_bench"
#: Posts per second of the latency phase.
RATE = 10.0
ENV = {
    "TICKERWIRE_WEBHOOKS_SIGNING_KEY": base64.b64encode(bytes(range(32))).decode(),
    "TICKERWIRE_WEBHOOKS_OPEN_TARGETS": "loopback",  # the receiver is on 127.0.0.1
}


class Receiver:
    """``POST /hook/{endpoint}``: answered 200 at once; (monotonic receipt time, post id) kept per endpoint."""

    def __init__(self) -> None:
        self.port = free_ports(1)[0]
        self.got: dict[str, list[tuple[float, int]]] = defaultdict(list)
        #: The last body received (the floor posts one like it).
        self.body = b""
        self._runner: web.AppRunner | None = None

    def url(self, endpoint_id: str) -> str:
        return f"http://127.0.0.1:{self.port}/hook/{endpoint_id}"

    async def _handle(self, request: web.Request) -> web.Response:
        self.body = body = await request.read()
        self.got[request.match_info["endpoint"]].append((time.monotonic(), orjson.loads(body)["data"]["id"]))
        return web.Response(text="ok")

    async def __aenter__(self) -> "Receiver":
        app = web.Application()
        app.router.add_post("/hook/{endpoint}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def endpoint_event(endpoint_id: str, version: int, status: str, url: str, start: str) -> WebhookEndpointEvent:
    now = datetime.now(timezone.utc)
    data = WebhookEndpoint(
        id=endpoint_id, workspace_id=WORKSPACE, url=url, status=status, start_cursor=start, created_at=now
    )
    return WebhookEndpointEvent(version=version, emitted_at=now, data=data)


async def frontier(stack: ServiceStack) -> str:
    """The read model's frontier cursor (where a newly registered endpoint starts)."""
    async with connect(stack.database_url, schema="rm") as conn:
        served = await served_locales(conn)
        page = await walk(conn, topic_name(stack.topic_prefix, POSTS), None, served, limit=0)
    assert isinstance(page, Page)
    return page.cursor()


async def held(stack: ServiceStack, ids: list[str]) -> int:
    """How many of ``ids`` a dispatcher holds (its lease, and so its worker)."""
    async with connect(stack.database_url, schema="rm") as conn:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = ANY($1::text[]) AND lease_until > now()",
                ids,
            )
        )


async def until_held(stack: ServiceStack, ids: list[str], count: int, what: str) -> None:
    deadline = Deadline(30, what)
    while await held(stack, ids) != count:
        deadline.check(stack.of("dispatcher")[0].proc)
        await asyncio.sleep(0.05)


class Endpoints:
    """Registers, resumes and removes the benchmark's endpoints (through the access topic, as an
    operator's command does), each version projected before it returns."""

    def __init__(self, stack: ServiceStack, receiver: Receiver) -> None:
        self.stack, self.receiver = stack, receiver
        self.versions: dict[str, tuple[int, str]] = {}

    async def _set(self, ids: list[str], status: str, start: str | None = None) -> None:
        evs = []
        for endpoint_id in ids:
            version, cursor = self.versions.get(endpoint_id, (0, start or ""))
            self.versions[endpoint_id] = (version + 1, cursor)
            evs.append(endpoint_event(endpoint_id, version + 1, status, self.receiver.url(endpoint_id), cursor))
        await self.stack.publish(evs)
        await self.stack.wait_projected()

    async def register(self, count: int, status: str, start: str) -> list[str]:
        ids = [f"whe_b{uuid.uuid4().hex[:12]}" for _ in range(count)]
        await self._set(ids, status, start)
        return ids

    async def resume(self, ids: list[str]) -> None:
        await self._set(ids, "active")

    async def remove(self, ids: list[str]) -> None:
        await self._set(ids, "removed")
        await until_held(self.stack, ids, 0, "the dispatcher letting removed endpoints go")


async def stream_receipts(ws: aiohttp.ClientWebSocketResponse, got: list[tuple[float, int]]) -> None:
    async for msg in ws:
        if msg.type == aiohttp.WSMsgType.TEXT and msg.data.startswith('{"type":"post.created"'):
            got.append((time.monotonic(), orjson.loads(msg.data)["data"]["id"]))


async def latency_run(
    stack: ServiceStack, hooks: Endpoints, ws_url: str, producer, topic: str, first_id: int, count: int
) -> tuple[list[float], list[float]]:
    """(publish -> webhook ms, publish -> stream ms) of ``count`` posts published at :data:`RATE`."""
    [endpoint] = await hooks.register(1, "active", await frontier(stack))
    await until_held(stack, [endpoint], 1, "the dispatcher taking the latency endpoint")
    streamed: list[tuple[float, int]] = []
    sent: dict[int, float] = {}
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url) as ws:
        listener = asyncio.create_task(stream_receipts(ws, streamed))
        try:
            await asyncio.sleep(0.5)  # the worker's first walk (at its start cursor) is done
            started = time.monotonic()
            for i, event in enumerate(posts(first_id, count, locales=("en-US",))):
                await asyncio.sleep(max(0.0, started + i / RATE - time.monotonic()))
                sent[event.data.id] = time.monotonic()
                await producer.send(topic, value=encode_event(event), key=entity_key(event).encode())
            deadline = Deadline(30, f"{count} posts pushed by the stream and delivered by the dispatcher")
            while len(streamed) < count or len(hooks.receiver.got[endpoint]) < count:
                deadline.check(stack.of("dispatcher")[0].proc)
                await asyncio.sleep(0.01)
        finally:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)
    await hooks.remove([endpoint])
    hooked = {post_id: t for t, post_id in hooks.receiver.got[endpoint]}
    pushed = {post_id: t for t, post_id in streamed}
    if not set(hooked) == set(pushed) == set(sent):
        raise RuntimeError("a post was missed, or was not one of this run's")
    return [(hooked[p] - t) * 1000 for p, t in sent.items()], [(pushed[p] - t) * 1000 for p, t in sent.items()]


def rate(receipts: list[tuple[float, int]]) -> float:
    """Deliveries per second from the first receipt to the last."""
    times = sorted(t for t, _ in receipts)
    return (len(times) - 1) / (times[-1] - times[0])


async def drain_run(
    stack: ServiceStack, hooks: Endpoints, stream_url: str, first_id: int, backlog: int, k: int
) -> tuple[float, float, tuple[float, float]]:
    """(webhook deliveries/s, stream deliveries/s, (the dispatcher's, this process's) CPU in cores
    while it drained) over a backlog of ``backlog`` posts, ``k`` endpoints resumed at once against ``k`` stream
    clients resuming from the same cursor."""
    start = await frontier(stack)
    ids = await hooks.register(k, "paused", start)
    await stack.publish(posts(first_id, backlog, locales=("en-US",)))
    await stack.wait_projected(timeout=120)
    deadline_s = 60 + k * backlog / 50

    # The baseline: k stream clients replaying the same backlog from the same cursor.
    streamed: list[list[tuple[float, int]]] = [[] for _ in range(k)]
    async with aiohttp.ClientSession() as session:
        sockets = [
            await session.ws_connect(f"{stream_url}&cursors=true&resume={start}", max_msg_size=0) for _ in range(k)
        ]
        listeners = [asyncio.create_task(stream_receipts(ws, got)) for ws, got in zip(sockets, streamed)]
        try:
            deadline = Deadline(deadline_s, f"{k} stream clients replaying {backlog} posts")
            while any(len(got) < backlog for got in streamed):
                deadline.check()
                await asyncio.sleep(0.01)
        finally:
            for task in listeners:
                task.cancel()
            await asyncio.gather(*listeners, return_exceptions=True)
            for ws in sockets:
                await ws.close()
    stream_rate = rate([x for got in streamed for x in got])

    dispatcher = stack.of("dispatcher")[0].proc
    await hooks.resume(ids)
    deadline = Deadline(deadline_s, f"{k} endpoints draining {backlog} posts")
    while not any(hooks.receiver.got[i] for i in ids):
        deadline.check(dispatcher)
        await asyncio.sleep(0.002)
    cpu, own, wall = proc_cpu_seconds(dispatcher.pid), time.process_time(), time.monotonic()
    while any(len(hooks.receiver.got[i]) < backlog for i in ids):
        deadline.check(dispatcher)
        await asyncio.sleep(0.05)
    seconds = time.monotonic() - wall
    cores = ((proc_cpu_seconds(dispatcher.pid) - cpu) / seconds, (time.process_time() - own) / seconds)
    await hooks.remove(ids)
    for got in [*streamed, *(hooks.receiver.got[i] for i in ids)]:
        if sorted(p for _, p in got) != list(range(first_id, first_id + backlog)):
            raise RuntimeError("a backlog post was missed or received twice")
    return rate([x for i in ids for x in hooks.receiver.got[i]]), stream_rate, cores


async def floor_run(stack: ServiceStack, receiver: Receiver, count: int) -> float:
    """Per second: one POST of a delivered body to the receiver and one committed UPDATE of a
    stored cursor, one at a time: the bound of one endpoint's rate without the dispatcher."""
    body = receiver.body
    conn = await stack.read_conn()
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS public.bench_floor (id int PRIMARY KEY, cursor text, n int)")
        await conn.execute("INSERT INTO public.bench_floor VALUES (1, '', 0) ON CONFLICT (id) DO NOTHING")
        async with aiohttp.ClientSession() as session:
            started = time.monotonic()
            for i in range(count):
                async with session.post(receiver.url("floor"), data=body) as resp:
                    await resp.read()
                await conn.execute("UPDATE public.bench_floor SET cursor = $1, n = n + 1 WHERE id = 1", f"c{i}")
            return count / (time.monotonic() - started)
    finally:
        await conn.close()


async def run(ctx: Context) -> Result:
    s = ctx.settings
    result = Result(NAME)
    count, backlog = s.pick(5, 100), s.pick(40, 2_000)
    result.notes.append(
        f"one dispatcher process; latency: {count} posts per run at {RATE:g} posts/s, each timed from just before it is"
        " produced to its webhook receipt and, in the same run, to its stream push (baseline); ratio = stream/webhook"
    )
    result.notes.append(
        f"drain: a backlog of {backlog} posts per endpoint, published while the endpoints were paused, then resumed;"
        " deliveries/s from the first receipt to the last; baseline = as many stream clients resuming from the same"
        " cursor over the same backlog (a replay read a page of 1,000 at a time, nothing acknowledged). An endpoint"
        " has one request in flight and commits its acknowledged cursor with the attempt before the next request"
        " (synchronous_commit as the PostgreSQL line says), so one endpoint's rate is bounded by a round trip plus a"
        " commit: the row 'baseline: POST + commit loop' measures that bound bare, a loop of one POST of a delivered"
        " body to the same receiver and one committed UPDATE"
    )
    lat = {
        q: result.metric(
            f"publish -> webhook receipt p{q} (baseline: stream push)",
            "ms",
            higher_is_better=False,
            target="< 150 ms" if q == 99 else "",
            check=(lambda p, r: p < 150) if q == 99 else None,
        )
        for q in (50, 99)
    }
    one = result.metric("deliveries/s, 1 endpoint (baseline: 1 stream resume)", "deliveries/s")
    floor = result.metric("deliveries/s, 1 endpoint (baseline: POST + commit loop)", "deliveries/s")
    four = result.metric("deliveries/s, 4 endpoints (baseline: 4 stream resumes)", "deliveries/s")
    cpu = {
        (who, k): result.metric(
            f"{who} CPU while {k} endpoint{'s' if k > 1 else ''} drain{'' if k > 1 else 's'}",
            "cores",
            note=f"the {what}'s user + system time over the drain's wall time, first receipt to last",
        )
        for who, what in (("dispatcher", "dispatcher"), ("receiver", "benchmark process (the receiver)"))
        for k in (1, 4)
    }
    next_id = 1
    async with ctx.stack(**ENV) as stack, Receiver() as receiver:
        projector = await stack.start("projector")
        await stack.publish(catalog(tokens=0))
        key = await provision_wide_open(stack, WORKSPACE)
        stream = await stack.start("stream")
        dispatcher = await stack.start("dispatcher")
        stream_url = stream.url.replace("http", "ws") + BASE + f"/stream?key={key}"
        topic = topic_name(stack.topic_prefix, POSTS)
        hooks = Endpoints(stack, receiver)
        async with kafka.started_producer(stack.config, linger_ms=0) as producer:
            with RssSampler() as rss:
                for label, svc in (("projector", projector), ("stream", stream), ("dispatcher", dispatcher)):
                    rss.watch(label, svc.proc.pid)
                for _ in range(s.runs):
                    hooked, streamed = await latency_run(stack, hooks, stream_url, producer, topic, next_id, count)
                    next_id += count
                    for q in (50, 99):
                        lat[q].product.append(percentile(hooked, q))
                        lat[q].baseline.append(percentile(streamed, q))
                    hook_rate, stream_rate, cores = await drain_run(stack, hooks, stream_url, next_id, backlog, 1)
                    next_id += backlog
                    for who, cores_of in zip(("dispatcher", "receiver"), cores):
                        cpu[(who, 1)].product.append(cores_of)
                    one.product.append(hook_rate)
                    one.baseline.append(stream_rate)
                    floor.product.append(hook_rate)
                    floor.baseline.append(await floor_run(stack, receiver, s.pick(50, 1_000)))
                    hook_rate, stream_rate, cores = await drain_run(stack, hooks, stream_url, next_id, backlog, 4)
                    next_id += backlog
                    for who, cores_of in zip(("dispatcher", "receiver"), cores):
                        cpu[(who, 4)].product.append(cores_of)
                    four.product.append(hook_rate)
                    four.baseline.append(stream_rate)
            ctx.record_rss(rss, "webhooks: ")
    return result
