"""The capacity run: the production shape under an open-loop load, to check the capacity rules of
docs/operations.md#scaling-plan against a measurement (issue 47, point 5).

``python -m tests.benchmarks.capacity [--seconds S] [--rate R] [--connections N] [--workspaces W]
[--posts-per-s P] [--doc]`` starts, on its own and all on this machine:

- three Apache Kafka nodes (a KRaft quorum; topics as declared: replication factor 3,
  ``min.insync.replicas=2``), one embedded PostgreSQL (durability on) and PgBouncer in
  transaction mode in front of it (the services' pools go through it, their LISTEN, admission
  and migration connections direct, as tests/support/pgbouncer.py's ``routed_env`` says);
- one projector, two api processes sharing one port and two stream processes sharing another
  (``TICKERWIRE_PORT_SHARING``, SO_REUSEPORT: the kernel spreads the connections);
- W workspaces, each with its own key, limits that never refuse this load.

Then, for S seconds at once: an open-loop load of R requests/s in total over the endpoints
partners call (``ENDPOINTS``: one generator process per endpoint, tests/benchmarks/openloop.py,
each request's latency counted from its due time, the keys of every workspace in turn); N
WebSocket connections held by separate client processes (at most 5 per workspace, the default
cap), spread over the stream processes by the kernel; P posts/s (three locales each) produced
with ``acks=all``. Every connection must get every post published in the window; the latency
from the produce call to each delivery is taken with CLOCK_MONOTONIC, which every process of
the machine shares.

It prints and stores (bench-results/capacity-*.json) per endpoint the requests, achieved rate,
p50, p99, max and errors (non-2xx and unanswered, and requests the generator skipped); the
stream's deliveries and their p50/p99, the connections each stream process held (its
``tickerwire_stream_connections`` gauge); CPU seconds and memory of every process (Kafka nodes,
PostgreSQL with its backends, PgBouncer, the services, the load generators and clients), the
load average and the machine. ``--doc`` writes the run into docs/capacity.md between its markers.

``python -m tests.benchmarks.capacity client URLFILE TIMEOUT`` is one stream client process
(see :func:`hold_connections`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, AsyncIterator, Iterable, Iterator

import aiohttp
import orjson

from tests.conftest import TEST_KAFKA_SETTINGS
from tests.support.events import provisioning
from tests.support.pgbouncer import Bouncer, routed_env
from tests.support.stack import BASE, Service, ServiceStack, gauge
from tickerwire.devstack.embedded.apache_cluster import ApacheKafkaCluster
from tickerwire.devstack.embedded.postgres import DURABLE_SETTINGS, EmbeddedPostgres, scratch_database
from tickerwire.services.common.db import connect
from tickerwire.services.common.runtime.retry import backoff_delays

from .common import CLK_TCK, REPO, catalog, posts, raise_nofile
from .run import machine

log = logging.getLogger("capacity")

#: The p99 every endpoint and the stream's delivery must stay under (docs/benchmarks.md's
#: stream target; docs/api.md states none for the read API).
TARGET_P99_MS = 250.0
#: Share of the total request rate per endpoint (label, path, weight): listing and reading posts
#: dominate what partners call; search is the costliest query and gets a small share.
ENDPOINTS: list[tuple[str, str, float]] = [
    ("/posts", "/posts", 0.35),
    ("/posts?filters", "/posts?sentiment=BULLISH,NEUTRAL&importance_min=20", 0.10),
    ("/posts/{id}", "/posts/{id}", 0.20),
    ("/tokens", "/tokens", 0.10),
    ("/languages", "/languages", 0.10),
    ("/changes", "/changes", 0.10),
    ("/search", "/search?q={word}", 0.05),
]
#: The stream's per-workspace connection cap (its default).
PER_WORKSPACE = 5
#: Locales of every post published (each pushed once per locale to a connection without filters).
LOCALES = 3
#: Posts in the read model before the window (so that pages are full).
PRELOADED_POSTS = 300
#: Bounds of the run's waits.
CLIENTS_READY_S = 180.0
DELIVERED_WITHIN_S = 30.0
GENERATOR_MARGIN_S = 60.0
#: Generated section of docs/capacity.md.
DOC = REPO / "docs" / "capacity.md"
BEGIN, END = "<!-- capacity:begin -->", "<!-- capacity:end -->"


@dataclass(frozen=True)
class Options:
    seconds: float = 120.0
    rate: float = 600.0
    connections: int = 2000
    workspaces: int = 400
    posts_per_s: float = 2.0
    api_processes: int = 2
    stream_processes: int = 2
    client_processes: int = 2


# --------------------------------------------------------------------------- process accounting


def stall_totals() -> dict[str, int] | None:
    """Microseconds some task of the machine waited for a CPU and for I/O, since boot (Linux's
    pressure stall information); None where the kernel has none. A window's share of each says
    whether a slow run waited for cores or for the disk (the load average counts both)."""
    totals: dict[str, int] = {}
    for kind in ("cpu", "io"):
        try:
            some = Path(f"/proc/pressure/{kind}").read_text().splitlines()[0]
        except (OSError, IndexError):
            return None
        totals[kind] = int(some.rsplit("total=", 1)[1])
    return totals


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int, children: bool = False) -> float:
    """utime + stime of ``pid`` (and of its children it has waited for, with ``children``)."""
    f = _stat(pid)
    ticks = int(f[11]) + int(f[12]) + ((int(f[13]) + int(f[14])) if children else 0)
    return ticks / CLK_TCK


def child_pids(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if int(_stat(int(entry))[1]) == pid:
                    out.append(int(entry))
    return out


def memory_mb(pid: int, field_: str = "VmRSS") -> float:
    """A memory figure of ``pid`` in MB: ``VmRSS`` from /proc/PID/status, or ``Pss`` from
    smaps_rollup (shared pages split between their users: PostgreSQL's shared buffers)."""
    path = f"/proc/{pid}/smaps_rollup" if field_ == "Pss" else f"/proc/{pid}/status"
    with contextlib.suppress(OSError), open(path) as fh:
        for line in fh:
            if line.startswith(field_ + ":"):
                return int(line.split()[1]) / 1000
    return 0.0


@dataclass
class Group:
    """Processes counted as one (PostgreSQL: the postmaster and its backends)."""

    label: str
    pid: int
    with_children: bool = False

    def cpu(self) -> float:
        with contextlib.suppress(OSError):
            total = cpu_seconds(self.pid, children=self.with_children)
            if self.with_children:
                for child in child_pids(self.pid):
                    with contextlib.suppress(OSError):
                        total += cpu_seconds(child)
            return total
        return 0.0

    def memory(self) -> float:
        if not self.with_children:
            return memory_mb(self.pid)
        return sum(memory_mb(p, "Pss") for p in [self.pid, *child_pids(self.pid)])


@dataclass
class Accounting:
    groups: list[Group] = field(default_factory=list)
    start: dict[str, float] = field(default_factory=dict)
    peak_mb: dict[str, float] = field(default_factory=dict)

    def watch(self, label: str, pid: int | None, with_children: bool = False) -> None:
        if pid is not None:
            self.groups.append(Group(label, pid, with_children))

    def begin(self) -> None:
        self.start = {g.label: g.cpu() for g in self.groups}

    def sample_memory(self) -> None:
        for g in self.groups:
            self.peak_mb[g.label] = max(self.peak_mb.get(g.label, 0.0), g.memory())

    def end(self, wall: float) -> dict[str, dict[str, float]]:
        out = {}
        for g in self.groups:
            used = g.cpu() - self.start.get(g.label, 0.0)
            out[g.label] = {
                "cpu_seconds": round(used, 2),
                "cores": round(used / wall, 3),
                "peak_mb": round(self.peak_mb.get(g.label, 0.0), 1),
            }
        return out

    async def sampling(self, every: float = 2.0) -> None:
        while True:
            self.sample_memory()
            await asyncio.sleep(every)


# --------------------------------------------------------------------------- stream client process


async def hold_connections(url_file: str, timeout: float) -> None:
    """Hold one connection per line of ``url_file``; print ``ready R`` (R: handshakes refused with
    429/503 and retried, as a partner's client does) once all are open. Then read one line from
    standard input: the path of a JSON file {post id: produce time}; once every connection has
    every one of those posts (or ``DELIVERED_WITHIN_S`` later), print one JSON line: the
    connections, those missing a post, deliveries, duplicates and a histogram of the
    produce-to-delivery latencies (whole milliseconds)."""
    raise_nofile()
    urls = [line.strip() for line in Path(url_file).read_text().splitlines() if line.strip()]
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    gate = asyncio.Semaphore(50)
    retried = 0
    deadline = time.monotonic() + timeout
    #: Per connection: post id -> receive times (one per locale; a connection gets every locale).
    got: list[dict[int, list[float]]] = [{} for _ in urls]

    async def connect(url: str) -> aiohttp.ClientWebSocketResponse:
        nonlocal retried
        delays = backoff_delays(0.1, 2.0)
        while True:
            try:
                async with gate:
                    return await session.ws_connect(url, autoping=True, max_msg_size=0)
            except aiohttp.WSServerHandshakeError as exc:
                if exc.status not in (429, 503) or time.monotonic() > deadline:
                    raise
                retried += 1
                await asyncio.sleep(next(delays))

    sockets = await asyncio.gather(*(connect(u) for u in urls))

    async def read(i: int, ws: aiohttp.ClientWebSocketResponse) -> None:
        mine = got[i]
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.TEXT and msg.data.startswith('{"type":"post.created"'):
                mine.setdefault(orjson.loads(msg.data)["data"]["id"], []).append(time.monotonic())

    readers = [asyncio.create_task(read(i, ws)) for i, ws in enumerate(sockets)]
    print(f"ready {retried}", flush=True)
    path = (await asyncio.to_thread(sys.stdin.readline)).strip()
    sent = {int(k): v for k, v in json.loads(Path(path).read_text()).items()}
    until = time.monotonic() + DELIVERED_WITHIN_S
    while time.monotonic() < until and any(len(sent.keys() & g.keys()) < len(sent) for g in got):
        await asyncio.sleep(0.2)
    summary = summarize(got, sent, [ws.close_code if ws.closed else None for ws in sockets])
    sys.stdout.write(json.dumps(summary) + "\n")
    sys.stdout.flush()
    for task in readers:
        task.cancel()
    for ws in sockets:
        await ws.close()
    await session.close()


def summarize(got: list[dict[int, list[float]]], sent: dict[int, float], closed: list[int | None]) -> dict[str, Any]:
    """One client process's figures over the posts in ``sent``: connections, those missing one,
    deliveries, duplicates (over one per locale), a histogram of latencies in whole ms, and the
    close codes of the connections the server closed (``closed``: each one's code, or None)."""
    closes = merged_counts({str(code): 1} for code in closed if code is not None)
    hist: dict[int, int] = {}
    deliveries = duplicates = missing = 0
    for g in got:
        if len(sent.keys() & g.keys()) < len(sent):
            missing += 1
        for post_id, times in g.items():
            if post_id not in sent:
                continue
            deliveries += len(times)
            duplicates += max(0, len(times) - LOCALES)
            for t in times:
                ms = int((t - sent[post_id]) * 1000)
                hist[ms] = hist.get(ms, 0) + 1
    return {
        "connections": len(got),
        "missing_a_post": missing,
        "deliveries": deliveries,
        "duplicates": duplicates,
        "hist_ms": hist,
        "closed_by_server": sum(closes.values()),
        "close_codes": closes,
    }


class ConnectionHolders:
    """Client processes holding the stream connections between them."""

    def __init__(self, urls: list[str], processes: int, folder: Path) -> None:
        self.procs: list[subprocess.Popen] = []
        for n in range(processes):
            part = urls[n::processes]
            if not part:
                continue
            path = folder / f"urls-{n}.txt"
            path.write_text("\n".join(part) + "\n")
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tests.benchmarks.capacity", "client", str(path), str(CLIENTS_READY_S)],
                    cwd=REPO,
                    stdout=subprocess.PIPE,
                    stdin=subprocess.PIPE,
                    text=True,
                )
            )

    async def _line(self, p: subprocess.Popen, what: str, seconds: float) -> str:
        assert p.stdout is not None
        try:
            async with asyncio.timeout(seconds):
                line = await asyncio.to_thread(p.stdout.readline)
        except TimeoutError:
            self.kill()
            raise RuntimeError(f"stream client {p.pid} sent no {what} within {seconds:.0f} s") from None
        if not line:
            raise RuntimeError(f"stream client {p.pid} exited ({p.poll()}) before its {what}")
        return line

    async def ready(self) -> int:
        retried = 0
        for p in self.procs:
            line = await self._line(p, "ready line", CLIENTS_READY_S + 30)
            if not line.startswith("ready "):
                raise RuntimeError(f"stream client {p.pid} said {line!r}")
            retried += int(line.split()[1])
        return retried

    async def report(self, sent_file: Path) -> list[dict]:
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.write(f"{sent_file}\n")
            p.stdin.flush()
        return [json.loads(await self._line(p, "report", DELIVERED_WITHIN_S + 60)) for p in self.procs]

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()

    def wait(self) -> None:
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


