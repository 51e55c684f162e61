"""The log positions are the read-model room's: no module outside ``services/readmodel/`` (its
migrations included) reads or writes the ``positions`` or ``log_epoch`` tables in SQL text. The
others ask :mod:`tickerwire.services.readmodel.positions` and
:mod:`tickerwire.services.readmodel.cursors`, or are handed the SQL by the wiring (the replica
monitor's probe)."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The room that owns the tables, and the test suite (which may look at them to check it).
OWNERS = ("services/readmodel/", "tests/")
#: SQL naming one of the tables where a statement reads, writes or locks it (schema-qualified or not).
QUERY = re.compile(
    r"\b(?:from|join|into|update|table|truncate|lock)\s+(?:only\s+)?(?:[\w\"{}$]+\.)?\"?(positions|log_epoch)\b",
    re.IGNORECASE,
)


def product_files() -> list[Path]:
    """The repository's Python and SQL files that git tracks or would track, outside the owners."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.py", "*.sql"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    return sorted(
        ROOT / name for name in listed.stdout.splitlines() if not name.startswith(OWNERS) and (ROOT / name).is_file()
    )


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes (prose, not SQL)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def string_texts(source: str) -> list[tuple[int, str]]:
    """Every string literal of a Python module but its docstrings, with its line; an f-string
    with ``{}`` where its values go."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = [v.value if isinstance(v, ast.Constant) else "{}" for v in node.values]
            out.append((node.lineno, "".join(str(p) for p in parts)))
            skip.update(id(v) for v in node.values)  # its pieces: read as the whole above
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            out.append((node.lineno, node.value))
    return out


def queries_of_positions(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".sql":
        found = [(text.count("\n", 0, m.start()) + 1, m.group(0)) for m in QUERY.finditer(text)]
    else:
        found = [(line, m.group(0)) for line, s in string_texts(text) for m in QUERY.finditer(s)]
    return [f"{path.relative_to(ROOT)}:{line}: {match!r}" for line, match in found]


def test_the_pattern_finds_a_query_of_the_tables_however_written():
    for sql in (
        "SELECT next_offset FROM positions WHERE topic = $1",
        'UPDATE "rm".log_epoch SET epoch = $1',
        "select * from rm.positions",
        "INSERT INTO positions (topic) VALUES ($1)",
    ):
        assert QUERY.search(sql), sql
    assert [s for _, s in string_texts('x = f"UPDATE {schema}.log_epoch n SET epoch = 1"')] == [
        "UPDATE {}.log_epoch n SET epoch = 1"
    ]
    assert string_texts('"""Reads from positions."""\n') == []  # a docstring is prose


def test_only_the_read_model_room_queries_the_log_positions():
    offenders = [hit for path in product_files() for hit in queries_of_positions(path)]
    assert offenders == [], (
        "the positions and log_epoch tables are queried only in services/readmodel/ "
        "(ask readmodel.positions or readmodel.cursors, or have the SQL handed in): " + "; ".join(offenders)
    )
