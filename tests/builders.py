"""Small Kubernetes objects for tests, built as the API server would send them (camelCase dicts)."""

from __future__ import annotations

import copy
from typing import Any

import msgspec

from stream.events import WatchEvent

GRAPH = "nvidia.com/dynamo-graph-deployment-name"
COMPONENT = "nvidia.com/dynamo-component"


def labels(graph: str | None = "g", component: str | None = "worker", **extra: str) -> dict[str, str]:
    out = dict(extra)
    if graph is not None:
        out[GRAPH] = graph
    if component is not None:
        out[COMPONENT] = component
    return out


def container(
    name: str = "main",
    restarts: int = 0,
    state: str = "waiting",
    exit_code: int | None = 1,
    last_exit: int | None = None,
    reason: str = "Error",
) -> dict[str, Any]:
    """A container status. state: running | waiting | terminated; exit_code is the current termination's
    (state terminated) and last_exit the previous one's; waiting containers take exit_code as last_exit."""
    states: dict[str, Any] = {
        "running": {"running": {"startedAt": "2026-11-20T10:00:00Z"}},
        "waiting": {"waiting": {"reason": "CrashLoopBackOff"}},
        "terminated": {"terminated": {"exitCode": exit_code, "reason": reason}},
    }
    last = last_exit if last_exit is not None else (exit_code if state == "waiting" else None)
    out: dict[str, Any] = {"name": name, "restartCount": restarts, "ready": state == "running", "state": states[state]}
    if last is not None:
        out["lastState"] = {"terminated": {"exitCode": last, "reason": reason}}
    return out


def pod(
    name: str = "p-0",
    namespace: str = "ns",
    uid: str | None = None,
    pod_labels: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    phase: str = "Running",
    ready: bool = False,
    deleting: bool = False,
    resource_version: str = "1",
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"uid-{namespace}-{name}",
        "resourceVersion": resource_version,
        "labels": labels() if pod_labels is None else pod_labels,
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-20T10:00:00Z"
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": meta,
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": containers if containers is not None else [container()],
            "initContainerStatuses": init or [],
        },
    }


def crashing(name: str = "p-0", restarts: int = 2, exit_code: int = 1, **kw: Any) -> dict[str, Any]:
    return pod(name, containers=[container(restarts=restarts, exit_code=exit_code)], **kw)


def healthy(name: str = "p-0", **kw: Any) -> dict[str, Any]:
    return pod(name, containers=[container(state="running", restarts=0)], ready=True, **kw)


def deployment(
    name: str,
    namespace: str = "ns",
    match_labels: dict[str, str] | None = None,
    expressions: list[dict[str, Any]] | None = None,
    owner_dcd: str | None = None,
    available: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-deploy-{name}", "generation": 1}
    if owner_dcd:
        meta["ownerReferences"] = [{"kind": "DynamoComponentDeployment", "name": owner_dcd, "controller": True}]
    selector: dict[str, Any] = {}
    if match_labels is not None:
        selector["matchLabels"] = match_labels
    if expressions is not None:
        selector["matchExpressions"] = expressions
    return {
        "kind": "Deployment",
        "apiVersion": "apps/v1",
        "metadata": meta,
        "spec": {"selector": selector},
        "status": {
            "observedGeneration": 1,
            "conditions": [{"type": "Available", "status": "True" if available else "False"}],
        },
    }


def dcd(
    name: str,
    graph: str = "g",
    component: str = "worker",
    namespace: str = "ns",
    available: str = "False",
    reason: str = "DeploymentNotReady",
    message: str = "Deployment is not ready",
    extra_conditions: list[dict[str, Any]] | None = None,
    generation: int = 1,
) -> dict[str, Any]:
    conditions = [
        {
            "type": "Available",
            "status": available,
            "reason": reason,
            "message": message,
            "observedGeneration": generation,
            "lastTransitionTime": "2026-11-20T09:00:00Z",
        }
    ] + (extra_conditions or [])
    return {
        "kind": "DynamoComponentDeployment",
        "apiVersion": "nvidia.com/v1beta1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-dcd-{name}",
            "generation": generation,
            "labels": labels(graph, component),
        },
        "status": {"conditions": conditions},
    }


