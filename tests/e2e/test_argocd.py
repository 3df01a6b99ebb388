"""The Argo CD health checks (k8s/argocd) on the DGD and DCD as `crashwatch run` leaves them on the real
API server: what an Argo CD Application would show for the graph while a component crash-loops, after the
fix, once the spec moves past the status, and when an older operator writes its own verdict back.

The checks run through the same Lua 5.1 sandbox as their unit tests (tests/argocd.py), on the objects
read back from the server, so a field the server drops, defaults or renders differently (numbers,
timestamps, list order) would show here and not in the hand-written testdata. The test plays the Dynamo
operator (status writes) and the kubelet (Pod statuses); the kube-controller-manager runs the Deployment.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import envtest
import pytest
from argocd import DCD, DGD, health
from dynamo import OPERATOR_TIME, conditions, dcds, dgds, make_graph, pods_of
from kube import Kube, crash_loop, eventually, make_ready
from watcher import Watcher

pytestmark = pytest.mark.e2e

GRAPH, COMPONENT = "llm", "worker"
NAME = f"{GRAPH}-{COMPONENT}"  # the DCD, its Deployment, and the Pods' selector


def read_dgd(kube: Kube, namespace: str) -> dict[str, Any]:
    obj: dict[str, Any] = kube.get(f"{dgds(namespace)}/{GRAPH}")
    return obj


def read_dcd(kube: Kube, namespace: str) -> dict[str, Any]:
    obj: dict[str, Any] = kube.get(f"{dcds(namespace)}/{NAME}")
    return obj


def verdicts(kube: Kube, namespace: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """What Argo CD says of the DGD and of the DCD, as the API server has them now."""
    return health(DGD, read_dgd(kube, namespace)), health(DCD, read_dcd(kube, namespace))


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return conditions(obj).get(kind, {})


def wait(predicate: Any, timeout: float = 30, what: str = "a condition") -> None:
    eventually(predicate, timeout, what)


def both_stalled(kube: Kube, namespace: str, status: str) -> bool:
    dgd, dcd = read_dgd(kube, namespace), read_dcd(kube, namespace)
    return condition(dgd, "Stalled").get("status") == status and condition(dcd, "Stalled").get("status") == status


def replace(obj: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """The object's conditions with `new` in place of its namesake: what an operator that reads, changes and
    writes back its status sends (it keeps conditions it does not know, as a []metav1.Condition does)."""
    return [new if c["type"] == new["type"] else c for c in obj["status"]["conditions"]]


def operator_condition(kind: str, status: str, reason: str, message: str, generation: int) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": OPERATOR_TIME,
        "observedGeneration": generation,
    }


def operator_writes_dgd(kube: Kube, namespace: str, state: str, reason: str, message: str) -> dict[str, Any]:
    """The operator's verdict on the DGD for its current generation; the patched object, as the server has it."""
    dgd = read_dgd(kube, namespace)
    generation = dgd["metadata"]["generation"]
    ready = operator_condition("Ready", "True" if state == "successful" else "False", reason, message, generation)
    patched: dict[str, Any] = kube.merge_patch(
        f"{dgds(namespace)}/{GRAPH}/status",
        {"status": {"state": state, "observedGeneration": generation, "conditions": replace(dgd, ready)}},
    )
    return patched


def operator_writes_dcd(kube: Kube, namespace: str, status: str, reason: str, message: str) -> dict[str, Any]:
    dcd = read_dcd(kube, namespace)
    available = operator_condition("Available", status, reason, message, dcd["metadata"]["generation"])
    patched: dict[str, Any] = kube.merge_patch(
        f"{dcds(namespace)}/{NAME}/status", {"status": {"conditions": replace(dcd, available)}}
    )
    return patched


