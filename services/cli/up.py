"""``tickerwire up``: the whole system on one machine.

Without a configured database and broker it starts an embedded PostgreSQL and a broker of its
own (``--broker``, :mod:`.up_broker`): by default the embedded Kafka-protocol broker, which
keeps the log in memory, so the database is re-created on every start to stay consistent with
it; with ``--broker apache`` an Apache Kafka whose log, and so the database too, is kept in
the state directory from one start to the next. Then it creates the topics,
applies migrations, starts the projector, the API and the stream as separate processes,
publishes the demo dataset and a live trickle, and prints where everything is. Ctrl-C or
SIGTERM stops every child and the embedded servers, leaving no process and no port behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import orjson

from ..common.runtime.config import STATE_DIR_DEFAULT, ConfigError, setting
from ..common.runtime.logs import setup_logging
from ..common.runtime.process import cancel_on_signals
from ..common.runtime.retry import Backoff, backoff_delays
from .settings import FullConfig
from .up_broker import PREFERRED_PORT, DemoState, OwnBroker, choose_broker, database_kept, demo_key_id

if TYPE_CHECKING:  # imported lazily, by `up` only
    from tickerwire.devstack.embedded.apache_kafka import ApacheKafka
    from tickerwire.devstack.embedded.broker import EmbeddedBroker
    from tickerwire.devstack.embedded.postgres import EmbeddedPostgres, EmbeddedReplica
    from tickerwire.schemas.models import AnyEvent

log = logging.getLogger("tickerwire.up")

DEMO_WORKSPACE = "ws_demo"
DEMO_EMBED = "bdg_demo0001"


def _die_with_parent() -> None:
    """Children get SIGTERM if `up` itself dies, even by SIGKILL (Linux prctl)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Child:
    """One service process of the stack, restarted with capped, jittered backoff when it dies."""

    name: str
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen | None = None
    restarts: int = 0
    started_at: float = 0.0
    restart_at: float | None = None
    delays: Iterator[float] = field(default_factory=lambda: backoff_delays(RESTART_BASE_S, RESTART_CAP_S))

    def spawn(self) -> subprocess.Popen:
        out = open(self.log_path, "ab")
        self.proc = proc = subprocess.Popen(
            [sys.executable, "-m", "tickerwire.services.cli.main", self.name],
            env=self.env,
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
            start_new_session=True,
        )
        out.close()
        self.started_at = time.monotonic()
        return proc

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


#: Child restarts: full-jitter backoff from 0.5 s, capped at 10 s; a child that ran this long
#: since its last start counts as healthy again (the backoff starts over).
RESTART_BASE_S = 0.5
RESTART_CAP_S = 10.0
HEALTHY_AFTER_S = 60.0


@dataclass
class Stack:
    state_dir: Path
    embedded: list = field(default_factory=list)
    children: list[Child] = field(default_factory=list)

    def spawn(self, name: str, env: dict[str, str]) -> Child:
        child = Child(name, env, self.state_dir / f"{name}.log")
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


def say(message: str) -> None:
    """A line on up's output (what a developer watching the terminal needs to know)."""
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {message}", flush=True)


def _port(preferred: int) -> int:
    from tickerwire.devstack.embedded.ports import free_port, port_is_free

    return preferred if port_is_free(preferred) else free_port()


class UpError(Exception):
    """A reason ``up`` refuses to start, told in one line."""


@dataclass
class Embedded:
    """The embedded servers ``up`` started (None where a configured one is used)."""

    postgres: EmbeddedPostgres | None = None
    broker: EmbeddedBroker | ApacheKafka | None = None
    #: Which broker of its own ``up`` started (None: a configured one).
    own: OwnBroker | None = None
    #: Streaming replicas of the embedded PostgreSQL (``--replicas N``), the API reading from them.
    replicas: list[EmbeddedReplica] = field(default_factory=list)


