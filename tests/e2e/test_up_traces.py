"""`tickerwire up --traces` as a developer runs it: a trace viewer (Phoenix) comes up before the
services, on loopback, its UI's URL printed with the others and written to up.json; every service
process is given its OTLP endpoint and the sampler, and a span sent there is found in Phoenix; a
real post published with a producer's ``traceparent`` is served and makes one trace in Phoenix
holding the projector's ``project post.created`` and the stream's ``broadcast post.created``;
Ctrl-C stops it with the rest and its database stays in the state directory.

Phoenix keeps no resource attributes (no ``service.name``), so a span's process is told by its
name: only the projector writes ``project`` spans, only the stream ``broadcast`` spans.

On demand (``--phoenix``), as tests/integration/test_phoenix.py: a machine without the install
gets it first (about 3 minutes and 860 MB, docs/testing.md)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.events import fresh_post_ev
from tests.support.faults import alive, start_up, stop_up, up_ports, wait_up
from tests.support.otlp import PRODUCER_SPAN, TRACE_ID, TRACEPARENT
from tests.support.phoenix_viewer import listeners_of, phoenix_install, send_span, spans_of
from tickerwire.devstack.embedded.phoenix_install import HOME_ENV
from tickerwire.devstack.embedded.ports import port_is_free
from tickerwire.schemas.models import encode_event, entity_key
from tickerwire.schemas.topics import POSTS, topic_name

pytestmark = [pytest.mark.e2e, pytest.mark.phoenix, pytest.mark.slow, pytest.mark.timeout(1500)]

POST_ID = 7_340_001
#: Phoenix writes what it receives in order, and a fresh ``up`` first sends it the demo load's
#: spans (about 12,000: over a minute on the 2-core CI machine) before the post's.
POST_SPANS_WITHIN_S = 300.0


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(entry.decode().split("=", 1) for entry in raw if b"=" in entry)


def publish_traced_post(info: dict) -> None:
    """One new post sent to up's broker as a platform team's tracing producer sends it."""
    event = fresh_post_ev(POST_ID)
    producer = Producer({"bootstrap.servers": info["kafka_bootstrap_servers"], "acks": "all"})
    producer.produce(
        topic_name(info["topic_prefix"], POSTS),
        value=encode_event(event),
        key=entity_key(event).encode(),
        headers=[("traceparent", TRACEPARENT.encode())],
    )
    assert producer.flush(30) == 0, "the post was not delivered to up's broker within 30 s"


def wait_served(info: dict, timeout: float) -> None:
    request = urllib.request.Request(
        f"{info['base_url']}/posts/{POST_ID}", headers={"Authorization": f"Bearer {info['api_key']}"}
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(request, timeout=5):
                return
        except urllib.error.HTTPError as exc:
            assert exc.code == 404 and time.monotonic() < deadline, f"post {POST_ID} not served: {exc}"
        time.sleep(0.25)


def spans_by_name(url: str, want: set[str], timeout: float) -> dict[str, dict]:
    """The spans of the producer's trace in Phoenix, by name, once those named ``want`` are in."""
    deadline = time.monotonic() + timeout
    while True:
        found = {span["name"]: span for span in spans_of(url, TRACE_ID)}
        if want <= set(found):
            return found
        assert time.monotonic() < deadline, (
            f"after {timeout:.0f} s Phoenix has only {sorted(found)} of the post's trace"
        )
        time.sleep(1.0)


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

        # A real post, followed from its producer through the projector to the stream.
        publish_traced_post(info)
        wait_served(info, timeout=60)
        started = time.monotonic()
        spans = spans_by_name(url, {"project post.created", "broadcast post.created"}, POST_SPANS_WITHIN_S)
        print(f"the post's trace in Phoenix after {time.monotonic() - started:.1f} s: {sorted(spans)}")
        project, broadcast = spans["project post.created"], spans["broadcast post.created"]
        assert project["parent_id"] == PRODUCER_SPAN  # the producer's traceparent, honoured
        assert project["attributes"]["tickerwire.post.id"] == POST_ID
        assert broadcast["parent_id"] == project["context"]["span_id"]  # the stored context, continued
        assert broadcast["attributes"]["tickerwire.post.id"] == POST_ID
    finally:
        assert stop_up(run) == 0
    assert not alive(viewer["pid"])
    assert port_is_free(int(url.rsplit(":", 1)[1]))
    assert not (state / "up.json").exists()
    assert (state / "phoenix" / "phoenix.db").is_file()  # the traces stay for the next start
