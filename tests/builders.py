"""Kubernetes objects as the API server sends them (camelCase dicts), and watch events of them: the one set
of builders the tests, the benchmarks (bench/) and the bundled examples (examples/generate.py) share.

Each builder makes the fields a diagnosis reads. `realistic=True` (for a Pod, `bulk=`) adds what a real
object carries besides, as the operator, kubelet and the API server write it: managed fields, a long
environment, probes, GPU resources, volumes, owner references. A model-serving worker Pod then weighs
about 9 KB on the wire, of which a few hundred bytes matter: what the typed projections in
`stream.model.objects` are for, and what the benchmarks measure. Keys come in the API server's order, so
that a log written from these objects reads as a recorded one (and the bundled logs stay byte-stable).

bench/ and examples/ run from the repository root and put this folder on sys.path to import it.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from typing import Any

import msgspec

from stream.model.decode import typed_event
from stream.model.events import WatchEvent
from stream.model.objects import Pod

GRAPH = "nvidia.com/dynamo-graph-deployment-name"
COMPONENT = "nvidia.com/dynamo-component"
SELECTOR = "nvidia.com/selector"
LWS = "leaderworkerset.sigs.k8s.io"
GROVE = "grove.io"
DYNAMO_API = "nvidia.com/v1beta1"
SINCE = "2026-11-20T09:00:00Z"
"""When the small objects' conditions last changed: an hour before the tests' events."""
START = "2026-11-20T10:00:00Z"
"""When the realistic objects were made and their conditions last changed: the examples' first second."""
IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.7.1"


