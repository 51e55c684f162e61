"""Where the field's own tools are: promtool (Debian's ``prometheus``), kubectl, and the partners'
Node linters (Spectral, Redocly, the AsyncAPI CLI) and Node's ``ws`` client, which ``.ci/run``
installs into ``.tools/node`` (covered by .gitignore). ``TICKERWIRE_NODE_TOOLS`` names another
folder holding a ``node_modules``. A test that needs a tool that is absent skips, naming it and
how to install it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
NODE_TOOLS_ENV = "TICKERWIRE_NODE_TOOLS"
#: What ``.ci/run`` installs with npm: the package and the command it provides.
NODE_PACKAGES = {
    "spectral": "@stoplight/spectral-cli",
    "redocly": "@redocly/cli",
    "asyncapi": "@asyncapi/cli",
}


def node_tools() -> Path:
    return Path(os.environ.get(NODE_TOOLS_ENV) or ROOT / ".tools" / "node")


def node_command(name: str) -> list[str]:
    """The command line that runs the Node CLI ``name``, or a skip naming what is missing."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed (Debian package `nodejs`)")
    script = node_tools() / "node_modules" / ".bin" / name
    if not script.exists():
        pytest.skip(f"{NODE_PACKAGES[name]} is not installed in {node_tools()} (.ci/run installs it; or set {NODE_TOOLS_ENV})")
    return [str(script)]


def node_modules_with(package: str) -> Path:
    """The ``node_modules`` folder holding ``package`` (for NODE_PATH), or a skip."""
    if shutil.which("node") is None:
        pytest.skip("node is not installed (Debian package `nodejs`)")
    modules = node_tools() / "node_modules"
    if not (modules / package / "package.json").exists():
        pytest.skip(f"npm package {package} is not installed in {node_tools()} (.ci/run installs it; or set {NODE_TOOLS_ENV})")
    return modules


def binary(name: str, package: str) -> str:
    """The path of an installed program, or a skip naming the Debian package that has it."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (Debian package `{package}`; .ci/run installs it)")
    return path
