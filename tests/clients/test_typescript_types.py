"""The TypeScript client's wire types (clients/typescript/src/generated/openapi.ts) are what
openapi-typescript writes from schemas/openapi.json today: a contract change that was not
regenerated (`npm run generate` in clients/typescript) fails here, in the default run, as well as
in the package's own `npm test`. The generator comes from npm (.ci/run installs it into
.tools/node, at the version the package's lockfile pins); the test skips, naming it, without it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.fieldtools import node_command, node_tools

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "typescript"


def test_the_generated_wire_types_match_the_openapi_document(tmp_path):
    command = node_command("openapi-typescript")
    pinned = json.loads((PACKAGE / "package-lock.json").read_text())["packages"]["node_modules/openapi-typescript"][
        "version"
    ]
    installed = json.loads((node_tools() / "node_modules" / "openapi-typescript" / "package.json").read_text())[
        "version"
    ]
    if installed != pinned:
        pytest.skip(
            f"openapi-typescript {installed} in {node_tools()}, the package pins {pinned} (.ci/node/package.json)"
        )
    out = tmp_path / "openapi.ts"
    done = subprocess.run(
        [*command, str(ROOT / "schemas" / "openapi.json"), "-o", str(out)],
        env={**os.environ, "HOME": str(tmp_path), "NO_UPDATE_NOTIFIER": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.read_text() == (PACKAGE / "src" / "generated" / "openapi.ts").read_text(), (
        "clients/typescript/src/generated/openapi.ts is out of date: run `npm run generate` in clients/typescript"
    )
