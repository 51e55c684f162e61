"""The rules both client libraries apply, read from clients/shared/vectors.json (the TypeScript
client's suite reads the same file): error classes, Retry-After, retry waits, ResumePoint JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tickerwire_client.errors as errors
from tickerwire_client import ResumePoint, RetryPolicy
from tickerwire_client.errors import error_from_response
from tickerwire_client.meta import retry_after_seconds

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