# --------------------------------------------------------------------------- the shape


@dataclass
class Shape:
    stack: ServiceStack
    cluster: ApacheKafkaCluster
    postgres: EmbeddedPostgres
    bouncer: Bouncer
    kafka_started_s: float

    @property
    def api(self) -> list[Service]:
        return self.stack.of("api")

    @property
    def streams(self) -> list[Service]:
        return self.stack.of("stream")


@contextlib.contextmanager
def _servers(root: Path) -> Iterator[tuple[ApacheKafkaCluster, EmbeddedPostgres, Bouncer, float]]:
    with contextlib.ExitStack() as stack:
        began = time.monotonic()
        cluster = stack.enter_context(ApacheKafkaCluster(root / "kafka", settings=TEST_KAFKA_SETTINGS))
        kafka_s = time.monotonic() - began
        postgres = stack.enter_context(EmbeddedPostgres(root / "pg", settings=DURABLE_SETTINGS))
        bouncer = stack.enter_context(Bouncer(postgres.dsn, pool_size=50))
        yield cluster, postgres, bouncer, kafka_s


@contextlib.asynccontextmanager
async def production_shape(opts: Options) -> AsyncIterator[Shape]:
    """Everything started; everything stopped after, also on failure."""
    root = Path(tempfile.mkdtemp(prefix="tickerwire-capacity-"))
    try:
        with _servers(root) as (cluster, postgres, bouncer, kafka_s):
            async with scratch_database(postgres.dsn, prefix="capacity_") as dsn:
                per_stream = -(-opts.connections // max(1, opts.stream_processes))
                env = {
                    **routed_env(dsn, bouncer),
                    "TICKERWIRE_TOPIC_REPLICATION_FACTOR": "3",
                    "TICKERWIRE_PORT_SHARING": "true",
                    "TICKERWIRE_DB_POOL_MAX": "10",  # the default (the test stacks use 5)
                    "TICKERWIRE_KAFKA_FETCH_MAX_WAIT_MS": "50",  # the default (the test stacks use 20)
                    # The kernel's spread is not exact: room for 20 % more than an even share.
                    "TICKERWIRE_MAX_CONNECTIONS": str(max(1000, int(per_stream * 1.2))),
                }
                # The services' logs outlive the run: removed by the caller once the run met its
                # target (under the test session's own log folder when there is one).
                logs = Path(
                    tempfile.mkdtemp(prefix="tickerwire-capacity-logs-", dir=os.environ.get("TICKERWIRE_TEST_LOG_ROOT"))
                )
                stack = ServiceStack(dsn, cluster.bootstrap_servers, "cap", extra_env=env, log_dir=logs)
                try:
                    await stack.prepare()
                    yield Shape(stack, cluster, postgres, bouncer, kafka_s)
                finally:
                    stack.stop_all()
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def provision_many(stack: ServiceStack, count: int) -> list[tuple[str, str]]:
    """``count`` workspaces, each with a key, projected and swept at once; (workspace, key) pairs."""
    limits = {"rate_limit_per_minute": 1_000_000, "daily_quota": 1_000_000_000}
    out, events = [], []
    async with connect(stack.database_url, schema="rm") as conn:
        for n in range(count):
            ws = f"ws_cap{n:05d}"
            key, evs = await provisioning(conn, ws, **limits)
            out.append((ws, key))
            events.extend(evs)
    await stack.publish(events)
    await stack.wait_projected(timeout=300)
    await stack.sweep()
    return out


async def start_services(shape: Shape, opts: Options) -> None:
    stack = shape.stack
    await stack.start("projector")
    first = await stack.start("api")
    for _ in range(opts.api_processes - 1):
        await stack.start("api", port=first.port)
    first = await stack.start("stream")
    for _ in range(opts.stream_processes - 1):
        await stack.start("stream", port=first.port)


# --------------------------------------------------------------------------- load


async def generator(url: str, rate: float, seconds: float, keys_file: Path) -> dict:
    cmd = [sys.executable, "-m", "tests.benchmarks.openloop", url, "--rate", f"{rate:.2f}", "--seconds", f"{seconds:g}"]
    proc = await asyncio.create_subprocess_exec(
        *cmd, "--keys", str(keys_file), cwd=REPO, stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL
    )
    try:
        async with asyncio.timeout(seconds + GENERATOR_MARGIN_S):
            out, _ = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"the open-loop generator on {url} did not finish") from None
    if proc.returncode != 0:
        raise RuntimeError(f"the open-loop generator on {url} exited {proc.returncode}")
    return json.loads(out.decode().strip().splitlines()[-1])


