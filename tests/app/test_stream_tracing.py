"""Tracing through the real stream process, over a real broker and PostgreSQL, into an OTLP/HTTP
sink: a post published under a producer's trace is broadcast under one PRODUCER span, child of
the context the projector stored on the post, however many sockets it reaches."""

from __future__ import annotations

import asyncio
import os

import aiohttp
import orjson
import pytest
from prometheus_client import CollectorRegistry

from tests.support.events import fresh_post_ev, locale_ev
from tests.support.otlp import TRACE_ID, TRACEPARENT, OtlpSink, classic_metrics, exemplar_trace_ids, traced_env
from tests.support.stack import BASE, started_stack
from tests.support.ws import WAIT, session
from tickerwire.services.cli.publish import send_events
from tickerwire.services.common import kafka, tracing

pytestmark = pytest.mark.slow

POST_ID = 7101


async def test_a_post_is_broadcast_under_one_span_continuing_its_stored_trace(pg_dsn, kafka_bootstrap):
    sink = OtlpSink()
    await sink.start()
    prefix = f"tracestream{os.getpid()}"
    try:
        env = traced_env(sink.endpoint)
        async with started_stack(pg_dsn, kafka_bootstrap, prefix, services=("projector", "stream"), **env) as stack:
            await stack.publish([locale_ev("en-US", default=True)])
            key = await stack.provision("ws_tracestream")
            (stream,) = stack.of("stream")
            url = f"{stream.url}{BASE}/stream?key={key}"
            publisher = tracing.from_env(env, "tickerwire-publish", CollectorRegistry())
            async with (
                aiohttp.ClientSession() as http,
                session(http, url) as (first, _),
                session(http, url) as (second, _),
            ):
                try:
                    async with kafka.started_producer(stack.config) as producer:
                        await send_events(
                            producer,
                            prefix,
                            [fresh_post_ev(POST_ID)],
                            tracing=publisher,
                            headers=[("traceparent", TRACEPARENT.encode())],
                        )
                finally:
                    await asyncio.to_thread(publisher.shutdown, 2.0)
                for ws in (first, second):
                    pushed = orjson.loads((await ws.receive(timeout=WAIT)).data)
                    assert (pushed["type"], pushed["data"]["id"]) == ("post.created", POST_ID)

            project = await sink.wait_for(lambda s: s.name == "project post.created" and s.trace_id == TRACE_ID)
            broadcast = await sink.wait_for(lambda s: s.name == "broadcast post.created")
            assert (broadcast.service, broadcast.kind, broadcast.trace_id) == (
                "tickerwire-stream",
                "producer",
                TRACE_ID,
            )
            assert broadcast.parent_span_id == project.span_id  # the context stored on the post's row
            assert broadcast.attributes["tickerwire.stream.sockets"] == 2
            assert broadcast.attributes["tickerwire.post.id"] == POST_ID
            await asyncio.sleep(1.0)  # every span of the broadcast exported (100 ms schedule)
            broadcasts = [s for s in sink.spans if s.name == "broadcast post.created"]
            assert len(broadcasts) == 1, broadcasts  # one per message, not one per connection

            # The publish-to-push latency was observed inside the span: its trace is an exemplar.
            assert TRACE_ID in await exemplar_trace_ids(stream.admin_url, "tickerwire_stream_event_to_send_seconds")
            content_type, classic = await classic_metrics(stream.admin_url)
            assert content_type == "text/plain" and "tickerwire_stream_event_to_send_seconds_bucket" in classic
            assert TRACE_ID not in classic  # exemplars only in OpenMetrics
    finally:
        await sink.stop()
