"""What a partner sees while faults are injected: HTTP status codes over time, stream close
codes and the posts the stream delivered, and the processes faults are injected into.

Operator endpoints are found through :func:`ops_url` only, so moving them (another port,
another path) changes one place.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson

from tickerwire.devstack.embedded.ports import free_ports
from tickerwire.services.cli.up.command import PORTS


def ops_url(metrics_url: str, path: str = "/readyz") -> str:
    """The URL of an operator endpoint of the process whose /metrics is ``metrics_url``."""
    return metrics_url.rsplit("/", 1)[0] + path


def readyz_url(metrics_url: str) -> str:
    return ops_url(metrics_url, "/readyz")


class _Background:
    """Runs ``self._run()`` while the ``async with`` block runs; ``now()`` is seconds since it started."""

    _task: asyncio.Task | None = None
    _t0: float = 0.0

    async def __aenter__(self):
        self._t0 = time.monotonic()
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def now(self) -> float:
        return time.monotonic() - self._t0

    async def _run(self) -> None:
        raise NotImplementedError


@dataclass
class Sample:
    t: float  # seconds since the prober started
    status: int | str  # HTTP status, or the error's name when there was no answer
    seconds: float  # time to the answer (or to the error)


@dataclass
class Prober(_Background):
    """GETs ``url`` every ``every_s`` seconds (each request bounded by ``timeout_s``)."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    every_s: float = 0.2
    timeout_s: float = 15.0
    samples: list[Sample] = field(default_factory=list)

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                started = time.monotonic()
                try:
                    async with session.get(self.url, headers=self.headers) as resp:
                        await resp.read()
                        status: int | str = resp.status
                except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
                    status = type(exc).__name__
                self.samples.append(Sample(started - self._t0, status, time.monotonic() - started))
                await asyncio.sleep(max(0.0, self.every_s - (time.monotonic() - started)))

    def since(self, t: float) -> list[Sample]:
        return [s for s in self.samples if s.t >= t]

    def statuses(self, t: float = 0.0) -> dict[str, int]:
        return dict(collections.Counter(str(s.status) for s in self.since(t)))

    def first_ok_after(self, t: float) -> float | None:
        """Seconds from ``t`` until the first 200 after the last failure that followed ``t``."""
        after = self.since(t)
        last_bad = max((s.t for s in after if s.status != 200), default=None)
        if last_bad is None:
            return 0.0
        ok = [s.t for s in after if s.t > last_bad and s.status == 200]
        return (ok[0] - t) if ok else None

    def first_ok_from(self, t: float) -> float | None:
        """Seconds from ``t`` until the first 200 answer to a request sent at or after ``t``."""
        hits = [s for s in self.since(t) if s.status == 200]
        return (hits[0].t + hits[0].seconds - t) if hits else None

    def first_of(self, t: float, status: int) -> float | None:
        hits = [s for s in self.since(t) if s.status == status]
        return (hits[0].t + hits[0].seconds - t) if hits else None

    def slowest(self, t: float = 0.0) -> float:
        return max((s.seconds for s in self.since(t)), default=0.0)


@dataclass
class StreamWatcher(_Background):
    """A partner on the stream: stays connected (reconnecting after a close), counts every
    post.created per (post id, lang) and records each close code with its time."""

    url: str
    closes: list[tuple[float, int | None]] = field(default_factory=list)
    delivered: collections.Counter = field(default_factory=collections.Counter)
    connected: asyncio.Event = field(default_factory=asyncio.Event)

    async def _run(self) -> None:
        async with aiohttp.ClientSession() as session:
            while True:
                try:
                    async with session.ws_connect(
                        self.url, heartbeat=None, timeout=aiohttp.ClientWSTimeout(ws_close=5)
                    ) as ws:
                        self.connected.set()
                        async for msg in ws:
                            if msg.type == aiohttp.WSMsgType.TEXT:
                                doc = orjson.loads(msg.data)
                                if doc.get("type") == "post.created":
                                    self.delivered[(doc["data"]["id"], doc.get("lang") or doc["data"].get("lang"))] += 1
                        self.closes.append((time.monotonic() - self._t0, ws.close_code))
                except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
                    self.closes.append((time.monotonic() - self._t0, None))
                self.connected.clear()
                await asyncio.sleep(0.5)

    def close_codes(self) -> list[int | None]:
        return [code for _, code in self.closes]

    def doubled(self, ids: set[int] | None = None) -> int:
        return sum(n - 1 for (post_id, _), n in self.delivered.items() if n > 1 and (ids is None or post_id in ids))


