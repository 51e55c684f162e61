"""Run the benchmark suite: ``python -m tests.benchmarks.run [--smoke] [--only NAME ...]``.

Prints one table, writes ``bench-results/benchmarks-<stamp>.json`` (git-ignored) and, in a
full run, ``docs/benchmarks.md``. ``--smoke`` runs each benchmark once at a tiny size to
prove the harness works (CI); its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from . import (
    changes,
    freshness,
    memory,
    projector,
    read_api,
    rebuild,
    rejected,
    scaling,
    search,
    stream,
    tracing,
    webhooks,
)
from .common import REPO, Context, Result, Settings, Summary, infrastructure, pg_settings, raise_nofile
from .doc import NOTES, carried_section

#: Hand-written notes on the profiles of figures that miss their target, appended to the doc.
ANALYSIS = Path(__file__).with_name("analysis.md")

BENCHMARKS = {
    m.NAME: m
    for m in (
        read_api,
        rejected,
        projector,
        stream,
        search,
        freshness,
        memory,
        rebuild,
        changes,
        webhooks,
        tracing,
        scaling,
    )
}

log = logging.getLogger("bench")


def machine() -> dict:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem_kb = next(
        int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")
    )
    load = os.getloadavg()
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gb": round(mem_kb / 1e6, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "loadavg_at_start": [round(x, 2) for x in load],
    }


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def uncommitted() -> list[str]:
    """The tracked files that differ from the commit (a run of a dirty tree says so)."""
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return sorted(line[3:] for line in out.splitlines() if line[3:] != "docs/benchmarks.md")


async def run_all(names: list[str], settings: Settings, dsn: str, bootstrap: str) -> list[Result]:
    ctx = Context(settings, dsn, bootstrap)
    results = []
    for name in names:
        started = time.perf_counter()
        log.info("running %s", name)
        try:
            result = await BENCHMARKS[name].run(ctx)
        except Exception as exc:  # one broken benchmark must not hide the others
            log.exception("benchmark %s failed", name)
            result = Result(name, status="error", notes=[f"{type(exc).__name__}: {exc}"])
        result.seconds = time.perf_counter() - started
        results.append(result)
    return results


def fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}" if abs(v) >= 1 else f"{v:.3f}"


def span(s: Summary | None) -> str:
    return "-" if s is None else f"{fmt(s.median)} ({fmt(s.min)}..{fmt(s.max)})"


def table(results: list[Result]) -> list[list[str]]:
    rows = [
        [
            "benchmark",
            "metric",
            "unit",
            "product median (min..max)",
            "baseline median (min..max)",
            "ratio",
            "target",
            "met",
        ]
    ]
    for r in results:
        if not r.metrics:
            rows.append([r.benchmark, r.status, "", "", "", "", "", "; ".join(r.notes)[:80]])
        for m in r.metrics:
            met = m.met()
            product = (
                span(Summary.of(m.product))
                if m.product
                else (m.note if m.note.startswith("n/a") else "-" if m.baseline else "n/a")
            )
            rows.append(
                [
                    r.benchmark,
                    m.name,
                    m.unit,
                    product,
                    span(Summary.of(m.baseline)),
                    fmt(m.ratio()) + ("x" if m.ratio() else ""),
                    m.target,
                    "" if met is None else ("yes" if met else "NO"),
                ]
            )
    return rows


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for n, row in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def markdown(doc: dict, rows: list[list[str]], results: list[Result], previous: str | None = None) -> str:
    m = doc["machine"]
    lines = [
        "# Benchmarks",
        "",
        "Generated by `python -m tests.benchmarks.run` from a real run; do not edit the figures by hand.",
        "Ratios are product/baseline for throughputs and baseline/product for latencies, so 1.0x means",
        '"as fast as the physical limit" and smaller is worse. Each benchmark alternates product and',
        f"baseline runs ({doc['runs']} of each); figures are the median (min..max) over runs.",
        "",
        f"- Date: {doc['date']}",
        f"- Commit: `{doc['commit']}`"
        + (f" with uncommitted changes to {', '.join(doc['uncommitted'])}" if doc.get("uncommitted") else ""),
        f"- Machine: {m['nproc']} CPUs, {m['cpu']}, {m['memory_gb']} GB RAM, Python {m['python']}, Linux {m['kernel']}",
        f"- Load average at start: {m['loadavg_at_start']}"
        + (" (other work was running on the machine during this run)" if doc.get("shared_machine") else ""),
        f"- Mode: {'smoke (numbers are meaningless)' if doc['smoke'] else 'full'}",
        "- PostgreSQL: "
        + ", ".join(f"{k} = {v}" for k, v in doc.get("postgres", {}).items())
        + (
            " (durability OFF: counting and write figures are optimistic)"
            if doc.get("postgres", {}).get("fsync") == "off"
            else ""
        ),
        f"- Load average at end: {doc.get('loadavg_at_end')}",
        "",
        "| " + " | ".join(rows[0]) + " |",
        "|" + "---|" * len(rows[0]),
        *("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows[1:]),
        "",
        NOTES,
        "",
    ]
    skipped = [name for name in BENCHMARKS if name not in {r.benchmark for r in results}]
    carried = carried_section(previous, skipped)
    if skipped:
        note = (
            f"Not run in this invocation (`--only`): {', '.join(skipped)}; "
            + (
                "their rows, notes and the run they come from are carried over, unchanged, below "
                '("Earlier runs, carried over").'
                if carried
                else "their figures are those of an earlier run, in this file's git history."
            )
            + "\n"
        )
        lines.insert(lines.index(NOTES), note)
    for r in results:
        lines.append(f"### {r.benchmark} ({r.status}, {r.seconds:.0f} s)")
        lines.append("")
        lines.extend(f"- {n}" for n in r.notes)
        lines.extend(f"- {mm.name}: {mm.note}" for mm in r.metrics if mm.note)
        lines.append("")
    lines.extend(carried)
    if ANALYSIS.exists():
        lines.append(ANALYSIS.read_text())
    return "\n".join(lines) + "\n"


def render(json_path: str, doc_path: str) -> None:
    """Re-render the markdown of a stored run (e.g. after writing the profile notes)."""
    doc = json.loads(Path(json_path).read_text())
    results = []
    for r in doc["results"]:
        result = Result(r["benchmark"], r["status"], notes=r["notes"], seconds=r["seconds"])
        for m in r["metrics"]:
            metric = result.metric(
                m["metric"],
                m["unit"],
                product=m["product_runs"],
                baseline=m["baseline_runs"],
                higher_is_better=m["higher_is_better"],
                target=m["target"],
                note=m["note"],
            )
            if m["met"] is not None:
                metric.check = lambda p, ratio, met=m["met"]: met
        results.append(result)
    old = Path(doc_path).read_text() if Path(doc_path).exists() else None
    Path(doc_path).write_text(markdown(doc, table(results), results, old))


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.run", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="one tiny run of each benchmark (CI)")
    parser.add_argument(
        "--only", action="append", choices=sorted(BENCHMARKS), help="run only this benchmark (repeatable)"
    )
    parser.add_argument("--runs", type=int, help="runs of product and of baseline (default 5; 1 in smoke mode)")
    parser.add_argument("--out", default=str(REPO / "bench-results"), help="directory of the JSON results")
    parser.add_argument("--doc", help="markdown output (default docs/benchmarks.md in a full run, none in smoke mode)")
    parser.add_argument(
        "--render", metavar="JSON", help="only re-render --doc (default docs/benchmarks.md) from a stored JSON"
    )
    parser.add_argument("--shared-machine", action="store_true", help="say in the doc that other work ran meanwhile")
    parser.add_argument(
        "--durability",
        choices=("on", "off"),
        help="embedded PostgreSQL with fsync/synchronous_commit/full_page_writes on (default in a full run) or off (default in smoke mode)",
    )
    args = parser.parse_args(argv)
    if args.render:
        render(args.render, args.doc or str(REPO / "docs" / "benchmarks.md"))
        return []
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    raise_nofile()
    settings = Settings.create(args.smoke, args.runs)
    names = [n for n in BENCHMARKS if not args.only or n in args.only]
    doc = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": commit(),
        "uncommitted": uncommitted(),
        "machine": machine(),
        "smoke": settings.smoke,
        "runs": settings.runs,
        "shared_machine": args.shared_machine,
    }
    durable = (args.durability or ("off" if settings.smoke else "on")) == "on"
    with infrastructure(durable) as (dsn, bootstrap):
        doc["postgres"] = asyncio.run(pg_settings(dsn))
        log.info("PostgreSQL settings: %s", doc["postgres"])
        results = asyncio.run(run_all(names, settings, dsn, bootstrap))
    doc["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    rows = table(results)
    print_table(rows)
    doc["results"] = [r.to_json() for r in results]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"benchmarks-{doc['date'].replace(':', '')}{'-smoke' if settings.smoke else ''}.json"
    path.write_text(json.dumps(doc, indent=2))
    print(f"\nJSON: {path}")
    doc_path = args.doc or (None if settings.smoke else str(REPO / "docs" / "benchmarks.md"))
    if doc_path:
        old = Path(doc_path).read_text() if Path(doc_path).exists() else None
        Path(doc_path).write_text(markdown(doc, rows, results, old))
        print(f"Markdown: {doc_path}")
    return doc["results"]


if __name__ == "__main__":
    main()
