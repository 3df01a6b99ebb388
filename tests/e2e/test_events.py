"""Kubernetes Events from `crashwatch run`, against the real control plane: one Warning series per crash loop
whose count climbs with the restarts, one Normal on recovery, none from a follower, none with
--events=false, and a refusal said once without stopping the watcher."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import envtest
import pytest
import yaml
from dynamo import dcd_available, dcds, dgd_state, dgds, labelled_pod, make_graph
from kube import Kube, crash_loop, crash_status, eventually, make_ready, set_pod_status
from watcher import Watcher, http_get

pytestmark = pytest.mark.e2e

RBAC = "/apis/rbac.authorization.k8s.io/v1"
WATCHER_MANIFESTS = Path(__file__).resolve().parents[2] / "k8s" / "watcher"


def events(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    """crashwatch's Events in the namespace, oldest first."""
    items = kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    ours = [e for e in items if e.get("reportingController") == "crashwatch"]
    return sorted(ours, key=lambda e: (e["eventTime"], e["regarding"]["kind"]))


def count(event: dict[str, Any]) -> int:
    return int((event.get("series") or {}).get("count", 1))


def failed(kube: Kube, namespace: str) -> bool:
    state, ready = dgd_state(kube, namespace)
    return state == "failed" and ready["reason"] == "component_crash_looping"


def says(kube: Kube, namespace: str, restarts: int) -> bool:
    return f"restarted {restarts} times" in dcd_available(kube, namespace, "llm-worker")["message"]


def metric(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert found is not None, f"{name} not in\n{text}"
    return float(found.group(1))


@pytest.fixture
def graph(kube: Kube, namespace: str) -> str:
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, "llm-worker-0", "llm", "worker")
    return namespace


def run(kubeconfig: Path, namespace: str, *extra: str) -> Watcher:
    return Watcher("run", "-n", namespace, "-o", "json", "--kubeconfig", str(kubeconfig), *extra)


def test_a_crash_loop_is_one_warning_series_counting_its_restarts_and_its_recovery_one_normal(
    control_plane: envtest.ControlPlane, kube: Kube, graph: str
) -> None:
    namespace = graph
    with run(control_plane.kubeconfig, namespace, "--http-address", "127.0.0.1:0") as w:
        w.wait_synced()
        url = w.served_at()
        crash_loop(kube, namespace, "llm-worker-0")
        eventually(lambda: len(events(kube, namespace)) == 2, 10, "the Warnings")
        dcd = kube.get(f"{dcds(namespace)}/llm-worker")
        dgd = kube.get(f"{dgds(namespace)}/llm")
        for restarts in (3, 4):  # the loop goes on: the same two Events, their series counting
            set_pod_status(kube, namespace, "llm-worker-0", crash_status(restarts))
            eventually(lambda n=restarts - 1: [count(e) for e in events(kube, namespace)] == [n, n], 10, "the series")
        warnings = events(kube, namespace)
        make_ready(kube, namespace, "llm-worker-0")
        eventually(lambda: len(events(kube, namespace)) == 4, 10, "the recoveries")
        time.sleep(0.5)
        status, metrics = http_get(f"{url}/metrics")
        final = events(kube, namespace)
    # one Warning per object, named for it, with what the status says and the object's uid
    by_kind = {e["regarding"]["kind"]: e for e in warnings}
    for obj in (dcd, dgd):
        event = by_kind[obj["kind"]]
        assert (event["type"], event["reason"], event["action"]) == ("Warning", "ComponentCrashLooping", "Diagnose")
        assert (event["reportingController"], bool(event["reportingInstance"])) == ("crashwatch", True)
        regarding = event["regarding"]
        assert (regarding["name"], regarding["namespace"], regarding["uid"]) == (
            obj["metadata"]["name"],
            namespace,
            obj["metadata"]["uid"],
        )
        assert regarding["apiVersion"] == "nvidia.com/v1beta1" and regarding["resourceVersion"]
        assert event["series"]["count"] == 3 and event["series"]["lastObservedTime"] > event["eventTime"]
    assert by_kind["DynamoComponentDeployment"]["note"] == (
        "container main of Pod llm-worker-0 restarted 2 times and is down after exit code 1"
    )
    # the Warnings are the same objects all along; the recoveries are one Normal each
    assert {e["metadata"]["name"] for e in warnings} < {e["metadata"]["name"] for e in final}
    recovered = [e for e in final if e["type"] == "Normal"]
    assert sorted((e["reason"], e["regarding"]["kind"], count(e)) for e in recovered) == [
        ("CrashLoopRecovered", "DynamoComponentDeployment", 1),
        ("CrashLoopRecovered", "DynamoGraphDeployment", 1),
    ]
    assert status == 200
    assert metric(metrics, 'crashwatch_events_written_total{request="create"}') == 4
    assert metric(metrics, 'crashwatch_events_written_total{request="patch"}') == 4
    assert metric(metrics, 'crashwatch_events_dropped_total{reason="queue_full"}') == 0


def replica(kubeconfig: Path, namespace: str) -> Watcher:
    return run(
        kubeconfig,
        namespace,
        "--http-address",
        "127.0.0.1:0",
        "--leader-elect",
        "--leader-election-namespace",
        namespace,
        "--leader-elect-lease-duration",
        "3s",
        "--leader-elect-renew-deadline",
        "2s",
        "--leader-elect-retry-period",
        "0.5s",
    )