# --------------------------------------------------------------------------- processes


def postgres_pids(postmaster_pid: int) -> list[int]:
    """The postmaster and every process it started (backends, checkpointer, ...)."""
    pids = [postmaster_pid]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == postmaster_pid:
                    pids.append(int(entry.name))
    return pids


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def pid_listening_on(port: int) -> int | None:
    """The pid of the process with a listening TCP socket on ``port`` (Linux /proc)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                parts = line.split()
                if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(parts[9])
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:[") and target[8:-1] in inodes:
                        return int(entry.name)
    return None


# --------------------------------------------------------------------------- tickerwire up


@dataclass
class UpRun:
    """A ``tickerwire up`` started by a test, with its output collected line by line."""

    state_dir: Path
    proc: subprocess.Popen
    lines: list[str] = field(default_factory=list)

    @property
    def info(self) -> dict:
        return orjson.loads((self.state_dir / "up.json").read_bytes())

    def children(self) -> dict[str, int]:
        """name -> pid of each service child, from the state file (kept current on restarts)."""
        return dict(self.info["pids"]["children"])

    def postmaster_pid(self) -> int:
        return int((self.state_dir / "pgdata" / "postmaster.pid").read_text().split()[0])

    def broker_pid(self) -> int | None:
        return pid_listening_on(int(self.info["kafka_bootstrap_servers"].rsplit(":", 1)[1]))

    async def read_output(self) -> None:
        """Collect up's output lines in the background (call as a task)."""
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, self.proc.stdout.readline)
            if not line:
                return
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)


#: The listeners ``up`` takes a port for on its command line.
#: Every listener port `up` takes a flag for.
UP_PORTS = PORTS


def up_ports() -> dict[str, int]:
    """A distinct free port for each of ``up``'s listeners, for :func:`up_command`."""
    return dict(zip(UP_PORTS, free_ports(len(UP_PORTS))))


def up_command(state_dir: Path, ports: dict[str, int], *extra: str) -> list[str]:
    """``ports`` maps up's port settings (``api_port``, ``api_admin_port``, ...) to numbers."""
    return [
        sys.executable,
        "-m",
        "tickerwire.services.cli.main",
        "up",
        "--state-dir",
        str(state_dir),
        "--posts",
        "60",
        "--tokens",
        "120",
        "--trickle-interval",
        "1",
        *[arg for name, port in ports.items() for arg in (f"--{name.replace('_', '-')}", str(port))],
        *extra,
    ]


def up_env() -> dict[str, str]:
    """The environment ``up`` runs in under a test: this one without any TICKERWIRE_ setting."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TICKERWIRE_")}


def start_up(state_dir: Path, ports: dict[str, int], *extra: str, more_env: dict[str, str] | None = None) -> UpRun:
    """``more_env``: settings added to :func:`up_env`'s environment."""
    env = {**up_env(), **(more_env or {})}
    proc = subprocess.Popen(
        up_command(state_dir, ports, *extra), env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    return UpRun(state_dir, proc)


def wait_up(run: UpRun, timeout: float = 180) -> None:
    """Read up's output until it says it is up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = run.proc.stdout.readline()
        if not line:
            raise AssertionError(f"up exited early with {run.proc.wait()}: {run.lines}")
        run.lines.append(line.rstrip("\n"))
        if line.startswith("Ctrl-C stops everything"):
            return
    raise AssertionError("up did not come up in time")


def stop_up(run: UpRun) -> int:
    if run.proc.poll() is None:
        run.proc.send_signal(signal.SIGINT)
    try:
        return run.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        run.proc.kill()
        return run.proc.wait()
