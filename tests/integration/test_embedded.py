"""The embedded PostgreSQL server and Apache Kafka: start, serve, stop cleanly, fail loudly."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tickerwire.devstack.embedded.apache_kafka import ApacheKafka
from tickerwire.devstack.embedded.errors import EmbeddedError
from tickerwire.devstack.embedded.ports import port_is_free
from tickerwire.devstack.embedded.postgres import EmbeddedPostgres


@pytest.fixture
def pg_root() -> Iterator[Path]:
    """A scratch directory under /tmp (not pytest's 0700 basetemp, which the server user cannot reach)."""
    root = Path(tempfile.mkdtemp(prefix="tickerwire-test-embedded-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port held by a plain listening socket for the duration of the test."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def children_of(pid: int) -> list[int]:
    """Pids whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


async def fetchval(dsn: str, query: str) -> object:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(query)
    finally:
        await conn.close()


# --- PostgreSQL -------------------------------------------------------------------------------


async def test_postgres_serves_stops_cleanly_and_keeps_data(pg_root: Path) -> None:
    server = EmbeddedPostgres(pg_root / "data")
    dsn = server.start()
    try:
        assert dsn == server.dsn and dsn.endswith("/tickerwire")
        assert await fetchval(dsn, "SELECT 1") == 1
        await fetchval(dsn, "CREATE TABLE kept AS SELECT 42 AS answer")
        pid, port = server.pid, server.port
        assert pid is not None and port is not None
        backends = children_of(pid)
        assert backends, "the postmaster should have auxiliary processes"
    finally:
        server.stop()

    assert server.pid is None
    assert not pid_alive(pid)
    assert not any(pid_alive(child) for child in backends)
    assert port_is_free(port)
    server.stop()  # idempotent

    with EmbeddedPostgres(pg_root / "data") as again:
        assert await fetchval(again.dsn, "SELECT answer FROM kept") == 42


async def test_postgres_refuses_a_data_dir_in_use(pg_root: Path) -> None:
    with EmbeddedPostgres(pg_root / "data") as running:
        with pytest.raises(EmbeddedError, match="already running"):
            EmbeddedPostgres(pg_root / "data").start()
        assert await fetchval(running.dsn, "SELECT 1") == 1


async def test_postgres_removes_a_stale_pid_file(pg_root: Path) -> None:
    with EmbeddedPostgres(pg_root / "data"):
        pass
    pid_file = pg_root / "data" / "postmaster.pid"
    pid_file.write_text(f"{dead_pid()}\n{pg_root / 'data'}\n0\n5432\n\n127.0.0.1\n0 0\nready\n")

    with EmbeddedPostgres(pg_root / "data") as server:
        assert await fetchval(server.dsn, "SELECT 1") == 1


def test_postgres_on_a_busy_port_raises(pg_root: Path, busy_port: int) -> None:
    with pytest.raises(EmbeddedError, match="already in use"):
        EmbeddedPostgres(pg_root / "data", port=busy_port).start()


# --- broker -----------------------------------------------------------------------------------


async def test_broker_round_trip_and_clean_stop(topic_prefix: str, pg_root: Path) -> None:
    broker = ApacheKafka(pg_root / "kafka")
    bootstrap = broker.start()
    topic = f"{topic_prefix}.news"
    try:
        assert bootstrap == f"127.0.0.1:{broker.port}"
        await create_topic(bootstrap, topic, partitions=3)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            assert await producer.partitions_for(topic) == {0, 1, 2}
            await producer.send_and_wait(topic, b"hello", key=b"btc", partition=2)
        finally:
            await producer.stop()
        assert await consume_one(bootstrap, TopicPartition(topic, 2)) == (b"btc", b"hello")
        pid, port = broker.pid, broker.port
    finally:
        broker.stop()

    assert broker.pid is None
    assert not pid_alive(pid)
    assert port_is_free(port)
    broker.stop()  # idempotent


def test_broker_on_a_busy_port_raises(busy_port: int, pg_root: Path) -> None:
    with pytest.raises(EmbeddedError, match="already in use"):
        ApacheKafka(pg_root / "kafka", port=busy_port).start()


async def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    finally:
        await admin.close()


async def consume_one(bootstrap: str, partition: TopicPartition) -> tuple[bytes | None, bytes | None]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([partition])
        message = await asyncio.wait_for(consumer.getone(), timeout=10)
    finally:
        await consumer.stop()
    return message.key, message.value


# --- the shared fixtures ----------------------------------------------------------------------


async def test_fresh_db_is_empty_and_isolated(fresh_db: str, pg_dsn: str) -> None:
    await fetchval(fresh_db, "CREATE TABLE only_here (id int)")
    assert await fetchval(fresh_db, "SELECT count(*) FROM only_here") == 0
    assert await fetchval(pg_dsn, "SELECT to_regclass('only_here') IS NULL") is True


async def test_shared_broker_is_reachable(kafka_bootstrap: str, topic_prefix: str) -> None:
    await create_topic(kafka_bootstrap, f"{topic_prefix}.probe", partitions=1)
