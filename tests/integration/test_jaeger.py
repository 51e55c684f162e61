"""The trace viewer (devstack/embedded/jaeger.py) on the real Jaeger v1.75.0: the binary accepts
the generated config, listens on loopback only, and a span sent with the OpenTelemetry SDK's
OTLP/HTTP exporter is found by its trace id; a restart keeps the ports and loses the traces.

On demand (``--jaeger``): a machine without the binary builds it with Go first, minutes of CPU
(docs/testing.md). Skips, saying how to get it, with neither the binary nor Go."""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.support.jaeger_viewer import jaeger_binary, listeners_of, trace
from tickerwire.devstack.embedded.jaeger import UI_ENV, Jaeger, config, config_text

#: A first run may build the binary (about 7 minutes on two cores).
pytestmark = [pytest.mark.jaeger, pytest.mark.slow, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def binary() -> Path:
    return jaeger_binary()


def send_span(otlp_endpoint: str, name: str) -> str:
    """One span sent as the services send theirs (OTLP over HTTP/protobuf); its trace id in hex."""
    provider = TracerProvider(resource=Resource.create({"service.name": "tickerwire-test"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{otlp_endpoint}/v1/traces", timeout=5)))
    try:
        with provider.get_tracer("tests").start_as_current_span(name) as span:
            trace_id = format(span.get_span_context().trace_id, "032x")
    finally:
        provider.shutdown()
    return trace_id


def test_the_binary_accepts_the_generated_config_and_refuses_a_wrong_one(binary: Path, tmp_path: Path):
    settings = config(otlp_port=4318, query_port=16686, grpc_port=16685, max_traces=100)
    good = tmp_path / "good.yaml"
    good.write_text(config_text(settings))
    done = subprocess.run([binary, "validate", "--config", str(good)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    settings["extensions"]["jaeger_query"]["no_such_setting"] = True  # the check can fail
    bad = tmp_path / "bad.yaml"
    bad.write_text(config_text(settings))
    done = subprocess.run([binary, "validate", "--config", str(bad)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "no_such_setting" in done.stdout + done.stderr


def test_a_span_sent_over_otlp_http_is_found_by_its_trace_id(binary: Path, tmp_path: Path):
    with Jaeger(tmp_path, binary=binary) as viewer:
        assert viewer.pid is not None
        ports = {int(part.rsplit(":", 1)[1]) for part in (viewer.url, viewer.otlp_endpoint)}
        listeners = listeners_of(viewer.pid)
        assert {address for address, _ in listeners} == {"127.0.0.1"}, listeners
        assert ports < {port for _, port in listeners} and len(listeners) == 3  # query, its gRPC, OTLP
        assert viewer.has_ui is False  # a binary from the module proxy: no UI assets, said so
        assert trace(viewer.url, "0123456789abcdef0123456789abcdef") is None  # the lookup can miss
        trace_id = send_span(viewer.otlp_endpoint, "send tickerwire.posts")
        found = trace(viewer.url, trace_id, timeout=15)
        assert found is not None, f"trace {trace_id} not in {viewer.url} (log {viewer.log_path})"
        (span,) = found["spans"]
        assert span["traceID"] == trace_id and span["operationName"] == "send tickerwire.posts"
        assert found["processes"][span["processID"]]["serviceName"] == "tickerwire-test"


def test_a_restart_keeps_the_ports_and_loses_the_traces(binary: Path, tmp_path: Path):
    viewer = Jaeger(tmp_path, binary=binary)
    try:
        url, otlp = viewer.start(), viewer.otlp_endpoint
        trace_id = send_span(otlp, "before the restart")
        assert trace(url, trace_id, timeout=15) is not None
        viewer.stop()
        assert viewer.start() == url and viewer.otlp_endpoint == otlp
        assert trace(url, trace_id) is None  # memory only
        after = send_span(otlp, "after the restart")
        assert trace(url, after, timeout=15) is not None  # the senders' endpoint still works
    finally:
        viewer.stop()


def test_a_ui_build_named_by_the_variable_is_served_at_the_url(
    binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    build = tmp_path / "ui"
    (build / "static").mkdir(parents=True)
    page = '<!doctype html><html><head><base href="/" data-inject-target="BASE_URL"/></head><body>a jaeger-ui build</body></html>'
    (build / "index.html").write_text(page)
    monkeypatch.setenv(UI_ENV, str(build))
    with Jaeger(tmp_path / "viewer", binary=binary) as viewer:
        assert viewer.has_ui is True
        with urllib.request.urlopen(f"{viewer.url}/search", timeout=5) as answer:  # the UI's own routes too
            assert b"a jaeger-ui build" in answer.read()
