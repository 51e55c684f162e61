"""deploy/ validated offline: the compose file against the Compose Specification schema, every
Kubernetes manifest (base, and the example overlay rendered by ``kubectl kustomize``; more in
test_k8s_manifests.py) against the Kubernetes schemas, the Grafana dashboard and the
Prometheus rules (the Dockerfile: tests/unit/test_dockerfile.py).

The schemas come from PyPI packages that ship them (check-jsonschema's vendored compose-spec,
kubernetes-validate's Kubernetes JSON schemas): no network at test time.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from functools import cache
from importlib import resources
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.support.fieldtools import kustomize

ROOT = Path(__file__).parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
OBS = DEPLOY / "observability"
KUBERNETES_VERSION = "1.30.0"  # the oldest minor the manifests promise to work on
ADMIN_PORTS = {"api": 9080, "stream": 9081, "projector": 9082, "webhooks": 9083}  # compose.yaml, base/config.env
#: The command each service runs (the webhook dispatcher's service is named after its job).
COMMANDS = {"api": "api", "stream": "stream", "projector": "projector", "webhooks": "dispatcher"}
#: The admin-port setting of each service.
ADMIN_VARS = {
    "api": "TICKERWIRE_API_ADMIN_PORT",
    "stream": "TICKERWIRE_STREAM_ADMIN_PORT",
    "projector": "TICKERWIRE_PROJECTOR_ADMIN_PORT",
    "webhooks": "TICKERWIRE_WEBHOOKS_ADMIN_PORT",
}
#: The webhook dispatcher's metrics (issue 45), which its package adds in a branch of its own
#: (services/webhooks/ holds only its settings here): see external_metrics().
WEBHOOK_METRICS = {
    "tickerwire_webhooks_backlog_age_seconds",
    "tickerwire_webhooks_attempts_total",
    "tickerwire_webhooks_endpoints",
    "tickerwire_webhooks_disabled_endpoints",
    "tickerwire_webhooks_loop_last_run_timestamp_seconds",
    "tickerwire_webhooks_delivery_seconds",
}
#: Metrics the dashboard and alerts use that another issue adds (issue 10: log discontinuity),
#: and Kubernetes' own (kube-state-metrics), so not defined in services/.
EXTERNAL_METRICS = {"tickerwire_projector_log_discontinuity", "kube_pod_container_status_ready", "up"}


def load_all(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


# ------------------------------------------------------------------ compose


@cache
def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())


def test_compose_file_validates_against_the_compose_specification():
    schema_text = resources.files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text()
    schema = json.loads(schema_text)
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose())]
    assert errors == []


def test_compose_runs_kafka_in_kraft_mode_and_migrates_before_the_services():
    services = compose()["services"]
    kafka = services["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    assert kafka["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert services["init"]["entrypoint"] == ["sh", "-c"]  # the image's entrypoint is `tickerwire`
    assert services["init"]["command"] == ["tickerwire migrate && tickerwire topics ensure"]
    for name, command in COMMANDS.items():
        assert services[name]["command"] == [command]
        assert services[name]["depends_on"]["init"]["condition"] == "service_completed_successfully"
        port = ADMIN_PORTS[name]
        assert f"http://127.0.0.1:{port}/readyz" in " ".join(services[name]["healthcheck"]["test"])
    env = services["api"]["environment"]
    assert {name: int(env[var]) for name, var in ADMIN_VARS.items()} == ADMIN_PORTS


def test_compose_gives_the_dispatcher_a_signing_key_generated_once_into_a_volume():
    services = compose()
    dispatcher, generator = services["services"]["webhooks"], services["services"]["webhooks-key"]
    assert dispatcher["depends_on"]["webhooks-key"]["condition"] == "service_completed_successfully"
    key_file = dispatcher["environment"]["TICKERWIRE_WEBHOOKS_SIGNING_KEY_FILE"]
    (mount,) = [v for v in dispatcher["volumes"] if key_file.startswith(v.split(":")[1] + "/")]
    volume, folder, mode = mount.split(":")
    assert mode == "ro" and volume in services["volumes"]
    (written,) = [v.split(":")[1] for v in generator["volumes"] if v.split(":")[0] == volume]
    script = " ".join(generator["command"])
    # Written only when absent (a new key would change every endpoint's secret), for the image's user.
    assert f"{written}/{key_file.removeprefix(folder + '/')}" in script
    assert '[ -s "$$f" ] ||' in script and "chown 10001:10001" in script
    # Only the dispatcher reads the key: the shared settings do not name it.
    assert not {k for k in services["x-tickerwire-env"] if "SIGNING_KEY" in k}


def test_compose_mounts_files_that_exist_and_prometheus_scrapes_the_admin_ports():
    compose_dir = DEPLOY / "compose"
    for name, service in compose()["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (compose_dir / source).exists(), f"{name}: {source}"
    prometheus = yaml.safe_load((OBS / "prometheus.yml").read_text())
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in prometheus["scrape_configs"]}
    assert targets == {f"tickerwire-{name}": [f"{name}:{port}"] for name, port in ADMIN_PORTS.items()}
    assert prometheus["rule_files"] == ["/etc/prometheus/alerts.yml"]


# ------------------------------------------------------------------ Kubernetes


def kustomization(folder: Path) -> dict:
    return yaml.safe_load((folder / "kustomization.yaml").read_text())


def patch_files() -> set[Path]:
    return {
        (kfile.parent / p["path"]).resolve()
        for kfile in K8S.rglob("kustomization.yaml")
        for p in yaml.safe_load(kfile.read_text()).get("patches", [])
    }


def k8s_files() -> list[Path]:
    return sorted(p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml")


def k8s_manifests() -> list[Path]:
    """Whole resources; patches are partial by design and checked in the rendered overlay."""
    return [p for p in k8s_files() if p.resolve() not in patch_files()]


def test_every_file_a_kustomization_names_exists_and_every_manifest_is_named():
    named = set()
    for kfile in K8S.rglob("kustomization.yaml"):
        spec = yaml.safe_load(kfile.read_text())
        for entry in spec.get("resources", []) + [p["path"] for p in spec.get("patches", [])]:
            assert (kfile.parent / entry).exists(), f"{kfile}: {entry}"
            named.add((kfile.parent / entry).resolve())
    assert [p for p in k8s_files() if p.resolve() not in named] == []


@pytest.mark.parametrize("path", k8s_manifests(), ids=lambda p: str(p.relative_to(K8S)))
def test_every_kubernetes_manifest_validates_against_its_schema(path: Path):
    for doc in load_all(path):
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("folder", [K8S / "base", K8S / "overlays" / "example"], ids=["base", "overlay-example"])
def test_rendered_kustomization_validates_and_keeps_the_production_rules(folder: Path):
    docs = kustomize(folder)
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    by_kind: dict[str, dict[str, dict]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], {})[doc["metadata"]["name"]] = doc
    (config_name,) = by_kind["ConfigMap"]
    assert config_name.startswith("tickerwire-config-")  # generated: a new name when a setting changes
    config = by_kind["ConfigMap"][config_name]["data"]
    deployments = by_kind["Deployment"]
    assert set(deployments) == {f"tickerwire-{name}" for name in ADMIN_PORTS}
    assert {h["spec"]["scaleTargetRef"]["name"] for h in by_kind["HorizontalPodAutoscaler"].values()} == {
        "tickerwire-api",
        "tickerwire-stream",
    }
    assert {
        p["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]
        for p in by_kind["PodDisruptionBudget"].values()
    } == set(ADMIN_PORTS)
    assert set(by_kind["Service"]) == {"tickerwire-api", "tickerwire-stream"}
    # Two dispatchers at least: when one stops, the other takes its endpoints over.
    assert deployments["tickerwire-webhooks"]["spec"]["replicas"] >= 2
    # One projector per partition of the posts topic.
    assert deployments["tickerwire-projector"]["spec"]["replicas"] == int(config["TICKERWIRE_TOPIC_POSTS_PARTITIONS"])
    # ... so a rollout replaces a projector instead of adding one that would own no partition.
    assert deployments["tickerwire-projector"]["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0
    for name, deployment in deployments.items():
        component = name.removeprefix("tickerwire-")
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
        (container,) = pod["containers"]
        assert container["args"] == [COMMANDS[component]]
        assert [e["configMapRef"]["name"] for e in container["envFrom"] if "configMapRef" in e] == [config_name]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["admin"] == ADMIN_PORTS[component]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert container[probe]["httpGet"]["port"] == "admin", (name, probe)
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert set(container["resources"]) == {"requests", "limits"}
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
        # The signing key only where it is used, mounted where the dispatcher reads it.
        signing = {"tickerwire-webhooks"} if component == "webhooks" else set()
        assert secrets == {"tickerwire-database", "tickerwire-kafka"} | signing
        if signing:
            (key_file,) = [e["value"] for e in container["env"] if e["name"] == "TICKERWIRE_WEBHOOKS_SIGNING_KEY_FILE"]
            (volume,) = [
                v["name"] for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "tickerwire-webhooks"
            ]
            (mount,) = [m["mountPath"] for m in container["volumeMounts"] if m["name"] == volume]
            assert key_file == f"{mount}/signing-key"
        assert deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == str(
            ADMIN_PORTS[component]
        )
    assert {c: int(config[v]) for c, v in ADMIN_VARS.items()} == ADMIN_PORTS
    assert not {k for k in config if "SIGNING_KEY" in k}  # every pod reads the ConfigMap
    assert config["TICKERWIRE_DATABASE_URL_FILE"].startswith("/var/run/secrets/tickerwire/database/")
    assert config["TICKERWIRE_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    job = by_kind["Job"]["tickerwire-migrate"]["spec"]["template"]["spec"]["containers"][0]
    assert job["command"][-1] == "tickerwire migrate && tickerwire topics ensure"


# ------------------------------------------------------------------ dashboard and alerts


@cache
def exported_metrics() -> set[str]:
    names = set()
    for path in (ROOT / "services").rglob("*.py"):
        names |= set(re.findall(r'"(tickerwire_[a-z_]+)"', path.read_text()))
    return names


def external_metrics() -> set[str]:
    """EXTERNAL_METRICS, and the webhook dispatcher's while services/ exports none of them: once it
    exports one, every name the dashboard and alerts use must be exported, so a name that differs
    between the two branches fails here."""
    dispatcher_exports = any(name.startswith("tickerwire_webhooks_") for name in exported_metrics())
    return EXTERNAL_METRICS if dispatcher_exports else EXTERNAL_METRICS | WEBHOOK_METRICS


def metric_names(expr: str) -> set[str]:
    found = set(re.findall(r"\b(tickerwire_[a-z_]+|kube_[a-z_]+|up)\b(?=\s*[{\[)])", expr))
    return {re.sub(r"_(bucket|sum|count)$", "", n) for n in found}


def test_dashboard_parses_and_uses_only_metrics_the_code_exports():
    dashboard = json.loads((OBS / "grafana" / "dashboards" / "tickerwire.json").read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    titles = " | ".join(p["title"] for p in panels).lower()
    for topic in (
        "partner requests",
        "latency",
        "429",
        "lag",
        "throughput",
        "dead letters",
        "connections",
        "slow-consumer",
        "webhook deliveries",
        "webhook backlog",
        "disabled webhook endpoints",
        "webhook attempt latency",
        "trace spans",
    ):
        assert topic in titles, topic
    used = set()
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used |= metric_names(target["expr"])
    assert used - exported_metrics() - external_metrics() == set()
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


@cache
def alert_rules() -> list[dict]:
    return [rule for group in yaml.safe_load((OBS / "alerts.yml").read_text())["groups"] for rule in group["rules"]]


def test_alert_rules_parse_cover_the_operational_risks_and_each_has_a_runbook():
    rules = {rule["alert"]: rule for rule in alert_rules()}
    for name in (
        "TickerwireProjectorLagging",
        "TickerwireLogDiscontinuity",
        "TickerwireDeadLettersGrowing",
        "TickerwireNotReady",
        "TickerwireApi5xxRate",
        "TickerwireWebhookBacklogGrowing",
        "TickerwireWebhookDispatcherStalled",
        "TickerwireWebhookEndpointsDisabled",
        "TickerwireTraceSpansDropped",
    ):
        assert name in rules
    operations = (ROOT / "docs" / "operations.md").read_text()
    headings = {
        re.sub(r"[^a-z0-9-]", "", h.strip().lower().replace(" ", "-"))
        for h in re.findall(r"^#+ (.+)$", operations, re.M)
    }
    for name, rule in rules.items():
        assert rule["annotations"]["runbook"] == f"docs/operations.md#{name.lower()}"
        assert name.lower() in headings, f"no runbook section for {name}"
        assert metric_names(rule["expr"]) - exported_metrics() - external_metrics() == set(), name


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian package `prometheus`)")
def test_promtool_accepts_the_rules_and_the_prometheus_config(tmp_path):
    rules = subprocess.run(
        ["promtool", "check", "rules", str(OBS / "alerts.yml")], capture_output=True, text=True, timeout=60
    )
    assert rules.returncode == 0, rules.stdout + rules.stderr
    shutil.copy(OBS / "alerts.yml", tmp_path / "alerts.yml")
    config = (OBS / "prometheus.yml").read_text().replace("/etc/prometheus/alerts.yml", str(tmp_path / "alerts.yml"))
    (tmp_path / "prometheus.yml").write_text(config)
    checked = subprocess.run(
        ["promtool", "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
