"""The rules both client libraries apply, read from clients/shared/vectors.json (the TypeScript
client's suite reads the same file): error classes, Retry-After, retry waits, ResumePoint JSON,
the stream's key and the X-Min-Log-Position sent."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

import tickerwire_client.errors as errors
from tickerwire_client import AsyncClient, ResumePoint, RetryPolicy
from tickerwire_client.errors import error_from_response
from tickerwire_client.meta import LogMark, ResponseMeta, retry_after_seconds
from tickerwire_client.stream import saw_push, stream_endpoint

VECTORS = json.loads((Path(__file__).resolve().parents[2] / "clients" / "shared" / "vectors.json").read_text())


@pytest.mark.parametrize("case", VECTORS["errors"], ids=lambda c: f"{c['status']}-{c['code']}")
def test_each_answer_maps_to_the_shared_class(case):
    error = error_from_response(case["status"], {"error": {"code": case["code"], "message": "m"}}, {})
    assert type(error) is getattr(errors, case["python"])


@pytest.mark.parametrize("case", VECTORS["retry_after"]["headers"], ids=lambda c: repr(c["value"]))
def test_retry_after_header(case):
    assert retry_after_seconds({"Retry-After": case["value"]}) == case["seconds"]


@pytest.mark.parametrize("case", VECTORS["retry_after"]["precedence"], ids=str)
def test_the_header_wins_over_the_envelope(case):
    headers = {} if case["header"] is None else {"Retry-After": case["header"]}
    envelope = {"code": "RATE_LIMITED", "message": "m"}
    if case["retry_after_sec"] is not None:
        envelope["retry_after_sec"] = case["retry_after_sec"]
    assert error_from_response(429, {"error": envelope}, headers).retry_after == case["seconds"]


@pytest.mark.parametrize("case", VECTORS["retry_delay"]["cases"], ids=str)
def test_retry_delay(case):
    policy = RetryPolicy(
        max_attempts=VECTORS["retry_delay"]["policy"]["max_attempts"],
        max_total_wait=VECTORS["retry_delay"]["policy"]["max_total_wait"],
    )
    delay = policy.delay(case["attempt"], case["retry_after"], case["waited"])
    if "delay_at_most" in case:
        assert delay is not None and 0 <= delay <= case["delay_at_most"]
    else:
        assert delay == case["delay"]


def test_retry_statuses():
    assert sorted(RetryPolicy().retry_statuses) == VECTORS["retry_statuses"]["python"]


@pytest.mark.parametrize("case", VECTORS["resume_points"]["cases"], ids=lambda c: c["json"][:40])
def test_resume_point_json(case):
    point = ResumePoint(case["cursor"], case["after"])
    assert point.to_json() == case["json"]
    assert ResumePoint.from_json(case["json"]) == point


@pytest.mark.parametrize("case", VECTORS["resume_points"]["reads"], ids=lambda c: c["json"])
def test_resume_point_reads(case):
    assert ResumePoint.from_json(case["json"]) == ResumePoint(case["cursor"], case["after"])


@pytest.mark.parametrize("case", VECTORS["stream_key"]["cases"], ids=lambda c: c["stream_url"])
def test_the_clients_key_wins_over_one_in_the_stream_url(case):
    query = parse_qsl(urlsplit(stream_endpoint(case["stream_url"], case["api_key"], {})).query)
    assert [v for k, v in query if k == "key"] == case["sent_keys"]
    assert {k: v for k, v in query if k != "key"} == case["kept"]


@pytest.mark.parametrize("case", VECTORS["min_log_position"]["cases"], ids=str)
def test_the_mark_sent_as_x_min_log_position(case):
    client = AsyncClient("http://127.0.0.1:9/api/v1/developer", "tw_live_k")  # no request is made
    for seen in case["seen"]:
        if "push" in seen:
            saw_push(client, LogMark.parse(seen["push"]))
        elif (
            position := ResponseMeta.from_headers(200, {"X-Log-Position": seen["response"]}).log_position
        ) is not None:
            client.saw(position.offsets)
    assert client.min_log_position() == case["sent"]
