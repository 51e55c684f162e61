"""The per-request bookkeeping of the read API, as pure logic: buffered log lines, the
access-log fast path, request ids and the request counters exported at scrape time."""

from __future__ import annotations

import asyncio
import io
import logging
from datetime import datetime, timezone

import orjson
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tickerwire.services.api.metrics import RequestStats
from tickerwire.services.common.http.requestlog import request_id
from tickerwire.services.common.runtime import logs
from tickerwire.services.common.runtime.logs import (
    REQUEST_ID,
    JsonFormatter,
    LineHandler,
    RequestIdFilter,
    info_line,
)
from tickerwire.services.common.runtime.shaped_lines import ShapedLines


def handler_on(out: io.StringIO) -> LineHandler:
    handler = LineHandler(out, JsonFormatter("test"))
    handler.addFilter(RequestIdFilter())
    return handler


def own_logger(name: str) -> tuple[io.StringIO, LineHandler, logging.Logger]:
    """A logger at INFO writing through its own LineHandler into a string (remove the handler after)."""
    out = io.StringIO()
    handler = handler_on(out)
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return out, handler, logger


def test_info_lines_wait_for_the_timer_and_a_warning_writes_them_first_in_order():
    out, handler, logger = own_logger("test.linehandler")

    async def scenario() -> list[str]:
        logger.info("one")
        logger.info("two")
        assert out.getvalue() == ""  # gathered, not written yet
        logger.warning("three")  # writes what waits, then itself
        written = out.getvalue().splitlines()
        logger.info("four")
        await asyncio.sleep(logs.FLUSH_AFTER_S * 3)  # the timer writes it
        return written

    try:
        written = asyncio.run(scenario())
    finally:
        logger.removeHandler(handler)
    assert [orjson.loads(line)["msg"] for line in written] == ["one", "two", "three"]
    assert [orjson.loads(line)["msg"] for line in out.getvalue().splitlines()] == ["one", "two", "three", "four"]


def test_a_line_logged_outside_an_event_loop_is_written_at_once():
    out = io.StringIO()
    handler = handler_on(out)
    handler.handle(logging.makeLogRecord({"name": "t", "levelno": logging.INFO, "levelname": "INFO", "msg": "now"}))
    assert orjson.loads(out.getvalue())["msg"] == "now"


def test_lines_left_by_a_stopped_loop_are_written_with_the_next_line_outside_it():
    out, handler, logger = own_logger("test.stoppedloop")

    async def scenario() -> None:
        logger.info("in the loop")  # waits for a timer that will never fire: the loop ends first
        logger.info("in the loop, again")  # the timer is set: nothing more to do

    try:
        asyncio.run(scenario())
        assert out.getvalue() == ""
        logger.info("after the loop")
    finally:
        logger.removeHandler(handler)
    assert [orjson.loads(line)["msg"] for line in out.getvalue().splitlines()] == [
        "in the loop",
        "in the loop, again",
        "after the loop",
    ]


def root_lines(monkeypatch) -> tuple[io.StringIO, LineHandler]:
    """The root logger's one handler, at INFO, writing into a string (as setup_logging does).
    Called in the test itself: pytest adds its capturing handlers to the root between a
    fixture's setup and the test."""
    out = io.StringIO()
    handler = handler_on(out)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [handler])
    monkeypatch.setattr(root, "level", logging.INFO)
    return out, handler


def test_the_access_line_fast_path_writes_what_the_formatter_would(monkeypatch):
    out, handler = root_lines(monkeypatch)
    logger = logging.getLogger("tickerwire.test.access")
    fields = {"method": "GET", "route": "/x/{id}", "status": 200, "duration_ms": 1.25, "workspace_id": None}
    records: list[logging.LogRecord] = []
    handler.addFilter(lambda record: records.append(record) or True)
    token = REQUEST_ID.set("req_abc")
    try:
        info_line(logger, "GET /x/{id} 200", fields)  # the fast path: no LogRecord
        assert records == []
        logger.info("GET /x/{id} 200", extra={"fields": fields})  # through a LogRecord
        assert len(records) == 1
    finally:
        REQUEST_ID.reset(token)
        handler.flush()
    fast, slow = (orjson.loads(line) for line in out.getvalue().splitlines())
    assert fast.pop("ts")[:10] == slow.pop("ts")[:10]
    assert (
        fast
        == slow
        == {
            "level": "info",
            "service": "test",
            "logger": "tickerwire.test.access",
            "msg": "GET /x/{id} 200",
            "request_id": "req_abc",
            **fields,
        }
    )


