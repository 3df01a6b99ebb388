"""Writes the bundled example logs. Run from the repository root: python -m examples.generate [FOLDER]

The logs are checked in; this script says how they were made, from the realistic objects of the builders
the tests share (tests/builders.py). Their expected outputs (examples/*.expected.*) were read line by line
against the scenario below before they were checked in; tests/replay compares the CLI against them, and
checks that this script, writing into another FOLDER, remakes every log byte for byte.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the builders the tests use

from builders import (  # noqa: E402
    dcd,
    deployment,
    dgd,
    grove_dgd,
    grove_pod,
    lws,
    lws_pod,
    set_crashing,
    set_init_crashing,
    set_running,
    set_unschedulable,
    set_waiting,
    terminating,
    worker_pod,
)


def _at(second: int) -> str:
    return f"2026-11-20T10:{second // 60:02d}:{second % 60:02d}Z"


def rollout_recovers() -> list[dict[str, Any]]:
    """A Deployment-backed worker crash-loops, climbs to 4 restarts, and a rollout with a fixed image ends it."""
    ns, graph = "dynamo", "llm"
    old = worker_pod(ns, "llm-vllmworker-6d9f7c8b5-x2x9k", graph, "VllmWorker")
    new = worker_pod(
        ns, "llm-vllmworker-7f8e9d0c1-k4m2p", graph, "VllmWorker", template_hash="7f8e9d0c1", node="gpu-node-02"
    )
    front = worker_pod(ns, "llm-frontend-5c4b3a291-q8w7e", graph, "Frontend", template_hash="5c4b3a291")
    front["metadata"]["labels"]["nvidia.com/dynamo-component-type"] = "frontend"
    unrelated = worker_pod(ns, "prometheus-node-exporter-7xk2q", graph, "x")
    for key in list(unrelated["metadata"]["labels"]):
        if key.startswith("nvidia.com/"):
            del unrelated["metadata"]["labels"][key]
    v = "nvidia.com/v1alpha1"
    crash_dcd = dcd("llm-vllmworker", graph, "VllmWorker", ns, api_version=v, realistic=True)
    crash_dgd = dgd(
        graph,
        ns,
        message="Resources not ready: llm-vllmworker: Deployment is not ready",
        api_version=v,
        realistic=True,
    )

    def echo_failed(restarts: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """The DCD and DGD as the live watcher left them (recorded back from the API server)."""
        finding = (
            f"container main of Pod llm-vllmworker-6d9f7c8b5-x2x9k restarted {restarts} times "
            "and is down after exit code 1"
        )
        d = dcd(
            "llm-vllmworker",
            graph,
            "VllmWorker",
            ns,
            available="False",
            reason="ContainerCrashLooping",
            message=finding,
            api_version=v,
            realistic=True,
        )
        g = dgd(
            graph,
            ns,
            state="failed",
            reason="component_crash_looping",
            message=f"Components crash-looping: VllmWorker: {finding}",
            api_version=v,
            realistic=True,
        )
        return d, g

    def workers(component: str = "VllmWorker", **kw: Any) -> dict[str, Any]:
        """The Deployment the operator made for the component's DCD (named alike)."""
        name = f"{graph}-{component.lower()}"
        return deployment(name, ns, owner_dcd=name, graph=graph, component=component, realistic=True, **kw)

    noisy = set_crashing(old, 1)
    noisy["metadata"]["resourceVersion"] = "1042"
    noisy["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] = "2026-11-20T10:00:05Z"
    failed_dcd, failed_dgd = echo_failed(2)
    events: list[tuple[int, str, dict[str, Any]]] = [
        (0, "ADDED", crash_dgd),
        (
            0,
            "ADDED",
            dcd(
                "llm-frontend",
                graph,
                "Frontend",
                ns,
                available="True",
                reason="DeploymentReady",
                message="Deployment is ready",
                api_version=v,
                realistic=True,
            ),
        ),
        (0, "ADDED", crash_dcd),
        (0, "ADDED", workers(available=True, component="Frontend", template_hash="5c4b3a291")),
        (0, "ADDED", workers()),
        (1, "ADDED", set_running(front)),
        (1, "ADDED", unrelated),
        (2, "ADDED", old),
        (3, "MODIFIED", set_running(old, ready=False)),
        (4, "MODIFIED", set_crashing(old, 1)),
        (5, "MODIFIED", noisy),
        (6, "MODIFIED", set_running(unrelated)),
        (46, "MODIFIED", set_crashing(old, 2)),
        (46, "MODIFIED", failed_dcd),
        (46, "MODIFIED", failed_dgd),
        (127, "MODIFIED", set_crashing(old, 3)),
        (
            130,
            "MODIFIED",
            workers(generation=2, template_hash="7f8e9d0c1"),
        ),
        (131, "ADDED", new),
        (140, "MODIFIED", set_running(new, ready=False)),
        (208, "MODIFIED", set_crashing(old, 4, exit_code=1)),
        (221, "MODIFIED", set_running(new)),
        (
            222,
            "MODIFIED",
            workers(generation=2, available=True, template_hash="7f8e9d0c1"),
        ),
        (223, "MODIFIED", terminating(set_crashing(old, 4), _at(223))),
        (240, "DELETED", terminating(set_crashing(old, 4), _at(223))),
    ]
    return [{"type": kind, "object": obj, "time": _at(t)} for t, kind, obj in events]


def two_failing_components() -> list[dict[str, Any]]:
    """A disaggregated graph: prefill workers die of OOM, a decode worker's init container fails."""
    ns, graph = "inference", "disagg"
    prefill_a = worker_pod(ns, "disagg-prefillworker-58c7d9f4b-r2d2x", graph, "PrefillWorker", "58c7d9f4b")
    prefill_b = worker_pod(ns, "disagg-prefillworker-58c7d9f4b-a1b2c", graph, "PrefillWorker", "58c7d9f4b")
    decode = worker_pod(ns, "disagg-decodeworker-6b5a4c3d2-m9n8b", graph, "DecodeWorker", "6b5a4c3d2")
    front = worker_pod(ns, "disagg-frontend-7a6b5c4d3-z1y2x", graph, "Frontend", "7a6b5c4d3")
    events: list[tuple[str, dict[str, Any]]] = [
        ("ADDED", dgd(graph, ns, realistic=True)),
        ("ADDED", dcd("disagg-decodeworker-0f1e2d", graph, "DecodeWorker", ns, realistic=True)),
        ("ADDED", dcd("disagg-prefillworker-3c4b5a", graph, "PrefillWorker", ns, realistic=True)),
        (
            "ADDED",
            dcd(
                "disagg-frontend",
                graph,
                "Frontend",
                ns,
                available="True",
                reason="DeploymentReady",
                message="Deployment is ready",
                realistic=True,
            ),
        ),
        ("ADDED", set_running(front)),
        ("ADDED", prefill_a),
        ("ADDED", prefill_b),
        ("ADDED", decode),
        ("MODIFIED", set_init_crashing(decode, 1)),
        ("MODIFIED", set_crashing(prefill_a, 1, exit_code=137, reason="OOMKilled")),
        ("MODIFIED", set_crashing(prefill_a, 2, exit_code=137, reason="OOMKilled")),
        ("MODIFIED", set_init_crashing(decode, 2)),
        ("MODIFIED", set_crashing(prefill_b, 2, exit_code=137, reason="OOMKilled")),
        ("MODIFIED", set_crashing(prefill_a, 3, exit_code=137, reason="OOMKilled", waiting=False)),
        ("MODIFIED", set_running(prefill_b, restarts=3, ready=False)),
        ("MODIFIED", set_init_crashing(decode, 3)),
    ]
    return [{"type": kind, "object": obj} for kind, obj in events]


def _recorded(events: list[tuple[int, str, dict[str, Any]]], first_rv: int) -> list[dict[str, Any]]:
    """Events as `crashwatch record` writes them: each object as the API server sent it then (a copy, with
    the cluster-wide resourceVersion that event carried), and the arrival time."""
    out = []
    for n, (t, kind, obj) in enumerate(events):
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(first_rv + n)
        out.append({"type": kind, "object": obj, "time": _at(t)})
    return out


def grove_crash_loop() -> list[dict[str, Any]]:
    """A Grove graph (no DCD): one of two decode workers crash-loops on start (exit 1), then starts on its
    third restart and becomes Ready; Grove's counts on the DGD follow a moment later.

    Each restart runs for half a minute (loading the model) before it dies again, as kubelet reports it:
    the verdict holds while the container runs again (the rule alone would clear it there and fire again
    at the next exit), and clears once the worker has been Ready for the recovery window (90 s by
    default), which a status rewrite later in the log shows has passed."""
    ns, graph = "serving", "qwen3"
    replicas = {"Frontend": 1, "VllmDecodeWorker": 2}

    def reported(frontend: int, decode: int) -> dict[str, Any]:
        counts = {"Frontend": frontend, "VllmDecodeWorker": decode}
        components = {name: ("PodClique", count, count, counts[name]) for name, count in replicas.items()}
        not_ready = [
            f"podclique/{graph}-0-{name.lower()}: desired={replicas[name]}, ready={count}"
            for name, count in (("Frontend", frontend), ("VllmDecodeWorker", decode))
            if count < replicas[name]
        ]
        if not not_ready:
            return grove_dgd(
                components,
                name=graph,
                namespace=ns,
                state="successful",
                reason="all_resources_are_ready",
                message="All resources are ready",
                realistic=True,
            )
        return grove_dgd(
            components,
            name=graph,
            namespace=ns,
            reason="pods_not_ready",
            message=f"Resources not ready: {graph}: " + "; ".join(not_ready),
            realistic=True,
        )

    front = grove_pod(ns, graph, "Frontend", 0, "7xq2m", "cpu-node-03")
    front["metadata"]["labels"]["nvidia.com/dynamo-component-type"] = "frontend"
    good = grove_pod(ns, graph, "VllmDecodeWorker", 0, "k8s4d", "gpu-node-05")
    bad = grove_pod(ns, graph, "VllmDecodeWorker", 1, "w2n9p", "gpu-node-09")
    events: list[tuple[int, str, dict[str, Any]]] = [
        (0, "ADDED", reported(0, 0)),
        (1, "ADDED", front),
        (1, "ADDED", good),
        (1, "ADDED", bad),
        (4, "MODIFIED", set_running(front, ready=False)),
        (6, "MODIFIED", set_running(good, ready=False)),
        (6, "MODIFIED", set_running(bad, ready=False)),
        (18, "MODIFIED", set_running(front)),
        (19, "MODIFIED", reported(1, 0)),
        (52, "MODIFIED", set_crashing(bad, 1)),  # restarted once: not a crash loop yet
        (63, "MODIFIED", set_running(bad, restarts=1, ready=False)),
        (71, "MODIFIED", set_running(good)),
        (72, "MODIFIED", reported(1, 1)),
        (97, "MODIFIED", set_crashing(bad, 2)),  # down again after its second restart: crash-looping
        (118, "MODIFIED", set_running(bad, restarts=2, ready=False)),
        (151, "MODIFIED", set_crashing(bad, 3)),
        (192, "MODIFIED", set_running(bad, restarts=3, ready=False)),
        (254, "MODIFIED", set_running(bad, restarts=3)),  # the third restart holds: Ready
        (256, "MODIFIED", reported(1, 2)),
        (360, "MODIFIED", set_running(good)),  # a status rewrite: time passed, the worker still Ready
    ]
    return _recorded(events, 51_200)


def lws_recreation_loop() -> list[dict[str, Any]]:
    """An LWS-backed DCD: whenever its worker container exits 1 (an NCCL error on a bad node), LWS deletes
    the group's leader, the worker goes with it, and the group is made anew with restart counts at 0.
    Four recreations in about four minutes, each after a failure; the fifth incarnation's worker lands
    on another node and the group becomes Ready."""
    ns, graph, component = "dynamo", "llama-mn", "VllmWorker"
    worker_dcd, group_set = "llama-mn-vllmworker", "llama-mn-vllmworker-0"
    front = worker_pod(ns, "llama-mn-frontend-5c4b3a291-q8w7e", graph, "Frontend", "5c4b3a291", node="cpu-node-01")
    front["metadata"]["labels"]["nvidia.com/dynamo-component-type"] = "frontend"

    def graph_status(state: str, reason: str, message: str) -> dict[str, Any]:
        spec = {
            "backendFramework": "vllm",
            "components": [
                {"componentName": "Frontend", "componentType": "frontend", "replicas": 1},
                {"componentName": component, "componentType": "worker", "replicas": 1, "multinode": {"nodeCount": 2}},
            ],
        }
        ready = state == "successful"
        reported = {
            "Frontend": {
                "componentKind": "Deployment",
                "componentNames": ["llama-mn-frontend"],
                "replicas": 1,
                "updatedReplicas": 1,
                "readyReplicas": 1,
            },
            component: {
                "componentKind": "LeaderWorkerSet",
                "componentNames": [group_set],
                "replicas": 1,
                "updatedReplicas": 1,
                "readyReplicas": 1 if ready else 0,
            },
        }
        return dgd(graph, ns, state, reason, message, spec=spec, components=reported, realistic=True)

    def worker_status(ready: bool) -> dict[str, Any]:
        if ready:
            return dcd(
                worker_dcd,
                graph,
                component,
                ns,
                available="True",
                reason="LeaderWorkerSetReady",
                message="LeaderWorkerSet is ready",
                realistic=True,
            )
        return dcd(
            worker_dcd,
            graph,
            component,
            ns,
            reason="LeaderWorkerSetNotReady",
            message="LeaderWorkerSet is not ready",
            realistic=True,
        )

    def leader_worker_set(ready: bool) -> dict[str, Any]:
        """The LeaderWorkerSet the operator made for the multinode DCD: one group of a leader and a worker."""
        return lws(
            group_set, namespace=ns, ready=ready, graph=graph, component=component, owner_dcd=worker_dcd, realistic=True
        )

    def group_pod(worker: int, n: int, created: int, node: str) -> dict[str, Any]:
        """Group 0's leader (worker 0) or worker in its n-th incarnation, just created."""
        return lws_pod(
            group_set,
            0,
            worker,
            n,
            ready=None,
            component=component,
            namespace=ns,
            graph=graph,
            created=_at(created),
            node=node,
        )

    events: list[tuple[int, str, dict[str, Any]]] = [
        (
            0,
            "ADDED",
            graph_status(
                "pending",
                "some_resources_are_not_ready",
                f"Resources not ready: {worker_dcd}: LeaderWorkerSet is not ready",
            ),
        ),
        (
            0,
            "ADDED",
            dcd(
                "llama-mn-frontend",
                graph,
                "Frontend",
                ns,
                available="True",
                reason="DeploymentReady",
                message="Deployment is ready",
                realistic=True,
            ),
        ),
        (0, "ADDED", worker_status(False)),
        (0, "ADDED", leader_worker_set(ready=False)),
        (0, "ADDED", set_running(front)),
    ]

    def incarnation(n: int, start: int, node: str, fails_at: int | None) -> None:
        """Group 0's n-th life: the leader, then its worker, both start; the worker's container exits 1 and
        restarts once, so LWS deletes the leader and the worker goes with it."""
        leader = group_pod(0, n, start, "gpu-node-04")
        worker = group_pod(1, n, start + 1, node)
        events.extend(
            [
                (start, "ADDED", leader),
                (start + 1, "ADDED", worker),
                (start + 4, "MODIFIED", set_running(leader, ready=False)),
                (start + 5, "MODIFIED", set_running(worker, ready=False)),
            ]
        )
        if fails_at is None:
            return
        failed = set_crashing(worker, 1, waiting=True)
        events.extend(
            [
                (fails_at, "MODIFIED", failed),
                (fails_at, "MODIFIED", terminating(set_running(leader, ready=False), _at(fails_at))),
                (fails_at + 1, "MODIFIED", terminating(failed, _at(fails_at + 1))),
                (fails_at + 3, "DELETED", terminating(failed, _at(fails_at + 1))),
                (fails_at + 4, "DELETED", terminating(set_running(leader, ready=False), _at(fails_at))),
            ]
        )

    incarnation(1, 2, "gpu-node-11", 48)
    incarnation(2, 54, "gpu-node-11", 129)  # recreated once: LWS doing its job
    incarnation(3, 135, "gpu-node-11", 211)  # recreated twice, each after a failure: recreation-looping
    incarnation(4, 217, "gpu-node-11", 291)
    incarnation(5, 297, "gpu-node-12", None)  # gpu-node-11 cordoned: the worker lands elsewhere
    last_leader = group_pod(0, 5, 297, "gpu-node-04")
    last_worker = group_pod(1, 5, 298, "gpu-node-12")
    events.extend(
        [
            (372, "MODIFIED", set_running(last_worker)),
            (374, "MODIFIED", set_running(last_leader)),  # the whole group Ready: recovered
            (376, "MODIFIED", leader_worker_set(ready=True)),
            (377, "MODIFIED", worker_status(True)),
            (378, "MODIFIED", graph_status("successful", "all_resources_are_ready", "All resources are ready")),
        ]
    )
    events.sort(key=lambda e: e[0])  # stable: same-second events keep their order
    return _recorded(events, 73_400)


def diagnoses() -> list[dict[str, Any]]:
    """A graph that will never be ready for five reasons besides a crash loop, each fixed in turn: the
    frontend's Secret is missing, the worker's image tag does not exist, the prefill worker asks for a GPU
    no node has, the planner exits 0 and is restarted forever, the processor is OOM-killed with exit 0
    (a child killed by the kernel). Under the default graces (3m pulls, 2m config errors, 15m
    unschedulable) each is reported once its grace has passed, and recovers when fixed."""
    ns, graph = "dynamo", "llm"
    v = "nvidia.com/v1beta1"

    def pod_of(component: str, template: str, suffix: str) -> dict[str, Any]:
        return worker_pod(ns, f"llm-{component.lower()}-{template}-{suffix}", graph, component, template)

    front = pod_of("Frontend", "5c4b3a291", "q8w7e")
    worker = pod_of("VllmWorker", "6d9f7c8b5", "x2x9k")
    worker_fixed = pod_of("VllmWorker", "7f8e9d0c1", "k4m2p")
    prefill = pod_of("VllmPrefillWorker", "7c4b9d6f8", "m4kq2")
    planner = pod_of("Planner", "8b7a6c5d4", "p1l2n")
    planner_fixed = pod_of("Planner", "9c8b7a6d5", "r3s4t")
    processor = pod_of("Processor", "4d3c2b1a0", "h5j6k")
    processor_fixed = pod_of("Processor", "5e4d3c2b1", "w7x8y")
    dcds = [
        dcd(f"llm-{c.lower()}", graph, c, ns, api_version=v, realistic=True)
        for c in ("Frontend", "Planner", "Processor", "VllmPrefillWorker", "VllmWorker")
    ]
    secret = 'secret "hf-token" not found'
    pull = 'Back-off pulling image "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.9"'
    pull_error = (
        'failed to pull and unpack image "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.9": '
        "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.9: not found"
    )
    no_gpu = (
        "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: "
        "4 No preemption victims found for incoming pod."
    )
    events: list[tuple[int, str, dict[str, Any]]] = [
        (0, "ADDED", dgd(graph, ns, api_version=v, realistic=True)),
        *((0, "ADDED", d) for d in dcds),
        (2, "ADDED", front),
        (2, "ADDED", worker),
        (2, "ADDED", prefill),
        (2, "ADDED", planner),
        (2, "ADDED", processor),
        (3, "MODIFIED", set_waiting(front, "CreateContainerConfigError", secret)),
        (4, "MODIFIED", set_waiting(worker, "ErrImagePull", pull_error)),
        (5, "MODIFIED", set_unschedulable(prefill, _at(5), no_gpu)),
        (6, "MODIFIED", set_running(planner, ready=False)),
        (6, "MODIFIED", set_running(processor, ready=False)),
        (20, "MODIFIED", set_waiting(worker, "ImagePullBackOff", pull)),
        (36, "MODIFIED", set_crashing(planner, 1, exit_code=0, reason="Completed", waiting=False)),
        (37, "MODIFIED", set_running(planner, 1, ready=False)),
        (41, "MODIFIED", set_crashing(processor, 1, exit_code=0, reason="OOMKilled", waiting=False)),
        (42, "MODIFIED", set_running(processor, 1, ready=False)),
        (50, "MODIFIED", set_waiting(worker, "ErrImagePull", pull_error)),
        (67, "MODIFIED", set_crashing(planner, 2, exit_code=0, reason="Completed", waiting=False)),
        (70, "MODIFIED", set_waiting(worker, "ImagePullBackOff", pull)),
        (72, "MODIFIED", set_crashing(processor, 2, exit_code=0, reason="OOMKilled", waiting=False)),
        (87, "MODIFIED", set_running(planner, 2, ready=False)),
        (92, "MODIFIED", set_running(processor, 2, ready=False)),
        (118, "MODIFIED", set_crashing(planner, 3, exit_code=0, reason="Completed")),
        (150, "MODIFIED", set_running(front, ready=False)),  # the Secret is there: the container runs
        (190, "MODIFIED", set_running(front)),
        (240, "ADDED", worker_fixed),  # a rollout with a tag that exists
        (241, "MODIFIED", set_running(worker_fixed, ready=False)),
        (300, "MODIFIED", set_running(worker_fixed)),
        (301, "MODIFIED", terminating(set_waiting(worker, "ImagePullBackOff", pull), _at(301))),
        (302, "DELETED", terminating(set_waiting(worker, "ImagePullBackOff", pull), _at(301))),
        (400, "ADDED", planner_fixed),  # the planner's fix: it serves instead of returning
        (401, "MODIFIED", terminating(set_crashing(planner, 3, exit_code=0, reason="Completed"), _at(401))),
        (402, "MODIFIED", set_running(planner_fixed)),
        (403, "DELETED", terminating(set_crashing(planner, 3, exit_code=0, reason="Completed"), _at(401))),
        (500, "ADDED", processor_fixed),  # more memory
        (501, "MODIFIED", terminating(set_running(processor, 2, ready=False), _at(501))),
        (502, "MODIFIED", set_running(processor_fixed)),
        (503, "DELETED", terminating(set_running(processor, 2, ready=False), _at(501))),
        (1000, "MODIFIED", set_running(prefill, ready=False)),  # a node with a GPU joined after all
        (1060, "MODIFIED", set_running(prefill)),
    ]
    events.sort(key=lambda e: e[0])
    return _recorded(events, 91_000)


def slow_start() -> list[dict[str, Any]]:
    """A healthy graph that takes its time, which no diagnosis may take for a failure: its worker waits
    four minutes for a cluster autoscaler's GPU node (Unschedulable all the while), pulls a large image
    for three minutes (ContainerCreating), then loads its model for 70 s before its readiness probe
    passes; a record's last time-only line says ten more minutes passed with it Ready."""
    ns, graph = "dynamo", "slow"
    v = "nvidia.com/v1beta1"
    worker = worker_pod(ns, "slow-vllmworker-6d9f7c8b5-b7n3m", graph, "VllmWorker")
    waiting_for_node = (
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: "
        "3 No preemption victims found for incoming pod."
    )
    pulling = set_waiting(worker, "ContainerCreating", "")
    events: list[tuple[int, str, dict[str, Any]]] = [
        (0, "ADDED", dgd(graph, ns, api_version=v, realistic=True)),
        (0, "ADDED", dcd("slow-vllmworker", graph, "VllmWorker", ns, api_version=v, realistic=True)),
        (1, "ADDED", worker),
        (2, "MODIFIED", set_unschedulable(worker, _at(2), waiting_for_node)),
        (60, "MODIFIED", set_unschedulable(worker, _at(2), waiting_for_node)),
        (242, "MODIFIED", pulling),  # the autoscaler's node joined: bound, the image pulls
        (420, "MODIFIED", set_running(worker, ready=False)),  # pulled: the model loads
        (490, "MODIFIED", set_running(worker)),  # the readiness probe passes after 70 s
        (
            491,
            "MODIFIED",
            dcd(
                "slow-vllmworker",
                graph,
                "VllmWorker",
                ns,
                available="True",
                reason="DeploymentReady",
                message="Deployment is ready",
                api_version=v,
                realistic=True,
            ),
        ),
        (
            492,
            "MODIFIED",
            dgd(
                graph,
                ns,
                state="successful",
                reason="all_resources_are_ready",
                message="All resources are ready",
                api_version=v,
                realistic=True,
            ),
        ),
    ]
    out = _recorded(events, 64_000)
    # `crashwatch record` stopped ten minutes later: its last record says only what time it was
    out.append({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {}}, "time": _at(1100)})
    return out


def main(folder: Path = HERE) -> None:
    with open(folder / "rollout-recovers.jsonl", "w") as out:
        for event in rollout_recovers():
            out.write(json.dumps(event, separators=(",", ":")) + "\n")
    with open(folder / "two-failing-components.json", "w") as out:
        for event in two_failing_components():
            out.write(json.dumps(event, indent=4) + "\n")
    for name, events in (
        ("grove-crash-loop.jsonl", grove_crash_loop()),
        ("lws-recreation-loop.jsonl", lws_recreation_loop()),
        ("diagnoses.jsonl", diagnoses()),
        ("slow-start.jsonl", slow_start()),
    ):
        with open(folder / name, "w") as out:
            for event in events:
                out.write(json.dumps(event, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
