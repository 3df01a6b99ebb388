"""k8s/watcher as shipped: its arguments are ones the CLI takes, and its probes and grace period fit them.
A manifest the CLI refused would make the watcher itself crash-loop."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from crashwatch.cli import build_parser

WATCHER = Path(__file__).resolve().parents[2] / "k8s" / "watcher"


def pod_spec() -> dict[str, Any]:
    deployment = yaml.safe_load((WATCHER / "deployment.yaml").read_text())
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def test_the_watchers_arguments_parse_and_its_probes_ask_the_port_it_serves() -> None:
    spec = pod_spec()
    (container,) = spec["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.command == "run"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert args.http_address == (None, ports["http"])
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}


def test_the_pod_waits_longer_than_the_watcher_spends_finishing_its_writes() -> None:
    spec = pod_spec()
    args = build_parser().parse_args(spec["containers"][0]["args"])
    assert spec["terminationGracePeriodSeconds"] > args.grace_period


def _manifest(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((WATCHER / name).read_text())
    return document


def test_two_replicas_elect_a_leader_on_a_lease_in_their_own_namespace() -> None:
    deployment = _manifest("deployment.yaml")
    spec = deployment["spec"]
    args = build_parser().parse_args(spec["template"]["spec"]["containers"][0]["args"])
    assert args.leader_elect and args.leader_election_id == "crashwatch"
    assert args.leader_election_namespace is None  # the Pod's own, where the Role is
    assert (args.leader_elect_lease_duration, args.leader_elect_renew_deadline) == (15.0, 10.0)
    assert args.leader_elect_retry_period == 2.0
    assert spec["replicas"] == 2
    assert spec["strategy"]["type"] == "RollingUpdate"
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    labels = spec["template"]["metadata"]["labels"]
    anti = spec["template"]["spec"]["affinity"]["podAntiAffinity"]
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == labels
    budget = _manifest("poddisruptionbudget.yaml")
    assert budget["spec"] == {"minAvailable": 1, "selector": {"matchLabels": labels}}


# the HTTP methods crashwatch.leader sends on the Lease, as RBAC verbs
VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def test_the_role_grants_exactly_what_leader_election_uses() -> None:
    source = (WATCHER.parents[1] / "crashwatch" / "leader.py").read_text()
    used = {VERBS[method] for method in re.findall(r'request\(\s*"([A-Z]+)"', source)}
    if re.search(r"client\.stream\(\s*self\.path", source) and '"watch": "1"' in source:
        used.add("watch")  # a candidate watches the Lease to hear of a release at once
    assert used == {"get", "create", "update", "watch"}
    role = _manifest("role.yaml")
    assert role["kind"] == "Role" and "namespace" not in role["metadata"]  # the kustomization's namespace
    named, create = role["rules"]
    for rule in role["rules"]:
        assert (rule["apiGroups"], rule["resources"]) == (["coordination.k8s.io"], ["leases"])
    assert sorted(named["verbs"] + create["verbs"]) == sorted(used)
    # its own Lease alone (the deployment's --leader-election-id); a create names none, so it stands apart
    assert named["resourceNames"] == ["crashwatch"] and create == {**create, "verbs": ["create"]}
    assert "resourceNames" not in create
    binding = _manifest("rolebinding.yaml")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "crashwatch", "namespace": "crashwatch"}]
    kustomization = _manifest("kustomization.yaml")
    assert {"role.yaml", "rolebinding.yaml", "poddisruptionbudget.yaml"} <= set(kustomization["resources"])
    # and the cluster-wide role took no lease rights
    clusterrole = _manifest("clusterrole.yaml")
    assert all("leases" not in rule["resources"] for rule in clusterrole["rules"])


def test_the_cluster_role_grants_exactly_the_event_verbs_the_recorder_sends() -> None:
    source = (WATCHER.parents[1] / "sinks" / "events.py").read_text()
    used = {VERBS[method] for method in re.findall(r'request\(\s*"([A-Z]+)"', source)}
    assert used == {"create", "patch"}
    clusterrole = _manifest("clusterrole.yaml")
    (rule,) = [rule for rule in clusterrole["rules"] if "events" in rule["resources"]]
    assert (rule["apiGroups"], rule["resources"]) == (["events.k8s.io"], ["events"])
    assert sorted(rule["verbs"]) == sorted(used)
