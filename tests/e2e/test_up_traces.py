"""`tickerwire up --traces` as a developer runs it: a trace viewer (Phoenix) comes up before the
services, on loopback, its UI's URL printed with the others and written to up.json; every service
process is given its OTLP endpoint and the sampler, and a span sent there is found in Phoenix;
Ctrl-C stops it with the rest and its database stays in the state directory.

On demand (``--phoenix``), as tests/integration/test_phoenix.py: a machine without the install
gets it first (about 3 minutes and 860 MB, docs/testing.md)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from tests.support.faults import alive, start_up, stop_up, up_ports, wait_up
from tests.support.phoenix_viewer import listeners_of, phoenix_install, send_span, spans_of
from tickerwire.devstack.embedded.phoenix_install import HOME_ENV
from tickerwire.devstack.embedded.ports import port_is_free

pytestmark = [pytest.mark.e2e, pytest.mark.phoenix, pytest.mark.slow, pytest.mark.timeout(1500)]


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(entry.decode().split("=", 1) for entry in raw if b"=" in entry)


def test_up_with_traces_runs_the_viewer_and_points_every_process_at_it(tmp_path: Path):
    install = phoenix_install()  # installs it first when this machine has none (minutes)
    state = tmp_path / "state"
    run = start_up(state, up_ports(), "--traces", "--no-trickle", more_env={HOME_ENV: str(install)})
    try:
        wait_up(run, timeout=600)
        info = run.info
        url, otlp = info["traces_url"], info["traces_otlp_endpoint"]
        (line,) = [line for line in run.lines if line.startswith("  traces:")]
        assert url in line and "Phoenix UI" in line
        assert info["traces_ui"] is True and info["traces_data"] == str(state / "phoenix" / "phoenix.db")
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert b"<title>Phoenix</title>" in answer.read()
        viewer = info["parts"]["phoenix"]
        assert viewer["state"] == "running"
        assert {address for address, _ in listeners_of(viewer["pid"])} == {"127.0.0.1"}
        children = run.children()
        assert {"projector", "api", "stream", "dispatcher"} <= set(children)
        for name, pid in children.items():
            env = environ(pid)
            assert env.get("OTEL_EXPORTER_OTLP_ENDPOINT") == otlp, name
            assert env.get("OTEL_TRACES_SAMPLER") == "parentbased_always_on", name
        trace_id, _ = send_span(otlp, "send tickerwire.posts")  # as a child would, to the endpoint it was given
        assert spans_of(url, trace_id, timeout=30)
    finally:
        assert stop_up(run) == 0
    assert not alive(viewer["pid"])
    assert port_is_free(int(url.rsplit(":", 1)[1]))
    assert not (state / "up.json").exists()
    assert (state / "phoenix" / "phoenix.db").is_file()  # the traces stay for the next start
