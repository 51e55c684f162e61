"""Shared helpers of the benchmark suite: settings, statistics, result rows, the shared
infrastructure (PostgreSQL, broker, service stacks), process accounting and load generation.

A benchmark module exposes ``NAME`` and ``async def run(ctx: Context) -> Result``. A
:class:`Result` holds one :class:`Metric` per measured figure; each metric keeps the raw
per-run values of the product and of its baseline, so the runner can print and store the
median, min and max of each and their ratio.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import AsyncIterator, Callable

import aiohttp
import asyncpg

from tests.support.brokers import TEST_KAFKA_SETTINGS
from tests.support.stack import ServiceStack, wait_http
from tickerwire.devstack.demo import dataset
from tickerwire.devstack.embedded.apache_kafka import ApacheKafka
from tickerwire.devstack.embedded.ports import free_port
from tickerwire.devstack.embedded.postgres import DURABLE_SETTINGS, EmbeddedPostgres, scratch_database
from tickerwire.schemas.models import PostStatus
from tickerwire.services.readmodel.migrate import migrate

log = logging.getLogger("bench")

REPO = Path(__file__).resolve().parents[2]
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Settings:
    smoke: bool
    runs: int  # runs of the product and of the baseline, alternated

    @classmethod
    def create(cls, smoke: bool, runs: int | None = None) -> "Settings":
        return cls(smoke=smoke, runs=runs or (1 if smoke else 5))

    def pick(self, smoke, full):
        return smoke if self.smoke else full


# --------------------------------------------------------------------------- statistics


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sample."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[index]


@dataclass
class Summary:
    median: float
    min: float
    max: float
    runs: int

    @classmethod
    def of(cls, values: list[float]) -> "Summary | None":
        return cls(statistics.median(values), min(values), max(values), len(values)) if values else None


@dataclass
class Metric:
    """One figure: product vs baseline over alternated runs. ``higher_is_better`` sets the ratio's direction."""

    name: str
    unit: str
    product: list[float] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)
    higher_is_better: bool = True
    #: Human-readable target and a predicate over (product median, ratio) that says whether it is met.
    target: str = ""
    check: Callable[[float, float | None], bool] | None = field(default=None, repr=False)
    note: str = ""

    def ratio(self) -> float | None:
        p, b = Summary.of(self.product), Summary.of(self.baseline)
        if p is None or b is None or b.median == 0 or p.median == 0:
            return None
        # Always "product relative to baseline" where >1 would mean the product is better.
        return p.median / b.median if self.higher_is_better else b.median / p.median

    def met(self) -> bool | None:
        p = Summary.of(self.product)
        if self.check is None or p is None:
            return None
        return bool(self.check(p.median, self.ratio()))

    def to_json(self) -> dict:
        return {
            "metric": self.name,
            "unit": self.unit,
            "product": asdict(s) if (s := Summary.of(self.product)) else None,
            "baseline": asdict(s) if (s := Summary.of(self.baseline)) else None,
            "product_runs": [round(v, 4) for v in self.product],
            "baseline_runs": [round(v, 4) for v in self.baseline],
            "ratio": self.ratio(),
            "higher_is_better": self.higher_is_better,
            "target": self.target,
            "met": self.met(),
            "note": self.note,
        }


@dataclass
class Result:
    benchmark: str
    status: str = "ok"  # ok | n/a | error
    metrics: list[Metric] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def metric(self, name: str, unit: str, **kw) -> Metric:
        m = Metric(name, unit, **kw)
        self.metrics.append(m)
        return m

    def to_json(self) -> dict:
        return {
            "benchmark": self.benchmark,
            "status": self.status,
            "seconds": round(self.seconds, 1),
            "notes": self.notes,
            "metrics": [m.to_json() for m in self.metrics],
        }


