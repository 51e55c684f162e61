"""The trace viewer (devstack/embedded/phoenix.py) on the real Arize Phoenix 20.26.1: it listens on
127.0.0.1 only (its gRPC receiver too), serves its web UI, and a span sent with the OpenTelemetry
SDK's OTLP/HTTP exporter is found through Phoenix's own REST API; a restart keeps the ports and
the traces (its SQLite database in its folder).

On demand (``--phoenix``): a machine without the install gets it first (about 3 minutes and
860 MB, docs/testing.md); ``TICKERWIRE_PHOENIX_HOME`` may name one."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from tests.support.phoenix_viewer import listeners_of, phoenix_install, send_span, spans_of
from tickerwire.devstack.embedded.phoenix import Phoenix

#: A first run may install Phoenix (minutes); each start creates or opens its database (tens of seconds).
pytestmark = [pytest.mark.phoenix, pytest.mark.slow, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def install() -> Path:
    return phoenix_install()


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_it_listens_on_loopback_only_and_a_span_sent_over_otlp_http_is_found(install: Path, tmp_path: Path):
    with Phoenix(tmp_path / "phoenix", install=install) as viewer:
        assert viewer.pid is not None
        listeners = listeners_of(viewer.pid)
        assert listeners == sorted([("127.0.0.1", port_of(viewer.url)), ("127.0.0.1", viewer.grpc_port)]), listeners
        with urllib.request.urlopen(viewer.url, timeout=10) as answer:  # its web UI, not a placeholder
            page = answer.read()
        assert b"<title>Phoenix</title>" in page
        assert spans_of(viewer.url, "0123456789abcdef0123456789abcdef") == []  # the lookup can miss
        trace_id, span_id = send_span(viewer.otlp_endpoint, "send tickerwire.posts")
        found = spans_of(viewer.url, trace_id, timeout=30)
        assert found, f"trace {trace_id} not in {viewer.url} (log {viewer.log_path})"
        (span,) = found
        assert span["name"] == "send tickerwire.posts"
        assert span["context"] == {"trace_id": trace_id, "span_id": span_id}
    assert viewer.database.is_file()


def test_a_restart_keeps_the_ports_and_the_traces(install: Path, tmp_path: Path):
    viewer = Phoenix(tmp_path / "phoenix", install=install)
    try:
        url = viewer.start()
        grpc_port = viewer.grpc_port
        before, _ = send_span(viewer.otlp_endpoint, "before the restart")
        assert spans_of(url, before, timeout=30)
        viewer.stop()
        assert viewer.start() == url and viewer.grpc_port == grpc_port  # the senders' endpoint still works
        assert [span["name"] for span in spans_of(url, before)] == ["before the restart"]  # kept in its database
        after, _ = send_span(viewer.otlp_endpoint, "after the restart")
        assert spans_of(url, after, timeout=30)
    finally:
        viewer.stop()