async def flow(stack: ServiceStack, rate: float, seconds: float, first_id: int) -> tuple[dict[int, float], int]:
    """Posts at ``rate``/s for ``seconds``, each produced with acks=all; {post id: produce time}
    and how many went out more than 100 ms after their due time."""
    count = max(1, int(rate * seconds))
    events = posts(first_id, count)
    sent: dict[int, float] = {}
    late = 0
    async with stack.publisher() as send:
        t0 = time.monotonic()
        for i, event in enumerate(events):
            due = t0 + i / rate
            now = time.monotonic()
            if now < due:
                await asyncio.sleep(due - now)
            elif now - due > 0.1:
                late += 1
            sent[event.data.id] = time.monotonic()
            async with asyncio.timeout(30):
                await send([event])
    return sent, late


def merged_counts(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for k, n in c.items():
            out[k] = out.get(k, 0) + n
    return out


async def backends(dsn: str) -> int:
    """Client connections PostgreSQL holds to the run's database now (this one excluded): the
    pooler's server connections and the services' direct ones."""
    async with connect(dsn) as conn:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            )
        )


def hist_percentile(hist: dict[int, int], q: float) -> float | None:
    total = sum(hist.values())
    if not total:
        return None
    rank = max(1, int(round(q / 100 * total + 0.5)))
    seen = 0
    for ms in sorted(hist):
        seen += hist[ms]
        if seen >= rank:
            return float(ms)
    return float(max(hist))