class Deadline:
    """A bound on one of a benchmark's waits: ``check()`` raises once ``seconds`` have passed, so a
    benchmark waiting on something that never comes fails with what it waited for instead of
    hanging its run (and the CI run around it)."""

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds, self.what = seconds, what
        self.at = time.monotonic() + seconds

    def check(self, process: subprocess.Popen | None = None) -> None:
        """Also raises if ``process`` (the one expected to do the work) has exited."""
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{self.what}: the process doing it exited with status {process.returncode}")
        if time.monotonic() > self.at:
            raise RuntimeError(f"{self.what}: not done within {self.seconds:.0f} s")


async def output_within(proc: asyncio.subprocess.Process, seconds: float, what: str) -> bytes:
    """``proc``'s standard output once it exits; killed, and a RuntimeError naming ``what``, if it
    has not exited within ``seconds``."""
    try:
        return (await asyncio.wait_for(proc.communicate(), seconds))[0]
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"{what} did not finish within {seconds:g} s") from None


# --------------------------------------------------------------------------- processes


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as fh:
        fields_ = fh.read().rsplit(")", 1)[1].split()
    return (int(fields_[11]) + int(fields_[12])) / CLK_TCK


def proc_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as fh:
        return int(fh.read().split()[1]) * PAGE / 1e6


def raise_nofile() -> int:
    """Raise the soft open-files limit to the hard limit (the stream benchmark holds thousands of sockets)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class RssSampler:
    """Samples the RSS of named pids every ``every`` seconds while active; keeps the peak of each."""

    def __init__(self, every: float = 0.25) -> None:
        self.every = every
        self.peak: dict[str, float] = {}
        self._task: asyncio.Task | None = None
        self._pids: dict[str, int] = {}

    def watch(self, label: str, pid: int) -> None:
        self._pids[label] = pid

    def sample(self) -> None:
        for label, pid in list(self._pids.items()):
            with contextlib.suppress(OSError):
                self.peak[label] = max(self.peak.get(label, 0.0), proc_rss_mb(pid))

    async def _loop(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.every)

    def __enter__(self) -> "RssSampler":
        self._task = asyncio.create_task(self._loop())
        return self

    def __exit__(self, *exc) -> None:
        self.sample()
        if self._task:
            self._task.cancel()


# --------------------------------------------------------------------------- infrastructure


@dataclass
class Context:
    """What every benchmark gets: settings, the shared servers, and the memory figures they gather."""

    settings: Settings
    pg_dsn: str
    kafka_bootstrap: str
    #: label -> list of peak RSS (MB) observations, filled by the load benchmarks for the memory row.
    memory: dict[str, list[float]] = field(default_factory=dict)
    out_dir: Path = Path("bench-results")

    def record_rss(self, sampler: RssSampler, prefix: str = "") -> None:
        for label, mb in sampler.peak.items():
            self.memory.setdefault(prefix + label, []).append(mb)

    @contextlib.asynccontextmanager
    async def database(self) -> AsyncIterator[str]:
        async with scratch_database(self.pg_dsn, prefix="bench_") as dsn:
            yield dsn

    @contextlib.asynccontextmanager
    async def read_model(self) -> AsyncIterator[asyncpg.Connection]:
        """A connection to a fresh benchmark database, migrated, its read model ``rm`` first on the search_path."""
        async with self.database() as dsn:
            conn = await asyncpg.connect(dsn)
            try:
                await migrate(conn, "rm")
                await conn.execute("SET search_path TO rm, public")
                yield conn
            finally:
                await conn.close()

    @contextlib.asynccontextmanager
    async def stack(self, **extra_env: str) -> AsyncIterator[ServiceStack]:
        """A migrated database, fresh topics and a ServiceStack (no process started yet). Its
        processes' logs are removed once the benchmark is done with it, kept (and named) when it
        failed; under the test suite they live in the session's own folder, which it removes."""
        async with self.database() as dsn:
            stack = ServiceStack(dsn, self.kafka_bootstrap, f"b{uuid.uuid4().hex[:8]}", extra_env=dict(extra_env))
            done = False
            try:
                await stack.prepare()
                yield stack
                done = True
            finally:
                stack.stop_all()
                if not done:
                    log.warning("the services' logs of the failed benchmark are kept in %s", stack.log_dir)
                elif "TICKERWIRE_TEST_LOG_ROOT" not in os.environ:
                    shutil.rmtree(stack.log_dir, ignore_errors=True)