def uid(*parts: str) -> str:
    """A stable UUID-shaped uid for an object named by `parts` (namespace, kind, name, incarnation ...)."""
    digest = hashlib.sha256("/".join(parts).encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


# Labels


def labels(graph: str | None = "g", component: str | None = "worker", **extra: str) -> dict[str, str]:
    """The two labels crashwatch reads (either may be left out), after `extra`."""
    out = dict(extra)
    if graph is not None:
        out[GRAPH] = graph
    if component is not None:
        out[COMPONENT] = component
    return out


def component_labels(
    graph: str, component: str, kind: str = "worker", template_hash: str | None = None
) -> dict[str, str]:
    """The labels the Dynamo operator puts on a component's Pods (and its Deployment); with the
    Deployment's `pod-template-hash` when `template_hash` is given."""
    out = {
        GRAPH: graph,
        COMPONENT: component,
        SELECTOR: f"{graph}-{component.lower()}",
        "nvidia.com/dynamo-component-type": kind,
        "nvidia.com/dynamo-namespace": f"{graph}-ns",
        "app.kubernetes.io/managed-by": "dynamo-operator",
        "app.kubernetes.io/part-of": graph,
        "app.kubernetes.io/name": f"{graph}-{component.lower()}",
    }
    if template_hash is not None:
        out["pod-template-hash"] = template_hash
    return out


def grove_labels(graph: str, component: str, index: int) -> dict[str, str]:
    """The labels of a Grove-backed component's Pod, sorted as the API server sends them: Dynamo's from
    the clique template, Grove's own on top (managed-by, part-of the PodCliqueSet, the clique, the PodGang)."""
    clique = f"{graph}-0-{component.lower()}"
    out = component_labels(graph, component)
    out.update(
        {
            "app.kubernetes.io/managed-by": "grove-operator",
            "app.kubernetes.io/part-of": graph,
            "app.kubernetes.io/name": clique,
            "app.kubernetes.io/component": "pcs-podclique",
            f"{GROVE}/podclique": clique,
            f"{GROVE}/podclique-pod-index": str(index),
            f"{GROVE}/podcliqueset-replica-index": "0",
            f"{GROVE}/podgang": f"{graph}-0",
            f"{GROVE}/pod-template-hash": "8c5d7f9b6",
        }
    )
    return dict(sorted(out.items()))


def lws_name(lws: str, group: int, worker: int) -> str:
    """A LeaderWorkerSet Pod's name: the leader `<lws>-<group>`, a worker `<lws>-<group>-<worker>`."""
    return f"{lws}-{group}" if worker == 0 else f"{lws}-{group}-{worker}"


def lws_labels(namespace: str, graph: str, component: str, lws: str, group: int, worker: int) -> dict[str, str]:
    """The labels of a Pod of a LeaderWorkerSet group, sorted as the API server sends them: Dynamo's from
    the templates, LWS's own, and its StatefulSet's."""
    owner = lws if worker == 0 else f"{lws}-{group}"
    out = component_labels(graph, component)
    out.update(
        {
            f"{LWS}/name": lws,
            f"{LWS}/group-index": str(group),
            f"{LWS}/worker-index": str(worker),
            f"{LWS}/group-key": hashlib.sha1(f"{namespace}/{lws}-{group}".encode()).hexdigest(),
            f"{LWS}/template-revision-hash": "6b4f8d97c5",
            "apps.kubernetes.io/pod-index": str(group if worker == 0 else worker),
            "controller-revision-hash": f"{owner}-6b4f8d97c5",
            "statefulset.kubernetes.io/pod-name": lws_name(lws, group, worker),
        }
    )
    return dict(sorted(out.items()))


# Pods


def container(
    name: str = "main",
    restarts: int = 0,
    state: str = "waiting",
    exit_code: int | None = 1,
    last_exit: int | None = None,
    reason: str | None = "Error",
    *,
    ready: bool | None = None,
    waiting: str = "CrashLoopBackOff",
    backoff: str | None = None,
    ran: tuple[str, str] | None = None,
    started_at: str = START,
    realistic: bool = False,
) -> dict[str, Any]:
    """A container status. state: running | waiting | terminated; exit_code is the current termination's
    (state terminated) and last_exit the previous one's; waiting containers take exit_code as last_exit;
    `reason` is the termination's (None: kubelet gave none). `ready` defaults to running; `waiting` is
    the waiting reason, `backoff` kubelet's message with it, `ran` the (startedAt, finishedAt) of the
    termination shown. `realistic` adds the image and container ids and kubelet's empty lastState."""
    if state == "running":
        now: dict[str, Any] = {"running": {"startedAt": started_at}}
    elif state == "waiting":
        now = {"waiting": {"reason": waiting} | ({"message": backoff} if backoff else {})}
    else:
        now = {"terminated": _terminated(exit_code, reason, ran)}
    last = last_exit if last_exit is not None else (exit_code if state == "waiting" else None)
    is_ready = state == "running" if ready is None else ready
    out: dict[str, Any] = {"name": name}
    if realistic:
        out |= {"image": IMAGE, "imageID": IMAGE.split(":")[0] + "@sha256:" + "4f" * 32}
        out["containerID"] = "containerd://" + "9a" * 32
    out["ready"] = is_ready
    if realistic:
        out["started"] = is_ready
    out |= {"restartCount": restarts, "state": now}
    if last is not None:
        out["lastState"] = {"terminated": _terminated(last, reason, ran)}
    elif realistic:
        out["lastState"] = {}
    return out


def _terminated(exit_code: int | None, reason: str | None, ran: tuple[str, str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"exitCode": exit_code}
    if reason is not None:
        out["reason"] = reason
    if ran is not None:
        out |= {"startedAt": ran[0], "finishedAt": ran[1]}
    return out


def pod_status(
    phase: str = "Running",
    ready: bool | None = False,
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    realistic: bool = False,
) -> dict[str, Any]:
    """A Pod's status. ready=None: kubelet has reported no conditions yet. `realistic` adds the addresses
    and the QoS class, and the five conditions kubelet keeps (Initialized follows the init containers)."""
    init = init or []
    out: dict[str, Any] = {"phase": phase}
    if realistic:
        out |= {"qosClass": "Guaranteed", "hostIP": "10.0.7.21", "podIP": "10.244.7.33"}
        out["startTime"] = "2026-11-20T10:00:01Z"
    if ready is None:
        out["conditions"] = []
    elif realistic:
        initialized = all(s["state"].get("terminated", {}).get("exitCode") == 0 for s in init)
        out["conditions"] = _conditions(ready, initialized)
    else:
        out["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    out["initContainerStatuses"] = init
    out["containerStatuses"] = containers if containers is not None else [container()]
    return out


def _conditions(ready: bool, initialized: bool) -> list[dict[str, Any]]:
    def cond(type_: str, ok: bool, reason: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": type_,
            "status": "True" if ok else "False",
            "lastTransitionTime": "2026-11-20T10:00:02Z",
            "lastProbeTime": None,
        }
        if reason and not ok:
            out["reason"] = reason
        return out

    return [
        cond("PodReadyToStartContainers", True),
        cond("Initialized", initialized, "ContainersNotInitialized"),
        cond("Ready", ready, "ContainersNotReady"),
        cond("ContainersReady", ready, "ContainersNotReady"),
        cond("PodScheduled", True),
    ]


@dataclass(frozen=True)
class Bulk:
    """What a real Pod carries that no diagnosis reads: its controller, node, service account, and how
    it was named and made (a Pod built with it also gets the spec, managed fields and kubelet's status)."""

    owner: dict[str, Any]
    node: str = "gpu-node-07"
    service_account: str = "worker"
    generate_name: str | None = None
    created: str = START
    annotations: dict[str, str] = field(default_factory=dict)
    hostname: str | None = None
    subdomain: str | None = None


def pod_annotations(template_hash: str = "6d9f7c8b5", **extra: str) -> dict[str, str]:
    """The annotations the operator puts on a worker Pod, then `extra`."""
    return {
        "kubectl.kubernetes.io/default-container": "main",
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9090",
        "nvidia.com/deployment-hash": template_hash,
    } | extra


def owner(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    """A controller's ownerReference, as the API server returns it."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod(
    name: str = "p-0",
    namespace: str = "ns",
    uid: str | None = None,
    pod_labels: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    phase: str = "Running",
    ready: bool | None = False,
    deleting: bool = False,
    resource_version: str = "1",
    bulk: Bulk | None = None,
) -> dict[str, Any]:
    """A Pod: labels(), one crash-looping `main` container unless `containers` says otherwise. With
    `bulk`, the realistic Pod (spec, managed fields, kubelet's status) its controller made."""
    meta: dict[str, Any] = {"name": name}
    if bulk is not None and bulk.generate_name is not None:
        meta["generateName"] = bulk.generate_name
    meta |= {"namespace": namespace, "uid": uid or f"uid-{namespace}-{name}", "resourceVersion": resource_version}
    if bulk is not None:
        meta["creationTimestamp"] = bulk.created
    meta["labels"] = labels() if pod_labels is None else pod_labels
    if bulk is not None:
        meta |= {"annotations": dict(bulk.annotations), "ownerReferences": [bulk.owner]}
        meta["managedFields"] = _managed_fields()
    if deleting:
        meta["deletionTimestamp"] = START
    out: dict[str, Any] = {"kind": "Pod", "apiVersion": "v1", "metadata": meta}
    if bulk is not None:
        out["spec"] = _pod_spec(bulk)
    out["status"] = pod_status(phase, ready, containers, init, realistic=bulk is not None)
    return out


def crashing(name: str = "p-0", restarts: int = 2, exit_code: int = 1, **kw: Any) -> dict[str, Any]:
    return pod(name, containers=[container(restarts=restarts, exit_code=exit_code)], **kw)


def healthy(name: str = "p-0", restarts: int = 0, **kw: Any) -> dict[str, Any]:
    """Running and Ready; `restarts` > 0: after crashes (the last exit 1), as a kubelet shows it."""
    last_exit = 1 if restarts else None
    return pod(name, containers=[container(state="running", restarts=restarts, last_exit=last_exit)], ready=True, **kw)


def worker_pod(
    namespace: str,
    name: str,
    graph: str,
    component: str,
    template_hash: str = "6d9f7c8b5",
    owner_name: str | None = None,
    node: str = "gpu-node-07",
) -> dict[str, Any]:
    """A realistic worker Pod of a Deployment's ReplicaSet, just scheduled (Pending, nothing reported);
    set its status with set_running, set_crashing, set_init_crashing."""
    rs = owner_name or f"{graph}-{component.lower()}-{template_hash}"
    bulk = Bulk(
        owner("apps/v1", "ReplicaSet", rs, uid(namespace, rs)),
        node=node,
        service_account=f"{graph}-worker",
        generate_name=f"{rs}-",
        annotations=pod_annotations(template_hash),
    )
    return pod(
        name,
        namespace,
        uid(namespace, name),
        component_labels(graph, component, template_hash=template_hash),
        containers=[],
        phase="Pending",
        ready=None,
        resource_version="1000",
        bulk=bulk,
    )


def grove_pod(namespace: str, graph: str, component: str, index: int, suffix: str, node: str) -> dict[str, Any]:
    """A realistic Pod of a Grove-backed component, as Grove makes it for a DGD: one PodCliqueSet per graph,
    the component's PodClique `<dgd>-0-<component>` (replica 0), the Pod `<clique>-<suffix>`; Pending."""
    clique = f"{graph}-0-{component.lower()}"
    name = f"{clique}-{suffix}"
    bulk = Bulk(
        owner("grove.io/v1alpha1", "PodClique", clique, uid(namespace, "podclique", clique)),
        node=node,
        service_account=f"{graph}-worker",
        generate_name=f"{clique}-",
        annotations=pod_annotations("8c5d7f9b6"),
        hostname=f"{clique}-{index}",
        subdomain=f"{graph}-0",
    )
    return pod(
        name,
        namespace,
        uid(namespace, name),
        grove_labels(graph, component, index),
        containers=[],
        phase="Pending",
        ready=None,
        resource_version="1000",
        bulk=bulk,
    )


def lws_pod(
    lws: str = "g-worker-0",
    group: int = 0,
    worker: int = 0,
    incarnation: int = 1,
    restarts: int = 0,
    exit_code: int = 1,
    ready: bool | None = False,
    component: str = "worker",
    namespace: str = "ns",
    graph: str = "g",
    *,
    created: str = START,
    node: str | None = None,
    size: int = 2,
    **kw: Any,
) -> dict[str, Any]:
    """A Pod of a LeaderWorkerSet group as LWS makes it: the leader `<lws>-<group>` (owned by the
    StatefulSet `<lws>`), a worker `<lws>-<group>-<worker>` (owned by the StatefulSet `<lws>-<group>`,
    which the leader owns). Names stay across recreations, uids do not (one per incarnation).

    Its main container has not started, or (`restarts`) restarted after exiting `exit_code` (what makes
    LWS recreate the group), or is `ready`; ready=None: just created, Pending. With `node`, the realistic
    Pod, `created` at that time, in a group of `size`."""
    name = lws_name(lws, group, worker)
    if ready is None:
        containers: list[dict[str, Any]] = []
        kw["phase"] = "Pending"
    elif ready:
        containers = [container(state="running", restarts=0)]
    elif restarts:
        containers = [container(state="running", restarts=restarts, last_exit=exit_code)]
    else:
        containers = [container(state="waiting", restarts=0, exit_code=None)]
    bulk = None
    if node is not None:
        sts = lws if worker == 0 else f"{lws}-{group}"
        extra = {f"{LWS}/size": str(size)} | ({f"{LWS}/leader-name": f"{lws}-{group}"} if worker else {})
        bulk = Bulk(
            owner(
                "apps/v1",
                "StatefulSet",
                sts,
                uid(namespace, "sts", sts, f"incarnation-{incarnation}" if worker else ""),
            ),
            node=node,
            service_account=f"{graph}-worker",
            created=created,
            annotations=pod_annotations(**extra),
            hostname=name,
            subdomain=lws,
        )
        kw.setdefault("resource_version", "1000")
    return pod(
        name,
        namespace,
        uid(namespace, name, f"incarnation-{incarnation}"),
        lws_labels(namespace, graph, component, lws, group, worker),
        containers,
        ready=ready,
        bulk=bulk,
        **kw,
    )


def set_running(obj: dict[str, Any], restarts: int = 0, ready: bool = True) -> dict[str, Any]:
    """A copy of a realistic Pod, its init container done and its main container running."""
    return _with_status(
        obj,
        "Running",
        ready,
        [container(state="running", restarts=restarts, ready=ready, started_at="2026-11-20T10:01:00Z", realistic=True)],
        [_init_done()],
    )


def set_crashing(
    obj: dict[str, Any], restarts: int, exit_code: int = 1, reason: str = "Error", waiting: bool = True
) -> dict[str, Any]:
    """A copy of a realistic Pod whose main container died `restarts` times; now waiting in
    CrashLoopBackOff (or just terminated)."""
    main = container(
        restarts=restarts,
        state="waiting" if waiting else "terminated",
        exit_code=exit_code,
        reason=reason,
        backoff="back-off 40s restarting failed container",
        ran=("2026-11-20T10:00:10Z", "2026-11-20T10:00:40Z"),
        realistic=True,
    )
    return _with_status(obj, "Running", False, [main], [_init_done()])


def set_init_crashing(obj: dict[str, Any], restarts: int, exit_code: int = 1) -> dict[str, Any]:
    """A copy of a realistic Pod whose init container fails over and over: Pending, Initialized=False."""
    init = container(
        "model-download",
        restarts,
        exit_code=exit_code,
        backoff="back-off 20s restarting failed container",
        ran=("2026-11-20T10:00:02Z", "2026-11-20T10:00:05Z"),
        realistic=True,
    )
    main = container(exit_code=None, waiting="PodInitializing", realistic=True)
    return _with_status(obj, "Pending", False, [main], [init])


def set_waiting(obj: dict[str, Any], reason: str, message: str, restarts: int = 0) -> dict[str, Any]:
    """A copy of a realistic Pod whose main container cannot start: kubelet's waiting `reason` (an image
    that cannot be pulled, a Secret that is not there) with its `message`; Pending, never Ready."""
    main = container(restarts=restarts, exit_code=None, waiting=reason, backoff=message, realistic=True)
    return _with_status(obj, "Pending", False, [main], [_init_done()])


def set_unschedulable(obj: dict[str, Any], since: str, message: str) -> dict[str, Any]:
    """A copy of a realistic Pod the scheduler cannot place since `since`, with its message: Pending,
    no node, no container statuses, PodScheduled=False reason Unschedulable (as kube-scheduler writes it)."""
    out = copy.deepcopy(obj)
    out["spec"].pop("nodeName", None)
    out["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": None,
                "lastTransitionTime": since,
                "reason": "Unschedulable",
                "message": message,
            }
        ],
        "qosClass": "Guaranteed",
    }
    return out


def _init_done() -> dict[str, Any]:
    ran = ("2026-11-20T10:00:02Z", "2026-11-20T10:00:09Z")
    return container("model-download", state="terminated", exit_code=0, reason="Completed", ran=ran, realistic=True)


def _with_status(
    obj: dict[str, Any], phase: str, ready: bool, containers: list[dict[str, Any]], init: list[dict[str, Any]]
) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["status"] = pod_status(phase, ready, containers, init, realistic=True)
    return out


def terminating(obj: dict[str, Any], at: str) -> dict[str, Any]:
    """A copy of a Pod being deleted since `at`, with the grace period kubelet has for it."""
    out = copy.deepcopy(obj)
    out["metadata"]["deletionTimestamp"] = at
    out["metadata"]["deletionGracePeriodSeconds"] = 60
    return out


def relabel(obj: dict[str, Any], new_labels: dict[str, str]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"]["labels"] = new_labels
    return obj


# Controllers and Dynamo's resources


def deployment(
    name: str,
    namespace: str = "ns",
    match_labels: dict[str, str] | None = None,
    expressions: list[dict[str, Any]] | None = None,
    owner_dcd: str | None = None,
    available: bool = False,
    generation: int = 1,
    *,
    graph: str = "g",
    component: str = "worker",
    template_hash: str = "6d9f7c8b5",
    realistic: bool = False,
) -> dict[str, Any]:
    """A Deployment, owned by the DCD `owner_dcd`. `realistic`: the one the operator makes for a
    component, labelled and selecting its Pods by nvidia.com/selector unless `match_labels` is given."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid(namespace, "deploy", name) if realistic else f"uid-deploy-{name}",
        "generation": generation,
    }
    pod_labels = component_labels(graph, component)
    if realistic:
        meta |= {"resourceVersion": "900", "labels": pod_labels}
        meta["annotations"] = {"deployment.kubernetes.io/revision": str(generation)}
        if match_labels is None:
            match_labels = {SELECTOR: pod_labels[SELECTOR]}
    if owner_dcd and realistic:
        dcd_ref = owner("nvidia.com/v1alpha1", "DynamoComponentDeployment", owner_dcd, uid(namespace, "dcd", owner_dcd))
        meta["ownerReferences"] = [dcd_ref]
    elif owner_dcd:
        meta["ownerReferences"] = [{"kind": "DynamoComponentDeployment", "name": owner_dcd, "controller": True}]
    selector: dict[str, Any] = {}
    if match_labels is not None:
        selector["matchLabels"] = match_labels
    if expressions is not None:
        selector["matchExpressions"] = expressions
    spec: dict[str, Any] = {"selector": selector}
    condition: dict[str, Any] = {"type": "Available", "status": "True" if available else "False"}
    out: dict[str, Any] = {"kind": "Deployment", "apiVersion": "apps/v1", "metadata": meta, "spec": spec}
    if not realistic:
        return out | {"status": {"observedGeneration": generation, "conditions": [condition]}}
    template = {"metadata": {"labels": pod_labels}, "spec": {"containers": [{"name": "main", "image": "x"}]}}
    out["spec"] = {"replicas": 1} | spec | {"template": template}
    out["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}
    replicas = 1 if available else 0
    condition |= {
        "reason": "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
        "lastTransitionTime": START,
        "lastUpdateTime": START,
        "message": "Deployment has minimum availability."
        if available
        else "Deployment does not have minimum availability.",
    }
    progressing = {
        "type": "Progressing",
        "status": "True",
        "reason": "NewReplicaSetAvailable",
        "lastTransitionTime": START,
        "lastUpdateTime": START,
        "message": f'ReplicaSet "{name}-{template_hash}" has successfully progressed.',
    }
    out["status"] = {
        "observedGeneration": generation,
        "replicas": 1,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
        "updatedReplicas": 1,
        "conditions": [condition, progressing],
    }
    return out


def _condition(type_: str, status: str, reason: str, message: str, generation: int, since: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": since,
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
    api_version: str = DYNAMO_API,
    realistic: bool = False,
) -> dict[str, Any]:
    """A DynamoComponentDeployment with the operator's Available condition. `realistic`: owned by its
    DGD, with a spec and the operator's other condition."""
    conditions = [_condition("Available", available, reason, message, generation, START if realistic else SINCE)]
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid(namespace, "dcd", name) if realistic else f"uid-dcd-{name}",
        "generation": generation,
    }
    out: dict[str, Any] = {"kind": "DynamoComponentDeployment", "apiVersion": api_version, "metadata": meta}
    if not realistic:
        meta["labels"] = labels(graph, component)
        out["status"] = {"conditions": conditions + (extra_conditions or [])}
        return out
    meta |= {"resourceVersion": "800", "labels": labels(graph, component)}
    meta["ownerReferences"] = [owner(api_version, "DynamoGraphDeployment", graph, uid(namespace, "dgd", graph))]
    out["spec"] = {"componentType": "worker", "replicas": 1, "dynamoNamespace": f"{graph}-ns"}
    conditions.append(_condition("DynamoComponentReady", "True", "Reconciled", "reconciled", generation, START))
    out["status"] = {"observedGeneration": generation, "conditions": conditions + (extra_conditions or [])}
    return out


def dgd(
    name: str = "g",
    namespace: str = "ns",
    state: str = "pending",
    reason: str = "some_resources_are_not_ready",
    message: str = "Resources not ready",
    extra_conditions: list[dict[str, Any]] | None = None,
    generation: int = 1,
    api_version: str = DYNAMO_API,
    *,
    spec: dict[str, Any] | None = None,
    components: dict[str, dict[str, Any]] | None = None,
    realistic: bool = False,
) -> dict[str, Any]:
    """A DynamoGraphDeployment with the operator's state and Ready condition, and `components` its
    status.components (component name -> what the operator reports of it). `realistic`: with a spec
    (`spec`, else an empty one) and the status's observedGeneration."""
    ready = "True" if state == "successful" else "False"
    condition = _condition(
        "Ready", ready, reason, message, generation if realistic else 1, START if realistic else SINCE
    )
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid(namespace, "dgd", name) if realistic else f"uid-dgd-{name}",
        "generation": generation,
    }
    out: dict[str, Any] = {"kind": "DynamoGraphDeployment", "apiVersion": api_version, "metadata": meta}
    status: dict[str, Any] = {"state": state}
    if realistic:
        meta["resourceVersion"] = "700"
        status["observedGeneration"] = generation
    if realistic or spec is not None:
        out["spec"] = {"services": {}} if spec is None else spec
    status["conditions"] = [condition] + (extra_conditions or [])
    if components is not None:
        status["components"] = components
    out["status"] = status
    return out


def grove_dgd(components: dict[str, tuple[str, int, int, int]], **kw: Any) -> dict[str, Any]:
    """A DGD whose components Grove runs, with no DCD: status.components as the operator fills it from
    the PodCliques, name -> (componentKind, replicas, updatedReplicas, readyReplicas). `realistic`: with
    the spec and each component's PodClique (`<dgd>-0-<component>`)."""
    realistic, graph = kw.get("realistic", False), kw.get("name", "g")
    reported: dict[str, dict[str, Any]] = {}
    for name, (kind, replicas, updated, ready) in components.items():
        reported[name] = {"componentKind": kind}
        if realistic:
            reported[name]["componentNames"] = [f"{graph}-0-{name.lower()}"]
        reported[name] |= {"replicas": replicas, "updatedReplicas": updated, "readyReplicas": ready}
    if realistic:
        kw["spec"] = {
            "backendFramework": "vllm",
            "components": [
                {
                    "componentName": name,
                    "componentType": "frontend" if name == "Frontend" else "worker",
                    "replicas": replicas,
                }
                for name, (_, replicas, _, _) in components.items()
            ],
        }
    return dgd(components=reported, **kw)


def lws(
    name: str = "g-worker-0",
    replicas: int = 1,
    failed: str | None = None,
    namespace: str = "ns",
    *,
    ready: bool = False,
    graph: str = "g",
    component: str = "worker",
    owner_dcd: str | None = None,
    realistic: bool = False,
) -> dict[str, Any]:
    """A LeaderWorkerSet of `replicas` groups of a leader and a worker, Failed with the message `failed`.
    `realistic`: the one the operator makes for a multinode DCD (`owner_dcd`), its Pod templates, its
    rollout and the conditions LWS keeps, Available when `ready`."""
    failure = {"type": "Failed", "status": "True", "reason": "RestartBudgetExhausted", "message": failed}
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid(namespace, "lws", name) if realistic else f"uid-lws-{name}",
        "generation": 1,
    }
    out: dict[str, Any] = {"kind": "LeaderWorkerSet", "apiVersion": "leaderworkerset.x-k8s.io/v1", "metadata": meta}
    if not realistic:
        out["spec"] = {"replicas": replicas, "leaderWorkerTemplate": {"size": 2}}
        out["status"] = {"conditions": [failure] if failed else []}
        return out
    template_labels = labels(graph, component)
    meta |= {"resourceVersion": "900", "labels": template_labels}
    if owner_dcd is not None:
        dcd_ref = owner(DYNAMO_API, "DynamoComponentDeployment", owner_dcd, uid(namespace, "dcd", owner_dcd))
        meta["ownerReferences"] = [dcd_ref]
    template = {"metadata": {"labels": template_labels}, "spec": {"containers": [{"name": "main", "image": "x"}]}}
    out["spec"] = {
        "replicas": replicas,
        "startupPolicy": "LeaderCreated",
        "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxUnavailable": 1}},
        "leaderWorkerTemplate": {
            "size": 2,
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": template,
            "workerTemplate": template,
        },
    }
    out["status"] = {
        "replicas": replicas,
        "readyReplicas": replicas if ready else 0,
        "updatedReplicas": replicas,
        "hpaPodSelector": f"{LWS}/name={name},{LWS}/worker-index=0",
        "conditions": [
            {
                "type": "Available",
                "status": "True" if ready else "False",
                "reason": "AllGroupsReady" if ready else "AllGroupsNotReady",
                "message": "All replicas are ready" if ready else "Not all replicas are ready",
                "lastTransitionTime": START,
            },
            {
                "type": "Progressing",
                "status": "False" if ready else "True",
                "reason": "GroupsProgressing",
                "message": "Replicas are progressing",
                "lastTransitionTime": START,
            },
        ]
        + ([failure] if failed else []),
    }
    return out


