"""CI keeps the tracing benchmark working (its four stacks start on a worker of their own): one
smoke run gives a well-formed row for each variant. No figure is asserted (docs/benchmarks.md)."""

from __future__ import annotations

import pytest

from tests.benchmarks import run, tracing

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def test_the_tracing_benchmark_has_a_row_per_variant_and_measure(tmp_path, pg_dsn, kafka_bootstrap, monkeypatch):
    monkeypatch.setenv("TICKERWIRE_TEST_DATABASE_URL", pg_dsn)
    monkeypatch.setenv("TICKERWIRE_TEST_KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    (result,) = run.main(["--smoke", "--only=tracing", "--out", str(tmp_path), "--doc", str(tmp_path / "b.md")])
    assert result["benchmark"] == "tracing" and result["status"] == "ok", result["notes"]
    names = [m["metric"] for m in result["metrics"]]
    assert names == [
        *(f"/posts requests/s, tracing {v}" for v in tracing.VARIANTS),
        "/posts api CPU per request, tracing installed, off",
        *(f"stream deliveries/s, tracing {v}" for v in tracing.VARIANTS),
        "stream CPU per delivery, tracing installed, off",
    ]
    for m in result["metrics"]:
        assert m["product"]["runs"] == 1 and m["baseline"]["runs"] == 1 and m["ratio"] is not None, m
