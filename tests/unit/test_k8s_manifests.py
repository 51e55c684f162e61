"""The Kubernetes manifests as ``kubectl kustomize`` renders them, checked by a linter of the
field (Checkov, with the two checks deploy/checkov.yaml waives and why) and by explicit
tests of the pitfalls Checkov does not know: a replica count on a Deployment an autoscaler
manages, containers without resources, probes and Services aimed at ports that do not exist,
a PodDisruptionBudget that blocks every eviction, and a webhook dispatcher that could reach the
cluster's private network.
"""

from __future__ import annotations

import ipaddress
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


#: What the webhook dispatcher must not reach but for PostgreSQL, Kafka and DNS: the private,
#: link-local (the cloud metadata service) and shared ranges, and an address in each.
PRIVATE_NETWORKS = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10"]
PRIVATE_ADDRESSES = ["10.1.2.3", "172.20.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1"]


def peer_reaches(peer: dict, address: str) -> bool:
    if "ipBlock" not in peer:  # pods and namespaces: addresses of the cluster, all private here
        return any(ipaddress.ip_address(address) in ipaddress.ip_network(n) for n in PRIVATE_NETWORKS)
    block = peer["ipBlock"]
    ip = ipaddress.ip_address(address)
    return ip in ipaddress.ip_network(block["cidr"]) and not any(
        ip in ipaddress.ip_network(e) for e in block.get("except", [])
    )


def egress_allows(policies: list[dict], address: str, port: int, protocol: str = "TCP") -> bool:
    """Whether NetworkPolicies selecting a pod let it connect to address:port (the union of their
    egress rules; a rule without ``to`` reaches every address, one without ``ports`` every port).
    No policy with Egress: everything is allowed."""
    egress = [p for p in policies if "Egress" in p["spec"].get("policyTypes", [])]
    if not egress:
        return True
    for policy in egress:
        for rule in policy["spec"].get("egress", []):
            ports = rule.get("ports")
            port_ok = ports is None or any(
                p.get("protocol", "TCP") == protocol and p.get("port") in (None, port) for p in ports
            )
            to_ok = "to" not in rule or any(peer_reaches(peer, address) for peer in rule["to"])
            if port_ok and to_ok:
                return True
    return False


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_the_webhook_dispatcher_reaches_the_internet_and_not_the_private_network(folder: Path):
    # Its second line of defense (the first: services/common/http/targets.py refuses non-public
    # addresses): any public address on any port, none of the private ranges but for DNS,
    # PostgreSQL and the brokers' ports of this very configuration.
    docs = kustomize(folder)
    (dispatcher,) = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "tickerwire-webhooks"]
    labels = dispatcher["spec"]["template"]["metadata"]["labels"]
    policies = [p for p in by_kind(docs, "NetworkPolicy") if selects(p["spec"]["podSelector"]["matchLabels"], labels)]
    (config,) = [d["data"] for d in by_kind(docs, "ConfigMap")]
    kafka_ports = {int(s.rsplit(":", 1)[1]) for s in config["TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS"].split(",")}
    for address, port in [("93.184.216.34", 443), ("8.8.8.8", 80), ("1.1.1.1", 8443), ("203.0.114.7", 9093)]:
        assert egress_allows(policies, address, port), (address, port)
    for address in PRIVATE_ADDRESSES:
        for port in (80, 443, 8080, 6443):
            assert not egress_allows(policies, address, port), (address, port)
        assert egress_allows(policies, address, 53, "UDP"), address
    for port in {5432} | kafka_ports:
        assert egress_allows(policies, "10.1.2.3", port), port
    # Every other pod keeps its egress open (its PostgreSQL, brokers and DNS differ per cluster).
    for deployment in by_kind(docs, "Deployment"):
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        if deployment is not dispatcher:
            selecting = [
                p
                for p in by_kind(docs, "NetworkPolicy")
                if selects(p["spec"]["podSelector"]["matchLabels"], pod_labels)
            ]
            assert egress_allows(selecting, "10.1.2.3", 5432), deployment["metadata"]["name"]


def test_the_egress_arithmetic_matches_kubernetes():
    public = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}]}
    policy = {"spec": {"policyTypes": ["Ingress", "Egress"], "egress": [public]}}
    assert egress_allows([policy], "8.8.8.8", 1234) and not egress_allows([policy], "10.0.0.1", 80)
    assert egress_allows([{"spec": {"policyTypes": ["Ingress"]}}], "10.0.0.1", 80)  # no Egress: all open
    assert not egress_allows([{"spec": {"policyTypes": ["Egress"]}}], "8.8.8.8", 443)  # no rule: all closed
    dns = {"spec": {"policyTypes": ["Egress"], "egress": [{"ports": [{"port": 53, "protocol": "UDP"}]}]}}
    assert egress_allows([dns], "10.0.0.1", 53, "UDP") and not egress_allows([dns], "10.0.0.1", 53, "TCP")
    pods = {"spec": {"policyTypes": ["Egress"], "egress": [{"to": [{"podSelector": {}}]}]}}
    assert egress_allows([pods], "10.0.0.1", 80) and not egress_allows([pods], "8.8.8.8", 80)
