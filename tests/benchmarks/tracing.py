"""Tracing's cost: ``/posts`` requests/s and stream deliveries/s with tracing not installed,
installed but off, on at 1 % sampling and on at 100 %, all in one run.

Four stacks run side by side on the same broker and PostgreSQL server, each with its own
database, topics, projector, api and stream, and the same posts:

- **not installed**: the processes cannot import ``opentelemetry`` at all (a ``sitecustomize`` on
  their ``PYTHONPATH`` refuses it, as a machine without the ``tracing`` extra would); the baseline
  column of every row;
- **installed, off**: the default, no ``OTEL_EXPORTER_OTLP_ENDPOINT``;
- **on, 1 %** and **on, 100 %**: ``OTEL_TRACES_SAMPLER=parentbased_traceidratio`` with 0.01 and
  1.0, exporting to a receiver in its own process that reads and discards each export
  (``baselines otlp``): what sending spans costs the product, not what storing them costs.

Two phases. First the 2 % floor, "installed, off" against "not installed", with only those two
stacks started: ``PAIRS`` pairs of runs, each pair's order the reverse of the last one's (A B,
B A, ...), so a drift of the machine weighs on both sides alike; besides requests/s, the api
process's CPU time per request (every thread's time on a CPU, from ``/proc``), which another process
competing for the cores hardly moves; and every pair runs on new api and stream processes, since
two processes of the same code differ by a few percent by themselves (hash seeds, where their
objects land in memory). Then the two "on" stacks start and each run measures
them and "not installed" in turn (the order rotates from run to run). A run of a variant: the
``/posts`` peak from ``wrk`` (closed loop; the Python loop in a smoke run), then a burst of
one-locale posts to stream clients held by client processes (``tests.benchmarks.stream``),
deliveries/s from the first publish to the last receipt. Ratios are each variant over "not
installed" in the same phase of the same run. The 2 % floor is held on ``/posts`` requests/s
(the api process is the bottleneck, its core busy) and on both processes' CPU per unit of work;
stream deliveries/s are reported, not held to it: the client processes, which parse every
message on the same two cores, bound them.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.stack import BASE
from tickerwire.schemas.models import encode_event, entity_key
from tickerwire.schemas.topics import POSTS, topic_name
from tickerwire.services.common import kafka

from .common import (
    Context,
    Metric,
    Result,
    baseline_process,
    catalog,
    closed_loop,
    posts,
    provision_wide_open,
    raise_nofile,
)
from .read_api import wrk_peak
from .stream import CONNECTION_MARGIN, Clients, figures

NAME = "tracing"

NOT_INSTALLED = "not installed"
#: The variants measured against "not installed", with the environment each stack's processes get.
VARIANTS = ("installed, off", "on, 1 % sampled", "on, 100 % sampled")
#: Seconds of each ``wrk`` peak run.
PEAK_S = 5.0
#: Pairs of runs of the floor's phase ("installed, off" and "not installed"), in a full run.
PAIRS = 8
CLIENT_BOUND = (
    "bound by the client processes parsing every message on the same cores, not by the stream: "
    "the floor is held on the stream's CPU per delivery"
)
#: Posts per stream burst in a full run (to 1,000 clients: 200,000 deliveries, about 1.5 s).
BURST = 200
#: The most "installed, off" may cost against "not installed".
OFF_FLOOR = 0.98

#: Put first on the processes' PYTHONPATH: ``opentelemetry`` cannot be imported, as on a machine
#: without the ``tracing`` extra.
BLOCKER = '''
import sys


class _NotInstalled:
    """Refuses every opentelemetry module, as if the package were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