def stalled(status: str, reason: str, message: str, generation: int = 1) -> dict[str, Any]:
    """The kstatus condition crashwatch owns on DCDs and DGDs."""
    return {
        "type": "Stalled",
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": SINCE,
    }


# Watch events


def typed_pod(obj: dict[str, Any]) -> Pod:
    """A Pod as the typed decoder reads it from JSON."""
    return msgspec.json.decode(msgspec.json.encode(obj), type=Pod)


def event(kind: str, obj: dict[str, Any], time: str | None = None) -> WatchEvent:
    """A decoded watch event of (a copy of) `obj`, arrived at `time`."""
    raw: dict[str, Any] = {"type": kind, "object": copy.deepcopy(obj)}
    if time is not None:
        raw["time"] = time
    return typed_event(raw)


# The realistic Pod's bulk


def _pod_spec(bulk: Bulk) -> dict[str, Any]:
    main = {
        "name": "main",
        "image": IMAGE,
        "command": ["/bin/sh", "-c"],
        "args": [
            "python3 -m dynamo.vllm --model Qwen/Qwen3-0.6B --tensor-parallel-size 1 "
            "--max-model-len 32768 --gpu-memory-utilization 0.90 --enforce-eager "
            "--kv-events-config '{\"enable_kv_cache_events\": true}'"
        ],
        "env": _env(),
        "ports": [{"containerPort": 9090, "name": "system", "protocol": "TCP"}],
        "resources": {
            "limits": {"cpu": "10", "memory": "80Gi", "nvidia.com/gpu": "1"},
            "requests": {"cpu": "10", "memory": "80Gi", "nvidia.com/gpu": "1"},
        },
        "livenessProbe": _probe("/live", 5, 1),
        "readinessProbe": _probe("/health", 10, 60),
        "startupProbe": _probe("/live", 10, 720),
        "volumeMounts": [
            {"mountPath": "/dev/shm", "name": "shared-memory"},
            {"mountPath": "/opt/models", "name": "model-cache"},
            {
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "name": "kube-api-access-x7k2p",
                "readOnly": True,
            },
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "imagePullPolicy": "IfNotPresent",
    }
    download = {
        "name": "model-download",
        "image": IMAGE,
        "command": ["huggingface-cli", "download", "Qwen/Qwen3-0.6B"],
        "volumeMounts": [{"mountPath": "/opt/models", "name": "model-cache"}],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    namespace_file = {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}, "path": "namespace"}
    api_access = {
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
            {"downwardAPI": {"items": [namespace_file]}},
        ],
    }
    gpu_nodes = {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}
    spec: dict[str, Any] = {
        "containers": [main],
        "initContainers": [download],
        "volumes": [
            {"name": "shared-memory", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
            {"name": "model-cache", "persistentVolumeClaim": {"claimName": "dynamo-model-cache"}},
            {"name": "kube-api-access-x7k2p", "projected": api_access},
        ],
        "tolerations": [
            {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"},
            {
                "effect": "NoExecute",
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "tolerationSeconds": 300,
            },
            {
                "effect": "NoExecute",
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "tolerationSeconds": 300,
            },
        ],
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [gpu_nodes]}}
        },
        "nodeName": bulk.node,
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "serviceAccountName": bulk.service_account,
        "terminationGracePeriodSeconds": 60,
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
    }
    if bulk.hostname is not None:
        spec["hostname"] = bulk.hostname
    if bulk.subdomain is not None:
        spec["subdomain"] = bulk.subdomain
    return spec


