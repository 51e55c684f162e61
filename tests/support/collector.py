"""A real OpenTelemetry Collector as the tests' trace backend (devstack/embedded/otel_collector.py),
one per test process (so one per xdist worker), and what it received as flat span dicts
(tests/support/otlp_spans.py).

    def test_something(otel_collector):
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": otel_collector.endpoint, ...}
        ...
        spans = otel_collector.spans(trace_id, count=3, timeout=10)

Without Go to build the collector and no binary built before (nor ``$TICKERWIRE_OTELCOL_BIN``),
a test that asks for it skips and says so. The binary is built at collection, once, when a
collected test asks for the fixture: outside any test's timeout.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.support.otlp_spans import parse_lines
from tickerwire.devstack.embedded import otel_collector
from tickerwire.devstack.embedded.errors import EmbeddedError
from tickerwire.devstack.embedded.otel_collector import OtelCollector

FIXTURE = "otel_collector"
#: What building the binary at collection said, when it failed: the fixture raises it again.
_BUILD_FAILED: list[EmbeddedError] = []


class CollectorHandle:
    """What a test holds: the endpoint to export to, the spans received, and the collector's
    life (``stop()`` takes the backend down, ``start()`` brings it up on the same endpoint)."""

    def __init__(self, server: OtelCollector) -> None:
        self._server = server

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:port``: the value of OTEL_EXPORTER_OTLP_ENDPOINT."""
        return self._server.endpoint

    @property
    def spans_path(self) -> Path:
        return self._server.spans_path

    @property
    def log_path(self) -> Path:
        return self._server.log_path

    def received(self, trace_id: str | None = None) -> list[dict]:
        """The spans received so far (of ``trace_id``, 32 hex, when given), at once."""
        try:
            text = self._server.spans_path.read_text()
        except FileNotFoundError:
            return []
        # A line the exporter is still writing has no newline yet: it is read next time.
        lines = text.split("\n")[:-1]
        spans = parse_lines(lines)
        return spans if trace_id is None else [s for s in spans if s["trace_id"] == trace_id.lower()]

    def spans(self, trace_id: str | None = None, *, count: int = 1, timeout: float = 10.0) -> list[dict]:
        """The spans received (of ``trace_id`` when given), once there are at least ``count`` of
        them or ``timeout`` seconds have passed: then those there are, maybe fewer (the test
        asserts). ``count=0`` waits the whole ``timeout``: for asserting that nothing came."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.received(trace_id)
            if (count and len(found) >= count) or time.monotonic() >= deadline:
                return found
            time.sleep(0.05)

    async def spans_async(self, trace_id: str | None = None, *, count: int = 1, timeout: float = 10.0) -> list[dict]:
        """:meth:`spans` for an async test: the event loop runs while it waits."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.received(trace_id)
            if (count and len(found) >= count) or time.monotonic() >= deadline:
                return found
            await asyncio.sleep(0.05)

    def stop(self) -> None:
        """Take the collector down (idempotent): exports to the endpoint are refused meanwhile."""
        self._server.stop()

    def start(self) -> None:
        """Bring it up again on the same endpoint (idempotent); what it received before stays."""
        self._server.start()

    def running(self) -> bool:
        return self._server.running()


def prebuild(items: list[pytest.Item]) -> None:
    """Build (or find) the binary when a collected test asks for the fixture, so that a first
    build does not count against that test's timeout. Where nothing can be built, the fixture
    skips; a failed build is kept for the fixture to raise."""
    if _BUILD_FAILED or not any(FIXTURE in getattr(item, "fixturenames", ()) for item in items):
        return
    if otel_collector.unavailable() is None:
        try:
            otel_collector.binary()
        except EmbeddedError as exc:
            _BUILD_FAILED.append(exc)


@pytest.fixture(scope="session", name=FIXTURE)
def otel_collector_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorHandle]:
    """The session's collector (registered as ``otel_collector`` in tests/conftest.py)."""
    if (reason := otel_collector.unavailable()) is not None:
        pytest.skip(reason)
    if _BUILD_FAILED:
        raise _BUILD_FAILED[0]
    server = OtelCollector(tmp_path_factory.mktemp("otelcol"))
    server.start()
    try:
        yield CollectorHandle(server)
    finally:
        server.stop()
