"""The lock that lets a throughput test run alone among xdist workers (tests/support/exclusive.py):
an exclusive holder keeps shared holders out, and a waiting exclusive one is not starved."""

from __future__ import annotations

import threading
import time

from tests.support.exclusive import held


def test_an_exclusive_test_waits_for_running_tests_and_keeps_new_ones_out(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    worker_temp = tmp_path / "popen-gw0"
    events: list[str] = []
    running = threading.Event()

    def reader(name: str, hold_s: float, started: threading.Event | None = None) -> None:
        with held(False, worker_temp):
            events.append(f"{name} in")
            if started:
                started.set()
            time.sleep(hold_s)
            events.append(f"{name} out")

    def writer() -> None:
        with held(True, worker_temp):
            events.append("exclusive in")
            time.sleep(0.2)
            events.append("exclusive out")

    first = threading.Thread(target=reader, args=("first", 0.4, running))
    first.start()
    running.wait(5)
    excl = threading.Thread(target=writer)
    excl.start()
    time.sleep(0.1)  # the exclusive test is now waiting for the first one
    late = threading.Thread(target=reader, args=("late", 0.0))
    late.start()
    for t in (first, excl, late):
        t.join(10)
    assert events == ["first in", "first out", "exclusive in", "exclusive out", "late in", "late out"]


def test_without_xdist_nothing_is_locked(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    with held(True, tmp_path / "x"), held(True, tmp_path / "x"):  # would deadlock if it locked
        pass
    assert not list(tmp_path.iterdir())
