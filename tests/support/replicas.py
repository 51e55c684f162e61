"""A real primary with real streaming replicas (embedded PostgreSQL, ``pg_basebackup``), and a
service stack on it whose API and stream read from the replicas."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
import time
import uuid
from pathlib import Path
from typing import AsyncIterator, Iterator, Sequence

import aiohttp
import asyncpg

from tests.support.events import locale_ev, token_ev
from tests.support.stack import ServiceStack
from tickerwire.devstack.embedded.ports import free_port
from tickerwire.devstack.embedded.postgres import (
    PRIMARY_REPLICATION_SETTINGS,
    EmbeddedPostgres,
    EmbeddedReplica,
    scratch_database,
    with_database,
)


@contextlib.contextmanager
def replicated_cluster(delays_ms: Sequence[int]) -> Iterator[tuple[EmbeddedPostgres, list[EmbeddedReplica]]]:
    """A primary and one streaming replica per entry of ``delays_ms`` (its ``recovery_min_apply_delay``).

    Their data is in a folder of the system's temporary folder, as the session's server's
    (tests/conftest.py), not under pytest's: every pytest session starting on the machine
    takes the other users' access to that back, and the servers run as another user when
    the tests run as root."""
    root = Path(tempfile.mkdtemp(prefix="tickerwire-test-replicas-"))
    try:
        with EmbeddedPostgres(root / "primary", settings=PRIMARY_REPLICATION_SETTINGS) as primary:
            replicas: list[EmbeddedReplica] = []
            try:
                for n, delay in enumerate(delays_ms):
                    # A port of its own from the start: a restarted replica is the same address.
                    replica = EmbeddedReplica(primary.dsn, root / f"replica{n}", port=free_port(), apply_delay_ms=delay)
                    replica.start()
                    replicas.append(replica)
                yield primary, replicas
            finally:
                for replica in replicas:
                    replica.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def database_on(replica_dsn: str, timeout: float = 30.0) -> None:
    """Until the database of ``replica_dsn`` (created on the primary) accepts connections there."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn = await asyncpg.connect(replica_dsn, timeout=2)
        except (OSError, asyncpg.PostgresError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)
        else:
            await conn.close()
            return


@contextlib.asynccontextmanager
async def replicated_stack(
    primary: EmbeddedPostgres, replicas: Sequence[EmbeddedReplica], kafka_bootstrap: str, prefix: str, **extra_env: str
) -> AsyncIterator[ServiceStack]:
    """A scratch database on ``primary`` and a prepared stack on it whose processes read from
    ``replicas`` (``TICKERWIRE_DATABASE_READ_URLS``); nothing started yet. All stopped after."""
    async with scratch_database(primary.dsn) as dsn:
        name = dsn.rpartition("/")[2]
        read_urls = [with_database(r.dsn, name) for r in replicas]
        for url in read_urls:
            await database_on(url)
        stack = ServiceStack(
            dsn, kafka_bootstrap, prefix, extra_env={"TICKERWIRE_DATABASE_READ_URLS": ",".join(read_urls), **extra_env}
        )
        await stack.prepare()
        try:
            yield stack
        finally:
            stack.stop_all()


@contextlib.asynccontextmanager
async def serving_stack(
    primary: EmbeddedPostgres, replicas: Sequence[EmbeddedReplica], kafka_bootstrap: str
) -> AsyncIterator[tuple[ServiceStack, str]]:
    """:func:`replicated_stack` with a locale and a token projected, a projector, an API and a
    stream started, and a key of a workspace with room to spare."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    # Pools of the example overlay's size: the tests send up to 200 reads at once.
    async with replicated_stack(
        primary, replicas, kafka_bootstrap, prefix, TICKERWIRE_REPLICA_MAX_LAG_S="2", TICKERWIRE_DB_POOL_MAX="20"
    ) as stack:
        await stack.publish([locale_ev("en-US", default=True), token_ev("BTC")])
        for name in ("projector", "api", "stream"):
            await stack.start(name)
        key = await stack.provision(
            f"ws_{prefix}", rate_limit_per_minute=1_000_000, daily_quota=1_000_000_000, stream_connection_limit=10
        )
        yield stack, key


def signal_server(server: EmbeddedPostgres, sig: int) -> set[int]:
    """``sig`` to every process of ``server``: the postmaster first (it forks no more), then its
    children (each backend is a session of its own: a process group signal misses them); the
    pids signalled. The children are listed before the postmaster is signalled too: one it
    killed is gone, and its children, reparented, are found by the list alone (a frozen child
    would otherwise be left holding the server's shared memory)."""
    assert server.pid is not None
    signalled: set[int] = set()
    before = children(server.pid)
    os.kill(server.pid, sig)
    for _ in range(3):  # again: a child the postmaster forked while the signal was on its way
        for pid in (before | children(server.pid)) - signalled:
            signalled.add(pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        time.sleep(0.02)
    return signalled | {server.pid}


def children(pid: int) -> set[int]:
    """The pids of the processes whose parent is ``pid`` now."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == pid:  # fields[1]: the parent's pid
            found.add(int(stat.parent.name))
    return found


def wait_gone(pids: set[int], timeout: float = 5.0) -> None:
    """Until none of ``pids`` is alive (gone, or a zombie: its memory released), at most ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = set()
        for pid in pids:
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
                    alive.add(pid)
        if not alive:
            return
        pids = alive
        time.sleep(0.02)
    raise TimeoutError(f"processes {sorted(pids)} still alive {timeout:.0f} s after SIGKILL")


def freeze(server: EmbeddedPostgres) -> None:
    signal_server(server, signal.SIGSTOP)


def thaw(server: EmbeddedPostgres) -> None:
    signal_server(server, signal.SIGCONT)


async def rotation(api_admin_url: str, http: aiohttp.ClientSession) -> dict[str, float]:
    """``tickerwire_replica_in_rotation`` by replica, from a process's /metrics."""
    async with http.get(f"{api_admin_url}/metrics") as resp:
        text = await resp.text()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("tickerwire_replica_in_rotation{"):
            label, _, value = line.rpartition(" ")
            out[label.split('replica="', 1)[1].split('"', 1)[0]] = float(value)
    return out
