"""Smoke tests of the real control plane, and of crashwatch's formats against what it really serves."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cli import run
from kube import ApiError, Kube, crash_loop, make_ready, pod_manifest

GRAPH = "nvidia.com/dynamo-graph-deployment-name"
COMPONENT = "nvidia.com/dynamo-component"
LABELS = {GRAPH: "llm", COMPONENT: "worker", "nvidia.com/selector": "llm-worker"}

pytestmark = pytest.mark.e2e


def deployment(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"nvidia.com/selector": labels["nvidia.com/selector"]}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "main", "image": "registry.invalid/worker:1"}]},
            },
        },
    }


def test_a_deployment_gets_its_pod_from_the_controller_manager(kube: Kube, namespace: str) -> None:
    kube.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment("llm-worker", LABELS))
    pods = kube.wait_for(
        f"/api/v1/namespaces/{namespace}/pods?labelSelector=nvidia.com/selector%3Dllm-worker",
        lambda lst: len(lst["items"]) == 1,
        timeout=60,
    )
    pod = pods["items"][0]
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    assert pod["metadata"]["labels"][COMPONENT] == "worker"


def test_a_patched_pod_status_reads_back_and_its_list_replays(kube: Kube, namespace: str) -> None:
    kube.create(f"/api/v1/namespaces/{namespace}/pods", pod_manifest("llm-worker-0", LABELS))
    crash_loop(kube, namespace, "llm-worker-0", restarts=2, exit_code=3)
    pod = kube.get(f"/api/v1/namespaces/{namespace}/pods/llm-worker-0")
    status = pod["status"]["containerStatuses"][0]
    assert status["restartCount"] == 2
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert status["lastState"]["terminated"]["exitCode"] == 3
    # the API server's own List (items carry no kind) is a log crashwatch reads
    _, raw = kube.get_raw(f"/api/v1/namespaces/{namespace}/pods")
    result = run("replay", "-o", "json", "-", stdin=raw)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert (lines[0]["pod"], lines[0]["restarts"], lines[0]["exit_code"]) == ("llm-worker-0", 2, 3)
    assert lines[1]["failed"] is True
    make_ready(kube, namespace, "llm-worker-0")
    assert kube.get(f"/api/v1/namespaces/{namespace}/pods/llm-worker-0")["status"]["conditions"][0]["status"] == "True"


def test_a_deleted_pod_stays_terminating_until_forced(kube: Kube, namespace: str) -> None:
    """With no kubelet to confirm, a bound Pod's delete only sets deletionTimestamp, as on a node that is
    shutting a crash-looping worker down; the e2e tests use that to show terminating Pods leave."""
    path = f"/api/v1/namespaces/{namespace}/pods/p"
    kube.create(f"/api/v1/namespaces/{namespace}/pods", pod_manifest("p", LABELS))
    kube.delete(path)
    assert kube.get(path)["metadata"]["deletionTimestamp"]
    kube.delete(path, grace=0)
    kube.wait_for(f"/api/v1/namespaces/{namespace}/pods", lambda lst: not lst["items"], timeout=30)


def dgd(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": name},
        "spec": {"services": {"worker": {"replicas": 1}}},
    }


def test_dgd_status_goes_through_the_status_subresource_only(kube: Kube, namespace: str) -> None:
    base = f"/apis/nvidia.com/v1beta1/namespaces/{namespace}/dynamographdeployments"
    created = kube.create(base, dgd("llm"))
    assert created["metadata"]["generation"] == 1
    status = {
        "state": "failed",
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "component_crash_looping",
                "message": "Components crash-looping: worker: ...",
                "lastTransitionTime": "2026-11-20T10:00:00Z",
                "observedGeneration": 1,
            }
        ],
    }
    # a spec change sent to /status is ignored; the status lands
    kube.merge_patch(f"{base}/llm/status", {"status": status, "spec": {"services": {"worker": {"replicas": 5}}}})
    got = kube.get(f"{base}/llm")
    assert got["status"]["state"] == "failed"
    assert got["status"]["conditions"][0]["reason"] == "component_crash_looping"
    assert got["spec"]["services"]["worker"]["replicas"] == 1
    assert got["metadata"]["generation"] == 1
    # and a status sent to the main resource is ignored
    kube.merge_patch(f"{base}/llm", {"status": {"state": "successful"}})
    assert kube.get(f"{base}/llm")["status"]["state"] == "failed"
    # both versions are served, with the same status
    alpha = kube.get(f"/apis/nvidia.com/v1alpha1/namespaces/{namespace}/dynamographdeployments/llm")
    assert alpha["apiVersion"] == "nvidia.com/v1alpha1"
    assert alpha["status"]["state"] == "failed"
    # the schema is enforced: an unknown state is refused
    with pytest.raises(ApiError) as error:
        kube.merge_patch(f"{base}/llm/status", {"status": {"state": "exploded"}})
    assert error.value.status == 422


def test_dry_run_patches_apply_to_the_real_crds(kube: Kube, namespace: str) -> None:
    """The status patches `replay --patches` prints are accepted by the real API server, and keep the
    DCD's other conditions."""
    dcds = f"/apis/nvidia.com/v1beta1/namespaces/{namespace}/dynamocomponentdeployments"
    kube.create(
        dcds,
        {
            "apiVersion": "nvidia.com/v1beta1",
            "kind": "DynamoComponentDeployment",
            "metadata": {"name": "llm-worker", "labels": {GRAPH: "llm", COMPONENT: "worker"}},
            "spec": {},
        },
    )
    other = {
        "type": "DynamoComponentReady",
        "status": "True",
        "reason": "Reconciled",
        "message": "ok",
        "lastTransitionTime": "2026-11-20T09:00:00Z",
        "observedGeneration": 1,
    }
    available = {
        "type": "Available",
        "status": "False",
        "reason": "DeploymentNotReady",
        "message": "Deployment is not ready",
        "lastTransitionTime": "2026-11-20T09:00:00Z",
        "observedGeneration": 1,
    }
    kube.merge_patch(f"{dcds}/llm-worker/status", {"status": {"conditions": [available, other]}})
    kube.create(f"/apis/nvidia.com/v1beta1/namespaces/{namespace}/dynamographdeployments", dgd("llm"))
    kube.create(f"/api/v1/namespaces/{namespace}/pods", pod_manifest("llm-worker-0", LABELS))
    crash_loop(kube, namespace, "llm-worker-0")
    log = b""
    for path in (
        dcds,
        f"/apis/nvidia.com/v1beta1/namespaces/{namespace}/dynamographdeployments",
        f"/api/v1/namespaces/{namespace}/pods",
    ):
        log += kube.get_raw(path)[1] + b"\n"
    result = run("replay", "--patches", "-", stdin=log)
    assert result.returncode == 0, result.stderr
    patches = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(p["kind"], p["name"]) for p in patches] == [
        ("DynamoComponentDeployment", "llm-worker"),
        ("DynamoGraphDeployment", "llm"),
    ]
    for patch in patches:
        plural = (
            "dynamocomponentdeployments" if patch["kind"] == "DynamoComponentDeployment" else "dynamographdeployments"
        )
        kube.merge_patch(
            f"/apis/{patch['apiVersion']}/namespaces/{namespace}/{plural}/{patch['name']}/status", patch["patch"]
        )
    dcd = kube.get(f"{dcds}/llm-worker")
    conditions = {c["type"]: c for c in dcd["status"]["conditions"]}
    assert conditions["Available"]["reason"] == "ContainerCrashLooping"
    assert conditions["DynamoComponentReady"] == other
    graph = kube.get(f"/apis/nvidia.com/v1beta1/namespaces/{namespace}/dynamographdeployments/llm")
    assert graph["status"]["state"] == "failed"
