"""One post followed from a platform team's producer to a partner, through a real OpenTelemetry
Collector (tests/support/collector.py): a record published by librdkafka (confluent-kafka, a
producer we did not write) with a known ``traceparent`` is projected, pushed on the stream and
POSTed to a webhook receiver, and the collector gets that trace's spans from the projector, the
stream and the dispatcher; the receiver sees the same trace id. Then, with the collector
stopped, posts and requests flow as before and each process counts the spans it dropped."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import time
from datetime import datetime, timezone

import aiohttp
import orjson
import pytest
from confluent_kafka import Producer

from tests.support.events import fresh_post_ev, locale_ev, webhook_endpoint_ev
from tests.support.otlp import PRODUCER_SPAN, TRACE_ID, TRACEPARENT
from tests.support.receivers import Receiver, start_cursor
from tests.support.stack import BASE, ServiceStack, started_stack
from tickerwire.schemas.models import encode_event, entity_key
from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.common.http.signing import derive_secret

pytestmark = pytest.mark.slow

FIRST, SECOND = 7401, 7402
ENDPOINT = "whe_e2etrace"
WORKSPACE = "ws_e2etrace"
SIGNING_KEY = base64.b64encode(bytes(range(32, 64))).decode()
ENV = {
    "TICKERWIRE_WEBHOOKS_SIGNING_KEY": SIGNING_KEY,
    "TICKERWIRE_WEBHOOKS_OPEN_TARGETS": "loopback",
    "OTEL_BSP_SCHEDULE_DELAY": "100",
    "OTEL_EXPORTER_OTLP_TIMEOUT": "2000",
}
#: How long a post may take from the producer to the stream and to the receiver, backend up or down.
FLOWS_WITHIN_S = 15.0
DROPPED = re.compile(r'^tickerwire_trace_spans_dropped_total\{reason="[a-z_]+"\} ([0-9.e+]+)$', re.M)


def produce(stack: ServiceStack, bootstrap: str, post_id: int, headers: list[tuple[str, bytes]]) -> None:
    """One post event, sent the way a platform team's librdkafka service does."""
    event = fresh_post_ev(post_id)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    producer.produce(
        topic_name(stack.topic_prefix, POSTS),
        value=encode_event(event),
        key=entity_key(event).encode(),
        headers=headers,
    )
    assert producer.flush(30) == 0, "librdkafka did not deliver the record within 30 s"


async def pushed(ws: aiohttp.ClientWebSocketResponse, post_id: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        msg = await ws.receive(timeout=max(0.1, deadline - time.monotonic()))
        body = orjson.loads(msg.data)
        if body.get("type") == "post.created" and body["data"]["id"] == post_id:
            return


async def delivered(receiver: Receiver, post_id: int, timeout: float):
    deadline = time.monotonic() + timeout
    while True:
        for request in receiver.requests:
            if request.message.get("data", {}).get("id") == post_id:
                return request
        assert time.monotonic() < deadline, f"post {post_id} not delivered to the receiver within {timeout} s"
        await asyncio.sleep(0.05)


async def dropped(http: aiohttp.ClientSession, admin_url: str) -> float:
    async with http.get(f"{admin_url}/metrics") as resp:
        return sum(float(n) for n in DROPPED.findall(await resp.text()))


async def test_a_posts_trace_reaches_a_real_collector_from_every_process_and_its_receiver(
    pg_dsn, kafka_bootstrap, otel_collector
):
    receiver = await Receiver(derive_secret(base64.b64decode(SIGNING_KEY), ENDPOINT, 1), lambda: None).start()
    env = {**ENV, "OTEL_EXPORTER_OTLP_ENDPOINT": otel_collector.endpoint}
    try:
        async with started_stack(
            pg_dsn, kafka_bootstrap, f"e2etrace{os.getpid()}", services=("projector",), **env
        ) as stack:
            await stack.publish([locale_ev("en-US", default=True)])
            key = await stack.provision(WORKSPACE)
            await stack.publish(
                [
                    webhook_endpoint_ev(
                        ENDPOINT,
                        WORKSPACE,
                        1,
                        url=receiver.url,
                        start_cursor=await start_cursor(stack),
                        now=datetime.now(timezone.utc),
                    )
                ]
            )
            await stack.wait_projected()
            processes = {name: await stack.start(name) for name in ("api", "stream", "dispatcher")}
            processes["projector"] = stack.of("projector")[0]
            stream_url = processes["stream"].url.replace("http", "ws") + BASE + f"/stream?key={key}"
            async with aiohttp.ClientSession() as http, http.ws_connect(stream_url) as ws:
                assert orjson.loads((await ws.receive(timeout=10)).data)["type"] == "ready"

                # 1. The producer's trace, followed end to end.
                await asyncio.to_thread(produce, stack, kafka_bootstrap, FIRST, [("traceparent", TRACEPARENT.encode())])
                await pushed(ws, FIRST, FLOWS_WITHIN_S)
                request = await delivered(receiver, FIRST, FLOWS_WITHIN_S)
                assert request.traceparent.split("-")[1] == TRACE_ID  # the receiver continues the trace
                want = {
                    ("tickerwire-projector", "project post.created"),
                    ("tickerwire-stream", "broadcast post.created"),
                    ("tickerwire-dispatcher", "POST webhook"),
                }
                deadline = time.monotonic() + 20
                while not want <= {(s["service"], s["name"]) for s in otel_collector.received(TRACE_ID)}:
                    assert time.monotonic() < deadline, otel_collector.received(TRACE_ID)
                    await asyncio.sleep(0.1)
                spans = {(s["service"], s["name"]): s for s in otel_collector.received(TRACE_ID)}
                project = spans["tickerwire-projector", "project post.created"]
                assert project["parent_span_id"] == PRODUCER_SPAN  # the producer's traceparent, honoured
                assert spans["tickerwire-stream", "broadcast post.created"]["parent_span_id"] == project["span_id"]
                hook = spans["tickerwire-dispatcher", "POST webhook"]
                assert hook["parent_span_id"] == project["span_id"]
                assert request.traceparent.split("-")[2] == hook["span_id"]
                # The projector's batch span is a trace of its own, linking the record's context.
                assert any(
                    s["name"].startswith("process ") and any(link["trace_id"] == TRACE_ID for link in s["links"])
                    for s in otel_collector.received()
                )

                # 2. The backend down: nothing waits on it, every process counts what it dropped.
                before = {name: await dropped(http, p.admin_url) for name, p in processes.items()}
                otel_collector.stop()
                try:
                    started = time.monotonic()
                    await asyncio.to_thread(produce, stack, kafka_bootstrap, SECOND, [])
                    await pushed(ws, SECOND, FLOWS_WITHIN_S)
                    await delivered(receiver, SECOND, FLOWS_WITHIN_S)
                    async with http.get(
                        f"{processes['api'].url}{BASE}/posts/{SECOND}", headers={"Authorization": f"Bearer {key}"}
                    ) as resp:
                        assert resp.status == 200
                    flowed = time.monotonic() - started
                    deadline = time.monotonic() + 20
                    while True:
                        after = {name: await dropped(http, p.admin_url) for name, p in processes.items()}
                        if all(after[name] > before[name] for name in processes):
                            break
                        assert time.monotonic() < deadline, f"dropped spans before {before}, after {after}"
                        await asyncio.sleep(0.2)
                    print(f"backend down: the post flowed in {flowed:.2f} s; spans dropped {before} -> {after}")
                finally:
                    otel_collector.start()
    finally:
        await receiver.stop()