async def capacity(opts: Options) -> dict[str, Any]:
    """One capacity run (see the module's docstring); returns its report."""
    raise_nofile()
    began = time.monotonic()
    report: dict[str, Any] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "options": opts.__dict__,
        "machine": machine(),
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
        "target_p99_ms": TARGET_P99_MS,
    }
    async with production_shape(opts) as shape:
        stack = shape.stack
        report["kafka_started_s"] = round(shape.kafka_started_s, 1)
        await start_services(shape, opts)
        preload = posts(1, PRELOADED_POSTS)
        await stack.publish([*catalog(), *preload])
        pairs = await provision_many(stack, opts.workspaces)
        await stack.wait_projected(timeout=300)
        word = max(preload[-1].data.translations[0].title.split(), key=len).strip(".,:;!?'\"").lower()
        api_url = shape.api[0].url + BASE
        stream_url = shape.streams[0].url.replace("http", "ws") + BASE + "/stream"

        folder = Path(tempfile.mkdtemp(prefix="tickerwire-capacity-run-"))
        clients: ConnectionHolders | None = None
        try:
            keys_file = folder / "keys.txt"
            keys_file.write_text("\n".join(k for _, k in pairs) + "\n")
            # Every endpoint answers 200 before the load (a wrong path would measure 404s).
            paths = {label: path.format(id=preload[-1].data.id, word=word) for label, path, _ in ENDPOINTS}
            async with aiohttp.ClientSession() as http:
                for label, path in paths.items():
                    async with http.get(api_url + path, headers={"Authorization": f"Bearer {pairs[0][1]}"}) as r:
                        if r.status != 200:
                            raise RuntimeError(f"{label}: {r.status} {(await r.text())[:300]}")

            slots = [key for _, key in pairs for _ in range(PER_WORKSPACE)]
            if opts.connections > len(slots):
                raise RuntimeError(
                    f"{opts.connections} connections need {opts.connections // PER_WORKSPACE} workspaces"
                )
            urls = [f"{stream_url}?key={key}" for key in slots[: opts.connections]]
            clients = ConnectionHolders(urls, opts.client_processes, folder)
            connect_began = time.monotonic()
            report["stream_handshakes_retried"] = await clients.ready()
            report["stream_connect_s"] = round(time.monotonic() - connect_began, 1)
            async with aiohttp.ClientSession() as http:
                spread = [int(await gauge(s.admin_url, "tickerwire_stream_connections", http)) for s in shape.streams]
            report["connections_per_stream_process"] = spread

            acct = Accounting()
            for n, node in enumerate(shape.cluster.nodes, start=1):
                acct.watch(f"kafka node {n}", node.pid)
            acct.watch("postgresql (postmaster + backends)", shape.postgres.pid, with_children=True)
            acct.watch("pgbouncer", shape.bouncer.proc.pid if shape.bouncer.proc else None)
            for s in stack.services:
                acct.watch(f"{s.name} :{s.admin_port}", s.proc.pid)
            for n, p in enumerate(clients.procs, start=1):
                acct.watch(f"stream client process {n}", p.pid)
            acct.watch("driver (this process: posts producer)", os.getpid())
            acct.begin()
            sampler = asyncio.create_task(acct.sampling())
            load0 = os.getloadavg()
            stalls0 = stall_totals()
            t0 = time.monotonic()
            try:
                gens = [
                    asyncio.create_task(generator(api_url + paths[label], opts.rate * w, opts.seconds, keys_file))
                    for label, _, w in ENDPOINTS
                ]
                sent, late_posts = await flow(stack, opts.posts_per_s, opts.seconds, PRELOADED_POSTS + 1)
                results = await asyncio.gather(*gens)
            finally:
                sampler.cancel()
            wall = time.monotonic() - t0
            stalls1 = stall_totals()
            report["stalled_share"] = (
                {k: round((stalls1[k] - stalls0[k]) / 1e6 / wall, 3) for k in stalls0} if stalls0 and stalls1 else None
            )
            report["postgresql_connections"] = await backends(stack.database_url)
            report["load_average_during"] = [round(x, 2) for x in os.getloadavg()]
            report["load_average_at_window_start"] = [round(x, 2) for x in load0]
            report["window_s"] = round(wall, 1)
            processes = acct.end(wall)

            sent_file = folder / "sent.json"
            sent_file.write_text(json.dumps(sent))
            client_reports = await clients.report(sent_file)
            clients.wait()

            endpoints = []
            for (label, _, w), r in zip(ENDPOINTS, results):
                endpoints.append(
                    {
                        "endpoint": label,
                        "target_rate": round(opts.rate * w, 1),
                        "achieved_rate": round(r["achieved_rate"], 1),
                        "requests": r["requests"],
                        "p50_ms": r["p50_ms"],
                        "p99_ms": r["p99_ms"],
                        "max_ms": r["max_ms"],
                        "errors": r["errors"],
                        "unanswered": r["unanswered"],
                        "skipped": r["skipped"],
                        "held": r["held"],
                        "generator_cpu": round(r["cpu_share"], 3),
                    }
                )
            report["endpoints"] = endpoints
            hist: dict[int, int] = {}
            for c in client_reports:
                for ms, n in c["hist_ms"].items():
                    hist[int(ms)] = hist.get(int(ms), 0) + n
            report["stream"] = {
                "connections": sum(c["connections"] for c in client_reports),
                "closed_by_server": sum(c["closed_by_server"] for c in client_reports),
                "close_codes": merged_counts(c.get("close_codes", {}) for c in client_reports),
                "posts_published": len(sent),
                "posts_published_late": late_posts,
                "deliveries": sum(c["deliveries"] for c in client_reports),
                "deliveries_expected": len(sent) * LOCALES * opts.connections,
                "duplicates": sum(c["duplicates"] for c in client_reports),
                "connections_missing_a_post": sum(c["missing_a_post"] for c in client_reports),
                "delivery_p50_ms": hist_percentile(hist, 50),
                "delivery_p99_ms": hist_percentile(hist, 99),
                "delivery_max_ms": float(max(hist)) if hist else None,
            }
            generators_cpu = sum(r["cpu_share"] for r in results) * opts.seconds
            processes["open-loop generators (7 processes)"] = {
                "cpu_seconds": round(generators_cpu, 2),
                "cores": round(generators_cpu / wall, 3),
                "peak_mb": 0.0,
            }
            report["processes"] = processes
            report["per_core"] = per_core(report, processes, wall)
        finally:
            if clients is not None:
                clients.kill()
            shutil.rmtree(folder, ignore_errors=True)
    report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    report["run_s"] = round(time.monotonic() - began, 1)
    report["verdict"] = verdict(report)
    if report["verdict"]["met"]:
        shutil.rmtree(shape.stack.log_dir, ignore_errors=True)
    else:
        report["logs_kept_in"] = str(shape.stack.log_dir)
    return report


