"""The type checker runs over the whole package (schemas, services, devstack) with the
committed configuration (``[tool.mypy]`` in pyproject.toml) and finds no error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
#: The package's folders and the import names pyproject.toml installs them as.
PACKAGE_DIRS = {"schemas": "schemas", "services": "services", "devstack": "devstack"}


def test_mypy_finds_no_error_in_the_package(tmp_path):
    # mypy cannot follow the editable install's import hook, so it reads the package through a
    # tree of links laid out as installed: tickerwire/<name> -> the repository folder.
    package = tmp_path / "tickerwire"
    package.mkdir()
    for name, folder in PACKAGE_DIRS.items():
        (package / name).symlink_to(ROOT / folder, target_is_directory=True)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "-p",
            "tickerwire",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Success: no issues found" in run.stdout