def _env() -> list[dict[str, Any]]:
    def field_ref(path: str) -> dict[str, Any]:
        return {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}

    env: list[dict[str, Any]] = [
        {"name": "DYN_NAMESPACE", "value": "dynamo"},
        {"name": "DYN_PARENT_DGD_K8S_NAME", "value": "llm"},
        {"name": "DYN_SYSTEM_ENABLED", "value": "true"},
        {"name": "DYN_SYSTEM_PORT", "value": "9090"},
        {"name": "DYN_HEALTH_CHECK_ENABLED", "value": "true"},
        {"name": "NATS_SERVER", "value": "nats://dynamo-platform-nats.dynamo-system.svc.cluster.local:4222"},
        {"name": "ETCD_ENDPOINTS", "value": "dynamo-platform-etcd.dynamo-system.svc.cluster.local:2379"},
        {"name": "HF_HOME", "value": "/opt/models/huggingface"},
        {"name": "VLLM_WORKER_MULTIPROC_METHOD", "value": "spawn"},
        {"name": "NCCL_DEBUG", "value": "WARN"},
        {"name": "NCCL_IB_DISABLE", "value": "0"},
        {"name": "CUDA_DEVICE_MAX_CONNECTIONS", "value": "1"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "POD_NAME", "valueFrom": field_ref("metadata.name")},
        {"name": "POD_NAMESPACE", "valueFrom": field_ref("metadata.namespace")},
        {"name": "POD_UID", "valueFrom": field_ref("metadata.uid")},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"key": "HF_TOKEN", "name": "hf-token-secret"}}},
    ]
    for i in range(12):
        env.append({"name": f"DYN_WORKER_OPTION_{i}", "value": f"option-value-{i}-" + "x" * 24})
    return env


