"""The trace viewer's generated Jaeger v2 config (pure), and what `up --traces` gives its
children and prints. The real binary reads the same config in tests/integration/test_jaeger.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from tickerwire.devstack.embedded.jaeger import MAX_TRACES, STORE, Jaeger, config, config_text
from tickerwire.services.cli.up.output import ready_lines
from tickerwire.services.cli.up.traces import SAMPLER, tracing_env, viewer_info


def endpoints(node: Any) -> Iterator[str]:
    """Every ``endpoint`` value anywhere in the config."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "endpoint":
                yield value
            else:
                yield from endpoints(value)
    elif isinstance(node, list):
        for value in node:
            yield from endpoints(value)


def test_every_listener_is_on_loopback_on_the_ports_given():
    settings = config(otlp_port=4318, query_port=16686, grpc_port=16685)
    assert sorted(endpoints(settings)) == ["127.0.0.1:16685", "127.0.0.1:16686", "127.0.0.1:4318"]
    query = settings["extensions"]["jaeger_query"]
    assert query["http"]["endpoint"] == "127.0.0.1:16686"
    assert query["grpc"]["endpoint"] == "127.0.0.1:16685"  # its default is every address
    assert settings["receivers"] == {"otlp": {"protocols": {"http": {"endpoint": "127.0.0.1:4318"}}}}


def test_its_own_telemetry_is_quiet():
    settings = config(otlp_port=1, query_port=2, grpc_port=3)
    assert settings["service"]["telemetry"] == {"metrics": {"level": "none"}, "logs": {"level": "warn"}}
    assert settings["extensions"]["jaeger_query"]["enable_tracing"] is False


def test_spans_go_from_the_otlp_receiver_into_one_bounded_memory_store_the_query_reads():
    settings = config(otlp_port=1, query_port=2, grpc_port=3, max_traces=500)
    pipeline = settings["service"]["pipelines"]["traces"]
    assert pipeline == {"receivers": ["otlp"], "processors": ["batch"], "exporters": ["jaeger_storage_exporter"]}
    assert settings["service"]["extensions"] == ["jaeger_storage", "jaeger_query"]
    assert settings["extensions"]["jaeger_storage"]["backends"] == {STORE: {"memory": {"max_traces": 500}}}
    assert settings["exporters"]["jaeger_storage_exporter"]["trace_storage"] == STORE
    assert settings["extensions"]["jaeger_query"]["storage"] == {"traces": STORE}
    default = config(otlp_port=1, query_port=2, grpc_port=3)
    assert default["extensions"]["jaeger_storage"]["backends"][STORE]["memory"]["max_traces"] == MAX_TRACES


def test_an_unbounded_store_is_refused():
    with pytest.raises(ValueError, match="max_traces"):
        config(otlp_port=1, query_port=2, grpc_port=3, max_traces=0)


def test_ui_assets_are_named_only_when_given(tmp_path: Path):
    assert "ui" not in config(otlp_port=1, query_port=2, grpc_port=3)["extensions"]["jaeger_query"]
    with_ui = config(otlp_port=1, query_port=2, grpc_port=3, ui_assets=tmp_path)
    assert with_ui["extensions"]["jaeger_query"]["ui"] == {"assets_path": str(tmp_path)}


def test_the_file_reads_back_as_the_config():
    settings = config(otlp_port=1, query_port=2, grpc_port=3)
    assert json.loads(config_text(settings)) == settings


def test_children_send_to_the_viewer_with_the_users_sampler_kept(tmp_path: Path):
    viewer = Jaeger(tmp_path, port=16686, otlp_port=4318)  # not started: its ports are known
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://elsewhere:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "x"}
    tracing_env(env, viewer)
    assert env == {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_SAMPLER": SAMPLER}
    chosen = {"OTEL_TRACES_SAMPLER": "traceidratio"}
    tracing_env(chosen, viewer)
    assert chosen["OTEL_TRACES_SAMPLER"] == "traceidratio"


def info(**more: Any) -> dict[str, Any]:
    return {
        "base_url": "http://127.0.0.1:8080/api/v1",
        "stream_url": "ws://127.0.0.1:8081/api/v1/stream",
        "docs_url": "http://127.0.0.1:8080/api/v1/docs",
        "api_key": None,
        "admin": {"api": "http://127.0.0.1:9080"},
        **more,
    }


def test_the_viewer_is_printed_with_memory_only_said(tmp_path: Path):
    viewer = Jaeger(tmp_path, port=16686, otlp_port=4318)
    lines = ready_lines(info(**viewer_info(viewer)), None, tmp_path / "up.json")
    traces = [line for line in lines if line.startswith("  traces:")]
    assert len(traces) == 1
    assert "http://127.0.0.1:16686" in traces[0] and "in memory only" in traces[0]
    assert "no UI" in traces[0]  # not started: not known to serve the UI
    viewer.has_ui = True
    (ui_line,) = [line for line in ready_lines(info(**viewer_info(viewer)), None, tmp_path) if "traces:" in line]
    assert "Jaeger UI" in ui_line and "no UI" not in ui_line


def test_without_traces_nothing_is_printed_of_them():
    assert not [line for line in ready_lines(info(), None, Path("/state/up.json")) if "trace" in line.lower()]