def per_core(report: dict, processes: dict[str, dict[str, float]], wall: float) -> dict[str, float | None]:
    """The figures the rules rest on: work done per CPU second of the process kind doing it."""

    def cores(prefix: str) -> float:
        return sum(v["cpu_seconds"] for k, v in processes.items() if k.startswith(prefix))

    requests = sum(e["requests"] for e in report["endpoints"])
    stream = report["stream"]
    events = stream["posts_published"]
    return {
        "api_requests_per_cpu_second": round(requests / cores("api"), 1) if cores("api") else None,
        "api_cores": round(cores("api") / wall, 3),
        "stream_deliveries_per_cpu_second": round(stream["deliveries"] / cores("stream :"), 1)
        if cores("stream :")
        else None,
        "stream_cores": round(cores("stream :") / wall, 3),
        "projector_cores": round(cores("projector") / wall, 3),
        "projector_post_events_per_cpu_second": round(events / cores("projector"), 1) if cores("projector") else None,
        "postgresql_cores": round(cores("postgresql") / wall, 3),
        "kafka_cores": round(cores("kafka") / wall, 3),
    }


def verdict(report: dict) -> dict[str, Any]:
    worst = max((e["p99_ms"] or 0.0) for e in report["endpoints"])
    errors = sum(e["errors"] + e["skipped"] for e in report["endpoints"])
    s = report["stream"]
    return {
        "api_p99_worst_ms": worst,
        "api_errors": errors,
        "all_rates_held": all(e["held"] for e in report["endpoints"]),
        "stream_complete": s["connections_missing_a_post"] == 0 and s["deliveries"] >= s["deliveries_expected"],
        "met": worst < TARGET_P99_MS
        and errors == 0
        and (s["delivery_p99_ms"] or 0) < TARGET_P99_MS
        and s["connections_missing_a_post"] == 0,
    }


