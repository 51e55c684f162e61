"""`tickerwire up --broker apache` as a user runs it: a real Apache Kafka whose log, and the
read model with it, outlive Ctrl-C, so the next start serves the same posts with the same key
and no log reset; and the one-line refusals of `--broker`."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import aiohttp
import pytest

from tests.e2e.test_up import exercise
from tests.support.faults import alive, start_up, stop_up, up_command, up_env, up_ports, wait_up
from tickerwire.devstack.embedded import apache_kafka
from tickerwire.devstack.embedded.ports import port_is_free

pytestmark = pytest.mark.e2e

#: The catalog and access events of the demo: a start that replays the log applies them again.
REPLAYED_TYPES = ("locale", "category", "token", "workspace", "api_key", "embed")


async def served_posts(info: dict) -> dict[int, str]:
    """Every post the API serves (id -> title), paged with ``before``."""
    headers = {"Authorization": f"Bearer {info['api_key']}"}
    posts: dict[int, str] = {}
    query = "limit=50"
    async with aiohttp.ClientSession() as http:
        while True:
            async with http.get(f"{info['base_url']}/posts?{query}", headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                page = (await resp.json())["posts"]
            if not page:
                return posts
            posts.update((post["id"], post["title"]) for post in page)
            query = f"limit=50&before={min(post['id'] for post in page)}"


async def projector_metrics(info: dict) -> dict[str, float]:
    """The projector's samples (``name{labels}`` -> value)."""
    async with aiohttp.ClientSession() as http:
        async with http.get(info["metrics"]["projector"]) as resp:
            text = await resp.text()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def left_nothing_behind(info: dict, broker_pid: int) -> None:
    """No process and no broker port of the stopped ``up`` is left."""
    pids = [info["pids"]["up"], *info["pids"]["children"], broker_pid]
    deadline = time.monotonic() + 15
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if alive(p)], "processes left behind"
    assert port_is_free(int(info["kafka_bootstrap_servers"].rsplit(":", 1)[1]))


@pytest.mark.skipif(bool(apache_kafka.available()), reason=f"no Apache Kafka here: {apache_kafka.available()}")
def test_up_on_apache_kafka_serves_the_same_posts_and_key_after_ctrl_c_and_a_second_start():
    state_dir = Path(tempfile.mkdtemp(prefix="tickerwire-up-apache-"))
    ports = up_ports()
    run = start_up(state_dir, ports, "--broker", "apache")
    try:
        wait_up(run, timeout=150)
        first = run.info
        assert first["broker"] == "apache"
        asyncio.run(exercise(first, ports))  # the demo data, the stream (a trickled post), /readyz of each
        before = asyncio.run(served_posts(first))
        demo = {i: title for i, title in before.items() if i <= 60}  # `up_command` publishes 60
        assert len(demo) > 30 and max(before) > 60, sorted(before)  # and the trickle goes on above them
        broker_pid = run.broker_pid()
        assert broker_pid is not None
    finally:
        assert stop_up(run) == 0  # SIGINT, as Ctrl-C
    left_nothing_behind(first, broker_pid)
    assert (state_dir / "kafka" / "log").is_dir() and (state_dir / "pgdata").is_dir()
    projector_log = state_dir / "projector.log"
    first_run_log = projector_log.stat().st_size

    run = start_up(state_dir, ports, "--broker", "apache")
    try:
        wait_up(run, timeout=150)
        second = run.info
        assert second["api_key"] == first["api_key"]  # kept beside the log, which has its hash
        asyncio.run(exercise(second, ports))  # the key is served, every process is ready
        after = asyncio.run(served_posts(second))
        assert set(before) <= set(after), sorted(set(before) - set(after))
        assert {i: after[i] for i in demo} == demo  # the same posts, not a new demo dataset
        assert max(after) > max(before)  # the trickle goes on above the kept posts
        samples = asyncio.run(projector_metrics(second))
        # The read model was kept: nothing of the kept log's catalog or access was applied again.
        replayed = {t: samples[f'tickerwire_projector_events_applied_total{{type="{t}"}}'] for t in REPLAYED_TYPES}
        assert not any(replayed.values()), replayed
        stopped = {k: v for k, v in samples.items() if k.startswith("tickerwire_projector_log_discontinuity") and v}
        assert not stopped, stopped
        broker_pid = run.broker_pid()
        assert broker_pid is not None
    finally:
        assert stop_up(run) == 0
    left_nothing_behind(second, broker_pid)
    second_run = projector_log.read_bytes()[first_run_log:].decode()
    assert second_run and "projection of this partition is stopped" not in second_run  # no log discontinuity
    said = "\n".join(run.lines)
    assert "an earlier start's, kept" in said and "re-sync" not in said
    shutil.rmtree(state_dir)  # passed: a failure keeps its logs


def refused(*extra: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    state_dir = Path(tempfile.mkdtemp(prefix="tickerwire-up-apache-"))
    result = subprocess.run(
        up_command(state_dir, up_ports(), *extra), env=env or up_env(), capture_output=True, text=True, timeout=60
    )
    return result, state_dir


def test_up_refuses_broker_apache_without_java_in_one_line_and_starts_nothing():
    env = {**up_env(), "JAVA_HOME": "/nonexistent-jdk"}
    result, state_dir = refused("--broker", "apache", env=env)
    assert result.returncode == 1
    said = [line for line in result.stderr.splitlines() if not line.startswith("{")]  # not up's JSON log records
    assert len(said) == 1 and said[0].startswith("tickerwire up: --broker apache: Apache Kafka needs Java 17"), said
    assert not (state_dir / "pgdata").exists() and not (state_dir / "kafka").exists()
    shutil.rmtree(state_dir)


def test_up_refuses_broker_with_a_configured_kafka():
    result, state_dir = refused("--broker", "embedded", "--kafka", "127.0.0.1:1")
    assert result.returncode == 1
    assert "--broker embedded starts a broker of up's own, and a broker is configured" in result.stderr
    assert "Traceback" not in result.stderr and not (state_dir / "pgdata").exists()
    shutil.rmtree(state_dir)
