"""CI keeps the benchmark harness working: one smoke run of every benchmark must produce a
well-formed result row for each. No figure is asserted (speed is judged in docs/benchmarks.md).
Endpoints that do not exist yet are allowed to report "n/a (endpoint missing: 404)".

The tracing benchmark (four stacks at once) has a module of its own, test_tracing_smoke.py, so
that its set-up runs on another worker, each within the per-test bound."""

from __future__ import annotations

import json

import pytest

from tests.benchmarks import run

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

#: The benchmarks of this module's smoke run: all but those with a module of their own.
ALONE = ("tracing",)
HERE = [name for name in run.BENCHMARKS if name not in ALONE]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, pg_dsn, kafka_bootstrap, monkeypatch_module):
    out = tmp_path_factory.mktemp("bench")
    monkeypatch_module.setenv("TICKERWIRE_TEST_DATABASE_URL", pg_dsn)
    monkeypatch_module.setenv("TICKERWIRE_TEST_KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    doc_path = out / "benchmarks.md"
    results = run.main(["--smoke", *(f"--only={name}" for name in HERE), "--out", str(out), "--doc", str(doc_path)])
    files = list(out.glob("benchmarks-*-smoke.json"))
    return results, files, doc_path


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_every_benchmark_has_a_result_row(smoke):
    results, _, _ = smoke
    assert [r["benchmark"] for r in results] == HERE
    for r in results:
        assert r["status"] in ("ok", "n/a"), (r["benchmark"], r["notes"])


def test_rows_are_well_formed(smoke):
    results, _, _ = smoke
    for r in results:
        assert r["metrics"], r["benchmark"]
        for m in r["metrics"]:
            assert {"metric", "unit", "product", "baseline", "ratio", "target", "met", "note"} <= set(m)
            if m["product"] is None and m["baseline"] is None:  # only an endpoint that does not exist yet
                assert m["note"].startswith("n/a"), m
                continue
            for side in (m["product"], m["baseline"]):
                if side is not None:
                    assert side["runs"] == 1 and side["min"] <= side["median"] <= side["max"], m
            if m["product"] is not None and m["baseline"] is not None:
                assert m["ratio"] is not None, m


def test_json_and_markdown_are_written(smoke):
    results, files, doc_path = smoke
    assert len(files) == 1
    doc = json.loads(files[0].read_text())
    assert doc["smoke"] is True and doc["commit"] and doc["machine"]["nproc"] >= 1
    assert [r["benchmark"] for r in doc["results"]] == [r["benchmark"] for r in results]
    text = doc_path.read_text()
    assert doc["commit"] in text and "| benchmark |" in text
