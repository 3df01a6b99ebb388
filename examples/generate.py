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
    ):
        with open(folder / name, "w") as out:
            for event in events:
                out.write(json.dumps(event, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