def start_embedded(stack: Stack, args) -> tuple[str, str, Embedded]:
    from tickerwire.devstack.embedded.postgres import PRIMARY_REPLICATION_SETTINGS, EmbeddedPostgres, EmbeddedReplica

    dsn = args.database_url
    replicas = getattr(args, "replicas", 0) or 0
    if dsn and replicas:
        raise UpError(
            "--replicas starts replicas of the embedded PostgreSQL; a configured database's replicas are "
            "configured with TICKERWIRE_DATABASE_READ_URLS"
        )
    bootstrap = args.kafka_bootstrap_servers
    if dsn and not bootstrap:
        # The embedded broker keeps the log in memory: its next start would be an empty log
        # under a read model that remembers positions in the old one (and an Apache Kafka's log
        # in the state directory is as easily deleted without the database knowing).
        raise UpError(
            "a configured database needs a configured broker too (--kafka or TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS): "
            "the embedded broker forgets its log on every start, which the database would not"
        )
    try:
        own = choose_broker(getattr(args, "broker", None), bootstrap, stack.state_dir)
    except ValueError as exc:
        raise UpError(str(exc)) from None
    parts = Embedded(own=own)
    if own is not None:
        broker, bootstrap = _start_server(own.make, PREFERRED_PORT)
        stack.embedded.append(broker)
        parts.broker = broker
    if not dsn:
        data = stack.state_dir / "pgdata"
        if not database_kept(own, stack.state_dir):
            # A new log (the embedded broker's always is): the read model starts empty too.
            shutil.rmtree(data, ignore_errors=True)
        settings = PRIMARY_REPLICATION_SETTINGS if replicas else None
        pg, dsn = _start_server(
            lambda port: EmbeddedPostgres(
                data, port=port, log_path=stack.state_dir / "postgres.log", settings=settings
            ),
            5433,
        )
        stack.embedded.append(pg)
        parts.postgres = pg
        for n in range(1, replicas + 1):
            shutil.rmtree(stack.state_dir / f"pgreplica{n}", ignore_errors=True)
            replica = EmbeddedReplica(
                dsn,
                stack.state_dir / f"pgreplica{n}",
                port=_port(5433 + n),
                log_path=stack.state_dir / f"postgres-replica{n}.log",
            )
            replica.start()
            stack.embedded.append(replica)
            parts.replicas.append(replica)
    return dsn, bootstrap, parts


def _start_server(make, preferred: int):
    """An embedded server started on ``preferred`` if free; if that fails (another process,
    another ``up`` perhaps, took the port between the check and the server's bind), once more
    on a port the kernel picks. The server binds its port itself and is checked to hold it."""
    from tickerwire.devstack.embedded.errors import EmbeddedError
    from tickerwire.devstack.embedded.ports import free_port

    port = _port(preferred)
    server = make(port)
    try:
        return server, server.start()
    except EmbeddedError as exc:
        if port != preferred:
            raise UpError(_one_line(exc)) from None
        say(f"{server.label} could not start on port {port} ({_one_line(exc)}); trying another port")
    server = make(free_port())
    try:
        return server, server.start()
    except EmbeddedError as exc:
        raise UpError(_one_line(exc)) from None


def _one_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


async def prepare(config: FullConfig) -> None:
    from ..common.db import connect
    from ..common.kafka import ensure_topics
    from ..readmodel.migrate import migrate

    await ensure_topics(config)
    async with connect(config.database_url) as conn:
        await migrate(conn, config.read_model_schema)


async def publish_demo(config: FullConfig, args, own: OwnBroker | None) -> tuple[str, dict]:
    """Publish a demo workspace and key, and the demo dataset, unless the kept log of ``own``
    has them (then only a fresh badge heartbeat, so the key is served); returns (api key, marks)."""
    from tickerwire.devstack.demo import dataset

    from ..common.http.keys import display_prefix, generate_key, hash_key
    from .publish import publish

    now = datetime.now(timezone.utc)
    saved = own.saved_demo() if own is not None else None
    events: list[AnyEvent] = [dataset.heartbeat_event(now=now, workspace_id=DEMO_WORKSPACE, embed_id=DEMO_EMBED)]
    if saved is None:
        key = generate_key()
        saved = DemoState(key, demo_key_id(own), dataset=False)
        events = list(
            dataset.access_events(
                now=now,
                workspace_id=DEMO_WORKSPACE,
                key_hash=hash_key(key),
                display_prefix=display_prefix(key),
                key_id=saved.key_id,
                embed_id=DEMO_EMBED,
            )
        )
    if not args.no_demo and not saved.dataset:
        events += dataset.catalog_events(now=now, tokens=args.tokens)
        events += dataset.post_events(now=now, posts=args.posts)
        saved = DemoState(saved.api_key, saved.key_id, dataset=True)
    marks = await publish(config, events)
    if own is not None:
        own.save_demo(saved)  # after publishing: a log without the key never has it saved
    return saved.api_key, marks


