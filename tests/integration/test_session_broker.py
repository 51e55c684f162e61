"""The test session's broker watch (tests/support/brokers.py): a frozen broker is restarted
before the next test instead of failing every later test of its worker after long timeouts."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest

from tests.support.brokers import SessionBroker
from tickerwire.devstack.embedded.apache_kafka import ApacheKafka


def stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped (SIGSTOP), as /proc says."""
    tasks = Path(f"/proc/{pid}/task")
    states = [(task / "stat").read_text().rsplit(")", 1)[1].split()[0] for task in tasks.iterdir()]
    return bool(states) and all(state in ("T", "t") for state in states)


def test_a_broker_that_stops_answering_is_restarted_on_its_port():
    root = Path(tempfile.mkdtemp(prefix="tickerwire-test-watch-"))
    broker = ApacheKafka(root).__enter__()
    watched = SessionBroker(broker.bootstrap_servers, broker)
    try:
        watched.ensure_answering()
        assert watched.restarts == 0
        os.kill(broker.pid, signal.SIGSTOP)  # frozen: accepts connections, answers nothing
        # Every thread of the JVM stops (state T) before it stops answering; bounded.
        deadline = time.monotonic() + 20
        while (watched.answers() or not stopped(broker.pid)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert stopped(broker.pid) and not watched.answers()
        with pytest.warns(UserWarning, match="stopped answering Kafka requests; restarting it"):
            watched.ensure_answering()
        assert watched.restarts == 1 and watched.answers()
        assert watched.server is not None and watched.server.bootstrap_servers == watched.bootstrap
    finally:
        if watched.server is not None:
            watched.server.stop()
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
