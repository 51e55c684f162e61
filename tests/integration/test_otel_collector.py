"""The tests' trace backend end to end, without any tracing code of ours: spans sent by the
OpenTelemetry Python SDK's OTLP/HTTP exporter reach the real collector
(devstack/embedded/otel_collector.py) and come back flat from ``otel_collector.spans()``; a
stopped collector refuses exports, and started again takes them on the same endpoint."""

from __future__ import annotations

import time
import uuid
from typing import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

#: A refused export fails within this (the exporter's own retries stop at its timeout).
EXPORT_TIMEOUT_S = 2.0


class Recording(SpanExporter):
    """The OTLP exporter, keeping what each export returned."""

    def __init__(self, endpoint: str) -> None:
        self.inner = OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces", timeout=EXPORT_TIMEOUT_S)
        self.results: list[SpanExportResult] = []

    def export(self, spans):
        self.results.append(self.inner.export(spans))
        return self.results[-1]

    def shutdown(self) -> None:
        self.inner.shutdown()


@pytest.fixture
def sent(otel_collector) -> Iterator[tuple[trace.Tracer, Recording, str]]:
    """A tracer of a service named for this test, exporting each span as it ends."""
    exporter = Recording(otel_collector.endpoint)
    service = f"probe-{uuid.uuid4().hex[:8]}"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield provider.get_tracer("tests.integration.test_otel_collector"), exporter, service
    finally:
        provider.shutdown()


def test_spans_sent_over_otlp_http_come_back_flat(otel_collector, sent) -> None:
    tracer, exporter, service = sent
    elsewhere = trace.SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=trace.TraceFlags(1))
    with tracer.start_as_current_span(
        "GET /probe",
        kind=trace.SpanKind.SERVER,
        attributes={"http.response.status_code": 200, "probe.ok": True, "probe.ratio": 0.5, "probe.tags": ["a", "b"]},
        links=[trace.Link(elsewhere, {"probe.link": "partner"})],
    ) as server:
        with tracer.start_as_current_span("send probe", kind=trace.SpanKind.PRODUCER) as producer:
            pass
    trace_id = format(server.get_span_context().trace_id, "032x")

    spans = otel_collector.spans(trace_id, count=2, timeout=10)

    assert exporter.results == [SpanExportResult.SUCCESS] * 2
    by_name = {span["name"]: span for span in spans}
    assert sorted(by_name) == ["GET /probe", "send probe"]
    root, child = by_name["GET /probe"], by_name["send probe"]
    assert (root["service"], root["kind"], root["parent_span_id"]) == (service, "SERVER", None)
    assert root["span_id"] == format(server.get_span_context().span_id, "016x")
    assert root["attributes"] == {
        "http.response.status_code": 200,
        "probe.ok": True,
        "probe.ratio": 0.5,
        "probe.tags": ["a", "b"],
    }
    assert root["links"] == [
        {
            "trace_id": f"{0xABC:032x}",
            "span_id": f"{0xDEF:016x}",
            "trace_state": "",
            "attributes": {"probe.link": "partner"},
        }
    ]
    assert (child["service"], child["kind"], child["trace_id"]) == (service, "PRODUCER", trace_id)
    assert child["parent_span_id"] == root["span_id"]
    assert child["span_id"] == format(producer.get_span_context().span_id, "016x")
    assert otel_collector.spans(format(0xABC, "032x"), count=0, timeout=0) == []


def test_a_stopped_collector_refuses_and_started_again_takes_spans(otel_collector, sent) -> None:
    tracer, exporter, _ = sent
    endpoint = otel_collector.endpoint
    otel_collector.stop()
    try:
        began = time.monotonic()
        with tracer.start_as_current_span("while down") as down:
            pass
        assert exporter.results == [SpanExportResult.FAILURE]
        assert time.monotonic() - began < EXPORT_TIMEOUT_S + 5
    finally:
        otel_collector.start()
    with tracer.start_as_current_span("after restart") as up:
        pass

    assert otel_collector.endpoint == endpoint
    assert exporter.results[-1] == SpanExportResult.SUCCESS
    assert [s["name"] for s in otel_collector.spans(format(up.get_span_context().trace_id, "032x"))] == [
        "after restart"
    ]
    assert otel_collector.spans(format(down.get_span_context().trace_id, "032x"), count=0, timeout=0.5) == []
