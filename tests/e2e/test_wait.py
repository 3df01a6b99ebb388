"""`crashwatch wait` and `get` against the real control plane, with no watcher in the cluster and with one.

The test plays the Dynamo operator (it writes the DGD's status) and the kubelet (it walks Pods through a
crash loop); `wait` has only get/list/watch to go on.
"""

from __future__ import annotations

import json
import time
from typing import Any

import envtest
import pytest
from cli import run
from dynamo import OPERATOR_TIME, dgds, labelled_pod, make_graph
from kube import Kube, crash_loop, make_ready
from watcher import Watcher

pytestmark = pytest.mark.e2e


def waiter(kubeconfig: Any, namespace: str, *args: str) -> Watcher:
    return Watcher("wait", "-n", namespace, "--kubeconfig", str(kubeconfig), *args)


def exit_code(w: Watcher, timeout: float = 30) -> int:
    code = w.process.wait(timeout=timeout)
    time.sleep(0.2)  # let the pumps take the last lines
    return code


def operator_says(kube: Kube, namespace: str, state: str, reason: str, message: str, graph: str = "llm") -> None:
    """The Dynamo operator's verdict on the DGD, for its current generation."""
    generation = kube.get(f"{dgds(namespace)}/{graph}")["metadata"]["generation"]
    kube.merge_patch(
        f"{dgds(namespace)}/{graph}/status",
        {
            "status": {
                "state": state,
                "observedGeneration": generation,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if state == "successful" else "False",
                        "reason": reason,
                        "message": message,
                        "lastTransitionTime": OPERATOR_TIME,
                        "observedGeneration": generation,
                    }
                ],
            }
        },
    )


def progress(w: Watcher) -> list[str]:
    return [line for line in w.snapshot(w.err) if "llm:" in line]


def test_wait_exits_0_once_the_graph_is_successful_and_shows_its_progress(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, "llm-worker-0", "llm", "worker")
    with waiter(control_plane.kubeconfig, namespace, "dgd/llm") as w:
        w.wait_for(lambda: bool(progress(w)), what="the first progress line")
        assert w.process.poll() is None  # pending: still waiting
        make_ready(kube, namespace, "llm-worker-0")
        operator_says(kube, namespace, "successful", "all_resources_are_ready", "All resources are ready")
        assert exit_code(w) == 0
    assert w.stdout() == f"{namespace}/llm  READY  successful at generation 1"
    lines = progress(w)
    assert "pending" in lines[0] and "llm-worker: starting" in lines[0]
    assert "successful" in lines[-1]


def test_wait_exits_1_the_moment_a_component_crash_loops_naming_the_finding(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, "llm-worker-0", "llm", "worker")
    with waiter(control_plane.kubeconfig, namespace, "dgd/llm", "-o", "json") as w:
        w.wait_for(lambda: bool(progress(w)), what="the first progress line")
        crash_loop(kube, namespace, "llm-worker-0")
        assert exit_code(w) == 1
    result = json.loads(w.stdout())
    assert result["result"] == "failed"
    (graph,) = result["graphs"]
    assert (graph["name"], graph["verdict"], graph["reason"]) == ("llm", "failed", "component_crash_looping")
    (looping,) = graph["crash_looping"]
    assert looping == {
        "component": "worker",
        "pod": "llm-worker-0",
        "container": "main",
        "restarts": 2,
        "exit_code": 1,
        "message": "container main of Pod llm-worker-0 restarted 2 times and is down after exit code 1",
    }
    assert any("crash-looping: worker (restarts=2 exit=1)" in line for line in progress(w))


def test_wait_fails_at_once_on_a_crash_loop_present_at_start(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, "llm-worker-0", "llm", "worker")
    crash_loop(kube, namespace, "llm-worker-0", restarts=3, exit_code=137)
    result = run("wait", "dgd/llm", "-n", namespace, "--kubeconfig", str(control_plane.kubeconfig))
    assert result.returncode == 1, result.stderr
    assert result.stdout.decode().startswith(f"{namespace}/llm  FAILED  component_crash_looping: ")
    assert "restarted 3 times and is down after exit code 137" in result.stdout.decode()