def _probe(path: str, period: int, threshold: int) -> dict[str, Any]:
    return {
        "failureThreshold": threshold,
        "httpGet": {"path": path, "port": "system", "scheme": "HTTP"},
        "initialDelaySeconds": 0,
        "periodSeconds": period,
        "successThreshold": 1,
        "timeoutSeconds": 5,
    }


def _managed_fields() -> list[dict[str, Any]]:
    spec_fields: dict[str, Any] = {
        f'k:{{"name":"DYN_WORKER_OPTION_{i}"}}': {".": {}, "f:name": {}, "f:value": {}} for i in range(12)
    }
    return [
        {
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {
                    "f:generateName": {},
                    "f:labels": {".": {}, f"f:{GRAPH}": {}, f"f:{COMPONENT}": {}},
                    "f:ownerReferences": {".": {}},
                },
                "f:spec": {"f:containers": {'k:{"name":"main"}': {".": {}, "f:env": spec_fields}}},
            },
            "manager": "kube-controller-manager",
            "operation": "Update",
            "time": START,
        },
        {
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:status": {
                    "f:conditions": {".": {}},
                    "f:containerStatuses": {},
                    "f:hostIP": {},
                    "f:phase": {},
                    "f:podIP": {},
                    "f:startTime": {},
                }
            },
            "manager": "kubelet",
            "operation": "Update",
            "subresource": "status",
            "time": "2026-11-20T10:00:03Z",
        },
    ]