def test_shaped_lines_read_exactly_as_the_formatter_writes_them(monkeypatch):
    out, handler = root_lines(monkeypatch)
    logger = logging.getLogger("tickerwire.test.shaped")
    lines = ShapedLines(logger, "duration_ms", max_shapes=2)
    cases = [  # (request id, method, route, status, workspace, duration)
        ("req_1", "GET", "/posts", 200, "ws_a", 0.42),
        ("req_2", "GET", "/posts", 200, "ws_a", 12.5),  # the same shape: from its template
        ("client:id-3", "GET", "/posts/{id}", 404, None, 0.0),
        ("req_4", "HEAD", "/x", 429, 'ws_"q', 3.0),  # a third shape: the table starts again
        ("tw_live_abcdefghijk", "GET", "/posts", 200, "ws_a", 1.5),  # key-like: redacted
    ]
    expected = []
    for rid, method, route, status, ws, duration in cases:
        fields = {"method": method, "route": route, "status": status, "duration_ms": duration, "workspace_id": ws}
        token = REQUEST_ID.set(rid)
        try:
            lines.write(
                (method, route, status, ws),
                duration,
                lambda: (f"{method} {route} {status}", {**fields, "duration_ms": 0}),
            )
            expected.append(handler.json.line(0.0, "info", logger.name, f"{method} {route} {status}", rid, fields))
        finally:
            REQUEST_ID.reset(token)
    logs.set_trace_ids(lambda: ("a" * 32, "b" * 16))  # a span's ids: the formatter's way
    token = REQUEST_ID.set("req_5")
    try:
        lines.write(("GET", "/posts", 200, "ws_a"), 2.0, lambda: ("GET /posts 200", {"duration_ms": 0}))
    finally:
        REQUEST_ID.reset(token)
        logs.set_trace_ids(None)
    handler.flush()
    written = out.getvalue().splitlines()
    assert len(written) == len(cases) + 1
    for line, want in zip(written, expected):
        written_at = datetime.fromisoformat(orjson.loads(line)["ts"])
        assert abs((datetime.now(timezone.utc) - written_at).total_seconds()) < 60
        assert line[36:] == want[36:]  # all but the time, byte for byte
    assert "tw_live_***" in written[4] and "abcdefghijk" not in written[4]
    assert orjson.loads(written[5])["trace_id"] == "a" * 32


def test_generated_request_ids_are_distinct_and_well_formed():
    ids = {request_id(None) for _ in range(1000)}
    assert len(ids) == 1000
    assert all(i.startswith("req_") and len(i) == 28 and request_id(i) == i for i in ids)


def test_request_stats_export_counts_and_cumulative_latency_buckets():
    registry = CollectorRegistry()
    stats = RequestStats(buckets=(0.001, 0.01))
    registry.register(stats)
    for seconds in (0.0005, 0.001, 0.005, 0.5):
        stats.observe("partner:posts", 200, seconds)
    stats.observe("partner:posts", 429, 0.0001)
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    requests = {(s.labels["route"], s.labels["status"]): s.value for s in families["tickerwire_api_requests"].samples}
    assert requests == {("partner:posts", "200"): 4, ("partner:posts", "429"): 1}
    latency = {(s.name, s.labels.get("le")): s.value for s in families["tickerwire_api_request_seconds"].samples}
    assert latency[("tickerwire_api_request_seconds_bucket", "0.001")] == 3  # le is inclusive
    assert latency[("tickerwire_api_request_seconds_bucket", "0.01")] == 4
    assert latency[("tickerwire_api_request_seconds_bucket", "+Inf")] == 5
    assert latency[("tickerwire_api_request_seconds_count", None)] == 5
    assert abs(latency[("tickerwire_api_request_seconds_sum", None)] - 0.5066) < 1e-9
