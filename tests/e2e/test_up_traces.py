"""`tickerwire up --traces` as a developer runs it: a trace viewer (Jaeger) comes up before the
services, on loopback, its URL printed with the others and written to up.json; every service
process is given its OTLP endpoint and the sampler; Ctrl-C stops it with the rest.

On demand (``--jaeger``), as tests/integration/test_jaeger.py: a machine without the binary
builds it with Go first, minutes of CPU (docs/testing.md)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

from tests.support.faults import alive, start_up, stop_up, up_ports, wait_up
from tests.support.jaeger_viewer import jaeger_binary, listeners_of
from tickerwire.devstack.embedded.ports import port_is_free

pytestmark = [pytest.mark.e2e, pytest.mark.jaeger, pytest.mark.slow, pytest.mark.timeout(1500)]


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(entry.decode().split("=", 1) for entry in raw if b"=" in entry)


def test_up_with_traces_runs_the_viewer_and_points_every_process_at_it(tmp_path: Path):
    jaeger_binary()  # skips without it and without Go; builds it first with Go (minutes)
    run = start_up(tmp_path / "state", up_ports(), "--traces", "--no-trickle")
    try:
        wait_up(run)
        info = run.info
        url, otlp = info["traces_url"], info["traces_otlp_endpoint"]
        (line,) = [line for line in run.lines if line.startswith("  traces:")]
        assert url in line and "in memory only" in line
        with urllib.request.urlopen(f"{url}/api/services", timeout=5) as answer:
            assert answer.status == 200
        viewer = info["parts"]["jaeger"]
        assert viewer["state"] == "running"
        assert {address for address, _ in listeners_of(viewer["pid"])} == {"127.0.0.1"}
        children = run.children()
        assert {"projector", "api", "stream", "dispatcher"} <= set(children)
        for name, pid in children.items():
            env = environ(pid)
            assert env.get("OTEL_EXPORTER_OTLP_ENDPOINT") == otlp, name
            assert env.get("OTEL_TRACES_SAMPLER") == "parentbased_always_on", name
    finally:
        assert stop_up(run) == 0
    assert not alive(viewer["pid"])
    assert port_is_free(int(url.rsplit(":", 1)[1]))
    assert not (tmp_path / "state" / "up.json").exists()
