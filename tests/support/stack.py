"""Running the real services as subprocesses for integration and end-to-end tests.

``ServiceStack`` starts any number of projector, API and stream processes against one
database and one topic prefix, waits until they answer, and offers the few operations tests
need: publish events, wait until the projector has applied everything, provision a
workspace with a working key, run a badge tick. Everything it starts, it stops.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable, Sequence

import aiohttp
import asyncpg

from tests.support.events import provisioning
from tests.support.pgbouncer import routed_env
from tickerwire.devstack.embedded.ports import free_ports
from tickerwire.devstack.embedded.postgres import scratch_database
from tickerwire.services.cli.publish import publish, send_events
from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.cli.up.demo import wait_projected
from tickerwire.services.common import kafka
from tickerwire.services.common.db import connect
from tickerwire.services.projector.sweeper import sweep_once
from tickerwire.services.readmodel.migrate import migrate

BASE = "/api/v1/developer"
#: Spec'd bound on how soon every process applies an access change (suspension, revocation, badge).
ACCESS_WITHIN_S = 1.0


async def gauge(admin_url: str, name: str, http: aiohttp.ClientSession | None = None) -> float:
    """The value of the unlabelled metric ``name`` on ``admin_url``'s ``/metrics``; -inf if absent."""
    if http is None:
        async with aiohttp.ClientSession() as own:
            return await gauge(admin_url, name, own)
    async with http.get(f"{admin_url}/metrics") as resp:
        text = await resp.text()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("-inf")


#: The environment variables of each service's listeners: (partner port, admin port).
PORT_VARS = {
    "projector": (None, "TICKERWIRE_PROJECTOR_ADMIN_PORT"),
    "api": ("TICKERWIRE_API_PORT", "TICKERWIRE_API_ADMIN_PORT"),
    "stream": ("TICKERWIRE_STREAM_PORT", "TICKERWIRE_STREAM_ADMIN_PORT"),
    "dispatcher": (None, "TICKERWIRE_WEBHOOKS_ADMIN_PORT"),
}


