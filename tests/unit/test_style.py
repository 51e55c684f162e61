"""Lint and format are automated: ruff's lint rules and its formatter (``[tool.ruff]`` in
pyproject.toml) find nothing to say over the whole repository. `ruff format . && ruff check
--fix .` fixes what they find."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_ruff_lint_finds_nothing():
    run = ruff("check", ".")
    assert run.returncode == 0, run.stdout + run.stderr


def test_ruff_format_would_change_nothing():
    run = ruff("format", "--check", ".")
    assert run.returncode == 0, run.stdout + run.stderr


def test_both_checks_can_fail(tmp_path):
    """With the repository's configuration, an unused import and an unformatted line are found."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "bad.py").write_text("import os\nx = {  'a':1 }\n")
    lint = ruff("check", ".", cwd=tmp_path)
    assert lint.returncode == 1 and "F401" in lint.stdout
    form = ruff("format", "--check", ".", cwd=tmp_path)
    assert form.returncode == 1 and "bad.py" in form.stdout + form.stderr
