"""docs/benchmarks.md keeps every figure attributed to the run that measured it: a partial run
(``--only``) carries the skipped benchmarks' rows, notes and run lines over, unchanged, however
many partial runs follow."""

from __future__ import annotations

from tests.benchmarks import run
from tests.benchmarks.common import Result

MACHINE = {
    "nproc": 2,
    "cpu": "test cpu",
    "memory_gb": 1.0,
    "python": "3.11",
    "kernel": "test",
    "loadavg_at_start": [0.5, 0.5, 0.5],
}


def invocation(date: str, commit: str, **figures: float) -> tuple[dict, list[Result]]:
    doc = {
        "date": date,
        "commit": commit,
        "machine": MACHINE,
        "smoke": False,
        "runs": 1,
        "postgres": {"fsync": "on"},
        "loadavg_at_end": [0.6, 0.6, 0.6],
    }
    results = []
    for name, value in figures.items():
        result = Result(name, notes=[f"{name} measured at {commit}"], seconds=1.0)
        result.metric(
            f"{name} figure",
            "ms",
            product=[value],
            baseline=[value / 2],
            higher_is_better=False,
            target="< 100 ms",
            check=lambda p, r: p < 100,
        )
        results.append(result)
    return doc, results


def render(previous: str | None, date: str, commit: str, **figures: float) -> str:
    doc, results = invocation(date, commit, **figures)
    return run.markdown(doc, run.table(results), results, previous)


def section(document: str, heading: str) -> str:
    start = document.index(heading)
    end = document.find("\n## ", start + 1)
    return document[start:] if end < 0 else document[start:end]


def test_a_partial_run_carries_the_skipped_rows_with_their_run_and_notes():
    first = render(None, "2026-01-01T00:00:00+00:00", "aaa", projector=10.0, rebuild=20.0)
    second = render(first, "2026-01-02T00:00:00+00:00", "bbb", projector=11.0)
    carried = section(second, "## Earlier runs, carried over")
    assert "### rebuild: carried over from the run of 2026-01-01T00:00:00+00:00" in carried
    assert "- Commit: `aaa`" in carried
    assert "| rebuild | rebuild figure | ms | 20.00 (20.00..20.00) |" in carried
    assert "- rebuild measured at aaa" in carried
    assert "projector" not in carried  # measured by this invocation: in the main table only
    main = second[: second.index("## Notes per benchmark")]
    assert (
        "- Commit: `bbb`" in main
        and "| projector | projector figure | ms | 11.00" in main
        and "| rebuild |" not in main
    )


def test_a_block_keeps_its_own_run_through_later_partial_runs():
    first = render(None, "2026-01-01T00:00:00+00:00", "aaa", projector=10.0, rebuild=20.0, search=5.0)
    second = render(first, "2026-01-02T00:00:00+00:00", "bbb", projector=11.0)
    third = render(second, "2026-01-03T00:00:00+00:00", "ccc", rebuild=21.0)
    carried = section(third, "## Earlier runs, carried over")
    assert "### projector: carried over from the run of 2026-01-02T00:00:00+00:00" in carried
    assert "### search: carried over from the run of 2026-01-01T00:00:00+00:00" in carried
    search = carried[carried.index("### search") :]
    assert "- Commit: `aaa`" in search and "- search measured at aaa" in search
    assert carried.count("- Commit:") == 2  # one run per carried benchmark, no accumulated dates
    assert "### rebuild" not in carried


def test_rows_of_the_former_single_carried_table_are_kept_and_marked_as_unrecorded():
    legacy = "\n".join(
        [
            "# Benchmarks",
            "",
            "- Date: 2026-01-01T00:00:00+00:00",
            "",
            "## Earlier run, carried over (benchmarks not run in this invocation)",
            "",
            "- Date: x",
            "- Date: y",
            "",
            "| benchmark | metric | unit | product median (min..max) | baseline median (min..max) | ratio | target | met |",
            "|---|---|---|---|---|---|---|---|",
            "| stream | old figure | ms | 1.00 | 1.00 | 1.00x |  |  |",
            "",
            "## Notes per benchmark",
            "",
        ]
    )
    carried = section(
        render(legacy, "2026-01-02T00:00:00+00:00", "bbb", projector=1.0), "## Earlier runs, carried over"
    )
    assert "| stream | old figure |" in carried and "- Run: not recorded" in carried and "- Date: x" not in carried