async def wait_projected(
    config: FullConfig, marks: dict[tuple[str, int], int] | None = None, timeout: float = 120.0
) -> None:
    """Until the projector's stored positions reach the end of every partition of every topic.

    ``marks`` are offsets a publisher was acknowledged for; they are exact, whereas a broker's
    reported end offsets may lag behind recent writes (so both are waited for)."""
    from aiokafka import TopicPartition

    from ..common import kafka
    from ..common.db import connect
    from ..common.kafka.declaration import declared_topics
    from ..readmodel import positions

    consumer = kafka.consumer(config, group_id=None, client_id="tickerwire-up")
    try:
        await consumer.start()
        tps = [TopicPartition(d.name, p) for d in declared_topics(config) for p in range(d.partitions)]
        ends = {(tp.topic, tp.partition): end for tp, end in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()
    for key, mark in (marks or {}).items():
        ends[key] = max(ends.get(key, 0), mark)
    async with connect(config.database_url, schema=config.read_model_schema) as conn:
        await positions.wait_until(conn, ends, timeout=timeout)


async def newest_post_id(config: FullConfig) -> int:
    """The highest post id the read model holds (0 when none): the trickle goes on above it."""
    from ..common.db import connect

    async with connect(config.database_url, schema=config.read_model_schema) as conn:
        return int(await conn.fetchval("SELECT coalesce(max(id), 0) FROM posts"))


async def sweep(config: FullConfig) -> None:
    from ..common.db import connect
    from ..projector.sweeper import sweep_once

    async with connect(config.database_url, schema=config.read_model_schema) as conn:
        await sweep_once(conn)


@dataclass
class Trickle:
    """The live demo trickle: it never takes anything down; it retries with backoff."""

    config: FullConfig
    next_id: int
    interval: float
    #: Pauses after a failed publish; short again once a post went out.
    backoff: Backoff = field(default_factory=lambda: Backoff(1.0, 30.0))

    async def run_forever(self) -> None:
        while True:
            try:
                await self._run()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                delay = self.backoff.delay()
                say(f"demo trickle: publishing failed ({type(exc).__name__}: {exc}); retrying in {delay:.1f}s")
                await asyncio.sleep(delay)

    async def _run(self) -> None:
        from tickerwire.devstack.demo.trickle import run_trickle

        from ..common.kafka import started_producer
        from .publish import send_events

        async with started_producer(self.config) as producer:

            async def publish(event) -> None:
                await send_events(producer, self.config.topic_prefix, [event])
                self.next_id = event.data.id + 1
                self.backoff.reset()  # published again: the next failure waits the short pause

            await run_trickle(publish, start_id=self.next_id, interval_s=self.interval, seed=random.randrange(1 << 30))


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


#: The listeners `up` starts; each port comes from its flag, else the environment or the default.
PORTS = ("api_port", "stream_port", "api_admin_port", "stream_admin_port", "projector_admin_port")


def settings_check(env: dict[str, str], database_url: str | None) -> FullConfig:
    """The environment's settings, checked before anything starts (the database and broker
    may not exist yet: a configured database's URL is checked, placeholders stand in for the rest)."""
    return FullConfig.from_env(env, database_url=database_url or "postgresql:///embedded", kafka_bootstrap_servers="-")


async def run(args, stack: Stack, base: FullConfig) -> None:
    """``base``: the environment's settings, as :func:`settings_check` found them."""
    dsn, bootstrap, parts = start_embedded(stack, args)
    # Demo data goes only into a broker of our own, unless asked for.
    demo = parts.broker is not None or args.demo
    env = dict(os.environ)
    env.update(TICKERWIRE_DATABASE_URL=dsn, TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS=bootstrap)
    if parts.replicas:
        env["TICKERWIRE_DATABASE_READ_URLS"] = ",".join(replica.dsn for replica in parts.replicas)
    if not args.kafka_bootstrap_servers:
        # The embedded broker is one node: replication factor 1. It keeps its (memory-only)
        # log whole, and reports the compaction it was created with, so the topic check passes.
        env["TICKERWIRE_TOPIC_REPLICATION_FACTOR"] = "1"
    env.setdefault("TICKERWIRE_KAFKA_SESSION_TIMEOUT_MS", "6000")
    # Static group membership: the projector child up restarts takes its partitions back at once.
    env.setdefault("TICKERWIRE_PROJECTOR_GROUP_INSTANCE_ID", "up-projector")
    env.setdefault("TICKERWIRE_KAFKA_HEARTBEAT_INTERVAL_MS", "1000")
    env.setdefault("TICKERWIRE_KAFKA_FETCH_MAX_WAIT_MS", "20")
    env.setdefault("TICKERWIRE_PROJECTOR_LOG_CHECK_INTERVAL_S", "2")
    config = FullConfig.from_env(env)
    await prepare(config)
    for attempt in range(PORT_ATTEMPTS):
        # Each child binds its own ports; the probes check that the answer comes from it. Two
        # `up`s started at once may choose the same free ports: the one whose child loses the
        # bind tries other ports the kernel picks, and says so.
        if attempt == 0:
            flags = {name: getattr(args, name, None) for name in PORTS}
            ports = {name: _port(flag if flag is not None else getattr(base, name)) for name, flag in flags.items()}
        else:
            from tickerwire.devstack.embedded.ports import free_ports

            ports = dict(zip(PORTS, free_ports(len(PORTS))))
        env.update({"TICKERWIRE_" + name.upper(): str(port) for name, port in ports.items()})
        config = FullConfig.from_env(env)
        children = {name: stack.spawn(name, env) for name in ("projector", "api", "stream")}
        admin = {
            "projector": f"http://{config.admin_host}:{config.projector_admin_port}",
            "api": f"http://{config.admin_host}:{config.api_admin_port}",
            "stream": f"http://{config.admin_host}:{config.stream_admin_port}",
        }
        probes = [
            Probe(children["projector"], admin["projector"] + "/healthz", config.projector_admin_port),
            Probe(children["api"], admin["api"] + "/readyz", config.api_admin_port),
            Probe(
                children["api"],
                f"http://{config.host}:{config.api_port}{config.base_path}/openapi.json",
                config.api_port,
            ),
            Probe(children["stream"], admin["stream"] + "/readyz", config.stream_admin_port),
            Probe(
                children["stream"],
                f"http://{config.host}:{config.stream_port}{config.base_path}/stream",
                config.stream_port,
                None,
            ),
        ]
        try:
            await wait_healthy(probes, list(children.values()))
            break
        except PortTaken as exc:
            stack.stop_children()
            if attempt + 1 == PORT_ATTEMPTS:
                raise UpError(f"{exc}; gave up after {PORT_ATTEMPTS} sets of ports") from None
            say(f"{exc}; trying other ports")
    host = config.host
    key, last_id = None, 0
    if demo:
        key, marks = await publish_demo(config, args, parts.own)
        await wait_projected(config, marks)
        last_id = await newest_post_id(config)
        await sweep(config)  # one badge tick, so the demo workspace's fresh heartbeat counts
        # The API reloads its cached catalog (locales, tokens, categories) within 0.5 s of a change.
        await asyncio.sleep(1.0)
    base_url = f"http://{host}:{config.api_port}{config.base_path}"
    info = {
        "base_url": base_url,
        "stream_url": f"ws://{host}:{config.stream_port}{config.base_path}/stream" + (f"?key={key}" if key else ""),
        "docs_url": f"{base_url}/docs",
        "api_key": key,
        "database_url": dsn,
        "database_read_urls": [replica.dsn for replica in parts.replicas],
        "kafka_bootstrap_servers": bootstrap,
        "broker": parts.own.kind if parts.own is not None else "configured",
        "topic_prefix": config.topic_prefix,
        # Operator endpoints (/healthz, /readyz, /metrics) of each process, on its admin listener.
        "admin": admin,
        "metrics": {name: url + "/metrics" for name, url in admin.items()},
    }
    state_file = stack.state_dir / "up.json"
    write_state(state_file, info, stack)
    lines = [
        "Tickerwire is up.",
        f"  base URL:   {info['base_url']}",
        f"  stream URL: {info['stream_url']}",
        f"  docs:       {info['docs_url']}",
    ]
    if parts.own is not None and parts.own.keeps_log:
        kept = "an earlier start's, kept" if parts.own.found_log else "new"
        lines.append(f"  broker:     {parts.own.label} on {bootstrap}, log {parts.own.data_dir} ({kept})")
    if key:
        lines.append(f"  API key:    {key}")
    else:
        lines.append(
            "  API key:    none (no demo data on a configured broker; pass --demo, or issue one: tickerwire key issue)"
        )
    lines.append(f"  admin:      {', '.join(f'{n} {u}' for n, u in admin.items())} (/healthz /readyz /metrics)")
    lines.append(f"  state:      {state_file}")
    if key:
        lines.append(f"Try: curl -H 'Authorization: Bearer {key}' {info['base_url']}/posts")
    lines.append("Ctrl-C stops everything.")
    print("\n".join(lines), flush=True)
    trickle = Trickle(config, last_id + 1, args.trickle_interval) if demo and not args.no_trickle else None
    await Supervision(stack, config, parts, trickle, state_file, info).run()


def write_state(state_file: Path, info: dict, stack: Stack) -> None:
    info["pids"] = {"up": os.getpid(), "children": [c.proc.pid for c in stack.children if c.proc is not None]}
    tmp = state_file.with_suffix(".tmp")
    # It holds the demo key and the database URL: readable by this user only from its first byte.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        os.fchmod(out.fileno(), 0o600)  # a left-over .tmp keeps its old mode through O_CREAT
        out.write(orjson.dumps(info, option=orjson.OPT_INDENT_2))
    tmp.replace(state_file)


@dataclass
class Supervision:
    """Keeps the stack running: restarts dead children, the embedded PostgreSQL and the
    broker of its own (the embedded one comes back empty: the topics are re-created and the
    projector re-synced with the new log; an Apache Kafka comes back with its log), and keeps
    the demo trickle going; says what it does on the output."""

    stack: Stack
    config: FullConfig
    parts: Embedded
    trickle: Trickle | None
    state_file: Path
    info: dict
    _trickle_task: asyncio.Task | None = None

    async def run(self) -> None:
        self._start_trickle()
        try:
            while True:
                await asyncio.sleep(0.25)
                if self.parts.postgres is not None and not self.parts.postgres.running():
                    await self._restart_server(self.parts.postgres, "PostgreSQL")
                for n, replica in enumerate(self.parts.replicas, start=1):
                    if not replica.running():
                        await self._restart_server(replica, f"PostgreSQL replica {n}")
                if self.parts.broker is not None and not self.parts.broker.running():
                    await self._recover_broker()
                self._restart_children()
        finally:
            if self._trickle_task is not None:
                self._trickle_task.cancel()

    def _start_trickle(self) -> None:
        if self.trickle is not None and (self._trickle_task is None or self._trickle_task.done()):
            self._trickle_task = asyncio.create_task(self.trickle.run_forever(), name="demo-trickle")

    def _restart_children(self) -> None:
        changed = False
        now = time.monotonic()
        for child in self.stack.children:
            if child.alive():
                continue
            if child.restart_at is None:
                if now - child.started_at >= HEALTHY_AFTER_S:
                    child.delays = backoff_delays(RESTART_BASE_S, RESTART_CAP_S)
                delay = next(child.delays)
                child.restart_at = now + delay
                say(
                    f"{child.name} exited (status {child.proc.returncode if child.proc else '?'}); "
                    f"restarting it in {delay:.1f}s (log: {child.log_path})"
                )
            elif now >= child.restart_at:
                proc = child.spawn()
                child.restarts += 1
                child.restart_at = None
                say(f"{child.name} restarted (pid {proc.pid}, restart {child.restarts})")
                changed = True
        if changed:
            write_state(self.state_file, self.info, self.stack)

    async def _restart_server(self, server, what: str) -> None:
        say(f"embedded {what} died; restarting it on port {server.port}")
        started = time.monotonic()
        delays = backoff_delays(RESTART_BASE_S, RESTART_CAP_S)
        with contextlib.suppress(Exception):
            server.stop()  # reap it and close its log
        while True:
            try:
                await asyncio.to_thread(server.start)
                break
            except Exception as exc:
                delay = next(delays)
                say(f"embedded {what} did not start ({str(exc).splitlines()[0]}); retrying in {delay:.1f}s")
                await asyncio.sleep(delay)
        say(f"embedded {what} restarted in {time.monotonic() - started:.1f}s (pid {server.pid})")

    async def _recover_broker(self) -> None:
        from ..common.kafka import ensure_topics
        from ..projector.accept import accept_log

        if self._trickle_task is not None:
            self._trickle_task.cancel()
            self._trickle_task = None
        own = self.parts.own
        await self._restart_server(self.parts.broker, "broker" if own is None else own.label)
        if own is not None and own.keeps_log:
            say(f"{own.label} came back with its log ({own.data_dir}): nothing to re-sync, the projector goes on")
            self._start_trickle()
            return
        delays = backoff_delays(RESTART_BASE_S, RESTART_CAP_S)
        while True:
            try:
                await ensure_topics(self.config)
                accepted = await accept_log(self.config, "earliest")
                if accepted.left:  # moved meanwhile: look again
                    raise RuntimeError("; ".join(accepted.left))
                break
            except Exception as exc:
                delay = next(delays)
                say(f"re-syncing with the new log failed ({exc}); retrying in {delay:.1f}s")
                await asyncio.sleep(delay)
        say(
            "the embedded broker keeps its log in memory, so it came back empty: topics re-created; "
            f"projector positions moved to the new log's start ({len(accepted.moved)} partition(s)); the read model "
            "keeps what it had projected and the demo key keeps working; new posts are projected from the new log"
        )
        self._start_trickle()


def lock_state_dir(state_dir: Path):
    """Take the state dir's lock before anything is touched; None if another ``up`` holds it.

    The lock (``flock`` on ``up.lock``) is released by the kernel when this process ends,
    however it ends, so a crashed ``up`` never blocks the next one."""
    import fcntl

    fd = os.open(state_dir / "up.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _lock_holder(state_dir: Path) -> str:
    with contextlib.suppress(OSError):
        pid = (state_dir / "up.lock").read_text().strip()
        if pid:
            return f" (pid {pid})"
    return ""


def up_main(args) -> int:
    try:
        args.state_dir = args.state_dir or setting("STATE_DIR", STATE_DIR_DEFAULT)
        args.database_url = args.database_url or setting("DATABASE_URL")
        args.kafka_bootstrap_servers = args.kafka_bootstrap_servers or setting("KAFKA_BOOTSTRAP_SERVERS")
        checked = settings_check(dict(os.environ), args.database_url)
    except ConfigError as exc:
        print(f"tickerwire up: {exc}", file=sys.stderr)
        return 2
    setup_logging("up", checked.log_level)
    state_dir = Path(args.state_dir).resolve()
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        lock = lock_state_dir(state_dir)
    except OSError as exc:
        print(f"tickerwire up: cannot use the state directory {state_dir}: {exc.strerror}", file=sys.stderr)
        return 1
    if lock is None:
        print(
            f"tickerwire up: another tickerwire up{_lock_holder(state_dir)} is running with the state directory "
            f"{state_dir}; stop it first, or pass another --state-dir",
            file=sys.stderr,
        )
        return 1
    stack = Stack(state_dir)

    async def main() -> None:
        cancel_on_signals()
        await run(args, stack, checked)

    status = 0
    try:
        asyncio.run(main())
    except (asyncio.CancelledError, KeyboardInterrupt):
        pass
    except Exception as exc:  # report, then tear down everything that was started
        log.error("up failed: %s", exc)
        print(f"tickerwire up: {exc}", file=sys.stderr)
        status = 1
    finally:
        stack.stop()
        with contextlib.suppress(FileNotFoundError):
            (state_dir / "up.json").unlink()
        print("Tickerwire stopped.", flush=True)
        os.close(lock)
    return status