def dgd(
    name: str = "g",
    namespace: str = "ns",
    state: str = "pending",
    reason: str = "some_resources_are_not_ready",
    message: str = "Resources not ready",
    extra_conditions: list[dict[str, Any]] | None = None,
    generation: int = 1,
) -> dict[str, Any]:
    return {
        "kind": "DynamoGraphDeployment",
        "apiVersion": "nvidia.com/v1beta1",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-dgd-{name}", "generation": generation},
        "status": {
            "state": state,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if state == "successful" else "False",
                    "reason": reason,
                    "message": message,
                    "observedGeneration": 1,
                    "lastTransitionTime": "2026-11-20T09:00:00Z",
                }
            ]
            + (extra_conditions or []),
        },
    }


def stalled(status: str, reason: str, message: str, generation: int = 1) -> dict[str, Any]:
    """The kstatus condition crashwatch owns on DCDs and DGDs."""
    return {
        "type": "Stalled",
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": "2026-11-20T09:00:00Z",
    }


def event(kind: str, obj: dict[str, Any], time: str | None = None) -> WatchEvent:
    raw: dict[str, Any] = {"type": kind, "object": copy.deepcopy(obj)}
    if time is not None:
        raw["time"] = time
    return msgspec.convert(raw, WatchEvent)


def relabel(obj: dict[str, Any], new_labels: dict[str, str]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"]["labels"] = new_labels
    return obj


LWS = "leaderworkerset.sigs.k8s.io"


def lws_pod(
    lws: str = "g-worker-0",
    group: int = 0,
    worker: int = 0,
    incarnation: int = 1,
    restarts: int = 0,
    exit_code: int = 1,
    ready: bool = False,
    component: str = "worker",
    **kw: Any,
) -> dict[str, Any]:
    """A Pod of a LeaderWorkerSet group as LWS makes it: the leader `<lws>-<group>`, workers
    `<lws>-<group>-<worker>`; names stay across recreations, uids do not (one per incarnation)."""
    name = f"{lws}-{group}" if worker == 0 else f"{lws}-{group}-{worker}"
    pod_labels = labels(
        component=component,
        **{
            f"{LWS}/name": lws,
            f"{LWS}/group-index": str(group),
            f"{LWS}/worker-index": str(worker),
            f"{LWS}/group-key": f"key-{lws}-{group}",
            f"{LWS}/template-revision-hash": "rev1",
        },
    )
    if ready:
        containers = [container(state="running", restarts=0)]
    elif restarts:  # restarted after a non-zero exit: what makes LWS recreate the group
        containers = [container(state="running", restarts=restarts, last_exit=exit_code)]
    else:
        containers = [container(state="waiting", restarts=0, exit_code=None)]
    return pod(name, uid=f"uid-{name}-{incarnation}", pod_labels=pod_labels, containers=containers, ready=ready, **kw)


def lws(
    name: str = "g-worker-0", replicas: int = 1, failed: str | None = None, namespace: str = "ns"
) -> dict[str, Any]:
    conditions = [{"type": "Failed", "status": "True", "reason": "RestartBudgetExhausted", "message": failed}]
    return {
        "kind": "LeaderWorkerSet",
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-lws-{name}", "generation": 1},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": 2}},
        "status": {"conditions": conditions if failed else []},
    }


def grove_dgd(components: dict[str, tuple[str, int, int, int]], **kw: Any) -> dict[str, Any]:
    """A DGD whose components Grove runs: status.components as the operator reports them,
    name -> (componentKind, replicas, updatedReplicas, readyReplicas)."""
    obj = dgd(**kw)
    obj["status"]["components"] = {
        name: {"componentKind": kind, "replicas": r, "updatedReplicas": u, "readyReplicas": ready}
        for name, (kind, r, u, ready) in components.items()
    }
    return obj