def test_a_follower_writes_no_events(control_plane: envtest.ControlPlane, kube: Kube, graph: str) -> None:
    namespace = graph
    with ExitStack() as stack:
        leader = stack.enter_context(replica(control_plane.kubeconfig, namespace))
        leader.wait_for(lambda: "leading: acquired" in leader.stderr(), 15, "leading")
        follower = stack.enter_context(replica(control_plane.kubeconfig, namespace))
        for w in (leader, follower):
            w.wait_synced()
        follower.wait_for(lambda: "is held by" in follower.stderr(), 10, "following")
        crash_loop(kube, namespace, "llm-worker-0")
        eventually(lambda: failed(kube, namespace), 10, "failed")
        for w in (leader, follower):  # both diagnosed it
            w.wait_line('"kind":"graph"')
        set_pod_status(kube, namespace, "llm-worker-0", crash_status(3))
        eventually(lambda: [count(e) for e in events(kube, namespace)] == [2, 2], 10, "the series")
        time.sleep(1)
        found = events(kube, namespace)
        scraped = {name: http_get(f"{w.served_at()}/metrics")[1] for name, w in (("l", leader), ("f", follower))}
    assert [(e["type"], e["regarding"]["kind"]) for e in found] == [
        ("Warning", "DynamoComponentDeployment"),
        ("Warning", "DynamoGraphDeployment"),
    ]
    written = 'crashwatch_events_written_total{request="create"}'
    assert (metric(scraped["l"], written), metric(scraped["f"], written)) == (2, 0)
    assert metric(scraped["f"], 'crashwatch_events_written_total{request="patch"}') == 0
    assert metric(scraped["f"], 'crashwatch_events_dropped_total{reason="not_leader"}') >= 4


def test_no_events_with_events_false_and_stderr_as_json_lines(
    control_plane: envtest.ControlPlane, kube: Kube, graph: str
) -> None:
    namespace = graph
    with run(control_plane.kubeconfig, namespace, "--events=false", "--log-format", "json") as w:
        w.wait_for(lambda: any('"synced in' in line for line in w.snapshot(w.err)), 30, "synced")
        crash_loop(kube, namespace, "llm-worker-0")
        eventually(lambda: failed(kube, namespace), 10, "failed")
        w.wait_for(lambda: sum('"msg":"wrote ' in line for line in w.snapshot(w.err)) == 2, 10, "two writes")
        time.sleep(1)
    assert events(kube, namespace) == []
    lines = [json.loads(line) for line in w.snapshot(w.err)]
    assert all(set(line) <= {"time", "level", "msg", "object"} for line in lines), lines
    assert all(line["time"].endswith("Z") and line["level"] in ("info", "warning") for line in lines)
    writes = [line for line in lines if line["msg"].startswith("wrote ")]
    assert sorted(line["object"]["kind"] for line in writes) == ["DynamoComponentDeployment", "DynamoGraphDeployment"]
    assert {line["object"]["namespace"] for line in writes} == {namespace}


def _namespaced_role(kube: Kube, namespace: str, user: str, rules: list[dict[str, Any]]) -> None:
    kube.create(
        f"{RBAC}/namespaces/{namespace}/roles",
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": user}, "rules": rules},
    )
    kube.create(
        f"{RBAC}/namespaces/{namespace}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": user},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": user},
            "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
        },
    )


def watcher_rules(events: bool) -> list[dict[str, Any]]:
    """k8s/watcher's ClusterRole rules, with or without the one for Events."""
    clusterrole = yaml.safe_load((WATCHER_MANIFESTS / "clusterrole.yaml").read_text())
    rules: list[dict[str, Any]] = clusterrole["rules"]
    return [rule for rule in rules if events or "events" not in rule["resources"]]


@pytest.fixture
def shipped(control_plane: envtest.ControlPlane, kube: Kube, graph: str) -> Iterator[Path]:
    """A user with k8s/watcher's rules in the test's namespace."""
    user = f"watcher-{graph}"
    _namespaced_role(kube, graph, user, watcher_rules(events=True))
    yield control_plane.user_kubeconfig(user)


def test_the_watchers_rules_are_enough_for_events(kube: Kube, graph: str, shipped: Path) -> None:
    namespace = graph
    with run(shipped, namespace) as w:
        w.wait_synced()
        crash_loop(kube, namespace, "llm-worker-0")
        eventually(lambda: len(events(kube, namespace)) == 2, 10, "the Warnings")
        set_pod_status(kube, namespace, "llm-worker-0", crash_status(3))
        eventually(lambda: [count(e) for e in events(kube, namespace)] == [2, 2], 10, "the series (PATCH)")
    assert "cannot write Events" not in w.stderr()


def test_a_refused_event_is_said_once_and_the_watcher_goes_on(
    control_plane: envtest.ControlPlane, kube: Kube, graph: str
) -> None:
    namespace = graph
    user = f"noevents-{namespace}"
    _namespaced_role(kube, namespace, user, watcher_rules(events=False))
    with run(control_plane.user_kubeconfig(user), namespace) as w:
        w.wait_synced()
        crash_loop(kube, namespace, "llm-worker-0")
        eventually(lambda: failed(kube, namespace), 10, "failed")
        for restarts in (3, 4):
            set_pod_status(kube, namespace, "llm-worker-0", crash_status(restarts))
            eventually(lambda n=restarts: says(kube, namespace, n), 10, f"restarts={restarts} written")
        make_ready(kube, namespace, "llm-worker-0")
        eventually(lambda: not failed(kube, namespace), 10, "cleared")
        w.wait_for(lambda: len(w.writes()) == 8, 10, "every status write")
        time.sleep(1)
    assert w.process.returncode == 0
    refused = [line for line in w.snapshot(w.err) if "cannot write Events" in line]
    assert len(refused) == 1 and "403" in refused[0], w.stderr()
    assert events(kube, namespace) == []