@dataclass
class Service:
    name: str
    port: int | None
    admin_port: int
    proc: subprocess.Popen
    log_path: Path

    @property
    def url(self) -> str:
        """The partner origin (the api and the stream)."""
        assert self.port is not None, f"the {self.name} has no partner port"
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin_url(self) -> str:
        """The operator endpoints' origin: /healthz, /readyz, /metrics."""
        return f"http://127.0.0.1:{self.admin_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class ServiceStack:
    database_url: str
    kafka_bootstrap: str
    topic_prefix: str
    extra_env: dict[str, str] = field(default_factory=dict)
    services: list[Service] = field(default_factory=list)
    #: Per (topic, partition), the offset after the last record this stack published.
    marks: dict[tuple[str, int], int] = field(default_factory=dict)
    #: Under ``TICKERWIRE_TEST_LOG_ROOT`` when set (the test session's own folder, removed after a
    #: passing session: tests/conftest.py), else in the system's temporary folder.
    log_dir: Path = field(
        default_factory=lambda: Path(
            tempfile.mkdtemp(prefix="tickerwire-stack-", dir=os.environ.get("TICKERWIRE_TEST_LOG_ROOT"))
        )
    )

    # ------------------------------------------------------------------ configuration

    def env(self, **overrides: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TICKERWIRE_")}
        env.update(routed_env(self.database_url))  # through the session's PgBouncer, if any
        env.update(
            TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS=self.kafka_bootstrap,
            TICKERWIRE_TOPIC_PREFIX=self.topic_prefix,
            TICKERWIRE_KAFKA_SESSION_TIMEOUT_MS="2000",
            TICKERWIRE_KAFKA_HEARTBEAT_INTERVAL_MS="300",
            TICKERWIRE_KAFKA_FETCH_MAX_WAIT_MS="20",
            TICKERWIRE_DB_POOL_MIN="1",
            TICKERWIRE_DB_POOL_MAX="5",
            TICKERWIRE_LOG_LEVEL="INFO",
            TICKERWIRE_TOPIC_REPLICATION_FACTOR="1",  # one-node test brokers
        )
        env.update(self.extra_env)
        env.update(overrides)
        return env

    @property
    def config(self) -> FullConfig:
        return FullConfig.from_env(self.env())

    # ------------------------------------------------------------------ processes

    async def prepare(self) -> None:
        """Topics and migrations, as `tickerwire up` does before starting anything."""
        await kafka.ensure_topics(self.config)
        async with connect(self.database_url) as conn:
            await migrate(conn, self.config.read_model_schema)

    def spawn(self, name: str, *, port: int | None = None, preexec_fn=None, **env_overrides: str) -> Service:
        """Start ``name`` on ``port`` (its partner port; default: a free one; a restart may reuse
        its predecessor's), and its admin listener on a free port."""
        port_var, admin_var = PORT_VARS[name]
        spare, admin_port = free_ports(2)  # distinct: two free_port() calls can return the same port
        if port == admin_port:  # a restart's port, free again
            admin_port = spare
        port = (port or spare) if port_var else None
        ports = {admin_var: str(admin_port), **({port_var: str(port)} if port_var else {})}
        log_path = self.log_dir / f"{name}-{admin_port}.log"
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tickerwire.services.cli.main", name],
                env=self.env(**ports, **env_overrides),
                stdout=out,
                stderr=out,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=preexec_fn,
            )
        service = Service(name, port, admin_port, proc, log_path)
        if not self.services:
            atexit.register(self.kill_all)  # even a test run that is cut short leaves no process
        self.services.append(service)
        return service

    async def start(self, name: str, *, port: int | None = None, preexec_fn=None, **env_overrides: str) -> Service:
        service = self.spawn(name, port=port, preexec_fn=preexec_fn, **env_overrides)
        await wait_http(
            f"{service.admin_url}/{'healthz' if name in ('projector', 'dispatcher') else 'readyz'}", service
        )
        return service

    def of(self, name: str) -> list[Service]:
        return [s for s in self.services if s.name == name and s.proc.poll() is None]

    def stop(self, service: Service, sig: int = signal.SIGTERM) -> None:
        if service.proc.poll() is None:
            service.proc.send_signal(sig)
            try:
                service.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                service.proc.kill()
                service.proc.wait()

    def stop_all(self) -> None:
        for service in self.services:
            self.stop(service)

    def kill_all(self) -> None:
        for service in self.services:
            if service.proc.poll() is None:
                service.proc.kill()

    def logs(self) -> str:
        return "\n".join(f"==== {s.name}:{s.port or s.admin_port}\n{s.log()}" for s in self.services)

    # ------------------------------------------------------------------ the log and the read model

    async def publish(self, events: Sequence) -> None:
        self._record(await publish(self.config, list(events)))

    def _record(self, marks: dict[tuple[str, int], int]) -> None:
        for key, mark in marks.items():
            self.marks[key] = max(self.marks.get(key, 0), mark)

    @contextlib.asynccontextmanager
    async def publisher(self) -> AsyncIterator[Callable[[Sequence], Awaitable[None]]]:
        """One producer for many small publishes (a steady flow of posts); marks recorded as ``publish`` does."""
        async with kafka.started_producer(self.config) as producer:

            async def send(events: Sequence) -> None:
                self._record(await send_events(producer, self.topic_prefix, list(events)))

            yield send

    async def log_size(self) -> int:
        """How many records every declared topic holds now (a command that published nothing leaves it)."""
        from aiokafka import TopicPartition

        from tickerwire.schemas.topics import ALL_TOPICS, topic_name

        consumer = kafka.consumer(self.config, group_id=None, client_id="test-log-size")
        await consumer.start()
        try:
            tps = [TopicPartition(topic_name(self.topic_prefix, s), p) for s in ALL_TOPICS for p in range(s.partitions)]
            return sum((await consumer.end_offsets(tps)).values())
        finally:
            await consumer.stop()

    async def read_conn(self) -> asyncpg.Connection:
        return await asyncpg.connect(self.database_url, server_settings={"search_path": "rm,public"})

    async def wait_projected(self, timeout: float = 60.0) -> None:
        """Until the projector's stored positions reach the end of every partition."""
        try:
            await wait_projected(self.config, self.marks, timeout)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{self.logs()[-4000:]}") from None
        await self.access_applied()

    async def access_applied(self, within: float = ACCESS_WITHIN_S) -> None:
        """Every running API and stream process serves the access state committed so far (its
        ``tickerwire_access_stamp`` gauge reached the database's stamp) within ``within`` seconds
        of this call; else the test fails. The processes hold access in memory, pushed by NOTIFY."""
        async with connect(self.database_url, schema="rm") as conn:
            stamp = await conn.fetchval("SELECT stamp FROM change_stamps WHERE name = 'access'")
        deadline = time.monotonic() + within
        async with aiohttp.ClientSession() as http:
            for service in [*self.of("api"), *self.of("stream")]:
                while (seen := await gauge(service.admin_url, "tickerwire_access_stamp", http)) < stamp:
                    if time.monotonic() > deadline:
                        raise AssertionError(
                            f"{service.name}:{service.port} serves access stamp {seen}, not {stamp}, {within} s after the commit"
                        )
                    await asyncio.sleep(0.01)

    async def sweep(self) -> dict[str, str]:
        async with connect(self.database_url, schema="rm") as conn:
            statuses = await sweep_once(conn)
        await self.access_applied()
        return statuses

    async def provision(self, workspace_id: str, **limits) -> str:
        """A workspace with an embed, a fresh heartbeat and a key; projected and swept. Returns the key."""
        async with connect(self.database_url, schema="rm") as conn:
            key, events = await provisioning(conn, workspace_id, **limits)
        await self.publish(events)
        await self.wait_projected()
        await self.sweep()
        return key