@contextmanager
def crash_looping(control_plane: envtest.ControlPlane, kube: Kube, namespace: str) -> Iterator[tuple[Watcher, str]]:
    """A one-component graph with its Deployment, `crashwatch run` watching it, and the Deployment's Pod
    in a crash loop that crashwatch has marked on the DCD and the DGD. Yields the watcher and the Pod."""
    with Watcher("run", "-n", namespace, "--kubeconfig", str(control_plane.kubeconfig)) as watcher:
        watcher.wait_synced()
        make_graph(kube, namespace, graph=GRAPH, components=(COMPONENT,))
        wait(lambda: len(pods_of(kube, namespace, NAME)) == 1, 60, "the Deployment's Pod")
        pod = pods_of(kube, namespace, NAME)[0]["metadata"]["name"]
        # the graph starting: the operator's own words, before crashwatch has anything to say
        assert verdicts(kube, namespace) == (
            ("Progressing", f"Resources not ready: {NAME}: starting"),
            ("Progressing", "Deployment is not ready"),
        )
        crash_loop(kube, namespace, pod)  # restartCount 1, then 2: CrashLoopBackOff after exit 1
        wait(
            lambda: both_stalled(kube, namespace, "True") and read_dgd(kube, namespace)["status"]["state"] == "failed",
            15,
            "crashwatch marking the crash loop",
        )
        yield watcher, pod


def finding(pod: str) -> str:
    return f"container main of Pod {pod} restarted 2 times and is down after exit code 1"