# --------------------------------------------------------------------------- report


def render(report: dict) -> str:
    o, m, s, v = report["options"], report["machine"], report["stream"], report["verdict"]
    lines = [
        f"Generated by `python -m tests.benchmarks.capacity --seconds {o['seconds']:g} --rate {o['rate']:g} "
        f"--connections {o['connections']} --workspaces {o['workspaces']} --posts-per-s {o['posts_per_s']:g} --doc` "
        f"on {report['date']}; "
        "do not edit by hand.",
        "",
        f"- Machine: {m['nproc']} CPUs, {m['cpu']}, {m['memory_gb']} GB, Python {m['python']}, Linux {m['kernel']}",
        f"- Load average before / at the window's start / at its end / after: {report['load_average_before']} / "
        f"{report['load_average_at_window_start']} / {report['load_average_during']} / {report['load_average_after']}",
        "- Share of the window some task waited for a CPU / for I/O (/proc/pressure): "
        + (
            f"{report['stalled_share']['cpu']:.0%} / {report['stalled_share']['io']:.0%}"
            if report.get("stalled_share")
            else "not available"
        ),
        f"- Window: {report['window_s']} s; {o['rate']:g} req/s over {o['workspaces']} workspaces' keys; "
        f"{s['connections']} stream connections ({report['connections_per_stream_process']} per stream process, "
        f"{report['stream_handshakes_retried']} handshakes retried, all open in {report['stream_connect_s']} s); "
        f"{o['posts_per_s']:g} posts/s (3 locales, acks=all)",
        f"- PostgreSQL: {report['postgresql_connections']} connections to the database at the window's end "
        "(PgBouncer's server connections and the services' direct ones)",
        f"- Target: p99 < {report['target_p99_ms']:g} ms, 0 errors; met: **{'yes' if v['met'] else 'no'}**",
        "",
        "| endpoint | target req/s | achieved | requests | p50 ms | p99 ms | max ms | errors | skipped |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in report["endpoints"]:
        lines.append(
            f"| `{e['endpoint']}` | {e['target_rate']:g} | {e['achieved_rate']:g} | {e['requests']:,} | "
            f"{e['p50_ms']:.1f} | {e['p99_ms']:.1f} | {e['max_ms']:.1f} | {e['errors']} | {e['skipped']} |"
        )
    lines += [
        "",
        f"Stream: {s['posts_published']} posts published ({s['posts_published_late']} over 100 ms late), "
        f"{s['deliveries']:,} deliveries of {s['deliveries_expected']:,} expected, {s['duplicates']} duplicates, "
        f"{s['connections_missing_a_post']} connections missing a post, {s['closed_by_server']} closed by the server {s['close_codes']}; "
        f"produce-to-delivery p50 {s['delivery_p50_ms']} ms, p99 {s['delivery_p99_ms']} ms, max {s['delivery_max_ms']} ms.",
        "",
        "| process | CPU s | cores | peak memory MB |",
        "|---|---|---|---|",
    ]
    for label, p in report["processes"].items():
        lines.append(f"| {label} | {p['cpu_seconds']:.1f} | {p['cores']:.2f} | {p['peak_mb']:.0f} |")
    pc = report["per_core"]
    lines += [
        "",
        "Per core: api "
        f"{pc['api_requests_per_cpu_second']} requests per CPU second ({pc['api_cores']} cores for both processes); "
        f"stream {pc['stream_deliveries_per_cpu_second']} deliveries per CPU second ({pc['stream_cores']} cores); "
        f"projector {pc['projector_cores']} cores; PostgreSQL {pc['postgresql_cores']} cores; Kafka {pc['kafka_cores']} cores.",
        "",
        "PostgreSQL's memory is PSS (shared buffers split between the backends), the others' RSS.",
    ]
    return "\n".join(lines)


def write_doc(report: dict, path: Path = DOC) -> None:
    text = path.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(head + BEGIN + "\n" + render(report) + "\n" + END + tail)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.capacity")
    d = Options()
    parser.add_argument("--seconds", type=float, default=d.seconds)
    parser.add_argument("--rate", type=float, default=d.rate, help="requests/s in total")
    parser.add_argument("--connections", type=int, default=d.connections)
    parser.add_argument("--workspaces", type=int, default=d.workspaces)
    parser.add_argument("--posts-per-s", type=float, default=d.posts_per_s)
    parser.add_argument("--out", type=Path, default=REPO / "bench-results")
    parser.add_argument("--doc", action="store_true", help="write the run into docs/capacity.md")
    args = parser.parse_args(argv)
    opts = Options(args.seconds, args.rate, args.connections, args.workspaces, args.posts_per_s)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    report = asyncio.run(capacity(opts))
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = report["date"].replace(":", "").replace("-", "")
    (args.out / f"capacity-{stamp}.json").write_text(json.dumps(report, indent=2) + "\n")
    print(render(report))
    if args.doc:
        write_doc(report)
    return report


if __name__ == "__main__":
    if sys.argv[1:2] == ["client"]:
        asyncio.run(hold_connections(sys.argv[2], float(sys.argv[3])))
    else:
        main()
