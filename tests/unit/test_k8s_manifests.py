"""The Kubernetes manifests as ``kubectl kustomize`` renders them, checked by a linter of the
field (Checkov, with the two checks deploy/checkov.yaml waives and why) and by explicit
tests of the pitfalls Checkov does not know: a replica count on a Deployment an autoscaler
manages, containers without resources, probes and Services aimed at ports that do not exist,
a PodDisruptionBudget that blocks every eviction.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.fieldtools import checkov, kustomize

K8S = Path(__file__).parents[2] / "deploy" / "k8s"
FOLDERS = [K8S / "base", K8S / "overlays" / "example"]
IDS = ["base", "overlay-example"]


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def pod_specs(docs: list[dict]) -> list[tuple[str, dict]]:
    return [(d["metadata"]["name"], d["spec"]["template"]["spec"]) for d in docs if d["kind"] in ("Deployment", "Job")]


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_no_deployment_an_autoscaler_manages_sets_replicas(folder: Path):
    # `kubectl apply -k`, the documented way to change a setting, applies spec.replicas again:
    # a Deployment scaled out to 30 pods at peak would drop to that number until the autoscaler
    # reacts. With no replicas field, apply leaves the autoscaler's count alone.
    docs = kustomize(folder)
    managed = {h["spec"]["scaleTargetRef"]["name"] for h in by_kind(docs, "HorizontalPodAutoscaler")}
    assert managed == {"tickerwire-api", "tickerwire-stream"}
    offenders = [
        d["metadata"]["name"]
        for d in by_kind(docs, "Deployment")
        if d["metadata"]["name"] in managed and "replicas" in d["spec"]
    ]
    assert offenders == [], "spec.replicas on HPA-managed Deployments: every apply resets their scale"


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_every_container_has_cpu_and_memory_requests_and_limits(folder: Path):
    for name, pod in pod_specs(kustomize(folder)):
        for container in pod["containers"] + pod.get("initContainers", []):
            resources = container.get("resources", {})
            for part in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources.get(part, {})), (name, container["name"], part)


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_probes_and_services_aim_at_ports_the_containers_have(folder: Path):
    docs = kustomize(folder)
    for name, pod in pod_specs(docs):
        for container in pod["containers"]:
            ports = {p.get("name") for p in container.get("ports", [])} | {
                p["containerPort"] for p in container.get("ports", [])
            }
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                if probe in container:
                    action = container[probe].get("httpGet") or container[probe].get("tcpSocket")
                    assert action["port"] in ports, (name, probe, action["port"])
    deployments = by_kind(docs, "Deployment")
    for service in by_kind(docs, "Service"):
        (target,) = [
            d for d in deployments if selects(service["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])
        ]
        ports = {p.get("name") for c in target["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
        ports |= {
            p["containerPort"] for c in target["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])
        }
        for port in service["spec"]["ports"]:
            assert port.get("targetPort", port["port"]) in ports, (service["metadata"]["name"], port)


def fewest_pods(deployment: dict, docs: list[dict]) -> int:
    for hpa in by_kind(docs, "HorizontalPodAutoscaler"):
        if hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]:
            return hpa["spec"].get("minReplicas", 1)
    return deployment["spec"].get("replicas", 1)


def evictable(pdb: dict, pods: int) -> int:
    """How many of ``pods`` healthy pods the budget lets a node drain evict at once."""
    spec = pdb["spec"]
    if "maxUnavailable" in spec:
        value = spec["maxUnavailable"]
        return int(pods * int(value[:-1]) / 100) if isinstance(value, str) else value  # percentages round down
    value = spec.get("minAvailable", 0)
    needed = -(-pods * int(value[:-1]) // 100) if isinstance(value, str) else value  # rounds up
    return max(0, pods - needed)


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_no_disruption_budget_blocks_every_eviction(folder: Path):
    # A budget that allows no eviction at the Deployment's smallest size blocks node drains
    # (cluster upgrades) for good.
    docs = kustomize(folder)
    budgets = by_kind(docs, "PodDisruptionBudget")
    assert budgets
    for pdb in budgets:
        (target,) = [
            d
            for d in by_kind(docs, "Deployment")
            if selects(pdb["spec"]["selector"]["matchLabels"], d["spec"]["template"]["metadata"]["labels"])
        ]
        pods = fewest_pods(target, docs)
        assert evictable(pdb, pods) >= 1, (pdb["metadata"]["name"], pods)


def test_the_budget_arithmetic_matches_kubernetes():
    assert evictable({"spec": {"maxUnavailable": 1}}, 2) == 1
    assert evictable({"spec": {"maxUnavailable": 0}}, 5) == 0
    assert evictable({"spec": {"maxUnavailable": "10%"}}, 5) == 0
    assert evictable({"spec": {"minAvailable": 2}}, 2) == 0
    assert evictable({"spec": {"minAvailable": "50%"}}, 3) == 1
    assert evictable({"spec": {"minAvailable": "100%"}}, 3) == 0


def test_checkov_passes_the_rendered_overlay(tmp_path: Path):
    # The overlay: what is applied. The base has no namespace by design (CKV_K8S_21).
    command, folder = checkov(), K8S / "overlays" / "example"
    rendered = tmp_path / "rendered"
    rendered.mkdir()
    kubectl_output = "---\n".join(json.dumps(doc) + "\n" for doc in kustomize(folder))
    (rendered / "all.yaml").write_text(kubectl_output)
    ran = subprocess.run(
        [command, "--config-file", str(K8S.parent / "checkov.yaml"), "-d", str(rendered), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    report = json.loads(ran.stdout)
    failed = [(c["check_id"], c["check_name"], c["resource"]) for c in report["results"]["failed_checks"]]
    assert failed == [] and ran.returncode == 0, failed or ran.stderr[-3000:]
    assert report["summary"]["passed"] > 100 and report["summary"]["parsing_errors"] == 0, report["summary"]
