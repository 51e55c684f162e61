"""Tracing through the real dispatcher, over a real broker and PostgreSQL, to a real receiver and
an OTLP/HTTP sink: each attempt of a post's message is a CLIENT span, child of the context the
projector stored on the post, and the receiver gets that span's ``traceparent`` as a header
beside the stored body, unchanged; a test event starts a trace of its own."""

from __future__ import annotations

import asyncio
import base64
import os
import time
from datetime import datetime, timezone

import pytest
from prometheus_client import CollectorRegistry

from tests.support.events import fresh_post_ev, locale_ev, webhook_endpoint_ev
from tests.support.otlp import TRACE_ID, TRACEPARENT, OtlpSink, exemplar_trace_ids, traced_env
from tests.support.receivers import Receiver, start_cursor
from tests.support.stack import ServiceStack, started_stack
from tickerwire.services.cli.publish import send_events
from tickerwire.services.common import kafka, tracing
from tickerwire.services.common.db import connect
from tickerwire.services.common.http.signing import derive_secret
from tickerwire.services.readmodel.webhook_tests import request_test

pytestmark = pytest.mark.slow

POST_ID = 7201
ENDPOINT = "whe_trace1"
WORKSPACE = "ws_tracehook"
SIGNING_KEY = base64.b64encode(bytes(range(32))).decode()
ENV = {
    "TICKERWIRE_WEBHOOKS_SIGNING_KEY": SIGNING_KEY,
    "TICKERWIRE_WEBHOOKS_OPEN_TARGETS": "loopback",
    "TICKERWIRE_WEBHOOKS_RETRY_SCALE": "0.002",  # the retry after a 500 comes within 10 ms
}


async def received(receiver: Receiver, count: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while len(receiver.requests) < count:
        assert time.monotonic() < deadline, f"{len(receiver.requests)} requests, not {count}, within {timeout} s"
        await asyncio.sleep(0.05)


async def publish_traced(stack: ServiceStack, env: dict[str, str], events: list) -> None:
    """``events`` sent by ``tickerwire publish``'s path under the producer's :data:`TRACEPARENT`."""
    publisher = tracing.from_env(env, "tickerwire-publish", CollectorRegistry())
    try:
        async with kafka.started_producer(stack.config) as producer:
            await send_events(
                producer,
                stack.topic_prefix,
                events,
                tracing=publisher,
                headers=[("traceparent", TRACEPARENT.encode())],
            )
    finally:
        await asyncio.to_thread(publisher.shutdown, 2.0)


async def test_each_attempt_is_a_span_of_the_posts_trace_and_its_receiver_sees_it(pg_dsn, kafka_bootstrap):
    sink = OtlpSink()
    await sink.start()
    answers = iter(["500"])  # the first attempt fails: two attempts of one message
    receiver = await Receiver(
        derive_secret(base64.b64decode(SIGNING_KEY), ENDPOINT, 1), lambda: next(answers, None)
    ).start()
    prefix = f"tracehook{os.getpid()}"
    try:
        env = {**ENV, **traced_env(sink.endpoint)}
        async with started_stack(pg_dsn, kafka_bootstrap, prefix, services=("projector",), **env) as stack:
            await stack.publish([locale_ev("en-US", default=True)])
            await stack.provision(WORKSPACE)
            now = datetime.now(timezone.utc)
            await stack.publish(
                [
                    webhook_endpoint_ev(
                        ENDPOINT, WORKSPACE, 1, url=receiver.url, start_cursor=await start_cursor(stack), now=now
                    )
                ]
            )
            await stack.wait_projected()
            dispatcher = await stack.start("dispatcher")
            await publish_traced(stack, env, [fresh_post_ev(POST_ID)])
            await received(receiver, 2)
            failed, delivered = receiver.requests[:2]
            assert (failed.answer, delivered.answer) == ("500", "ok")

            project = await sink.wait_for(lambda s: s.name == "project post.created" and s.trace_id == TRACE_ID)
            attempts = []
            for r in (failed, delivered):
                version, trace_id, span_id, flags = r.traceparent.split("-")
                assert trace_id == TRACE_ID  # the receiver continues the post's trace
                span = await sink.wait_for(lambda s, span_id=span_id: s.span_id == span_id)
                attempts.append(span)
                assert (span.service, span.name, span.kind) == ("tickerwire-dispatcher", "POST webhook", "client")
                assert span.parent_span_id == project.span_id  # the context stored on the post's row
                assert span.attributes["tickerwire.webhook.endpoint_id"] == ENDPOINT
                assert span.attributes["http.request.method"] == "POST"
                assert span.attributes["server.address"] == "127.0.0.1"
            assert [s.attributes["http.response.status_code"] for s in attempts] == [500, 200]
            assert attempts[0].span_id != attempts[1].span_id  # one span per attempt

            # Each attempt's latency was observed inside its span: the trace is an exemplar.
            assert TRACE_ID in await exemplar_trace_ids(dispatcher.admin_url, "tickerwire_webhooks_delivery_seconds")

            # One id, one body: both attempts sent the stored bytes, no trace context in them.
            assert failed.webhook_id == delivered.webhook_id and failed.body == delivered.body
            async with connect(stack.database_url, schema="rm") as conn:
                stored = await conn.fetchval(
                    "SELECT body FROM webhook_messages WHERE endpoint_id = $1 AND webhook_id = $2",
                    ENDPOINT,
                    delivered.webhook_id,
                )
                assert bytes(stored) == delivered.body and b"traceparent" not in delivered.body
                await request_test(conn, ENDPOINT, WORKSPACE)
            await received(receiver, 3)
            test = receiver.requests[2]
            assert test.message["type"] == "webhook.test"
            test_span = await sink.wait_for(lambda s: s.span_id == test.traceparent.split("-")[2])
            assert test_span.name == "POST webhook" and test_span.parent_span_id == ""  # a root of its own
            assert test_span.trace_id != TRACE_ID
    finally:
        await receiver.stop()
        await sink.stop()
