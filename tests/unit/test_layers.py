"""The layer rule holds: import-linter's contracts (``[tool.importlinter]`` in pyproject.toml)
over the whole package. Schemas at the bottom, then services/common (its rooms in order), then
services/readmodel, then the services, which never import each other, then the CLI; devstack
only under ``tickerwire up``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
#: The package's folders and the import names pyproject.toml installs them as.
PACKAGE_DIRS = {"schemas": "schemas", "services": "services", "devstack": "devstack"}


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    # Like test_types.py: the package is read through a tree laid out as installed, since the
    # editable install's import hook is not a folder import-linter can walk.
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())",
            str(ROOT / "pyproject.toml"),
            "--no-cache",
        ],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def package_tree(tmp_path: Path, copy: str | None = None) -> Path:
    """tmp_path/tickerwire/<name> -> the repository's folders (``copy`` is copied instead, to be changed)."""
    package = tmp_path / "tickerwire"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, folder in PACKAGE_DIRS.items():
        if name == copy:
            shutil.copytree(ROOT / folder, package / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (package / name).symlink_to(ROOT / folder, target_is_directory=True)
    return tmp_path


def test_every_layer_contract_is_kept(tmp_path):
    run = lint_imports(package_tree(tmp_path))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


def test_a_back_import_from_the_bottom_layer_breaks_the_contracts(tmp_path):
    """The check can fail: schemas importing a service is reported, naming the import."""
    tree = package_tree(tmp_path, copy="schemas")
    (tree / "tickerwire" / "schemas" / "backwards.py").write_text("from tickerwire.services.api import app\n")
    run = lint_imports(tree)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "BROKEN" in run.stdout and "tickerwire.schemas.backwards -> tickerwire.services.api.app" in run.stdout
