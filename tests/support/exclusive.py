"""Tests that measure throughput or latency run alone while the suite is spread over xdist
workers: a test marked ``exclusive`` waits until no other worker is inside a test and keeps
the others out of their next test until it has finished (their module set-ups may still run).

A readers-writer lock over two ``flock``ed files in the temporary folder the workers of one
run share (pytest's ``pytest-N``, removed with the old runs): every test holds ``gate`` shared; an exclusive one holds it exclusively.
``turnstile`` gives the writer precedence: a reader passes it on its way in, a waiting writer
holds it, so a steady flow of short tests cannot starve the exclusive one."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def held(exclusive: bool, worker_temp: Path) -> Iterator[None]:
    """Around one test; ``worker_temp`` is this worker's base temporary folder."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield  # one process: nothing runs beside this test
        return
    turnstile_path, gate_path = worker_temp.parent / "tickerwire.turnstile", worker_temp.parent / "tickerwire.gate"
    with open(turnstile_path, "a+") as turnstile, open(gate_path, "a+") as gate:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(gate, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
