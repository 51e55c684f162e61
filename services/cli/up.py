"""``tickerwire up``: the whole system on one machine.

Without a configured database and broker it starts an embedded PostgreSQL and an embedded
Kafka-protocol broker (both ephemeral: the broker keeps the log in memory, so the database
is re-created on every start to stay consistent with it). Then it creates the topics,
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

import orjson

from ..common.config import Config, ConfigError
from ..common.logs import setup_logging

log = logging.getLogger("tickerwire.up")

DEMO_WORKSPACE = "ws_demo"
DEMO_EMBED = "bdg_demo0001"


def _die_with_parent() -> None:
    """Children get SIGTERM if `up` itself dies, even by SIGKILL (Linux prctl)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Stack:
    state_dir: Path
    embedded: list = field(default_factory=list)
    children: list[subprocess.Popen] = field(default_factory=list)

    def spawn(self, name: str, env: dict[str, str]) -> subprocess.Popen:
        log_path = self.state_dir / f"{name}.log"
        out = open(log_path, "ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "tickerwire.services.cli.main", name],
            env=env,
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
            start_new_session=True,
        )
        out.close()
        self.children.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.children:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.children:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for part in reversed(self.embedded):
            with contextlib.suppress(Exception):
                part.stop()


def _port(preferred: int) -> int:
    from ..embedded.ports import free_port, port_is_free

    return preferred if port_is_free(preferred) else free_port()


def start_embedded(stack: Stack, args) -> tuple[str, str]:
    from ..embedded.broker import EmbeddedBroker
    from ..embedded.postgres import EmbeddedPostgres

    dsn = args.database_url
    bootstrap = args.kafka_bootstrap_servers
    if not bootstrap:
        broker = EmbeddedBroker(port=_port(19092), log_path=stack.state_dir / "broker.log")
        bootstrap = broker.start()
        stack.embedded.append(broker)
    if not dsn:
        data = stack.state_dir / "pgdata"
        # The embedded broker forgets everything on restart, so the read model starts empty too.
        shutil.rmtree(data, ignore_errors=True)
        pg = EmbeddedPostgres(data, port=_port(5433), log_path=stack.state_dir / "postgres.log")
        dsn = pg.start()
        stack.embedded.append(pg)
    return dsn, bootstrap


async def prepare(config: Config) -> None:
    from ..common.db import connect, migrate
    from ..common.kafka import ensure_topics

    await ensure_topics(config)
    async with connect(config.database_url) as conn:
        await migrate(conn, config.read_model_schema)


async def publish_demo(config: Config, args) -> tuple[str, int, dict]:
    """Publish the demo dataset and a demo workspace; returns (api key, last post id, marks)."""
    from ..common.keys import display_prefix, generate_key, hash_key
    from ..demo import dataset
    from .publish import publish

    now = datetime.now(timezone.utc)
    key = generate_key()
    access = dataset.access_events(
        now=now, workspace_id=DEMO_WORKSPACE, key_hash=hash_key(key), display_prefix=display_prefix(key), embed_id=DEMO_EMBED
    )
    events = list(access)
    last_id = 0
    if not args.no_demo:
        events += dataset.catalog_events(now=now, tokens=args.tokens)
        posts = dataset.post_events(now=now, posts=args.posts)
        events += posts
        last_id = max((e.data.id for e in posts), default=0)
    marks = await publish(config, events)
    return key, last_id, marks


