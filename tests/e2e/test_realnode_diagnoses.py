"""The diagnoses beside the crash loop (docs/status.md) as a real kubelet and scheduler make them (tests/realnode.py),
each reproduced and then fixed: an image that is not on the node under `imagePullPolicy: Never` (the image then
imported), a Pod whose env names a Secret key that is not there (the Secret then created), a Pod asking for
`nvidia.com/gpu: 1` on a node with none (the request then removed), and a container whose child is OOM-killed by
its memory limit while the container itself exits 0 (the allocation then removed).

The cases run side by side, each in a namespace of its own, watched by one `crashwatch run` with short graces
(`--image-pull-grace 5s --config-error-grace 5s --unschedulable-grace 5s`). For each: the DCD and the DGD get
`Stalled=True` with the diagnosis's reason, `crashwatch wait` exits 1 naming it, kstatus (Helm 4, Flux) reads
Failed; after the fix `Stalled` turns False (`Recovered`) and, once the Pod is Ready and the graph reads
successful, `wait` exits 0. No Dynamo operator runs here, so the test writes what it would once the Pod is
Ready (the DCD `Available`, the DGD `successful`): crashwatch leaves those to the operator for these diagnoses.

Covered elsewhere, not repeated: an exit-0 restart loop (test_realnode.py's `exits-0` case) and an OOM kill with
exit code 137 (its `oom-killed` case, a crash loop by the upstream rule).

A watch of the test's own (Pods and DCDs, all namespaces) times each verdict: from the kubelet's or scheduler's
write that carries the reason to the DCD's `Stalled=True`, less the grace; printed, and in docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import realnode
from dynamo import conditions, dcds, dgds
from kube import ApiError, Kube, eventually
from realnode import container, make_component, spec
from watcher import Watcher

pytestmark = pytest.mark.e2e

GRACE = "5s"
GRACES = ("--image-pull-grace", GRACE, "--config-error-grace", GRACE, "--unschedulable-grace", GRACE)
WINDOW = ("--recovery-window", "30s")
TIMEOUT = 300  # seconds for every case to show its verdict, and again for every fix to land
ABSENT = "crashwatch.test/absent-worker:1"  # not on the node until the test tags the imported busybox so
SECRET, KEY = "worker-token", "token"
# a child allocating 64 MiB under a 16 MiB limit is killed by the kernel; the shell exits 0 after it
CHILD_OOM = "dd if=/dev/zero of=/dev/null bs=64M count=1; echo child killed; sleep 1; exit 0"


# --- the cases --------------------------------------------------------------------------------------------


def waiting_reason(pod: dict[str, Any]) -> str:
    for status in pod.get("status", {}).get("containerStatuses", []):
        reason = status.get("state", {}).get("waiting", {}).get("reason", "")
        if reason:
            return str(reason)
    return ""


def unschedulable(pod: dict[str, Any]) -> bool:
    scheduled = conditions(pod).get("PodScheduled", {})
    return scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable"


def bound(pod: dict[str, Any]) -> bool:
    """The scheduler's binding, from which a config error's grace counts (PodScheduled's lastTransitionTime)."""
    return bool(conditions(pod).get("PodScheduled", {}).get("status") == "True")


def oom_killed_twice(pod: dict[str, Any]) -> bool:
    for status in pod.get("status", {}).get("containerStatuses", []):
        state = status.get("state", {})
        terminated = state.get("terminated") or status.get("lastState", {}).get("terminated") or {}
        down = "running" not in state
        if status.get("restartCount", 0) >= 2 and down and terminated.get("reason") == "OOMKilled":
            return True
    return False


def patch_containers(kube: Kube, namespace: str, containers: list[dict[str, Any]]) -> None:
    kube.merge_patch(
        f"/apis/apps/v1/namespaces/{namespace}/deployments/llm-worker",
        {"spec": {"template": {"spec": {"containers": containers}}}},
    )


def import_absent(node: realnode.Node, kube: Kube, namespace: str) -> None:
    """The missing image arrives on the node: the imported busybox, tagged with the name the Pod asks for."""
    done = node.ctr("images", "tag", "--force", node.busybox, ABSENT)
    assert done.returncode == 0, done.stderr


def create_secret(node: realnode.Node, kube: Kube, namespace: str) -> None:
    kube.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET}, "stringData": {KEY: "s3cret"}},
    )


