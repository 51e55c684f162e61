"""The trace viewer's configuration (pure): the environment Phoenix is started with, the launcher
that keeps its gRPC receiver on loopback (run here over stand-in ``grpc`` and ``phoenix``
modules), and what `up --traces` gives its children, prints, writes to up.json and clears with
--fresh. The real Phoenix runs the same in tests/integration/test_phoenix.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tickerwire.devstack.embedded.phoenix import DATABASE, LAUNCHER, Phoenix, server_env
from tickerwire.services.cli.up.broker import start_over
from tickerwire.services.cli.up.output import ready_lines
from tickerwire.services.cli.up.traces import SAMPLER, tracing_env, viewer_info


def test_it_listens_on_loopback_on_the_ports_given_and_keeps_its_data_in_its_folder(tmp_path: Path):
    env = server_env({"PATH": "/usr/bin"}, folder=tmp_path, port=6006, grpc_port=4317)
    assert env["PHOENIX_HOST"] == "127.0.0.1"
    assert (env["PHOENIX_PORT"], env["PHOENIX_GRPC_PORT"]) == ("6006", "4317")
    assert env["PHOENIX_WORKING_DIR"] == str(tmp_path)
    assert env["PHOENIX_SQL_DATABASE_URL"] == f"sqlite:///{tmp_path / DATABASE}"
    assert env["PATH"] == "/usr/bin"


def test_it_sends_nothing_of_its_own():
    env = server_env({}, folder=Path("/state/phoenix"), port=1, grpc_port=2)
    assert env["PHOENIX_TELEMETRY_ENABLED"] == "false"
    assert env["PHOENIX_ALLOW_EXTERNAL_RESOURCES"] == "false"
    assert env["PHOENIX_DISABLE_AGENT_ASSISTANT"] == "true"


def test_no_otel_or_phoenix_variable_of_the_callers_reaches_it():
    base = {
        "HOME": "/home/dev",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:6006",
        "OTEL_SERVICE_NAME": "tickerwire-api",
        "PHOENIX_ENABLE_AUTH": "true",
        "PHOENIX_HOST": "0.0.0.0",
        "PHOENIX_COLLECTOR_ENDPOINT": "http://elsewhere",
    }
    env = server_env(base, folder=Path("/state/phoenix"), port=1, grpc_port=2)
    assert not [key for key in env if key.startswith("OTEL_")]
    assert "PHOENIX_ENABLE_AUTH" not in env and "PHOENIX_COLLECTOR_ENDPOINT" not in env
    assert env["PHOENIX_HOST"] == "127.0.0.1" and env["HOME"] == "/home/dev"


STAND_INS = {
    "grpc/__init__.py": "",
    "grpc/aio/__init__.py": "",
    "grpc/aio/_server.py": (
        "class Server:\n    def add_insecure_port(self, address):\n        print('bound', address)\n        return 1\n"
    ),
    "phoenix/__init__.py": "",
    "phoenix/server/__init__.py": "",
    "phoenix/server/main.py": (
        "import sys\nfrom grpc.aio._server import Server\n"
        "def main():\n    print('argv', *sys.argv)\n    Server().add_insecure_port('[::]:4317')\n"
    ),
}


def test_the_launcher_runs_phoenix_serve_with_its_grpc_receiver_on_its_host(tmp_path: Path):
    for name, text in STAND_INS.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    env = {"PYTHONPATH": str(tmp_path), "PHOENIX_HOST": "127.0.0.1"}
    done = subprocess.run(
        [sys.executable, "-c", LAUNCHER, "serve"], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["argv phoenix serve", "bound 127.0.0.1:4317"]  # not [::]:4317


def test_children_send_to_the_viewer_with_the_users_sampler_kept(tmp_path: Path):
    viewer = Phoenix(tmp_path, port=6006)  # not started: its port is known
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://elsewhere:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "x"}
    tracing_env(env, viewer)
    assert env == {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:6006", "OTEL_TRACES_SAMPLER": SAMPLER}
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


def test_up_json_and_the_printed_line_name_the_ui_and_where_the_traces_are_kept(tmp_path: Path):
    viewer = Phoenix(tmp_path / "phoenix", port=6006, log_path=tmp_path / "phoenix.log")
    written = viewer_info(viewer)
    assert written == {
        "traces_url": "http://127.0.0.1:6006",
        "traces_otlp_endpoint": "http://127.0.0.1:6006",
        "traces_ui": True,
        "traces_data": str(tmp_path / "phoenix" / DATABASE),
        "traces_log": str(tmp_path / "phoenix.log"),
    }
    (line,) = [line for line in ready_lines(info(**written), None, tmp_path / "up.json") if "traces:" in line]
    assert line.startswith("  traces:     http://127.0.0.1:6006 (Phoenix UI")
    assert "kept in the state directory" in line and "--fresh" in line


def test_without_traces_nothing_is_printed_of_them():
    assert not [line for line in ready_lines(info(), None, Path("/state/up.json")) if "trace" in line.lower()]


def test_fresh_removes_the_traces_and_keeps_the_viewers_log(tmp_path: Path):
    (tmp_path / "phoenix").mkdir()
    (tmp_path / "phoenix" / DATABASE).write_bytes(b"SQLite format 3\0")
    (tmp_path / "phoenix.log").write_text("kept\n")
    assert start_over(tmp_path) == ["phoenix"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["phoenix.log"]


def test_traces_without_the_tracing_extra_stops_up_at_once_naming_it(tmp_path: Path, monkeypatch):
    """No viewer is installed or started for processes that could not send it a span."""
    import importlib.util

    from tickerwire.services.cli.up import traces
    from tickerwire.services.cli.up.output import UpError

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "opentelemetry.sdk" else real(name, *a)
    )
    started: list[str] = []
    monkeypatch.setattr("tickerwire.devstack.embedded.phoenix_install.ensure_installed", lambda: started.append("x"))
    try:
        traces.start_viewer(None, None)  # type: ignore[arg-type]
    except UpError as exc:
        assert str(exc) == traces.NEEDS_EXTRA and "pip install 'tickerwire[tracing]'" in str(exc)
    else:
        raise AssertionError("up --traces went on without the tracing extra")
    assert not started
