"""The service processes ``tickerwire up`` starts: each child, the stack of them, and the wait
until each listens and answers on its own port."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .output import UpError


def _die_with_parent() -> None:
    """Children get SIGTERM if `up` itself dies, even by SIGKILL (Linux prctl)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Child:
    """One service process of the stack (its restarts are :mod:`.supervisor`'s)."""

    name: str
    env: dict[str, str]
    log_path: Path
    #: The `tickerwire` command it runs (default: its name; `api-2` runs `api`).
    command: str = ""
    proc: subprocess.Popen | None = None

    def spawn(self) -> subprocess.Popen:
        out = open(self.log_path, "ab")
        self.proc = proc = subprocess.Popen(
            [sys.executable, "-m", "tickerwire.services.cli.main", self.command or self.name],
            env=self.env,
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
            start_new_session=True,
        )
        out.close()
        return proc

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class Stack:
    state_dir: Path
    embedded: list = field(default_factory=list)
    children: list[Child] = field(default_factory=list)

    def spawn(self, name: str, env: dict[str, str], command: str = "") -> Child:
        child = Child(name, env, self.state_dir / f"{name}.log", command)
        child.spawn()
        self.children.append(child)
        return child

    @property
    def procs(self) -> list[subprocess.Popen]:
        return [c.proc for c in self.children if c.proc is not None]

    def stop_children(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.children.clear()

    def stop(self) -> None:
        self.stop_children()
        for part in reversed(self.embedded):
            with contextlib.suppress(Exception):
                part.stop()


#: One readiness probe of `up` waits at most this long (/readyz answers within 1 s).
PROBE_TIMEOUT_S = 2.0
#: Sets of ports `up` tries for its listeners when another process takes one of them first.
PORT_ATTEMPTS = 3


class PortTaken(UpError):
    """A listener's port was taken by another process between `up`'s choice and the child's bind."""


@dataclass(frozen=True)
class Probe:
    """A URL of ``child``'s own listener on ``port``: ready when it answers ``status`` (None:
    any HTTP answer, for a partner listener that needs a key)."""

    child: Child
    url: str
    port: int
    status: int | None = 200


def last_line(path: Path) -> str:
    """The last non-empty line of a log file ('' when there is none)."""
    with contextlib.suppress(OSError), open(path, "rb") as log_file:
        log_file.seek(max(0, log_file.seek(0, os.SEEK_END) - 8192))
        lines = [line.strip() for line in log_file.read().decode("utf-8", "replace").splitlines()]
        return next((line for line in reversed(lines) if line), "")
    return ""


def exited_at_start(child: Child) -> UpError:
    """One line: which child exited, its status and the last line of its log."""
    assert child.proc is not None
    line = last_line(child.log_path)
    kind = PortTaken if "cannot listen on" in line else UpError
    return kind(
        f"the {child.name} exited at start-up with status {child.proc.returncode}: "
        f"{line or '(its log is empty)'} (log: {child.log_path})"
    )


async def wait_healthy(probes: list[Probe], children: list[Child], timeout: float = 60.0) -> None:
    """Until each probe's URL answers 200 from its own child: a child that exits meanwhile, or
    an answer from another process holding the child's port, ends the wait at once."""
    import aiohttp

    from tickerwire.devstack.embedded.ports import listens_on

    deadline = time.monotonic() + timeout
    # Each probe is bounded too: a listener that accepts and never answers must not hold up
    # the deadline (aiohttp's default is 5 minutes).
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)) as session:
        for probe in probes:
            while True:
                for child in children:
                    if child.proc is not None and child.proc.poll() is not None:
                        raise exited_at_start(child)
                with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                    async with session.get(probe.url) as resp:
                        if probe.status is None or resp.status == probe.status:
                            proc = probe.child.proc
                            if proc is not None and listens_on(proc.pid, probe.port) is False:
                                raise PortTaken(
                                    f"{probe.url} is answered by another process, not by this up's {probe.child.name} "
                                    f"(pid {proc.pid}): port {probe.port} was taken after up chose it"
                                )
                            break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{probe.url} did not become ready")
                await asyncio.sleep(0.2)
