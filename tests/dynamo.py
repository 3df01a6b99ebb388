"""Dynamo graphs on the real control plane, as the operator would leave them: a DGD, a DCD per component
(with the operator's conditions), and a Deployment owned by each DCD whose Pods carry the graph labels.
No operator runs here, so these helpers write the statuses it would have written."""

from __future__ import annotations

from typing import Any

from kube import Kube, pod_manifest

GRAPH = "nvidia.com/dynamo-graph-deployment-name"
COMPONENT = "nvidia.com/dynamo-component"
SELECTOR = "nvidia.com/selector"
V = "nvidia.com/v1beta1"
OPERATOR_TIME = "2026-12-01T00:00:00Z"


def dgds(namespace: str) -> str:
    return f"/apis/{V}/namespaces/{namespace}/dynamographdeployments"


def dcds(namespace: str) -> str:
    return f"/apis/{V}/namespaces/{namespace}/dynamocomponentdeployments"


def other_condition() -> dict[str, Any]:
    """A condition crashwatch does not own: it must come through every write untouched."""
    return {
        "type": "DynamoComponentReady",
        "status": "True",
        "reason": "Reconciled",
        "message": "reconciled by the operator",
        "lastTransitionTime": OPERATOR_TIME,
        "observedGeneration": 1,
    }


def not_ready(generation: int = 1) -> dict[str, Any]:
    return {
        "type": "Available",
        "status": "False",
        "reason": "DeploymentNotReady",
        "message": "Deployment is not ready",
        "lastTransitionTime": OPERATOR_TIME,
        "observedGeneration": generation,
    }


def make_graph(
    kube: Kube, namespace: str, graph: str = "llm", components: tuple[str, ...] = ("worker",), deployments: bool = True
) -> None:
    kube.create(
        dgds(namespace), {"apiVersion": V, "kind": "DynamoGraphDeployment", "metadata": {"name": graph}, "spec": {}}
    )
    kube.merge_patch(
        f"{dgds(namespace)}/{graph}/status",
        {
            "status": {
                "state": "pending",
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "False",
                        "reason": "some_resources_are_not_ready",
                        "message": "Resources not ready: " + "; ".join(f"{graph}-{c}: starting" for c in components),
                        "lastTransitionTime": OPERATOR_TIME,
                        "observedGeneration": 1,
                    }
                ],
            }
        },
    )
    for component in components:
        name = f"{graph}-{component}"
        dcd = kube.create(
            dcds(namespace),
            {
                "apiVersion": V,
                "kind": "DynamoComponentDeployment",
                "metadata": {"name": name, "labels": {GRAPH: graph, COMPONENT: component}},
                "spec": {},
            },
        )
        kube.merge_patch(
            f"{dcds(namespace)}/{name}/status", {"status": {"conditions": [not_ready(), other_condition()]}}
        )
        if deployments:
            kube.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment(name, graph, component, dcd))


def deployment(name: str, graph: str, component: str, owner: dict[str, Any]) -> dict[str, Any]:
    labels = {GRAPH: graph, COMPONENT: component, SELECTOR: name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "labels": {GRAPH: graph},
            "ownerReferences": [
                {
                    "apiVersion": V,
                    "kind": "DynamoComponentDeployment",
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {SELECTOR: name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "main", "image": "registry.invalid/worker:1"}],
                    "terminationGracePeriodSeconds": 30,
                },
            },
        },
    }


def labelled_pod(kube: Kube, namespace: str, name: str, graph: str, component: str) -> None:
    """A Pod of the graph without a Deployment behind it (as Grove's are)."""
    kube.create(f"/api/v1/namespaces/{namespace}/pods", pod_manifest(name, {GRAPH: graph, COMPONENT: component}))


def pods_of(kube: Kube, namespace: str, selector: str) -> list[dict[str, Any]]:
    items = kube.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector={SELECTOR}%3D{selector}")["items"]
    return [p for p in items if "deletionTimestamp" not in p["metadata"]]


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}


def dcd_available(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return conditions(kube.get(f"{dcds(namespace)}/{name}"))["Available"]


def dgd_state(kube: Kube, namespace: str, name: str = "llm") -> tuple[str, dict[str, Any]]:
    obj = kube.get(f"{dgds(namespace)}/{name}")
    return obj["status"].get("state", ""), conditions(obj)["Ready"]


def operators_successful(kube: Kube, path: str, dgd: dict[str, Any]) -> dict[str, Any]:
    """The operator's `successful` on a Ready flip, written over the DGD at `path` as `dgd` reads (its other
    conditions kept as read); the object as the server stored it."""
    ready = {**conditions(dgd)["Ready"], "status": "True", "reason": "all_resources_are_ready"}
    others = [c for c in dgd["status"]["conditions"] if c["type"] != "Ready"]
    stored: dict[str, Any] = kube.merge_patch(
        f"{path}/status", {"status": {"state": "successful", "conditions": [ready, *others]}}
    )
    return stored


def crash_loop_written(kube: Kube, namespace: str, dcd: str = "llm-worker") -> bool:
    """What `run` writes for a crash loop of the graph's component has landed: the DGD failed, and the
    component's DCD says ContainerCrashLooping."""
    failed = dgd_state(kube, namespace)[0] == "failed"
    return failed and dcd_available(kube, namespace, dcd)["reason"] == "ContainerCrashLooping"


def adopted_by_helm(kube: Kube, namespace: str, manifest: dict[str, Any], release: str) -> None:
    """Make the graph's DGD one that `helm install` adopts and waits on: the chart's spec applied under
    Helm's field manager (so a later upgrade that changes it meets no conflict with other writers), Helm's
    ownership metadata, and the operator's status.observedGeneration at its generation. (kstatus reads a
    custom resource with no status at all as Current, so a DGD Helm creates itself would be done at once.)"""
    name = manifest["metadata"]["name"]
    path = f"{dgds(namespace)}/{name}"
    kube.request(
        "PATCH",
        f"{path}?fieldManager=helm",
        {
            "apiVersion": manifest["apiVersion"],
            "kind": manifest["kind"],
            "metadata": {
                "name": name,
                "labels": {"app.kubernetes.io/managed-by": "Helm"},
                "annotations": {"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": namespace},
            },
            "spec": manifest["spec"],
        },
        "application/apply-patch+yaml",
    )
    generation = kube.get(path)["metadata"]["generation"]
    kube.merge_patch(f"{path}/status", {"status": {"observedGeneration": generation}})