def test_wait_fails_on_a_graph_the_operator_failed_for_another_reason(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    make_graph(kube, namespace, deployments=False)
    operator_says(kube, namespace, "failed", "reconcile_failed", "admission webhook denied the Deployment")
    result = run("wait", "dgd/llm", "-n", namespace, "--kubeconfig", str(control_plane.kubeconfig))
    assert result.returncode == 1, result.stderr
    assert result.stdout.decode() == (
        f"{namespace}/llm  FAILED  reconcile_failed: admission webhook denied the Deployment\n"
    )


def test_wait_for_a_graph_that_does_not_exist_exits_3(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    make_graph(kube, namespace, deployments=False)
    result = run("wait", "dgd/llm", "dgd/nope", "-n", namespace, "--kubeconfig", str(control_plane.kubeconfig))
    assert result.returncode == 3
    assert f"dgd/nope not found in namespace {namespace}" in result.stderr.decode()
    assert result.stdout.decode().splitlines()[-1] == f"{namespace}/nope  NOT-FOUND"


def test_wait_times_out_with_124_saying_what_it_still_waits_for(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    make_graph(kube, namespace, components=("worker", "frontend"), deployments=False)
    started = time.monotonic()
    # long enough for the first list to be in on a busy machine (the time counts from the start): 2 s was not
    result = run("wait", "dgd/llm", "-n", namespace, "--timeout", "10s", "--kubeconfig", str(control_plane.kubeconfig))
    took = time.monotonic() - started
    assert result.returncode == 124
    assert 10 <= took < 60
    assert result.stdout.decode() == (
        f"{namespace}/llm  STILL-WAITING  pending, components ready 0/2 "
        "(Resources not ready: llm-worker: starting; llm-frontend: starting)\n"
    )


def test_wait_reads_a_failure_a_running_watcher_wrote(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    """With `run` in the cluster, a waiter started later sees Stalled=True at once, as kstatus does."""
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, "llm-worker-0", "llm", "worker")
    with Watcher("run", "-n", namespace, "--kubeconfig", str(control_plane.kubeconfig)) as watcher:
        watcher.wait_synced()
        crash_loop(kube, namespace, "llm-worker-0")
        kube.wait_for(
            f"{dgds(namespace)}/llm",
            lambda obj: any(
                c["type"] == "Stalled" and c["status"] == "True" for c in obj["status"].get("conditions", [])
            ),
        )
        result = run("wait", "dgd/llm", "-n", namespace, "--kubeconfig", str(control_plane.kubeconfig))
        assert result.returncode == 1
        assert "component_crash_looping" in result.stdout.decode()
        # the fix: Ready, and the operator's verdict; the watcher clears Stalled, and wait says ready
        make_ready(kube, namespace, "llm-worker-0")
        kube.wait_for(
            f"{dgds(namespace)}/llm",
            lambda obj: any(
                c["type"] == "Stalled" and c["status"] == "False" for c in obj["status"].get("conditions", [])
            ),
        )
        operator_says(kube, namespace, "successful", "all_resources_are_ready", "All resources are ready")
        result = run("wait", "dgd/llm", "-n", namespace, "--kubeconfig", str(control_plane.kubeconfig))
        assert result.returncode == 0, result.stdout


def test_get_prints_a_table_of_graphs_with_their_crash_looping_components(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    make_graph(kube, namespace, deployments=False)
    make_graph(kube, namespace, graph="ok", deployments=False)
    operator_says(kube, namespace, "successful", "all_resources_are_ready", "All resources are ready", graph="ok")
    labelled_pod(kube, namespace, "llm-worker-0", "llm", "worker")
    crash_loop(kube, namespace, "llm-worker-0", restarts=4)
    args = ("-n", namespace, "--kubeconfig", str(control_plane.kubeconfig))
    result = run("get", *args)
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.decode().splitlines()]
    assert rows[0] == ["NAME", "STATE", "VERDICT", "READY", "CRASH-LOOPING"]
    assert rows[1] == ["llm", "pending", "crash-looping", "0/1", "worker", "(restarts=4", "exit=1)"]
    assert rows[2] == ["ok", "successful", "ready", "0/1", "<none>"]
    wide = run("get", "-o", "wide", *args).stdout.decode()
    assert "worker (pod=llm-worker-0 container=main restarts=4 exit=1)" in wide
    listed = json.loads(run("get", "dgd/llm", "-o", "json", *args).stdout)
    assert [item["name"] for item in listed["items"]] == ["llm"]
    missing = run("get", "dgd/nope", *args)
    assert missing.returncode == 3 and b"dgd/nope not found" in missing.stderr
