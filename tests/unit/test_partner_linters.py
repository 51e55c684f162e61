"""The partner-facing documents pass the linters partners run in their own CI: Spectral with
its ``spectral:oas`` ruleset and Redocly CLI on the OpenAPI document, the AsyncAPI CLI on the
AsyncAPI document. No error and no warning; what a ruleset changes is in schemas/.spectral.yaml
and schemas/redocly.yaml with its reason. The tools come from npm (.ci/run installs them;
tests/support/fieldtools.py says where), and each test skips, naming the tool, without them.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.support.fieldtools import node_command

SCHEMAS = Path(__file__).parents[2] / "schemas"


def run(command: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    # HOME in tmp_path: the tools write their settings and caches there, not in the user's home.
    environment = {**os.environ, "HOME": str(tmp_path), "NO_UPDATE_NOTIFIER": "1", **env}
    return subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=180)


def test_spectral_oas_ruleset_reports_nothing_on_the_openapi_document(tmp_path):
    linted = run(
        [
            *node_command("spectral"),
            "lint",
            "--ruleset",
            str(SCHEMAS / ".spectral.yaml"),
            "--fail-severity",
            "hint",
            "--format",
            "json",
            "--output",
            "report.json",
            str(SCHEMAS / "openapi.json"),
        ],
        tmp_path,
    )
    assert linted.returncode == 0, linted.stdout[-4000:] + linted.stderr[-2000:]
    assert json.loads((tmp_path / "report.json").read_text()) == []


def test_redocly_reports_no_error_and_no_warning_on_the_openapi_document(tmp_path):
    linted = run(
        [
            *node_command("redocly"),
            "lint",
            "--config",
            str(SCHEMAS / "redocly.yaml"),
            "--format",
            "json",
            str(SCHEMAS / "openapi.json"),
        ],
        tmp_path,
        REDOCLY_TELEMETRY="off",
        REDOCLY_SUPPRESS_UPDATE_NOTICE="true",
    )
    assert linted.returncode == 0, linted.stdout[-4000:] + linted.stderr[-2000:]
    report = json.loads(linted.stdout)
    assert (report["totals"]["errors"], report["totals"]["warnings"]) == (0, 0), [
        p["message"] for p in report["problems"]
    ]


def test_asyncapi_cli_validates_the_asyncapi_document_with_no_warning(tmp_path):
    settings = tmp_path / "asyncapi-analytics.json"
    settings.write_text(json.dumps({"analyticsEnabled": "false", "infoMessageShown": "true"}))
    validated = run(
        [*node_command("asyncapi"), "validate", "--fail-severity", "info", str(SCHEMAS / "asyncapi.json")],
        tmp_path,
        ASYNCAPI_METRICS_CONFIG_PATH=str(settings),
        CI="true",
    )
    assert validated.returncode == 0, validated.stdout[-4000:] + validated.stderr[-2000:]
    assert "is valid" in validated.stdout, validated.stdout
