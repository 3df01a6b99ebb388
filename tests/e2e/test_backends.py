"""The three workload backends on the real API server, with `crashwatch run` watching.

The test plays the backends' controllers (Grove, LeaderWorkerSet, the ReplicaSet controller is the real
one), the Dynamo operator (it writes the DGD's and DCD's statuses as the operator would) and the kubelet
(it writes Pod statuses). Each test records every version of the DGD from a watch of its own, so what
crashwatch wrote between two polls is seen too. Times printed are from the answer to the write that
decides to the status read back, polling every 20 ms.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import json
import re
import socket
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import envtest
import pytest
from dynamo import COMPONENT, GRAPH, OPERATOR_TIME, SELECTOR, V, dcds, deployment, dgds, other_condition
from kube import (
    ApiError,
    Kube,
    crash_loop,
    crash_status,
    eventually,
    make_ready,
    pod_manifest,
    ready_status,
    set_pod_status,
)
from watcher import Watcher, http_get

pytestmark = pytest.mark.e2e

POLL = 0.02  # seconds between two reads of a status being timed
LWS = "leaderworkerset.sigs.k8s.io"
DS = "disaggregatedset.x-k8s.io"


# --- reading what happened -----------------------------------------------------------------------------


class History:
    """Every version of the objects of one collection, from a watch of its own (so a status that lasted
    less than a poll is seen too), in the order the API server sent them."""

    def __init__(self, kube: Kube, collection: str) -> None:
        self.versions: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        deadline = time.monotonic() + 30
        while True:
            self._connection = http.client.HTTPSConnection(kube.host, kube.port, context=kube.context, timeout=600)
            self._connection.request("GET", f"{collection}?watch=1&resourceVersion=0&timeoutSeconds=600")
            self._response = self._connection.getresponse()
            if self._response.status == 200:
                break
            body = self._response.read()
            self._connection.close()
            # a new CRD's watch cache may still be filling: 429, "storage is (re)initializing"
            assert self._response.status == 429 and time.monotonic() < deadline, body
            time.sleep(float(self._response.getheader("Retry-After") or 1))
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for line in self._response:
                event = json.loads(line)
                if event["type"] in ("ADDED", "MODIFIED"):
                    with self._lock:
                        self.versions.append(event["object"])
        except (OSError, ValueError, http.client.HTTPException):
            pass  # closed by stop()

    def of(self, name: str) -> list[dict[str, Any]]:
        with self._lock:
            return [v for v in self.versions if v["metadata"]["name"] == name]

    def stop(self) -> None:
        sock = self._connection.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(5)
        self._response.close()
        self._connection.close()

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}


def verdict(obj: dict[str, Any], condition: str = "Ready") -> tuple[str, str, str, str]:
    """(state, the condition's status, reason, message) of a DGD (state "" for a DCD)."""
    found = conditions(obj).get(condition, {})
    return (
        obj.get("status", {}).get("state", ""),
        found.get("status", ""),
        found.get("reason", ""),
        found.get("message", ""),
    )


def stalled(obj: dict[str, Any]) -> tuple[str, str, str] | None:
    found = conditions(obj).get("Stalled")
    return (found["status"], found["reason"], found["message"]) if found else None


def steps(versions: list[dict[str, Any]], condition: str = "Ready") -> list[tuple[str, str, str, str]]:
    """The verdicts an object went through, a repeated one (another field changed) once."""
    out: list[tuple[str, str, str, str]] = []
    for version in versions:
        if "status" not in version:
            continue  # created, before the operator's first status write
        step = verdict(version, condition)
        if not out or out[-1] != step:
            out.append(step)
    return out


def timed(predicate: Callable[[], bool], timeout: float = 10, what: str = "a condition") -> float:
    """Seconds until the predicate holds, reading every POLL seconds."""
    return eventually(predicate, timeout, what, POLL)


def wait(predicate: Callable[[], bool], timeout: float = 30, what: str = "a condition") -> None:
    timed(predicate, timeout, what)


def watch(control_plane: envtest.ControlPlane, namespace: str) -> Watcher:
    return Watcher(
        "run", "-n", namespace, "-o", "json", "--kubeconfig", str(control_plane.kubeconfig),
        "--http-address", "127.0.0.1:0",
    )  # fmt: skip


def started(w: Watcher) -> str:
    """Wait until the watcher has listed everything; its metrics URL."""
    w.wait_synced()
    assert "not watching LeaderWorkerSets" not in w.stderr()
    return w.served_at()


def events_seen(url: str, resource: str) -> int:
    """How many watch events of `resource` (a plural) the watcher has handed to its pipeline."""
    status, body = http_get(f"{url}/metrics")
    assert status == 200
    found = re.search(rf'^crashwatch_watch_events_total\{{[^}}]*resource="{resource}"[^}}]*\}} (\S+)$', body, re.M)
    return int(float(found.group(1))) if found else 0


def settled(url: str, resource: str, before: int, count: int = 1) -> None:
    """The positive signal that the watcher has had its say on a change: it has received the `count`
    events the change made (then a moment for its writes, which take milliseconds, to be sent)."""
    wait(lambda: events_seen(url, resource) >= before + count, 10, f"{count} more {resource} events")
    time.sleep(0.5)


def json_lines(w: Watcher) -> list[dict[str, Any]]:
    return [json.loads(line) for line in w.snapshot(w.out)]


def writes_to(w: Watcher, kind: str) -> list[str]:
    return [line for line in w.writes() if f" {kind} " in line]


# --- playing the Dynamo operator -----------------------------------------------------------------------


def ready_condition(reason: str, message: str, status: str = "False") -> dict[str, Any]:
    return {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": OPERATOR_TIME,
        "observedGeneration": 1,
    }


def replicas(kind: str, desired: int, updated: int, ready: int, names: list[str]) -> dict[str, Any]:
    return {
        "componentKind": kind,
        "componentNames": names,
        "replicas": desired,
        "updatedReplicas": updated,
        "readyReplicas": ready,
    }


def make_dgd(kube: Kube, namespace: str, status: dict[str, Any], graph: str = "llm") -> None:
    kube.create(dgds(namespace), {"apiVersion": V, "kind": "DynamoGraphDeployment", "metadata": {"name": graph}})
    operator_writes(kube, namespace, graph, {"observedGeneration": 1, **status})


def operator_writes(kube: Kube, namespace: str, graph: str, status: dict[str, Any]) -> Any:
    """The operator's status write on the DGD (a merge patch of the fields it sets)."""
    return kube.merge_patch(f"{dgds(namespace)}/{graph}/status", {"status": status})


def get_dgd(kube: Kube, namespace: str, graph: str = "llm") -> dict[str, Any]:
    return kube.get(f"{dgds(namespace)}/{graph}")  # type: ignore[no-any-return]


def get_dcd(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return kube.get(f"{dcds(namespace)}/{name}")  # type: ignore[no-any-return]


def dgd_failed(obj: dict[str, Any]) -> bool:
    state, _, reason, _ = verdict(obj)
    return state == "failed" and reason == "component_crash_looping" and (stalled(obj) or ("",))[0] == "True"


def dcd_looping(obj: dict[str, Any]) -> bool:
    _, status, reason, _ = verdict(obj, "Available")
    return status == "False" and reason == "ContainerCrashLooping" and (stalled(obj) or ("",))[0] == "True"


# --- 1. Grove: no DCDs, the operator reports the PodCliques through status.components ------------------


def grove_pod(kube: Kube, namespace: str, graph: str, component: str, suffix: str, index: int) -> str:
    """A Pod as Grove makes it for the PodCliqueSet `graph`, replica 0: no Deployment, no DCD."""
    clique = f"{graph}-0-{component}"
    labels = {
        GRAPH: graph,
        COMPONENT: component,
        SELECTOR: f"{graph}-{component}",
        "nvidia.com/dynamo-namespace": f"{namespace}-{graph}",
        "app.kubernetes.io/managed-by": "grove-operator",
        "app.kubernetes.io/part-of": graph,
        "grove.io/podclique": clique,
        "grove.io/podcliqueset-replica-index": "0",
        "grove.io/podclique-pod-index": str(index),
        "grove.io/podgang": f"{graph}-0",
        "grove.io/podtemplate-hash": "5d8f9c7b6",
    }
    name = f"{clique}-{suffix}"
    kube.create(f"/api/v1/namespaces/{namespace}/pods", pod_manifest(name, labels))
    return name


def grove_components(decode: tuple[int, int, int]) -> dict[str, Any]:
    return {
        "frontend": replicas("PodClique", 1, 1, 1, ["llm-0-frontend"]),
        "decode": replicas("PodClique", *decode, ["llm-0-decode"]),
    }


def test_a_grove_graph_fails_within_a_second_stays_failed_through_an_update_and_clears_in_the_operators_words(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    with History(kube, dgds(namespace)) as history:
        make_dgd(
            kube,
            namespace,
            {
                "state": "pending",
                "conditions": [
                    ready_condition("pods_not_ready", "Resources not ready: decode: scheduled but ready=1/2")
                ],
                "components": grove_components((2, 2, 1)),
            },
        )
        frontend = grove_pod(kube, namespace, "llm", "frontend", "x7k2p", 0)
        healthy = grove_pod(kube, namespace, "llm", "decode", "b4m9q", 0)
        crashing = grove_pod(kube, namespace, "llm", "decode", "r2t8w", 1)
        for name in (frontend, healthy):
            make_ready(kube, namespace, name)
        with watch(control_plane, namespace) as w:
            url = started(w)
            assert w.writes() == []  # pending is the operator's to say
            crash_loop(kube, namespace, crashing)  # restartCount 1, then 2: the write that completes the loop
            took = timed(lambda: dgd_failed(get_dgd(kube, namespace)), 5, "the DGD failed")
            print(f"\ngrove: DGD failed {took * 1000:.0f} ms after the Pod write that completed the crash loop")
            assert took < 1.0
            dgd = get_dgd(kube, namespace)
            finding = f"container main of Pod {crashing} restarted 2 times and is down after exit code 1"
            message = f"Components crash-looping: decode: {finding}"
            assert verdict(dgd) == ("failed", "False", "component_crash_looping", message)
            assert stalled(dgd) == ("True", "ComponentCrashLooping", message)
            assert dgd["status"]["components"] == grove_components((2, 2, 1))  # the operator's, untouched
            assert [c["type"] for c in dgd["status"]["conditions"]] == ["Ready", "Stalled"]

            # a rolling update starts: the operator says so, and Grove replaces the Pods one by one
            before = events_seen(url, "dynamographdeployments")
            rolling = {"phase": "InProgress", "startTime": OPERATOR_TIME, "updatedComponents": ["frontend"]}
            operator_writes(
                kube, namespace, "llm", {"rollingUpdate": rolling, "components": grove_components((2, 1, 1))}
            )
            settled(url, "dynamographdeployments", before)
            assert dgd_failed(get_dgd(kube, namespace))  # still failed: an update does not excuse a crash loop
            set_pod_status(kube, namespace, crashing, crash_status(3))
            follows = f"Components crash-looping: decode: container main of Pod {crashing} restarted 3 times"
            took = timed(lambda: verdict(get_dgd(kube, namespace))[3].startswith(follows), 5, "restarts=3")
            print(f"grove: the DGD's message followed restartCount 3 after {took * 1000:.0f} ms (rolling update)")
            dgd = get_dgd(kube, namespace)
            assert dgd_failed(dgd) and dgd["status"]["rollingUpdate"] == rolling

            # the fix: the Pod comes up. Grove still counts 1 of 2 ready, and crashwatch says so in the
            # operator's words
            make_ready(kube, namespace, crashing)
            took = timed(lambda: verdict(get_dgd(kube, namespace))[0] == "pending", 5, "the DGD cleared")
            print(f"grove: the DGD cleared {took * 1000:.0f} ms after the Pod became Ready")
            dgd = get_dgd(kube, namespace)
            assert verdict(dgd) == (
                "pending",
                "False",
                "pods_not_ready",
                "Resources not ready: decode: scheduled but ready=1/2",
            )
            assert stalled(dgd) == ("False", "NoCrashLoop", "no component is crash-looping")
            assert dgd["status"]["rollingUpdate"] == rolling
            cleared = dgd

            # Grove reports every Pod ready and updated. The state is no longer crashwatch's failure, so it
            # writes nothing: saying `successful` is the operator's job
            before = events_seen(url, "dynamographdeployments")
            operator_writes(
                kube,
                namespace,
                "llm",
                {"rollingUpdate": {**rolling, "phase": "Completed"}, "components": grove_components((2, 2, 2))},
            )
            settled(url, "dynamographdeployments", before)
            dgd = get_dgd(kube, namespace)
            assert verdict(dgd) == verdict(cleared) and dgd["status"]["conditions"] == cleared["status"]["conditions"]
            before = events_seen(url, "dynamographdeployments")
            operator_writes(
                kube,
                namespace,
                "llm",
                {
                    "state": "successful",
                    "conditions": [
                        ready_condition("all_resources_are_ready", "All resources are ready", "True"),
                        conditions(dgd)["Stalled"],
                    ],
                },
            )
            settled(url, "dynamographdeployments", before)
            dgd = get_dgd(kube, namespace)
            assert verdict(dgd) == ("successful", "True", "all_resources_are_ready", "All resources are ready")
            assert stalled(dgd) == ("False", "NoCrashLoop", "no component is crash-looping")
            writes = w.writes()
            lines = json_lines(w)
        versions = history.of("llm")
    # three writes, all on the DGD (a Grove graph has no DCD): failed, the count followed, cleared
    assert len(writes) == 3 and writes == writes_to(w, "DynamoGraphDeployment"), writes
    assert [s[:3] for s in steps(versions)] == [
        ("pending", "False", "pods_not_ready"),  # the operator
        ("failed", "False", "component_crash_looping"),  # crashwatch: restarts=2
        ("failed", "False", "component_crash_looping"),  # crashwatch: restarts=3
        ("pending", "False", "pods_not_ready"),  # crashwatch clears, in the operator's words
        ("successful", "True", "all_resources_are_ready"),  # the operator
    ]
    assert not any("no components observed" in json.dumps(v.get("status")) for v in versions)
    summary = [(line["kind"], line.get("crash_looping", line.get("failed")), line.get("restarts")) for line in lines]
    assert summary == [
        ("component", True, 2),
        ("graph", True, None),
        ("component", True, 3),
        ("graph", True, None),
        ("component", False, None),
        ("graph", False, None),
    ]
    assert {line.get("dcd") for line in lines if line["kind"] == "component"} == {None}


# --- 2. LeaderWorkerSet: a DCD, an LWS per replica, groups recreated on a container restart ----------------


class LwsGroup:
    """Plays LeaderWorkerSet for group 0 of `<dcd>-0` (size 2) under RecreateGroupOnPodRestart: the first
    restart of a container of the group makes it delete the leader and the worker and create them anew,
    with the same names and new uids."""

    def __init__(self, kube: Kube, namespace: str, dcd: str, graph: str = "llm", component: str = "worker") -> None:
        self.kube, self.namespace, self.graph, self.component = kube, namespace, graph, component
        self.lws = f"{dcd}-0"
        self.leader, self.worker = f"{self.lws}-0", f"{self.lws}-0-1"
        self.uids: list[str] = []
        kube.create(
            f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{namespace}/leaderworkersets",
            {
                "apiVersion": "leaderworkerset.x-k8s.io/v1",
                "kind": "LeaderWorkerSet",
                "metadata": {"name": self.lws, "labels": {GRAPH: graph, COMPONENT: component}},
                "spec": {
                    "replicas": 1,
                    "startupPolicy": "LeaderCreated",
                    "leaderWorkerTemplate": {"size": 2, "restartPolicy": "RecreateGroupOnPodRestart"},
                },
            },
        )

    def labels(self, worker: int) -> dict[str, str]:
        return {
            GRAPH: self.graph,
            COMPONENT: self.component,
            "role": "leader" if worker == 0 else "worker",
            f"{LWS}/name": self.lws,
            f"{LWS}/group-index": "0",
            f"{LWS}/worker-index": str(worker),
            f"{LWS}/group-key": "0a7f3c9e1b2d4f6a8c0e2b4d6f8a0c2e4b6d8f0a",
            f"{LWS}/template-revision-hash": "6b9c8d7f5",
        }

    def pods(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods"

    def create_leader(self) -> None:
        self.uids.append(self.kube.create(self.pods(), pod_manifest(self.leader, self.labels(0)))["metadata"]["uid"])

    def create_worker(self) -> None:
        self.kube.create(self.pods(), pod_manifest(self.worker, self.labels(1)))

    def create(self) -> None:
        self.create_leader()
        self.create_worker()

    def worker_restarts_after_exit_1(self) -> None:
        """The kubelet: the worker's container exited 1 and was restarted once."""
        status = ready_status(restarts=1)
        status["conditions"][0]["status"] = "False"
        container = status["containerStatuses"][0]
        container["ready"] = False
        container["lastState"] = {
            "terminated": {"exitCode": 1, "reason": "Error", "startedAt": OPERATOR_TIME, "finishedAt": OPERATOR_TIME}
        }
        set_pod_status(self.kube, self.namespace, self.worker, status)

    def delete(self) -> None:
        for name in (self.leader, self.worker):  # the leader first; the worker goes with it
            self.kube.delete(f"{self.pods()}/{name}", grace=0)
        for name in (self.leader, self.worker):
            wait(functools.partial(self._gone, name), 10, f"{name} deleted")

    def _gone(self, name: str) -> bool:
        try:
            self.kube.get(f"{self.pods()}/{name}")
        except ApiError as exc:
            return exc.status == 404
        return False

    def fail_and_delete(self) -> None:
        """One turn of the loop, up to LWS's deleting the group: the recreation is the next create."""
        self.worker_restarts_after_exit_1()
        self.delete()

    def ready(self) -> None:
        for name in (self.leader, self.worker):
            make_ready(self.kube, self.namespace, name)


def make_lws_graph(kube: Kube, namespace: str) -> LwsGroup:
    """A DGD with one LeaderWorkerSet-backed component, its DCD, and the LWS `llm-worker-0`, as the
    operator leaves them before the group's Pods are up."""
    make_dgd(
        kube,
        namespace,
        {
            "state": "pending",
            "conditions": [
                ready_condition(
                    "some_resources_are_not_ready",
                    "Resources not ready: llm-worker: Some LeaderWorkerSets are not ready",
                )
            ],
            "components": {"worker": replicas("LeaderWorkerSet", 1, 1, 0, ["llm-worker-0"])},
        },
    )
    kube.create(
        dcds(namespace),
        {
            "apiVersion": V,
            "kind": "DynamoComponentDeployment",
            "metadata": {"name": "llm-worker", "labels": {GRAPH: "llm", COMPONENT: "worker"}},
            "spec": {"multinode": {"nodeCount": 2}},
        },
    )
    available = {
        "type": "Available",
        "status": "False",
        "reason": "SomeLeaderWorkerSetsNotReady",
        "message": "Some LeaderWorkerSets are not ready",
        "lastTransitionTime": OPERATOR_TIME,
        "observedGeneration": 1,
    }
    kube.merge_patch(f"{dcds(namespace)}/llm-worker/status", {"status": {"conditions": [available, other_condition()]}})
    return LwsGroup(kube, namespace, "llm-worker")


LOOP = (
    "LeaderWorkerSet llm-worker-0 group 0 is recreation-looping: recreated 2 times, each after a failure "
    "(last: container main of Pod llm-worker-0-0-1 exited with code 1)"
)


def looping(kube: Kube, namespace: str) -> bool:
    return dcd_looping(get_dcd(kube, namespace, "llm-worker")) and dgd_failed(get_dgd(kube, namespace))


def loop_twice(group: LwsGroup, kube: Kube, namespace: str, url: str, w: Watcher) -> float:
    """Incarnations 1 and 2 fail and are recreated; the second recreation's leader decides. Its time."""
    group.create()
    before = events_seen(url, "pods")
    group.fail_and_delete()
    group.create()  # recreated once after a failure: LWS doing its job, not yet a loop
    settled(url, "pods", before, 5)  # the worker's failure, two deletes, two creates
    assert w.writes() == [] and json_lines(w) == []
    group.fail_and_delete()
    group.create_leader()  # the second recreation after a failure: the deciding event
    took = timed(lambda: looping(kube, namespace), 5, "the DCD and the DGD failed")
    group.create_worker()
    return took


def test_a_leaderworkerset_group_recreated_after_each_failure_fails_the_dcd_and_the_graph_and_recovers(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    with History(kube, dgds(namespace)) as history:
        group = make_lws_graph(kube, namespace)
        with watch(control_plane, namespace) as w:
            url = started(w)
            took = loop_twice(group, kube, namespace, url, w)
            print(f"\nlws: the DCD and the DGD failed {took * 1000:.0f} ms after the new leader's create")
            assert took < 1.0
            assert len(set(group.uids)) == 3  # three incarnations of the leader, each its own uid
            dcd = get_dcd(kube, namespace, "llm-worker")
            assert verdict(dcd, "Available") == ("", "False", "ContainerCrashLooping", LOOP)
            assert stalled(dcd) == ("True", "ContainerCrashLooping", LOOP)
            assert conditions(dcd)["DynamoComponentReady"] == other_condition()  # the operator's, untouched
            dgd = get_dgd(kube, namespace)
            assert verdict(dgd) == (
                "failed",
                "False",
                "component_crash_looping",
                f"Components crash-looping: worker: {LOOP}",
            )
            assert stalled(dgd) == ("True", "ComponentCrashLooping", f"Components crash-looping: worker: {LOOP}")
            w.wait_line('"kind":"graph"')
            (component, graph) = json_lines(w)
            assert {k: component[k] for k in ("component", "dcd", "crash_looping", "lws", "group", "recreations")} == {
                "component": "worker",
                "dcd": "llm-worker",
                "crash_looping": True,
                "lws": "llm-worker-0",
                "group": "0",
                "recreations": 2,
            }
            assert (component["pod"], component["container"], component["exit_code"]) == ("llm-worker-0-0-1", "main", 1)
            assert (graph["failed"], graph["components"]) == (True, ["worker"])

            # the fix: the group's third incarnation comes up, leader and worker Ready
            make_ready(kube, namespace, group.leader)
            before = events_seen(url, "pods")
            make_ready(kube, namespace, group.worker)
            took = timed(lambda: not dcd_looping(get_dcd(kube, namespace, "llm-worker")), 5, "the DCD cleared")
            wait(lambda: verdict(get_dgd(kube, namespace))[0] == "successful", 5, "the DGD cleared")
            print(f"lws: cleared {took * 1000:.0f} ms after the group's last Pod became Ready")
            settled(url, "pods", before)
            dcd, dgd = get_dcd(kube, namespace, "llm-worker"), get_dgd(kube, namespace)
            writes = w.writes()
            lines = json_lines(w)
        versions = history.of("llm")
    # the DCD runs a LeaderWorkerSet: cleared in the operator's words for one, its group all Ready
    assert verdict(dcd, "Available") == ("", "True", "LeaderWorkerSetReady", "LeaderWorkerSet is ready")
    assert stalled(dcd) == ("False", "NoCrashLoop", "no container is crash-looping")
    assert conditions(dcd)["DynamoComponentReady"] == other_condition()
    assert verdict(dgd) == ("successful", "True", "all_resources_are_ready", "All resources are ready")
    assert stalled(dgd) == ("False", "NoCrashLoop", "no component is crash-looping")
    assert len(writes) == 4, writes  # failed, then cleared, each on the DCD and the DGD
    assert [line.get("crash_looping", line.get("failed")) for line in lines] == [True, True, False, False]
    assert [s[:3] for s in steps(versions)] == [
        ("pending", "False", "some_resources_are_not_ready"),
        ("failed", "False", "component_crash_looping"),
        ("successful", "True", "all_resources_are_ready"),  # its one DCD available again
    ]


def test_a_restarted_watcher_holds_a_group_loop_without_a_write_and_clears_it_when_the_group_is_ready(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    group = make_lws_graph(kube, namespace)
    with watch(control_plane, namespace) as first:
        url = started(first)
        loop_twice(group, kube, namespace, url, first)
        wait(lambda: len(first.writes()) == 2, 5, "two writes")
    assert first.process.returncode == 0  # SIGTERM: a clean stop
    reported = (get_dcd(kube, namespace, "llm-worker"), get_dgd(kube, namespace))
    assert verdict(reported[0], "Available")[3] == LOOP

    with watch(control_plane, namespace) as second:
        url = started(second)
        # it has lost the history, but the DCD says what it found: held, in the same words
        second.wait_line('"kind":"graph"')
        (component, graph) = json_lines(second)
        assert (component["crash_looping"], component["message"]) == (True, LOOP)
        assert (graph["failed"], graph["message"]) == (True, f"Components crash-looping: worker: {LOOP}")
        assert second.writes() == []
        # the loop goes on: one recreation more is not a loop to the new history, and must not flap
        before = events_seen(url, "pods")
        group.fail_and_delete()
        group.create()
        settled(url, "pods", before, 5)  # the worker's failure, two deletes, two creates
        assert second.writes() == []
        assert json_lines(second) == [component, graph]
        # and a second one makes the same finding from its own history: the same words, so no write
        before = events_seen(url, "pods")
        group.fail_and_delete()
        group.create()
        settled(url, "pods", before, 5)
        assert second.writes() == []
        # (it may say so in a line of its own: the finding now has the failure's details, in the same words)
        assert all(line.get("crash_looping", line.get("failed")) for line in json_lines(second))
        assert {line["message"] for line in json_lines(second) if line["kind"] == "component"} == {LOOP}
        assert (get_dcd(kube, namespace, "llm-worker"), get_dgd(kube, namespace)) == reported
        # the group comes up: the new watcher clears what the old one reported
        group.ready()
        wait(lambda: not dcd_looping(get_dcd(kube, namespace, "llm-worker")), 5, "the DCD cleared")
        wait(lambda: verdict(get_dgd(kube, namespace))[0] == "successful", 5, "the DGD cleared")
        wait(lambda: len(second.writes()) == 2, 5, "two clearing writes")
        lines = json_lines(second)
    assert [line.get("crash_looping", line.get("failed")) for line in lines][-2:] == [False, False]
    assert stalled(get_dcd(kube, namespace, "llm-worker")) == ("False", "NoCrashLoop", "no container is crash-looping")
    assert stalled(get_dgd(kube, namespace)) == ("False", "NoCrashLoop", "no component is crash-looping")


# --- 3. A DisaggregatedSet's frontend is a DCD like any other ------------------------------------------


def test_a_disaggregatedset_frontend_dcd_that_crash_loops_fails_and_fails_the_graph(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    make_dgd(
        kube,
        namespace,
        {"state": "pending", "conditions": [ready_condition("some_resources_are_not_ready", "Resources not ready")]},
    )
    ds = {f"{DS}/name": "llm", f"{DS}/role": "frontend"}
    dcd = kube.create(
        dcds(namespace),
        {
            "apiVersion": V,
            "kind": "DynamoComponentDeployment",
            "metadata": {"name": "llm-frontend", "labels": {GRAPH: "llm", COMPONENT: "frontend", **ds}},
            "spec": {},
        },
    )
    manifest = deployment("llm-frontend", "llm", "frontend", dcd)
    manifest["spec"]["template"]["metadata"]["labels"].update(ds)
    kube.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", manifest)
    selector = quote(f"{SELECTOR}=llm-frontend")

    def pods() -> list[str]:
        items = kube.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")["items"]
        return [p["metadata"]["name"] for p in items]

    with watch(control_plane, namespace) as w:
        started(w)
        wait(lambda: len(pods()) == 1, 60, "the ReplicaSet's Pod")
        (pod,) = pods()
        crash_loop(kube, namespace, pod)
        took = timed(
            lambda: dcd_looping(get_dcd(kube, namespace, "llm-frontend")) and dgd_failed(get_dgd(kube, namespace)),
            5,
            "the DCD and the DGD failed",
        )
        print(f"\ndisaggregatedset frontend: failed {took * 1000:.0f} ms after the Pod write")
        w.wait_line('"kind":"graph"')
        lines = json_lines(w)
    finding = f"container main of Pod {pod} restarted 2 times and is down after exit code 1"
    dcd = get_dcd(kube, namespace, "llm-frontend")
    assert verdict(dcd, "Available") == ("", "False", "ContainerCrashLooping", finding)
    assert {k: v for k, v in dcd["metadata"]["labels"].items() if k.startswith(DS)} == ds
    assert verdict(get_dgd(kube, namespace)) == (
        "failed",
        "False",
        "component_crash_looping",
        f"Components crash-looping: frontend: {finding}",
    )
    assert [(line["kind"], line.get("dcd")) for line in lines] == [("component", "llm-frontend"), ("graph", None)]