async def wait_projected(config: Config, marks: dict[tuple[str, int], int] | None = None, timeout: float = 120.0) -> None:
    """Until the projector's stored positions reach the end of every partition of every topic.

    ``marks`` are offsets a publisher was acknowledged for; they are exact, whereas a broker's
    reported end offsets may lag behind recent writes (so both are waited for)."""
    from aiokafka import TopicPartition

    from ..common import kafka
    from ..common.db import connect
    from ..common.topics import declared_topics

    consumer = kafka.consumer(config, group_id=None, client_id="tickerwire-up")
    await consumer.start()
    try:
        tps = [TopicPartition(d.name, p) for d in declared_topics(config) for p in range(d.partitions)]
        ends = {(tp.topic, tp.partition): end for tp, end in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()
    for key, mark in (marks or {}).items():
        ends[key] = max(ends.get(key, 0), mark)
    deadline = time.monotonic() + timeout
    async with connect(config.database_url) as conn:
        while True:
            rows = await conn.fetch(f"SELECT topic, partition, next_offset FROM {config.read_model_schema}.positions")
            stored = {(r["topic"], r["partition"]): r["next_offset"] for r in rows}
            if all(stored.get(key, 0) >= end for key, end in ends.items()):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the projector did not catch up in {timeout:.0f}s: {stored} of {ends}")
            await asyncio.sleep(0.05)


async def sweep(config: Config) -> None:
    from ..common.db import connect
    from ..projector.sweeper import sweep_once

    async with connect(config.database_url) as conn:
        await conn.execute(f"SET search_path TO {config.read_model_schema}, public")
        await sweep_once(conn)


async def trickle(config: Config, start_id: int, interval: float) -> None:
    from ..common.kafka import started_producer
    from ..demo.trickle import run_trickle
    from .publish import send_events

    async with started_producer(config) as producer:

        async def publish(event) -> None:
            await send_events(producer, config.topic_prefix, [event])

        await run_trickle(publish, start_id=start_id, interval_s=interval, seed=random.randrange(1 << 30))


async def wait_healthy(urls: list[str], children: list[subprocess.Popen], timeout: float = 60.0) -> None:
    import aiohttp

    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        for url in urls:
            while True:
                for proc in children:
                    if proc.poll() is not None:
                        raise RuntimeError(f"a service exited early (status {proc.returncode}); see the logs")
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(url) as resp:
                        if resp.status == 200:
                            break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{url} did not become ready")
                await asyncio.sleep(0.2)


#: The listeners `up` starts; each port comes from its flag, else the environment or the default.
PORTS = ("api_port", "stream_port", "api_admin_port", "stream_admin_port", "projector_admin_port")


def settings_check(env: dict[str, str]) -> Config:
    """The environment's settings, checked before anything starts (the database and broker
    may not exist yet, so placeholders stand in for them)."""
    return Config.from_env(env, database_url="-", kafka_bootstrap_servers="-")


async def run(args, stack: Stack) -> None:
    base = settings_check(dict(os.environ))
    dsn, bootstrap = start_embedded(stack, args)
    env = dict(os.environ)
    env.update(TICKERWIRE_DATABASE_URL=dsn, TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS=bootstrap)
    for name in PORTS:
        flag = getattr(args, name, None)
        env["TICKERWIRE_" + name.upper()] = str(_port(flag if flag is not None else getattr(base, name)))
    if not args.kafka_bootstrap_servers:
        # The embedded broker is one node: replication factor 1. It keeps its (memory-only)
        # log whole, and reports the compaction it was created with, so the topic check passes.
        env["TICKERWIRE_TOPIC_REPLICATION_FACTOR"] = "1"
    env.setdefault("TICKERWIRE_KAFKA_SESSION_TIMEOUT_MS", "6000")
    env.setdefault("TICKERWIRE_KAFKA_HEARTBEAT_INTERVAL_MS", "1000")
    env.setdefault("TICKERWIRE_KAFKA_FETCH_MAX_WAIT_MS", "20")
    config = Config.from_env(env)
    await prepare(config)
    for name in ("projector", "api", "stream"):
        stack.spawn(name, env)
    host = config.host
    admin = {
        "projector": f"http://{config.admin_host}:{config.projector_admin_port}",
        "api": f"http://{config.admin_host}:{config.api_admin_port}",
        "stream": f"http://{config.admin_host}:{config.stream_admin_port}",
    }
    await wait_healthy(
        [admin["projector"] + "/healthz", admin["api"] + "/readyz", admin["stream"] + "/readyz"], stack.children
    )
    key, last_id, marks = await publish_demo(config, args)
    await wait_projected(config, marks)
    await sweep(config)  # one badge tick, so the demo workspace's fresh heartbeat counts
    # The API reloads its cached catalog (locales, tokens, categories) within 0.5 s of a change.
    await asyncio.sleep(1.0)
    info = {
        "base_url": f"http://{host}:{config.api_port}{config.base_path}",
        "stream_url": f"ws://{host}:{config.stream_port}{config.base_path}/stream?key={key}",
        "docs_url": f"http://{host}:{config.api_port}{config.base_path}/docs",
        "api_key": key,
        "database_url": dsn,
        "kafka_bootstrap_servers": bootstrap,
        "topic_prefix": config.topic_prefix,
        # Operator endpoints (/healthz, /readyz, /metrics) of each process, on its admin listener.
        "admin": admin,
        "metrics": {name: url + "/metrics" for name, url in admin.items()},
        "pids": {"up": os.getpid(), "children": [p.pid for p in stack.children]},
    }
    state_file = stack.state_dir / "up.json"
    state_file.write_bytes(orjson.dumps(info, option=orjson.OPT_INDENT_2))
    os.chmod(state_file, 0o600)
    print(
        f"Tickerwire is up.\n"
        f"  base URL:   {info['base_url']}\n"
        f"  stream URL: {info['stream_url']}\n"
        f"  docs:       {info['docs_url']}\n"
        f"  API key:    {key}\n"
        f"  admin:      {', '.join(f'{n} {u}' for n, u in admin.items())} (/healthz /readyz /metrics)\n"
        f"  state:      {state_file}\n"
        f"Try: curl -H 'Authorization: Bearer {key}' {info['base_url']}/posts\n"
        f"Ctrl-C stops everything.",
        flush=True,
    )
    waiters = [asyncio.create_task(_watch(stack.children))]
    if not args.no_trickle:
        waiters.append(asyncio.create_task(trickle(config, last_id + 1, args.trickle_interval)))
    done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for task in done:
        task.result()


async def _watch(children: list[subprocess.Popen]) -> None:
    while all(p.poll() is None for p in children):
        await asyncio.sleep(0.5)
    raise RuntimeError("a service exited unexpectedly; see its log in the state directory")


def up_main(args) -> int:
    try:
        settings_check(dict(os.environ))
    except ConfigError as exc:
        print(f"tickerwire up: {exc}", file=sys.stderr)
        return 2
    setup_logging("up", os.environ.get("TICKERWIRE_LOG_LEVEL", "INFO"))
    state_dir = Path(args.state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    stack = Stack(state_dir)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        await run(args, stack)

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
    return status
