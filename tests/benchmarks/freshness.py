"""5. End-to-end freshness: produce -> visible on GET /posts, and produce -> received on the
stream, p50 and p99; against produce -> received by a raw aiokafka consumer (the log's own
latency, the floor under both).

Posts are published one at a time, a few per second, each newer than every other, while a
poller asks GET /posts?limit=1 every 2 ms and one WebSocket client listens.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson

from tests.support.stack import BASE
from tickerwire.schemas.models import encode_event, entity_key
from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.common import kafka

from .common import Context, Deadline, Result, RssSampler, catalog, percentile, posts, provision_wide_open
from .projector import posts_end

NAME = "freshness"


async def product_run(
    stack, api_url: str, ws_url: str, key: str, producer, topic: str, first_id: int, count: int
) -> tuple[list[float], list[float]]:
    headers = {"Authorization": f"Bearer {key}"}
    visible: list[float] = []
    streamed: list[float] = []
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url) as ws:
        for event in posts(first_id, count, locales=("en-US",)):
            post_id = event.data.id
            sent = time.monotonic()
            await producer.send(topic, value=encode_event(event), key=entity_key(event).encode())

            async def poll() -> float:
                while True:
                    async with session.get(api_url + BASE + "/posts?limit=1", headers=headers) as resp:
                        items = orjson.loads(await resp.read())["posts"]
                    if items and items[0]["id"] == post_id:
                        return time.monotonic()
                    await asyncio.sleep(0.002)

            async def listen() -> float:
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.TEXT and msg.data.startswith('{"type":"post.created"'):
                        if orjson.loads(msg.data)["data"]["id"] == post_id:
                            return time.monotonic()
                raise RuntimeError("stream closed")

            t_visible, t_stream = await asyncio.wait_for(asyncio.gather(poll(), listen()), timeout=30)
            visible.append((t_visible - sent) * 1000)
            streamed.append((t_stream - sent) * 1000)
            await asyncio.sleep(0.2)
    return visible, streamed


async def baseline_run(stack, producer, topic: str, first_id: int, count: int) -> list[float]:
    ends = await posts_end(None, stack)
    consumer = kafka.consumer(stack.config, group_id=None, client_id="bench-fresh", fetch_max_wait_ms=5)
    await consumer.start()
    out = []
    try:
        consumer.assign(list(ends))
        for tp, end in ends.items():
            consumer.seek(tp, end)
        for event in posts(first_id, count, locales=("en-US",)):
            sent = time.monotonic()
            await producer.send(topic, value=encode_event(event), key=entity_key(event).encode())
            got = False
            deadline = Deadline(30, f"the raw consumer receiving post {event.data.id}")
            while not got:
                deadline.check()
                for records in (await consumer.getmany(timeout_ms=100)).values():
                    got = got or any(r.key == entity_key(event).encode() for r in records)
            out.append((time.monotonic() - sent) * 1000)
            await asyncio.sleep(0.2)
    finally:
        await consumer.stop()
    return out


async def run(ctx: Context) -> Result:
    s = ctx.settings
    result = Result(NAME)
    count = s.pick(5, 40)
    result.notes.append(f"{count} posts per run, one at a time; baseline = produce -> raw aiokafka consumer")
    metrics = {
        (kind, q): result.metric(
            f"produce -> {kind} p{q}",
            "ms",
            higher_is_better=False,
            target="< 150 ms" if q == 99 else "",
            check=(lambda p, r: p < 150) if q == 99 else None,
        )
        for kind in ("GET /posts", "stream")
        for q in (50, 99)
    }
    next_id = 1
    async with ctx.stack() as stack:
        projector = await stack.start("projector")
        await stack.publish(catalog(tokens=0))
        key = await provision_wide_open(stack)
        api, stream = await stack.start("api"), await stack.start("stream")
        ws_url = stream.url.replace("http", "ws") + BASE + f"/stream?key={key}"
        topic = topic_name(stack.topic_prefix, POSTS)
        async with kafka.started_producer(stack.config, linger_ms=0) as producer:
            with RssSampler() as rss:
                for label, svc in (("api", api), ("projector", projector), ("stream", stream)):
                    rss.watch(label, svc.proc.pid)
                for _ in range(s.runs):
                    visible, streamed = await product_run(stack, api.url, ws_url, key, producer, topic, next_id, count)
                    next_id += count
                    base = await baseline_run(stack, producer, topic, next_id, count)
                    next_id += count
                    for kind, lat in (("GET /posts", visible), ("stream", streamed)):
                        for q in (50, 99):
                            metrics[(kind, q)].product.append(percentile(lat, q))
                            metrics[(kind, q)].baseline.append(percentile(base, q))
            ctx.record_rss(rss, "freshness load: ")
    return result
