"""Where the field's own tools are: promtool (Debian's ``prometheus``), kubectl, Checkov (PyPI,
in a virtual environment of its own), and the partners' Node linters (Spectral, Redocly, the
AsyncAPI CLI) and Node's ``ws`` client. ``.ci/run`` installs them into ``.tools/`` (covered by
.gitignore): ``.tools/node`` (``TICKERWIRE_NODE_TOOLS`` names another folder holding a
``node_modules``) and ``.tools/checkov`` (``TICKERWIRE_CHECKOV`` names another ``checkov``). A test
that needs a tool that is absent skips, naming it and how to install it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[2]
NODE_TOOLS_ENV = "TICKERWIRE_NODE_TOOLS"
CHECKOV_ENV = "TICKERWIRE_CHECKOV"
#: What ``.ci/run`` installs with npm: the package and the command it provides.
NODE_PACKAGES = {
    "spectral": "@stoplight/spectral-cli",
    "redocly": "@redocly/cli",
    "asyncapi": "@asyncapi/cli",
    "openapi-typescript": "openapi-typescript",
}


def node_tools() -> Path:
    return Path(os.environ.get(NODE_TOOLS_ENV) or ROOT / ".tools" / "node")


def node_command(name: str) -> list[str]:
    """The command line that runs the Node CLI ``name``, or a skip naming what is missing."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed (Debian package `nodejs`)")
    script = node_tools() / "node_modules" / ".bin" / name
    if not script.exists():
        pytest.skip(
            f"{NODE_PACKAGES[name]} is not installed in {node_tools()} (.ci/run installs it; or set {NODE_TOOLS_ENV})"
        )
    return [str(script)]


def node_modules_with(package: str) -> Path:
    """The ``node_modules`` folder holding ``package`` (for NODE_PATH), or a skip."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed (Debian package `nodejs`)")
    modules = node_tools() / "node_modules"
    if not (modules / package / "package.json").exists():
        pytest.skip(
            f"npm package {package} is not installed in {node_tools()} (.ci/run installs it; or set {NODE_TOOLS_ENV})"
        )
    return modules


def checkov() -> str:
    """The checkov command, or a skip."""
    for candidate in (
        os.environ.get(CHECKOV_ENV),
        str(ROOT / ".tools" / "checkov" / "bin" / "checkov"),
        shutil.which("checkov"),
    ):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.skip(
        f"checkov is not installed (PyPI package `checkov`; .ci/run installs it in .tools/checkov; or set {CHECKOV_ENV})"
    )


def binary(name: str, package: str) -> str:
    """The path of an installed program, or a skip naming the Debian package that has it."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (Debian package `{package}`; .ci/run installs it)")
    return path


@cache
def kustomize(folder: Path) -> list[dict]:
    """The kustomization as ``kubectl kustomize`` (kustomize v5) renders it: what ``kubectl apply -k`` applies."""
    kubectl = binary("kubectl", "kubectl")
    rendered = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert rendered.returncode == 0, rendered.stderr
    return [doc for doc in yaml.safe_load_all(rendered.stdout) if doc is not None]
