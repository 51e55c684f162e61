"""Tracing through the real projector process, a real broker and PostgreSQL, into an OTLP/HTTP
sink: a producer's trace continues through ``tickerwire publish``'s send span into the
projector's spans and onto the post's row; with the collector gone the projector goes on and
counts what it drops."""

from __future__ import annotations

import asyncio
import os
import time

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from tests.support.events import fresh_post_ev
from tests.support.otlp import PRODUCER_SPAN, TRACE_ID, TRACEPARENT, OtlpSink, traced_env
from tests.support.stack import started_stack
from tickerwire.devstack.embedded.ports import free_ports
from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.cli.publish import send_events
from tickerwire.services.common import kafka, tracing

pytestmark = pytest.mark.slow


async def dropped(admin_url: str) -> float:
    """``tickerwire_trace_spans_dropped_total``, every reason summed."""
    async with aiohttp.ClientSession() as http, http.get(f"{admin_url}/metrics") as resp:
        text = await resp.text()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("tickerwire_trace_spans_dropped_total{")
    )


async def test_a_producers_trace_goes_through_publish_and_the_projector_onto_the_post(pg_dsn, kafka_bootstrap):
    sink = OtlpSink()
    await sink.start()
    prefix = f"trace{os.getpid()}"
    try:
        env = traced_env(sink.endpoint)
        async with started_stack(pg_dsn, kafka_bootstrap, prefix, services=("projector",), **env) as stack:
            publisher = tracing.from_env(env, "tickerwire-publish", CollectorRegistry())
            try:
                async with kafka.started_producer(stack.config) as producer:
                    marks = await send_events(
                        producer,
                        prefix,
                        [fresh_post_ev(7001)],
                        tracing=publisher,
                        headers=[("traceparent", TRACEPARENT.encode())],
                    )
                stack.marks.update(marks)
            finally:
                await asyncio.to_thread(publisher.shutdown, 2.0)  # the sink answers meanwhile
            await stack.wait_projected(timeout=60)

            send = await sink.wait_for(lambda s: s.name == f"send {topic_name(prefix, POSTS)}")
            assert (send.service, send.kind, send.trace_id) == ("tickerwire-publish", "producer", TRACE_ID)
            assert send.parent_span_id == PRODUCER_SPAN  # the caller's traceparent is the parent

            project = await sink.wait_for(lambda s: s.name == "project post.created")
            assert (project.service, project.kind, project.trace_id) == ("tickerwire-projector", "internal", TRACE_ID)
            assert project.parent_span_id == send.span_id  # the record's context, as the send span wrote it

            batch = await sink.wait_for(lambda s: s.name == f"process {topic_name(prefix, POSTS)}" and bool(s.links))
            assert batch.kind == "consumer" and batch.trace_id != TRACE_ID  # a trace of its own ...
            assert (TRACE_ID, send.span_id) in batch.links  # ... linking the record's creation context
            assert batch.attributes["messaging.batch.message_count"] >= 1

            conn = await stack.read_conn()
            try:
                row = await conn.fetchrow("SELECT trace_parent, trace_state FROM posts WHERE id = 7001")
            finally:
                await conn.close()
            assert row["trace_parent"] == f"00-{TRACE_ID}-{project.span_id}-01"
    finally:
        await sink.stop()


async def test_with_the_collector_gone_posts_are_projected_promptly_and_drops_counted(pg_dsn, kafka_bootstrap):
    (dead_port,) = free_ports(1)  # nothing listens there: every export is refused
    prefix = f"tracedown{os.getpid()}"
    env = traced_env(f"http://127.0.0.1:{dead_port}", OTEL_EXPORTER_OTLP_TIMEOUT="500")
    async with started_stack(pg_dsn, kafka_bootstrap, prefix, services=("projector",), **env) as stack:
        (projector,) = stack.of("projector")
        before = await dropped(projector.admin_url)
        started = time.monotonic()
        await stack.publish([fresh_post_ev(7002)])
        await stack.wait_projected(timeout=10)
        assert time.monotonic() - started < 10
        conn = await stack.read_conn()
        try:
            assert await conn.fetchval("SELECT trace_parent IS NOT NULL FROM posts WHERE id = 7002")
        finally:
            await conn.close()
        deadline = time.monotonic() + 15
        while (after := await dropped(projector.admin_url)) <= before:
            assert time.monotonic() < deadline, f"no dropped span counted ({after})\n{projector.log()[-3000:]}"
            await asyncio.sleep(0.2)
        assert "Traceback" not in projector.log()
