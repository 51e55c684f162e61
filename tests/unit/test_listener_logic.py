"""Pure logic of the listeners: the log limiter, request ids, the fd budget, handshake checks."""

from __future__ import annotations

import asyncio
import io
import logging
import sys

import orjson
from aiokafka import errors as kafka_errors

from tickerwire.services.common.http.requestlog import REQUEST_ID, RequestIdFilter, request_id
from tickerwire.services.common.operator.admin_listener import ADMIN_MAX_CONNECTIONS, FD_RESERVE, connection_budget
from tickerwire.services.common.runtime.logs import (
    ExpectedFaultTracebacks,
    JsonFormatter,
    LibraryFloodFilter,
    LogLimiter,
    RetriedLibraryErrors,
)
from tickerwire.services.stream.handshake import handshake_error

KEY = "dGhlIHNhbXBsZSBub25jZQ=="


def test_log_limiter_allows_a_burst_then_one_per_second_and_counts_the_rest():
    now = [0.0]
    limiter = LogLimiter(burst=3, per_second=1.0, clock=lambda: now[0])
    assert [limiter.allow() for _ in range(5)] == [0, 0, 0, None, None]
    now[0] += 1.0
    assert limiter.allow() == 2  # two lines were suppressed since the last one written
    assert limiter.allow() is None


def test_a_library_flooding_the_log_gets_a_burst_then_one_line_a_second_that_counts_the_rest():
    # aiokafka logs about a hundred ERROR lines a second while a broker refuses connections.
    now = [0.0]
    flood = LibraryFloodFilter("aiokafka", LogLimiter(burst=3, per_second=1.0, clock=lambda: now[0]))

    def record(name: str) -> logging.LogRecord:
        return logging.LogRecord(name, logging.ERROR, __file__, 1, "Unable connect to node with id 111", None, None)

    passed = [flood.filter(record("aiokafka.conn" if i % 2 else "aiokafka")) for i in range(50)]
    assert passed.count(True) == 3
    assert all(flood.filter(record("tickerwire.services.projector.runner")) for _ in range(20))  # ours: never
    now[0] += 1.0
    line = record("aiokafka")
    assert flood.filter(line) and line.fields == {"suppressed": 47}
    assert not flood.filter(record("aiokafka"))


def test_expected_fault_lines_of_libraries_are_one_line_without_a_traceback():
    def record(name, level, msg, exc):
        try:
            raise exc
        except Exception:
            return logging.LogRecord(name, level, __file__, 1, msg, None, sys.exc_info())

    expected = ExpectedFaultTracebacks()
    floor = record(
        "asyncpg.pool",
        logging.WARNING,
        "Failed to restore the pool connection floor; retrying",
        ConnectionRefusedError(111, "Connection refused"),
    )
    assert expected.filter(floor) and floor.exc_info is None
    assert (
        floor.getMessage()
        == "Failed to restore the pool connection floor; retrying: ConnectionRefusedError: [Errno 111] Connection refused"
    )
    release = record(
        "asyncio",
        logging.ERROR,
        "Task exception was never retrieved\nfuture: <Task finished name='Task-9' "
        "coro=<PoolConnectionHolder.release() done> exception=TimeoutError()>",
        TimeoutError(),
    )
    assert expected.filter(release) and release.exc_info is None and release.levelname == "WARNING"
    assert "asyncpg#1326" in release.getMessage()
    ours = record("tickerwire.services.api", logging.ERROR, "a bug", RuntimeError("x"))
    assert expected.filter(ours) and ours.exc_info is not None  # a traceback where it means a bug


def test_asyncio_lines_without_an_exception_keep_their_message():
    """asyncio's default exception handler logs with ``exc_info=False`` when its context has no
    exception; the filter once indexed that and raised, and the line became "Exception in
    default exception handler"."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter("test"))
    handler.addFilter(ExpectedFaultTracebacks())
    logger = logging.getLogger("asyncio")
    saved = logger.handlers[:], logger.propagate
    logger.handlers[:], logger.propagate = [handler], False
    loop = asyncio.new_event_loop()
    try:
        loop.call_exception_handler({"message": "Unclosed client session"})
    finally:
        loop.close()
        logger.handlers[:], logger.propagate = saved
    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [line["msg"] for line in lines] == ["Unclosed client session"]
    assert "exc" not in lines[0]


def test_request_id_is_the_clients_when_well_formed():
    assert request_id("abc-123.X_y:z") == "abc-123.X_y:z"
    for bad in (None, "", "has space", "x" * 129, "new\nline", "ünicode"):
        generated = request_id(bad)
        assert generated.startswith("req_") and generated != bad


def test_every_log_line_written_during_a_request_carries_its_id():
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter("test"))
    handler.addFilter(RequestIdFilter())
    logger = logging.getLogger("test.requestid")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        token = REQUEST_ID.set("req_abc")
        logger.warning("inside")
        REQUEST_ID.reset(token)
        logger.warning("outside")
    finally:
        logger.removeHandler(handler)
    inside, outside = out.getvalue().splitlines()
    assert '"request_id":"req_abc"' in inside and "request_id" not in outside


def test_connection_budget_fits_the_fd_limit():
    assert connection_budget(1000, 10, 100_000) == 1000
    assert connection_budget(1000, 10, 1024) == 1024 - ADMIN_MAX_CONNECTIONS - 10 - FD_RESERVE
    assert connection_budget(1000, 10, 50) == 1


def test_handshake_checks():
    ok = {"Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": KEY}
    assert handshake_error(ok) is None
    assert handshake_error({}) is None  # a plain GET: the gates decide (426 after a valid key)
    assert handshake_error({"Upgrade": "h2c"}) is None
    for bad in (
        {**ok, "Sec-WebSocket-Version": "8"},
        {**ok, "Sec-WebSocket-Key": "c2hvcnQ="},
        {**ok, "Sec-WebSocket-Key": "not base64!"},
        {"Upgrade": "websocket", "Sec-WebSocket-Version": "13"},
        {**ok, "Upgrade": "websocket\udcff"},
        {**ok, "User-Agent": "\udcc3("},
    ):
        response = handshake_error(bad)
        assert response is not None and response.status == 400, bad


def test_a_retried_coordinator_lookup_is_a_warning_and_any_other_aiokafka_error_stays_an_error():
    def record(msg: str, *args) -> logging.LogRecord:
        return logging.LogRecord("aiokafka.consumer.group_coordinator", logging.ERROR, __file__, 1, msg, args, None)

    retried = RetriedLibraryErrors()
    loading = record("Group Coordinator Request failed: %s", kafka_errors.CoordinatorNotAvailableError())
    fatal = record("Group Coordinator Request failed: %s", kafka_errors.KafkaError())
    expired = record("Heartbeat session expired - marking coordinator dead")
    assert all(retried.filter(r) for r in (loading, fatal, expired))
    assert [r.levelname for r in (loading, fatal, expired)] == ["WARNING", "ERROR", "ERROR"]