'''


def blocker(folder: Path) -> str:
    """A ``sitecustomize`` refusing opentelemetry in ``folder``; checked to work before use."""
    (folder / "sitecustomize.py").write_text(BLOCKER)
    probe = subprocess.run(
        [sys.executable, "-c", "import opentelemetry.trace"],
        env={"PYTHONPATH": str(folder), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        timeout=60,
    )
    if probe.returncode == 0:
        raise RuntimeError("the not-installed variant could still import opentelemetry")
    return str(folder)


def environment(variant: str, sink: str, blocked: str) -> dict[str, str]:
    if variant == NOT_INSTALLED:
        return {"PYTHONPATH": blocked}
    if variant == "installed, off":
        return {}
    ratio = "0.01" if variant.startswith("on, 1 %") else "1.0"
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": sink,
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": ratio,
    }


class Stack:
    """One variant's stack, started: its urls, its api and stream processes, and the topic its
    posts go to. :meth:`fresh` replaces the api and stream processes with new ones."""

    def __init__(self, variant: str, stack, key: str, clients: int) -> None:
        self.variant, self.stack, self.key, self.clients = variant, stack, key, clients
        self.topic = topic_name(stack.topic_prefix, POSTS)
        self.api = self.stream = None

    async def fresh(self) -> None:
        for service in (self.api, self.stream):
            if service is not None:
                self.stack.stop(service)
        self.api = await self.stack.start("api")
        self.stream = await self.stack.start("stream", TICKERWIRE_MAX_CONNECTIONS=str(self.clients + CONNECTION_MARGIN))

    @property
    def posts_url(self) -> str:
        return self.api.url + BASE + "/posts"

    @property
    def stream_url(self) -> str:
        return self.stream.url.replace("http", "ws") + BASE + f"/stream?key={self.key}"


async def started(
    ctx: Context, held: contextlib.AsyncExitStack, variant: str, env: dict[str, str], clients: int, count: int
) -> Stack:
    stack = await held.enter_async_context(ctx.stack(**env))
    await stack.start("projector")
    await stack.publish([*catalog(), *posts(1, count)])
    st = Stack(variant, stack, await provision_wide_open(stack), clients)
    await st.fresh()
    return st


async def deliveries(ctx: Context, stack: Stack, producer, size: int, burst: int, first_id: int) -> tuple[float, float]:
    """(deliveries/s, the stream process's CPU µs per delivery) of a burst of ``burst`` posts to
    ``size`` clients of ``stack``; the CPU is counted from the first publish to the last receipt."""
    s = ctx.settings
    clients = Clients(stack.stream_url, size, burst, s.pick(2, 4), s.pick(30.0, 90.0))
    await clients.ready()
    await asyncio.sleep(0.5)
    sent = {}
    cpu = cpu_seconds(stack.stream.proc.pid)
    for event in posts(first_id, burst, locales=("en-US",)):
        sent[event.data.id] = time.monotonic()
        await producer.send(stack.topic, value=encode_event(event), key=entity_key(event).encode())
    await producer.flush()
    receipts = await clients.receipts()
    cpu = cpu_seconds(stack.stream.proc.pid) - cpu
    await clients.finish()
    return figures(receipts, sent)[0], 1e6 * cpu / max(1, len(receipts))


def against_not_installed(result: Result, what: str, unit: str, floor: bool = True, **kw) -> dict[str, Metric]:
    """A row per variant, measured against "not installed"; with ``floor``, "installed, off" is
    held to it."""
    higher = kw.get("higher_is_better", True)
    return {
        v: result.metric(
            f"{what}, tracing {v}",
            unit,
            target=f">= {OFF_FLOOR}x not installed" if floor and v == "installed, off" else "",
            check=(lambda p, r: r is not None and r >= OFF_FLOOR) if floor and v == "installed, off" else None,
            **kw,
        )
        for v in (VARIANTS if higher else VARIANTS[:1])
    }


def cpu_seconds(pid: int) -> float:
    """CPU seconds of process ``pid`` so far, every thread, in nanoseconds (``/proc/<pid>/task/*/
    schedstat``: the time on a CPU, user and system alike). ``/proc/<pid>/stat`` counts in 10 ms
    ticks, coarser than 2 % of a stream burst's half a second of CPU."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            continue
    return total / 1e9


@dataclass(frozen=True, slots=True)
class Figures:
    """One run of one variant."""

    requests_per_s: float
    api_cpu_us: float  # per request
    deliveries_per_s: float
    stream_cpu_us: float  # per delivery


class Runs:
    """Measures one variant's stack per call: /posts peak (with the api's CPU per request) and a
    stream burst's deliveries/s."""

    def __init__(self, ctx: Context, size: int, burst: int) -> None:
        self.ctx, self.size, self.burst = ctx, size, burst
        self.next_id = 10**6
        self.use_wrk = not ctx.settings.smoke

    async def measure(self, st: Stack, producer) -> Figures:
        cpu = cpu_seconds(st.api.proc.pid)
        load = (
            wrk_peak(st.posts_url, st.key, PEAK_S)
            if self.use_wrk
            else await closed_loop(st.posts_url, {"Authorization": f"Bearer {st.key}"}, 1.0, 8)
        )
        cpu = cpu_seconds(st.api.proc.pid) - cpu
        answered = load.requests - load.errors
        pushed, push_cpu = await deliveries(self.ctx, st, producer, self.size, self.burst, self.next_id)
        self.next_id += self.burst
        return Figures(answered / load.seconds, 1e6 * cpu / max(1, load.requests), pushed, push_cpu)


async def run(ctx: Context) -> Result:
    s = ctx.settings
    result = Result(NAME)
    raise_nofile()
    size, burst, pairs = s.pick(50, 1000), s.pick(3, BURST), s.pick(1, PAIRS)
    result.notes.append(
        f"four stacks side by side, each a projector, an api and a stream on its own database and topics, "
        f"{s.pick(200, 2000)} posts each; /posts peak: "
        f"{f'wrk -t1 -c32 for {PEAK_S:g} s (closed loop)' if not s.smoke else 'smoke: python aiohttp closed loop (not comparable)'}; "
        f"stream: a burst of {burst} one-locale posts to {size} clients; "
        f"installed-off rows: {pairs} pairs of runs of the two stacks alone, each pair on new api and stream "
        "processes and in the reverse order of the last; CPU: the process's time on a CPU (schedstat, ns) over "
        "the wrk run (api) or from the first publish to the last receipt (stream); on rows: the order of the "
        "variants rotates from run to run; on: parentbased_traceidratio, exporting to a receiver that discards "
        "(baselines otlp)"
    )
    off = "installed, off"
    reads = against_not_installed(result, "/posts requests/s", "req/s")
    api_cpu = against_not_installed(result, "/posts api CPU per request", "µs", higher_is_better=False)
    # Deliveries/s measure the client processes as much as the stream: they parse every message on
    # the same two cores (about three quarters of a burst's CPU), so the floor is held on the
    # stream's own cost, its CPU per delivery. /posts requests/s are the api's (one core, busy).
    pushes = against_not_installed(result, "stream deliveries/s", "msg/s", floor=False)
    pushes["installed, off"].note = CLIENT_BOUND
    push_cpu = against_not_installed(result, "stream CPU per delivery", "µs", higher_is_better=False)
    with tempfile.TemporaryDirectory(prefix="tickerwire-bench-blocked-") as folder:
        blocked = blocker(Path(folder))
        async with baseline_process("otlp") as (_, sink), contextlib.AsyncExitStack() as held:
            runs = Runs(ctx, size, burst)
            stacks: dict[str, Stack] = {}
            producers = {}

            async def start(variant: str) -> None:
                stacks[variant] = await started(
                    ctx, held, variant, environment(variant, sink, blocked), size, s.pick(200, 2000)
                )
                producers[variant] = await held.enter_async_context(
                    kafka.started_producer(stacks[variant].stack.config, linger_ms=0)
                )

            for v in (NOT_INSTALLED, off):
                await start(v)
            for n in range(pairs):
                if n:  # a process's own layout (hash seeds, allocation) is not the variant's: new ones each pair
                    for v in (NOT_INSTALLED, off):
                        await stacks[v].fresh()
                got = {}
                for v in (NOT_INSTALLED, off) if n % 2 == 0 else (off, NOT_INSTALLED):
                    got[v] = await runs.measure(stacks[v], producers[v])
                base, mine = got[NOT_INSTALLED], got[off]
                for row, field in (
                    (reads, "requests_per_s"),
                    (api_cpu, "api_cpu_us"),
                    (pushes, "deliveries_per_s"),
                    (push_cpu, "stream_cpu_us"),
                ):
                    row[off].product.append(getattr(mine, field))
                    row[off].baseline.append(getattr(base, field))
            on = [v for v in VARIANTS if v != off]
            for v in on:
                await start(v)
            for n in range(s.runs):
                order = [NOT_INSTALLED, *on]
                order = order[n % len(order) :] + order[: n % len(order)]
                got = {v: await runs.measure(stacks[v], producers[v]) for v in order}
                for v in on:
                    reads[v].product.append(got[v].requests_per_s)
                    reads[v].baseline.append(got[NOT_INSTALLED].requests_per_s)
                    pushes[v].product.append(got[v].deliveries_per_s)
                    pushes[v].baseline.append(got[NOT_INSTALLED].deliveries_per_s)
    return result
