"""The alerts, checked by Prometheus's own tool: ``promtool test rules`` over
deploy/observability/alerts.test.yml, where each alert fires in one case and stays quiet in
another, series that do not exist yet included (``promtool check rules`` runs in
test_deploy_artifacts.py). And the other half of "an alert sees
the first event": every labelled series an alert reads exists at 0 from the process's start.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry, generate_latest

from tests.support.fieldtools import binary
from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.common.kafka.topicgate import TopicGate
from tickerwire.services.common.tracing.export import EXPORT_FAILED, QUEUE_FULL, SpanCounters
from tickerwire.services.projector.metrics import APPLIED_TYPES, DEAD_LETTER_KINDS, ProjectorMetrics

ROOT = Path(__file__).parents[2]
OBS = ROOT / "deploy" / "observability"


def test_promtool_rule_tests_pass():
    promtool = binary("promtool", "prometheus")
    tested = subprocess.run(
        [promtool, "test", "rules", "alerts.test.yml"], cwd=OBS, capture_output=True, text=True, timeout=120
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_has_a_firing_and_a_quiet_case():
    alerts = {
        rule["alert"] for group in yaml.safe_load((OBS / "alerts.yml").read_text())["groups"] for rule in group["rules"]
    }
    tests = yaml.safe_load((OBS / "alerts.test.yml").read_text())["tests"]
    fired, quiet = set(), set()
    for case in tests:
        for check in case["alert_rule_test"]:
            (fired if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert alerts - fired == set(), "alerts no test fires"
    assert alerts - quiet == set(), "alerts no test keeps quiet"
    assert fired | quiet <= alerts, "tests of alerts that do not exist"


def test_the_stall_is_tested_with_no_applied_series_at_all():
    tests = yaml.safe_load((OBS / "alerts.test.yml").read_text())["tests"]
    stalls = [
        case
        for case in tests
        if any(c["alertname"] == "TickerwireProjectorStalled" and c.get("exp_alerts") for c in case["alert_rule_test"])
        and not any("events_applied_total" in s["series"] for s in case["input_series"])
    ]
    assert stalls, "no case where the projector has lag and no applied-counter series, and the stall fires"


def samples(registry: CollectorRegistry, name: str) -> dict[str, float]:
    text = generate_latest(registry).decode()
    return {labels: float(value) for labels, value in re.findall(rf"^{name}\{{(.*?)\}} (\S+)$", text, re.M)}


def test_projector_counters_alerts_read_exist_at_zero_from_the_start():
    metrics = ProjectorMetrics()
    applied = samples(metrics.registry, "tickerwire_projector_events_applied_total")
    assert applied == {f'type="{t}"': 0.0 for t in APPLIED_TYPES}
    dead = samples(metrics.registry, "tickerwire_projector_dead_lettered_total")
    assert dead == {f'reason="{r}"': 0.0 for r in DEAD_LETTER_KINDS}


def literal_kinds(pattern: str, *paths: Path) -> set[str]:
    return {m for path in paths for m in re.findall(pattern, path.read_text())}


def test_the_zeroed_label_values_are_every_value_the_projector_uses():
    projector = ROOT / "services" / "projector"
    applied = (
        literal_kinds(r'applied\["(\w+)"\]', projector / "apply.py")
        | literal_kinds(r'_count\(result, "(\w+)"', projector / "apply.py")
        | literal_kinds(r'\("(\w+)", sql\.UPSERT_', projector / "apply.py")
    )
    assert applied and applied <= set(APPLIED_TYPES)
    reasons = (
        literal_kinds(r'DeadLetter\([^()]*?"(\w+)"', projector / "apply.py")
        | literal_kinds(r'dead_lettered\.labels\("(\w+)"\)', projector / "batches.py")
        | literal_kinds(r'InvalidEvent\([^()]*?, "(\w+)"\)', ROOT / "schemas" / "models.py")
    )
    assert {"undecodable", "rejected", "wrong_topic", "schema"} <= reasons <= set(DEAD_LETTER_KINDS)


def test_topic_differences_exist_at_zero_before_the_first_check():
    registry = CollectorRegistry()
    TopicGate(
        FullConfig(database_url="postgresql://unused", kafka_bootstrap_servers="unused:9092"), registry, create=False
    )
    assert samples(registry, "tickerwire_topic_differences") == {'kind="loses_history"': 0.0, 'kind="other"': 0.0}


def test_trace_span_counters_exist_at_zero_for_both_reasons_once_tracing_is_on():
    registry = CollectorRegistry()
    SpanCounters(registry)
    dropped = samples(registry, "tickerwire_trace_spans_dropped_total")
    assert dropped == {f'reason="{r}"': 0.0 for r in (EXPORT_FAILED, QUEUE_FULL)}
    assert "tickerwire_trace_spans_exported_total 0.0" in generate_latest(registry).decode()