#: PostgreSQL's own defaults: every commit flushed. The embedded server turns them off for speed.
DURABLE = DURABLE_SETTINGS


@contextlib.contextmanager
def infrastructure(durable: bool = False):
    """(pg_dsn, kafka_bootstrap): from TICKERWIRE_TEST_* variables, else embedded servers
    (``durable``: the embedded PostgreSQL with fsync, synchronous_commit and full_page_writes on)."""
    import tempfile

    with contextlib.ExitStack() as stack:
        dsn = os.environ.get("TICKERWIRE_TEST_DATABASE_URL")
        if not dsn:
            root = Path(tempfile.mkdtemp(prefix="tickerwire-bench-pg-"))
            stack.callback(shutil.rmtree, root, True)
            dsn = stack.enter_context(EmbeddedPostgres(root / "data", settings=DURABLE if durable else None)).dsn
        bootstrap = os.environ.get("TICKERWIRE_TEST_KAFKA_BOOTSTRAP_SERVERS")
        if not bootstrap:
            kafka_root = Path(tempfile.mkdtemp(prefix="tickerwire-bench-kafka-"))
            stack.callback(shutil.rmtree, kafka_root, True)
            bootstrap = stack.enter_context(ApacheKafka(kafka_root, settings=TEST_KAFKA_SETTINGS)).bootstrap_servers
        yield dsn, bootstrap


WIDE_OPEN = dict(rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000, stream_connection_limit=10_000)


async def provision_wide_open(stack: ServiceStack, workspace_id: str = "ws_bench") -> str:
    """A workspace whose limits never throttle the benchmarks; returns its key."""
    return await stack.provision(workspace_id, **WIDE_OPEN)


# --------------------------------------------------------------------------- HTTP


async def probe(url: str, headers: dict[str, str]) -> tuple[int, bytes, str | None, list[tuple[str, str]]]:
    """(status, body, reason-if-missing, response headers), asked for like ``wrk`` asks (no
    Accept-Encoding). A 404 that is not the spec's JSON envelope means the route does not exist."""
    async with aiohttp.ClientSession(skip_auto_headers=("Accept-Encoding",)) as session:
        async with session.get(url, headers=headers) as resp:
            body = await resp.read()
            missing = None
            if resp.status == 404 and (not body.startswith(b'{"error"') or b"No such endpoint" in body):
                missing = "n/a (endpoint missing: 404)"
            elif resp.status != 200:
                missing = f"n/a (status {resp.status}: {body[:120].decode(errors='replace')})"
            return resp.status, body, missing, list(resp.headers.items())


@dataclass
class LoadResult:
    requests: int
    errors: int
    seconds: float
    latencies_ms: list[float]
    cpu_seconds: float

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def cpu_share(self) -> float:
        """CPU seconds of the load generator per wall second (1.0 = one core busy)."""
        return self.cpu_seconds / self.seconds if self.seconds else 0.0


async def closed_loop(url: str, headers: dict[str, str], seconds: float, connections: int) -> LoadResult:
    """Python fallback for peak throughput: ``connections`` workers sending back to back."""
    latencies: list[float] = []
    errors = 0
    conn = aiohttp.TCPConnector(limit=connections)
    cpu0, t0 = time.process_time(), time.perf_counter()
    deadline = t0 + seconds
    async with aiohttp.ClientSession(connector=conn) as session:

        async def worker() -> None:
            nonlocal errors
            while (start := time.perf_counter()) < deadline:
                try:
                    async with session.get(url, headers=headers) as resp:
                        await resp.read()
                        if resp.status != 200:
                            errors += 1
                except aiohttp.ClientError:
                    errors += 1
                latencies.append((time.perf_counter() - start) * 1000)

        await asyncio.gather(*(worker() for _ in range(connections)))
    wall = time.perf_counter() - t0
    return LoadResult(len(latencies), errors, wall, latencies, time.process_time() - cpu0)


