"""Writes the bundled example logs. Run from the repository root: python -m examples.generate

The logs are checked in; this script says how they were made and remakes them after a change to
`examples/realistic.py`. Their expected outputs (examples/*.expected.*) were read line by line against the
scenario below before they were checked in; tests/replay compares the CLI against them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from examples.realistic import (
    dcd,
    deployment,
    dgd,
    set_crashing,
    set_init_crashing,
    set_running,
    terminating,
    worker_pod,
)

HERE = Path(__file__).parent


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
    crash_dcd = dcd(ns, graph, "VllmWorker", "llm-vllmworker")
    crash_dgd = dgd(ns, graph, message="Resources not ready: llm-vllmworker: Deployment is not ready")

    def echo_failed(restarts: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """The DCD and DGD as the live watcher left them (recorded back from the API server)."""
        finding = (
            f"container main of Pod llm-vllmworker-6d9f7c8b5-x2x9k restarted {restarts} times "
            "and is down after exit code 1"
        )
        d = dcd(
            ns,
            graph,
            "VllmWorker",
            "llm-vllmworker",
            available="False",
            reason="ContainerCrashLooping",
            message=finding,
        )
        g = dgd(
            ns,
            graph,
            state="failed",
            reason="component_crash_looping",
            message=f"Components crash-looping: VllmWorker: {finding}",
        )
        return d, g

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
                ns,
                graph,
                "Frontend",
                "llm-frontend",
                available="True",
                reason="DeploymentReady",
                message="Deployment is ready",
            ),
        ),
        (0, "ADDED", crash_dcd),
        (0, "ADDED", deployment(ns, graph, "Frontend", "llm-frontend", available=True, template_hash="5c4b3a291")),
        (0, "ADDED", deployment(ns, graph, "VllmWorker", "llm-vllmworker")),
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
            deployment(ns, graph, "VllmWorker", "llm-vllmworker", generation=2, template_hash="7f8e9d0c1"),
        ),
        (131, "ADDED", new),
        (140, "MODIFIED", set_running(new, ready=False)),
        (208, "MODIFIED", set_crashing(old, 4, exit_code=1)),
        (221, "MODIFIED", set_running(new)),
        (
            222,
            "MODIFIED",
            deployment(
                ns, graph, "VllmWorker", "llm-vllmworker", generation=2, available=True, template_hash="7f8e9d0c1"
            ),
        ),
        (223, "MODIFIED", terminating(set_crashing(old, 4), _at(223))),
        (240, "DELETED", terminating(set_crashing(old, 4), _at(223))),
    ]
    return [{"type": kind, "object": obj, "time": _at(t)} for t, kind, obj in events]


def two_failing_components() -> list[dict[str, Any]]:
    """A disaggregated graph: prefill workers die of OOM, a decode worker's init container fails."""
    ns, graph = "inference", "disagg"
    v = "nvidia.com/v1beta1"
    prefill_a = worker_pod(ns, "disagg-prefillworker-58c7d9f4b-r2d2x", graph, "PrefillWorker", "58c7d9f4b")
    prefill_b = worker_pod(ns, "disagg-prefillworker-58c7d9f4b-a1b2c", graph, "PrefillWorker", "58c7d9f4b")
    decode = worker_pod(ns, "disagg-decodeworker-6b5a4c3d2-m9n8b", graph, "DecodeWorker", "6b5a4c3d2")
    front = worker_pod(ns, "disagg-frontend-7a6b5c4d3-z1y2x", graph, "Frontend", "7a6b5c4d3")
    events: list[tuple[str, dict[str, Any]]] = [
        ("ADDED", dgd(ns, graph, api_version=v)),
        ("ADDED", dcd(ns, graph, "DecodeWorker", "disagg-decodeworker-0f1e2d", api_version=v)),
        ("ADDED", dcd(ns, graph, "PrefillWorker", "disagg-prefillworker-3c4b5a", api_version=v)),
        (
            "ADDED",
            dcd(
                ns,
                graph,
                "Frontend",
                "disagg-frontend",
                available="True",
                reason="DeploymentReady",
                message="Deployment is ready",
                api_version=v,
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


def main() -> None:
    with open(HERE / "rollout-recovers.jsonl", "w") as out:
        for event in rollout_recovers():
            out.write(json.dumps(event, separators=(",", ":")) + "\n")
    with open(HERE / "two-failing-components.json", "w") as out:
        for event in two_failing_components():
            out.write(json.dumps(event, indent=4) + "\n")


if __name__ == "__main__":
    main()