def drop_gpu(node: realnode.Node, kube: Kube, namespace: str) -> None:
    patch_containers(kube, namespace, [container(node.busybox, "exec sleep 3600")])


def stop_allocating(node: realnode.Node, kube: Kube, namespace: str) -> None:
    limits = {"limits": {"memory": "16Mi"}, "requests": {"memory": "16Mi"}}
    patch_containers(kube, namespace, [container(node.busybox, "exec sleep 3600", resources=limits)])


@dataclass(frozen=True)
class Case:
    name: str
    template: Callable[[str], dict[str, Any]]  # the Pod spec, given the busybox image
    shows: Callable[[dict[str, Any]], bool]  # the Pod status the kubelet or scheduler writes with the reason
    source: str  # which of them writes it, and what
    dcd_reason: str
    dgd_reason: str
    diagnosis: str  # the finding's, in `wait -o json`
    wait_reason: str  # the graph's, in `wait -o json`
    grace: float
    fix: Callable[[realnode.Node, Kube, str], None]
    words: str  # what the Stalled message must keep
    origin: Callable[[dict[str, Any]], bool] | None = None  # where the grace counts from, if not the write


CASES = (
    Case(
        "image-never-pulled",
        lambda i: spec([container(ABSENT, "exec sleep 3600")]),
        lambda pod: waiting_reason(pod) == "ErrImageNeverPull",
        "kubelet: waiting ErrImageNeverPull",
        "ImagePullFailing",
        "ComponentImagePullFailing",
        "image_pull_failing",
        "component_image_pull_failing",
        0.0,  # permanent at once
        import_absent,
        "ErrImageNeverPull",
    ),
    Case(
        "missing-secret-key",
        lambda i: spec(
            [
                container(
                    i,
                    "exec sleep 3600",
                    env=[{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": SECRET, "key": KEY}}}],
                )
            ]
        ),
        lambda pod: waiting_reason(pod) == "CreateContainerConfigError",
        "kubelet: waiting CreateContainerConfigError",
        "ContainerConfigError",
        "ComponentConfigError",
        "config_error",
        "component_config_error",
        5.0,
        create_secret,
        SECRET,
        origin=bound,
    ),
    Case(
        "gpu-unschedulable",
        lambda i: spec(
            [container(i, "exec sleep 3600", resources={"limits": {"nvidia.com/gpu": "1"}})],
        ),
        unschedulable,
        "scheduler: PodScheduled=False Unschedulable",
        "PodUnschedulable",
        "ComponentUnschedulable",
        "unschedulable",
        "component_unschedulable",
        5.0,
        drop_gpu,
        "Insufficient nvidia.com/gpu",
    ),
    Case(
        "child-oom-killed",
        lambda i: spec(
            [
                container(
                    i,
                    CHILD_OOM,
                    resources={"limits": {"memory": "16Mi"}, "requests": {"memory": "16Mi"}},
                )
            ]
        ),
        oom_killed_twice,
        "kubelet: restarts 2, OOMKilled, exit code 0",
        "ContainerOOMKilled",
        "ComponentOOMKilled",
        "oom_killed",
        "component_oom_killed",
        0.0,
        stop_allocating,
        "OOM-killed (memory limit 16Mi, exit code 0)",
    ),
)


# On cgroup v2 the kubelet (singleProcessOOMKill false, the default there) sets memory.oom.group: the kernel kills
# the whole container, which then exits 137, a crash loop by the upstream rule (test_realnode.py's oom-killed case).
# A child killed alone, the container exiting 0, is a cgroup v1 node's (or one with singleProcessOOMKill: true).
GROUP_OOM_KILL = Path("/sys/fs/cgroup/cgroup.controllers").exists()
RUNNING = tuple(case for case in CASES if not (GROUP_OOM_KILL and case.name == "child-oom-killed"))


# --- a watch of the test's own ------------------------------------------------------------------------------


class Watch(threading.Thread):
    """Lists, then watches a collection (all namespaces), handing each object and the moment it arrived to
    `seen`; starts over from a fresh list when the watch ends or fails."""

    def __init__(self, kube: Kube, path: str, seen: Callable[[float, dict[str, Any]], None]) -> None:
        super().__init__(daemon=True)
        self.kube, self.path, self.seen = kube, path, seen
        self.stopping = threading.Event()
        self.listed = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            with contextlib.suppress(OSError, ApiError, ValueError, http.client.HTTPException):
                listed = self.kube.get(self.path)
                now = time.monotonic()
                for item in listed["items"]:
                    self.seen(now, item)
                self.listed.set()
                self.follow(listed["metadata"]["resourceVersion"])
            self.stopping.wait(0.2)

    def follow(self, version: str) -> None:
        connection = http.client.HTTPSConnection(self.kube.host, self.kube.port, context=self.kube.context, timeout=60)
        try:
            connection.request("GET", f"{self.path}?watch=true&resourceVersion={version}&timeoutSeconds=30")
            response = connection.getresponse()
            if response.status != 200:
                return
            while not self.stopping.is_set():
                line = response.readline()
                if not line:
                    return
                event = json.loads(line)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    self.seen(time.monotonic(), event["object"])
                elif event.get("type") == "ERROR":
                    return
        finally:
            connection.close()


@dataclass
class Seen:
    namespace: str
    pod_shows: float | None = None  # when the watch first saw the kubelet's or scheduler's write
    origin: float | None = None  # ... and what the grace counts from (the binding, for a config error)
    dcd_stalled: float | None = None  # ... and the DCD's Stalled=True with the case's reason
    dcd_recovered: float | None = None  # ... and Stalled=False after it
    failing: tuple[int, dict[str, Any]] = (0, {})  # `wait`'s exit code and document, while failing
    kstatus_failing: list[dict[str, str]] | None = None
    stalled_dcd: dict[str, Any] = field(default_factory=dict)
    stalled_dgd: dict[str, Any] = field(default_factory=dict)
    fixed: tuple[int, dict[str, Any]] = (0, {})
    kstatus_fixed: list[dict[str, str]] | None = None
    recovered_dcd: dict[str, Any] = field(default_factory=dict)
    recovered_dgd: dict[str, Any] = field(default_factory=dict)
    lines: list[dict[str, Any]] = field(default_factory=list)


def stalled(obj: dict[str, Any], status: str, reason: str) -> bool:
    condition = conditions(obj).get("Stalled", {})
    return condition.get("status") == status and condition.get("reason") == reason


def kstatus_of(*objects: dict[str, Any]) -> list[dict[str, str]] | None:
    """kstatus's verdicts (CRASHWATCH_WAITERS_BIN's helper), or None where it cannot be had here."""
    from waiters_bin import waiters_bin

    try:
        folder = waiters_bin()
    except pytest.skip.Exception:
        return None
    done = subprocess.run(
        [str(folder / "kstatus")], input=json.dumps(list(objects)).encode(), capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr.decode()
    return [json.loads(line) for line in done.stdout.decode().splitlines()]


def waited(processes: dict[str, subprocess.Popen[str]]) -> dict[str, tuple[int, dict[str, Any]]]:
    results = {}
    for name, process in processes.items():
        out, err = process.communicate(timeout=400)
        results[name] = (process.returncode, json.loads(out) if out.strip() else {"stderr": err})
    return results


def pod_ready(kube: Kube, namespace: str) -> bool:
    pods = [
        p for p in kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"] if "deletionTimestamp" not in p["metadata"]
    ]
    return len(pods) == 1 and conditions(pods[0]).get("Ready", {}).get("status") == "True"


def play_the_operator(kube: Kube, namespace: str) -> None:
    """What the Dynamo operator writes once the component's Deployment is available (no operator runs
    here): the DCD `Available=True`, the DGD `successful`; every other condition kept as it is."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for path, kind, extra in (
        (f"{dcds(namespace)}/llm-worker", "Available", {}),
        (f"{dgds(namespace)}/llm", "Ready", {"state": "successful"}),
    ):
        obj = kube.get(path)
        ready = {
            "type": kind,
            "status": "True",
            "reason": "DeploymentReady" if kind == "Available" else "all_resources_are_ready",
            "message": "Deployment is ready" if kind == "Available" else "All resources are ready",
            "lastTransitionTime": now,
            "observedGeneration": obj["metadata"]["generation"],
        }
        kept = [c for c in obj.get("status", {}).get("conditions", []) if c["type"] != kind]
        kube.merge_patch(f"{path}/status", {"status": {**extra, "conditions": [*kept, ready]}})


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[realnode.Node]:
    yield from realnode.started(tmp_path_factory)


@pytest.fixture(scope="module")
def session(node: realnode.Node) -> Iterator[dict[str, Seen]]:
    kube = node.kube()
    kubeconfig = node.plane.kubeconfig
    began = time.monotonic()
    seen = {case.name: Seen(f"rd-{case.name}-{uuid.uuid4().hex[:6]}") for case in RUNNING}
    by_namespace = {seen[case.name].namespace: (case, seen[case.name]) for case in RUNNING}
    lock = threading.Lock()

    def on_pod(now: float, pod: dict[str, Any]) -> None:
        found = by_namespace.get(pod["metadata"]["namespace"])
        if found and "deletionTimestamp" not in pod["metadata"]:
            with lock:
                case, s = found
                if s.pod_shows is None and case.shows(pod):
                    s.pod_shows = now
                if s.origin is None and (case.origin or case.shows)(pod):
                    s.origin = now

    def on_dcd(now: float, dcd: dict[str, Any]) -> None:
        found = by_namespace.get(dcd["metadata"]["namespace"])
        if found:
            case, s = found
            with lock:
                if s.dcd_stalled is None and stalled(dcd, "True", case.dcd_reason):
                    s.dcd_stalled = now
                if s.dcd_stalled is not None and s.dcd_recovered is None and stalled(dcd, "False", "Recovered"):
                    s.dcd_recovered = now

    watches = [
        Watch(kube, "/api/v1/pods", on_pod),
        Watch(kube, dcds("").replace("/namespaces//", "/"), on_dcd),
    ]
    for w in watches:
        w.start()
    for w in watches:
        assert w.listed.wait(60), "the test's own watches never listed"
    for s in seen.values():
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": s.namespace}})
    try:
        with Watcher("run", "-A", "-o", "json", *GRACES, *WINDOW, "--kubeconfig", str(kubeconfig)) as runner:
            runner.wait_synced(60)
            for case in RUNNING:
                make_component(kube, seen[case.name].namespace, case.template(node.busybox))

            def all_stalled() -> bool:
                for case in RUNNING:
                    s = seen[case.name]
                    dcd = kube.get(f"{dcds(s.namespace)}/llm-worker")
                    dgd = kube.get(f"{dgds(s.namespace)}/llm")
                    if not (stalled(dcd, "True", case.dcd_reason) and stalled(dgd, "True", case.dgd_reason)):
                        return False
                    s.stalled_dcd, s.stalled_dgd = dcd, dgd
                return True

            eventually(all_stalled, TIMEOUT, "every diagnosis written", step=1)
            failing = waited(
                {
                    case.name: realnode.wait_for_graph(seen[case.name].namespace, kubeconfig, "2m", *GRACES, *WINDOW)
                    for case in RUNNING
                }
            )
            for case in RUNNING:
                s = seen[case.name]
                s.failing = failing[case.name]
                s.kstatus_failing = kstatus_of(s.stalled_dgd, s.stalled_dcd)
                case.fix(node, kube, s.namespace)

            def all_recovered() -> bool:
                for case in RUNNING:
                    s = seen[case.name]
                    dcd = kube.get(f"{dcds(s.namespace)}/llm-worker")
                    dgd = kube.get(f"{dgds(s.namespace)}/llm")
                    if not (
                        stalled(dcd, "False", "Recovered")
                        and stalled(dgd, "False", "Recovered")
                        and pod_ready(kube, s.namespace)
                    ):
                        return False
                    s.recovered_dcd, s.recovered_dgd = dcd, dgd
                return True

            eventually(all_recovered, TIMEOUT, "every fix seen and the Stalled conditions cleared", step=1)
            for case in RUNNING:
                play_the_operator(kube, seen[case.name].namespace)
            fixed = waited(
                {
                    case.name: realnode.wait_for_graph(seen[case.name].namespace, kubeconfig, "2m", *GRACES, *WINDOW)
                    for case in RUNNING
                }
            )
            for case in RUNNING:
                s = seen[case.name]
                s.fixed = fixed[case.name]
                s.kstatus_fixed = kstatus_of(
                    kube.get(f"{dgds(s.namespace)}/llm"), kube.get(f"{dcds(s.namespace)}/llm-worker")
                )
            time.sleep(1)
            lines = [json.loads(line) for line in runner.snapshot(runner.out)]
        assert runner.process.returncode == 0, runner.stderr()
    finally:
        for w in watches:
            w.stopping.set()
    for case in RUNNING:
        s = seen[case.name]
        s.lines = [line for line in lines if line["namespace"] == s.namespace and line["kind"] == "component"]
    print(f"\nreal-node diagnoses shown and fixed in {time.monotonic() - began:.0f}s", file=sys.stderr)
    print(report(seen), file=sys.stderr)
    for s in seen.values():
        kube.delete(f"/api/v1/namespaces/{s.namespace}")
    yield seen


def report(seen: dict[str, Seen]) -> str:
    """Per diagnosis, the time from the write carrying the reason to the DCD's Stalled=True, less the grace;
    and, where the grace counts from an earlier write (a config error's: the binding), from that one."""
    rows = [f"  {'diagnosis':<20} {'written by':<45} {'to Stalled':>10} {'grace':>5} {'beyond':>7} {'from origin':>11}"]
    for case in RUNNING:
        s = seen[case.name]
        if s.pod_shows is None or s.dcd_stalled is None or s.origin is None:
            rows.append(f"  {case.name:<20} {case.source:<45} (not seen)")
            continue
        took, since = s.dcd_stalled - s.pod_shows, s.dcd_stalled - s.origin
        rows.append(
            f"  {case.name:<20} {case.source:<45} {took:>9.2f}s {case.grace:>4.0f}s {took - case.grace:>6.2f}s "
            f"{since - case.grace:>10.2f}s"
        )
    return "\n".join(rows)


# --- the verdicts -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_real_diagnosis_stalls_the_graph_and_its_fix_clears_it(session: dict[str, Seen], case: Case) -> None:
    if case not in RUNNING:
        pytest.skip("cgroup v2: the kubelet OOM-kills the whole container (exit 137: a crash loop, test_realnode.py)")
    s = session[case.name]
    # the kubelet or scheduler wrote the reason, and the verdict followed it
    assert s.pod_shows is not None and s.dcd_stalled is not None, s
    assert s.dcd_recovered is not None and s.dcd_recovered > s.dcd_stalled, s
    # Stalled on both, the finding kept in words; the operator's own verdicts left alone
    assert case.words in conditions(s.stalled_dcd)["Stalled"]["message"], s.stalled_dcd
    assert case.words in conditions(s.stalled_dgd)["Stalled"]["message"], s.stalled_dgd
    assert conditions(s.stalled_dcd)["Available"]["reason"] != case.dcd_reason
    assert s.stalled_dgd["status"]["state"] == "pending"
    # `wait` fails naming it
    code, result = s.failing
    assert code == 1 and result["result"] == "failed", result
    (graph,) = result["graphs"]
    assert graph["reason"] == case.wait_reason, graph
    (finding,) = graph["crash_looping"]
    assert finding["diagnosis"] == case.diagnosis, finding
    assert case.words in finding["message"], finding
    if case.diagnosis == "oom_killed":
        assert (finding["exit_code"], finding["memory_limit"]) == (0, "16Mi"), finding
    # kstatus (Helm 4, Flux) reads both Failed
    if s.kstatus_failing is not None:
        assert [v["status"] for v in s.kstatus_failing] == ["Failed", "Failed"], s.kstatus_failing
    # after the fix: Stalled False on both, `wait` ready once the graph is, kstatus no longer Failed
    for obj in (s.recovered_dcd, s.recovered_dgd):
        assert stalled(obj, "False", "Recovered"), obj
    code, result = s.fixed
    assert code == 0 and result["result"] == "ready", result
    if s.kstatus_fixed is not None:
        assert [v["status"] for v in s.kstatus_fixed] == ["Current", "Current"], s.kstatus_fixed
    # what run said: the diagnosis, then its end
    said = [line.get("diagnosis") for line in s.lines]
    assert said and said[0] == case.diagnosis and said[-1] is None, s.lines