def recover(kube: Kube, namespace: str, pod: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """The fix: the Pod becomes Ready, crashwatch clears its marks in the operator's words, and the operator
    (which runs on) says Available and successful at the current generation where crashwatch did not.
    Returns the verdicts in between: on the status crashwatch left when it cleared."""
    make_ready(kube, namespace, pod)
    wait(
        lambda: (
            both_stalled(kube, namespace, "False")
            and condition(read_dgd(kube, namespace), "Ready")["reason"] != "component_crash_looping"
            and condition(read_dcd(kube, namespace), "Available")["reason"] != "ContainerCrashLooping"
        ),
        15,
        "crashwatch clearing the crash loop",
    )
    cleared = verdicts(kube, namespace)
    kube.wait_for(
        f"/apis/apps/v1/namespaces/{namespace}/deployments/{NAME}",
        lambda d: d.get("status", {}).get("availableReplicas") == 1,
        60,
    )
    if condition(read_dcd(kube, namespace), "Available")["status"] != "True":
        operator_writes_dcd(kube, namespace, "True", "DeploymentReady", "Deployment is ready")
    if read_dgd(kube, namespace)["status"]["state"] != "successful":
        operator_writes_dgd(kube, namespace, "successful", "all_resources_are_ready", "All resources are ready")
    return cleared


def test_a_crash_loop_crashwatch_marked_turns_both_degraded_naming_the_component_and_its_finding(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    with crash_looping(control_plane, kube, namespace) as (_, pod):
        (dgd_status, dgd_message), dcd_verdict = verdicts(kube, namespace)
    assert dcd_verdict == ("Degraded", finding(pod))
    assert (dgd_status, dgd_message) == ("Degraded", f"Components crash-looping: {COMPONENT}: {finding(pod)}")
    # the Stalled condition carries it (Ready says the same): kstatus and Argo CD read one message
    dgd, dcd = read_dgd(kube, namespace), read_dcd(kube, namespace)
    assert (dgd["status"]["state"], condition(dgd, "Ready")["reason"]) == ("failed", "component_crash_looping")
    assert condition(dcd, "Available")["reason"] == condition(dcd, "Stalled")["reason"] == "ContainerCrashLooping"
    assert condition(dgd, "Stalled")["reason"] == "ComponentCrashLooping"
    assert condition(dgd, "Stalled")["message"] == condition(dgd, "Ready")["message"] == dgd_message


def test_the_recovered_graph_is_healthy(control_plane: envtest.ControlPlane, kube: Kube, namespace: str) -> None:
    with crash_looping(control_plane, kube, namespace) as (_, pod):
        cleared = recover(kube, namespace, pod)
        time.sleep(1)  # crashwatch has nothing more to say: the verdict holds
        assert verdicts(kube, namespace) == (
            ("Healthy", "All resources are ready"),
            ("Healthy", "Deployment is ready"),
        )
    # In between, on crashwatch's clearing alone: no longer Degraded, and Healthy only if the Deployment was
    # already available when the crash loop cleared (the kube-controller-manager usually lags the Pod).
    assert cleared in (
        (
            ("Progressing", f"Resources not ready: {NAME}: Deployment is not ready"),
            ("Progressing", "Deployment is not ready"),
        ),
        (("Healthy", "All resources are ready"), ("Healthy", "Deployment is ready")),
    )
    dgd, dcd = read_dgd(kube, namespace), read_dcd(kube, namespace)
    for obj, message in ((dgd, "no component is crash-looping"), (dcd, "no container is crash-looping")):
        stalled = condition(obj, "Stalled")
        assert (stalled["status"], stalled["reason"], stalled["message"]) == ("False", "NoCrashLoop", message)


def test_a_spec_ahead_of_the_status_is_progressing_and_says_the_status_is_behind(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    with crash_looping(control_plane, kube, namespace) as (watcher, pod):
        recover(kube, namespace, pod)
        # a new spec (both kinds keep unknown spec fields): generation 2, no operator has caught up yet
        bumped = kube.merge_patch(f"{dgds(namespace)}/{GRAPH}", {"spec": {"services": {"Worker": {"replicas": 2}}}})
        assert bumped["metadata"]["generation"] == 2
        bumped = kube.merge_patch(f"{dcds(namespace)}/{NAME}", {"spec": {"replicas": 2}})
        assert bumped["metadata"]["generation"] == 2
        writes = len(watcher.writes())
        time.sleep(1)
        assert len(watcher.writes()) == writes  # a spec change is the operator's to answer, not crashwatch's
        behind = "Waiting for the operator: status is for generation 1, the spec is at generation 2"
        assert verdicts(kube, namespace) == (("Progressing", behind), ("Progressing", behind))
        # the operator catches up: healthy again
        operator_writes_dcd(kube, namespace, "True", "DeploymentReady", "Deployment is ready")
        operator_writes_dgd(kube, namespace, "successful", "all_resources_are_ready", "All resources are ready")
        assert verdicts(kube, namespace) == (
            ("Healthy", "All resources are ready"),
            ("Healthy", "Deployment is ready"),
        )


def test_an_older_operator_writing_pending_back_leaves_the_graph_degraded_while_the_loop_holds(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    """An operator without the upstream change knows nothing of crash loops: on its next reconcile it
    writes its own verdict back (pending, Deployment not ready). Stalled=True, which it keeps as it keeps
    any condition it does not know, still says the graph has failed, between its write and crashwatch's."""
    with crash_looping(control_plane, kube, namespace) as (_, pod):
        degraded = ("Degraded", f"Components crash-looping: {COMPONENT}: {finding(pod)}")
        # the very object the operator's write left, before crashwatch can reassert anything
        dgd = operator_writes_dgd(
            kube,
            namespace,
            "pending",
            "some_resources_are_not_ready",
            f"Resources not ready: {NAME}: Deployment is not ready",
        )
        assert dgd["status"]["state"] == "pending"
        assert condition(dgd, "Ready")["reason"] == "some_resources_are_not_ready"
        assert condition(dgd, "Stalled")["status"] == "True"
        assert health(DGD, dgd) == degraded
        dcd = operator_writes_dcd(kube, namespace, "False", "DeploymentNotReady", "Deployment is not ready")
        assert condition(dcd, "Available")["reason"] == "DeploymentNotReady"
        assert health(DCD, dcd) == ("Degraded", finding(pod))
        # crashwatch puts its verdict back; Argo CD's stays the same throughout
        wait(
            lambda: (
                read_dgd(kube, namespace)["status"]["state"] == "failed"
                and condition(read_dcd(kube, namespace), "Available")["reason"] == "ContainerCrashLooping"
            ),
            15,
            "crashwatch reasserting",
        )
        assert verdicts(kube, namespace) == (degraded, ("Degraded", finding(pod)))
