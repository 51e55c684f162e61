"""The benchmark document's carried-over runs: a partial run (``--only``) keeps, for every
benchmark it skipped, that benchmark's rows AND the run they came from (date, commit, load,
PostgreSQL settings) and its notes, so every figure in docs/benchmarks.md stays attributed
to the run that measured it, however many partial runs follow.

The document has two places a benchmark's figures can sit:

- the run of this invocation: the header's ``- Date:`` ... lines, the main table, and the
  ``### name (status, N s)`` notes under ``## Notes per benchmark``;
- ``## Earlier runs, carried over``: one ``### name: carried over from the run of DATE``
  block per benchmark, with that run's lines, its table rows and its notes.

:func:`blocks` reads both from the document being replaced; :func:`carried_section` writes
the blocks of the skipped benchmarks. A section from before this layout (one table of rows
from several runs under ``## Earlier run, carried over``) is carried with its runs marked
unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The header lines that describe a run.
RUN_LINES = (
    "- Date:",
    "- Commit:",
    "- Machine:",
    "- Load average at start:",
    "- PostgreSQL:",
    "- Mode:",
    "- Load average at end:",
)
TABLE_HEADER = [
    "| benchmark | metric | unit | product median (min..max) | baseline median (min..max) | ratio | target | met |",
    "|---|---|---|---|---|---|---|---|",
]
NOTES = "## Notes per benchmark"
CARRIED = "## Earlier runs, carried over (benchmarks not run in this invocation)"
_LEGACY = "## Earlier run, carried over"
_FROM = ": carried over from the run of "
_UNKNOWN = "- Run: not recorded (carried over by an earlier version of this harness; see this file's git history)"


@dataclass
class Block:
    """One benchmark's figures from one run."""

    run: list[str] = field(default_factory=list)
    rows: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def date(self) -> str:
        return next(
            (line.split(":", 1)[1].strip() for line in self.run if line.startswith("- Date:")), "an unrecorded date"
        )


def _benchmark(row: str) -> str:
    return row.split("|")[1].strip()


def _sections(lines: list[str]) -> list[tuple[str, list[str]]]:
    """(heading, its lines) for the document's preamble ("") and each ``## `` section."""
    out: list[tuple[str, list[str]]] = [("", [])]
    for line in lines:
        if line.startswith("## "):
            out.append((line, []))
        else:
            out[-1][1].append(line)
    return out


def _subsections(lines: list[str]) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for line in lines:
        if line.startswith("### "):
            out.append((line, []))
        elif out:
            out[-1][1].append(line)
    return out


def blocks(document: str) -> dict[str, Block]:
    """Every benchmark's block in ``document``: from its run of that invocation, or carried."""
    found: dict[str, Block] = {}
    sections = _sections(document.splitlines())
    preamble = sections[0][1]
    run = [line for line in preamble if line.startswith(RUN_LINES)]
    for row in (line for line in preamble if line.startswith("| ") and not line.startswith("| benchmark |")):
        found.setdefault(_benchmark(row), Block(run=run)).rows.append(row)
    for heading, lines in sections[1:]:
        if heading == NOTES:
            for title, body in _subsections(lines):
                name = title[4:].split(" (", 1)[0]
                if name in found:
                    found[name].notes = [line for line in body if line.startswith("- ")]
        elif heading == CARRIED:
            for title, body in _subsections(lines):
                name = title[4:].split(_FROM, 1)[0]
                at_table = next((i for i, line in enumerate(body) if line.startswith("| ")), len(body))
                found[name] = Block(
                    run=[line for line in body[:at_table] if line.startswith("- ")],
                    rows=[
                        line
                        for line in body
                        if line.startswith("| ") and not line.startswith(("| benchmark |", "|---"))
                    ],
                    notes=[line for line in body[at_table:] if line.startswith("- ")],
                )
        elif heading.startswith(_LEGACY):
            for row in (
                line for line in lines if line.startswith("| ") and not line.startswith(("| benchmark |", "|---"))
            ):
                found.setdefault(_benchmark(row), Block(run=[_UNKNOWN])).rows.append(row)
    return found


def carried_section(previous: str | None, skipped: list[str]) -> list[str]:
    """The ``## Earlier runs, carried over`` lines for the ``skipped`` benchmarks found in
    ``previous`` (none if it holds none of them)."""
    found = blocks(previous or "")
    lines: list[str] = []
    for name in skipped:
        block = found.get(name)
        if block is None or not block.rows:
            continue
        lines += [f"### {name}{_FROM}{block.date()}", "", *block.run, "", *TABLE_HEADER, *block.rows, ""]
        if block.notes:
            lines += [*block.notes, ""]
    return [CARRIED, "", *lines] if lines else []
