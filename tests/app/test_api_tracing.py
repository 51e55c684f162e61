"""Tracing through the real API process, over PostgreSQL, into an OTLP/HTTP sink: a request is a
SERVER span named by its route template, a trace of its own that links the partner's
``traceparent`` (untrusted: never the parent), with the statement its handler ran beneath it."""

from __future__ import annotations

import os

import aiohttp
import pytest

from tests.support.apps import config_for
from tests.support.events import fresh_post_ev, locale_ev
from tests.support.otlp import PRODUCER_SPAN, TRACE_ID, TRACEPARENT, OtlpSink, traced_env
from tests.support.stack import BASE, auth, started_stack
from tickerwire.services.api.app import create_app
from tickerwire.services.common.operator.app_tracing import TRACING

pytestmark = pytest.mark.slow

POST_ID = 7301
DETAIL = f"GET {BASE}/posts/{{id_or_slug}}"


async def test_a_request_is_a_server_span_with_its_statements_beneath_and_the_partners_context_linked(
    pg_dsn, kafka_bootstrap
):
    sink = OtlpSink()
    await sink.start()
    prefix = f"traceapi{os.getpid()}"
    try:
        async with started_stack(pg_dsn, kafka_bootstrap, prefix, services=("projector",)) as stack:
            await stack.publish([locale_ev("en-US", default=True), fresh_post_ev(POST_ID)])
            key = await stack.provision("ws_traceapi")
            api = await stack.start("api", **traced_env(sink.endpoint))
            async with aiohttp.ClientSession() as http:
                headers = {**auth(key), "traceparent": TRACEPARENT}
                async with http.get(f"{api.url}{BASE}/posts/{POST_ID}", headers=headers) as resp:
                    assert resp.status == 200, await resp.text()
                async with http.get(f"{api.url}{BASE}/posts/{POST_ID + 1}", headers=auth(key)) as resp:
                    assert resp.status == 404

            server = await sink.wait_for(
                lambda s: s.name == DETAIL and s.attributes["http.response.status_code"] == 200
            )
            assert (server.service, server.kind, server.parent_span_id) == ("tickerwire-api", "server", "")
            assert server.trace_id != TRACE_ID  # the partner's context is not the parent ...
            assert server.links == ((TRACE_ID, PRODUCER_SPAN),)  # ... but a link
            assert server.attributes["http.request.method"] == "GET"
            assert server.attributes["http.route"] == f"{BASE}/posts/{{id_or_slug}}"

            statement = await sink.wait_for(lambda s: s.parent_span_id == server.span_id)
            assert (statement.kind, statement.trace_id) == ("client", server.trace_id)
            assert statement.name.startswith("SELECT post_translations")
            assert statement.attributes["db.system.name"] == "postgresql"

            missing = await sink.wait_for(
                lambda s: s.name == DETAIL and s.attributes["http.response.status_code"] == 404
            )
            assert missing.links == ()  # no traceparent sent: nothing linked
            assert not [s.name for s in sink.spans if str(POST_ID) in s.name]  # the template, never the path
    finally:
        await sink.stop()


def test_with_tracing_off_the_request_path_has_no_tracing_layer(monkeypatch, pg_dsn):
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    assert len(create_app(config_for(pg_dsn)).middlewares) == 1
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    traced = create_app(config_for(pg_dsn))
    assert len(traced.middlewares) == 2
    traced[TRACING].shutdown(0.1)