@contextlib.asynccontextmanager
async def started_stack(
    pg_dsn: str,
    kafka_bootstrap: str,
    prefix: str,
    services: Sequence[str] = ("projector", "api", "stream"),
    **extra_env: str,
) -> AsyncIterator[ServiceStack]:
    """A scratch database and topic prefix, prepared, with ``services`` started; all stopped after."""
    async with scratch_database(pg_dsn) as dsn:
        stack = ServiceStack(dsn, kafka_bootstrap, prefix, extra_env=dict(extra_env))
        await stack.prepare()
        try:
            for name in services:
                await stack.start(name)
            yield stack
        finally:
            stack.stop_all()


@contextlib.asynccontextmanager
async def running_stack(
    pg_dsn: str, kafka_bootstrap: str, prefix: str, events: Sequence, **limits
) -> AsyncIterator[tuple[ServiceStack, str]]:
    """A fresh database and topic prefix, the projector and one API, ``events`` projected, a key."""
    async with started_stack(pg_dsn, kafka_bootstrap, prefix, services=("projector",)) as stack:
        await stack.publish(events)
        await stack.wait_projected(timeout=180)
        key = await stack.provision(
            f"ws_{prefix}", rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000, **limits
        )
        await stack.start("api")
        yield stack, key


async def wait_http(url: str, service: Service | None = None, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    detail = "no answer"
    async with aiohttp.ClientSession() as session:
        while True:
            if service is not None and service.proc.poll() is not None:
                raise RuntimeError(f"{service.name} exited with {service.proc.returncode}:\n{service.log()[-4000:]}")
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with session.get(url) as resp:
                    if resp.status == 200:
                        return
                    detail = await resp.text()
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{url} not ready within {timeout} s: {detail[:2000]}\n{service.log()[-4000:] if service else ''}"
                )
            await asyncio.sleep(0.1)


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