def require_wrk() -> str:
    """The path of ``wrk``, the closed-loop generator of the full run; missing is an error, never a
    silent switch to a slower generator that would inflate every ratio."""
    path = shutil.which("wrk")
    if path is None:
        raise RuntimeError("wrk is required for a full benchmark run and is not installed: apt-get install -y wrk")
    return path


async def open_loop_process(url: str, headers: dict[str, str], rate: float, seconds: float) -> dict:
    """Fixed-rate load from ``tests.benchmarks.openloop`` in its own process (see there); returns its
    JSON report, whose ``held`` says whether it achieved the rate."""
    cmd = [sys.executable, "-m", "tests.benchmarks.openloop", url, "--rate", f"{rate:.1f}", "--seconds", f"{seconds:g}"]
    for name, value in headers.items():
        cmd += ["--header", f"{name}: {value}"]
    proc = await asyncio.create_subprocess_exec(
        *cmd, cwd=REPO, stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL
    )
    out = await output_within(proc, seconds + 120, f"the open-loop generator's {seconds:g} s run")
    if proc.returncode != 0:
        raise RuntimeError(f"open-loop generator exited {proc.returncode}")
    import json

    return json.loads(out.decode().strip().splitlines()[-1])


async def pg_settings(dsn: str) -> dict[str, str]:
    """The durability settings every figure depends on."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        return {
            name: await conn.fetchval(f"SHOW {name}")
            for name in ("fsync", "synchronous_commit", "full_page_writes", "server_version")
        }
    finally:
        await conn.close()


async def db_transactions(dsn: str) -> int:
    """Committed plus rolled-back transactions of the database so far (pg_stat_database, flushed)."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await asyncio.sleep(1.2)  # backends flush their pending statistics at most every second
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        return int(
            await conn.fetchval(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
            )
        )
    finally:
        await conn.close()


# --------------------------------------------------------------------------- data and processes

THREE_LOCALES = ("en-US", "es-ES", "fr-FR")


def catalog(tokens: int = 500) -> list:
    """Locales, categories and ``tokens`` tokens of the demo dataset."""
    return dataset.catalog_events(now=datetime.now(timezone.utc), tokens=tokens)


def posts(first_id: int, count: int, locales: tuple[str, ...] = THREE_LOCALES, seed: int = 7) -> list:
    """``count`` published posts with ids from ``first_id``, each translated into exactly ``locales``
    (which must start with en-US); published_at is now, rising with the id."""
    rng = random.Random(f"bench/{seed}/{first_id}")
    pool = dataset.ticker_pool(seed)
    now = datetime.now(timezone.utc)
    out = []
    for i in range(count):
        at = now + timedelta(microseconds=i)
        event = dataset.build_post(
            rng,
            post_id=first_id + i,
            status=PostStatus.published,
            published_at=at,
            emitted_at=at,
            locales=locales,
            pool=pool,
        )
        assert len(event.data.translations) == len(locales)
        out.append(event)
    return out


@contextlib.asynccontextmanager
async def baseline_process(kind: str, *args: str) -> AsyncIterator[tuple[subprocess.Popen, str]]:
    """Start ``python -m tests.benchmarks.baselines KIND`` on a free port; yields (process, base url)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.benchmarks.baselines", kind, "--port", str(port), *args],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_http(url + "/readyz")
        yield proc, url
    finally:
        proc.terminate()
        proc.wait(10)
