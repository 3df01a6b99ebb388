"""The diagnoses beside the crash loop (docs/status.md) as a real kubelet and scheduler make them (tests/realnode.py),
each reproduced and then fixed: an image that is not on the node under `imagePullPolicy: Never` (the image then
imported), a Pod whose env names a Secret key that is not there (the Secret then created), a Pod asking for
`nvidia.com/gpu: 1` on a node with none (the request then removed), and a container whose child is OOM-killed by
its memory limit while the container itself exits 0 (the allocation then removed).

The cases run side by side, each in a namespace of its own, watched by one `crashwatch run` and one `crashwatch
record` with short graces (`--image-pull-grace 5s --config-error-grace 5s --unschedulable-grace 5s`). For each:
the DCD and the DGD get `Stalled=True` with the diagnosis's reason, `crashwatch wait` exits 1 naming it, kstatus
(Helm 4, Flux) reads Failed, Argo CD's Lua checks (tests/argocd.py) read Degraded with the finding's words, and
`helm install --wait` of a chart holding the graph's DGD (adopted, as test_kstatus_helm.py does) gives up on
kstatus's Failed; after the fix `Stalled` turns False (`Recovered`) and, once the Pod is Ready and the graph
reads successful, `wait` exits 0, kstatus reads Current, Argo CD Healthy and `helm upgrade --wait` succeeds. No
Dynamo operator runs here, so the test writes what it would once the Pod is Ready (the DCD `Available`, the DGD
`successful`): crashwatch leaves those to the operator for these diagnoses. A replay of the record, and of its
trimmed copy (kept in tests/data/realnode for tests/replay), says what `run` said.

Beside them, a slow but healthy start, watched by a second `run` with the default graces and a `wait`: a
readiness probe that passes only after 60 s never trips a diagnosis, and `wait` returns ready.

Two more cases, also in test_realnode.py's crash-loop tier, are here for the waiters: a container that exits 0
under restartPolicy Always (a restart loop) and one OOM-killed as PID 1, exit code 137 (a crash loop by the
upstream rule, the DGD `state: failed`, its memory limit in the words); each fixed by a rollout that keeps running.

A watch of the test's own (Pods and DCDs, all namespaces) times each verdict: from the kubelet's or scheduler's
write that carries the reason to the DCD's `Stalled=True`, less the grace; printed, and in docs/benchmarks.md.
"""

from __future__ import annotations

import calendar
import contextlib
import functools
import gzip
import http.client
import json
import os
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
import yaml
from argocd import DCD, DGD, health
from cli import run
from dynamo import adopted_by_helm, conditions, dcds, dgds
from kube import ApiError, Kube, eventually
from realnode import HelmRun, container, make_component, play_the_operator, spec
from registry import Registry
from watcher import Watcher

pytestmark = pytest.mark.e2e

GRACE = "5s"
GRACES = ("--image-pull-grace", GRACE, "--config-error-grace", GRACE, "--unschedulable-grace", GRACE)
WINDOW = ("--recovery-window", "30s")
TIMEOUT = 300  # seconds for every case to show its verdict, and again for every fix to land
ABSENT = "crashwatch.test/absent-worker:1"  # not on the node until the test tags the imported busybox so
SECRET, KEY = "worker-token", "token"
CHART = Path(__file__).resolve().parent / "charts" / "dynamo-graph"  # test_kstatus_helm's: the graph's DGD alone
RELEASE = "llm"
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


def keep_running(node: realnode.Node, kube: Kube, namespace: str) -> None:
    limits = {"limits": {"memory": "16Mi"}, "requests": {"memory": "16Mi"}}
    patch_containers(kube, namespace, [container(node.busybox, "exec sleep 3600", resources=limits)])


def down_twice(reason: str, exit_code: int) -> Callable[[dict[str, Any]], bool]:
    """The kubelet's status of a container restarted twice and down after `reason` with `exit_code`."""

    def shows(pod: dict[str, Any]) -> bool:
        for status in pod.get("status", {}).get("containerStatuses", []):
            state = status.get("state", {})
            terminated = state.get("terminated") or status.get("lastState", {}).get("terminated") or {}
            if (
                status.get("restartCount", 0) >= 2
                and "running" not in state
                and (terminated.get("reason"), terminated.get("exitCode")) == (reason, exit_code)
            ):
                return True
        return False

    return shows


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
    state: str = "pending"  # the DGD's state while it holds: a crash loop's is "failed" (the upstream rule)
    cleared: str = "Recovered"  # Stalled's reason once it ends ("NoCrashLoop" for a crash loop)
    exit_code: int = 0


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
    Case(
        "exits-0",
        lambda i: spec([container(i, "sleep 1; exit 0")]),
        down_twice("Completed", 0),
        "kubelet: restarts 2, Completed, exit code 0",
        "ContainerRestartLooping",
        "ComponentRestartLooping",
        "restart_loop",
        "component_restart_looping",
        0.0,
        keep_running,
        "is down after exit code 0 (restartPolicy Always restarts it forever)",
    ),
    Case(
        "oom-killed-137",
        lambda i: spec(
            [
                {
                    **container(i, ""),
                    # dd as PID 1 reads 64 MiB into one buffer under a 16 MiB limit: the kernel kills it (137)
                    "command": ["dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"],
                    "resources": {"limits": {"memory": "16Mi"}, "requests": {"memory": "16Mi"}},
                }
            ]
        ),
        down_twice("OOMKilled", 137),
        "kubelet: restarts 2, OOMKilled, exit code 137",
        "ContainerCrashLooping",
        "ComponentCrashLooping",
        "",  # a crash loop, the upstream rule's
        "component_crash_looping",
        0.0,
        keep_running,
        "is down after exit code 137 (OOMKilled, memory limit 16Mi)",
        state="failed",
        cleared="NoCrashLoop",
        exit_code=137,
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


def helm_binary() -> Path | None:
    """CRASHWATCH_WAITERS_BIN's helm (or scripts/build-waiters'), or None where it cannot be had here."""
    from waiters_bin import waiters_bin

    try:
        return waiters_bin() / "helm"
    except pytest.skip.Exception:
        return None


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
    fixed_dcd: dict[str, Any] = field(default_factory=dict)  # once the operator (played) reads it ready
    fixed_dgd: dict[str, Any] = field(default_factory=dict)
    lines: list[dict[str, Any]] = field(default_factory=list)
    replayed: list[dict[str, Any]] = field(default_factory=list)  # replay of the record, of this namespace
    replayed_trimmed: list[dict[str, Any]] = field(default_factory=list)  # ... and of the trimmed record
    install: HelmRun | None = None  # `helm install --wait` of the graph's chart, started beside the case
    upgrade: HelmRun | None = None  # `helm upgrade --wait` once fixed and ready


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


def ready_after(kube: Kube, namespace: str) -> float:
    """Seconds from the namespace's Pod's creation to its Ready condition, as the API server and kubelet wrote
    them (whole seconds)."""
    (pod,) = kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    ready = conditions(pod)["Ready"]["lastTransitionTime"]
    return float(calendar.timegm(time.strptime(ready, "%Y-%m-%dT%H:%M:%SZ"))) - calendar.timegm(
        time.strptime(pod["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
    )


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[realnode.Node]:
    yield from realnode.started(tmp_path_factory)


@dataclass
class Slow:
    """A slow but healthy start, watched by a `run` with the default graces: it must never trip a diagnosis."""

    name: str
    template: Callable[[str, str], dict[str, Any]]  # the Pod spec, given the busybox image and the registry's
    shows: Callable[[dict[str, Any]], bool]  # what the kubelet writes while it is slow
    namespace: str = ""
    shown: bool = False  # ... seen
    stalled: list[dict[str, Any]] = field(default_factory=list)  # any Stalled=True seen on its DCD (none, rightly)
    ready_after: float | None = None  # seconds from the Deployment's creation to the Pod's Ready
    waited: tuple[int, dict[str, Any]] = (0, {})  # `wait` with the default graces, started at creation
    lines: list[dict[str, Any]] = field(default_factory=list)  # what the default-grace `run` said


def running_not_ready(pod: dict[str, Any]) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses", [])
    return bool(statuses) and all("running" in s.get("state", {}) and not s.get("ready") for s in statuses)


def pull_retried(pod: dict[str, Any]) -> bool:
    return waiting_reason(pod) in ("ErrImagePull", "ImagePullBackOff")


READY_AFTER = 60  # seconds: the slow readiness probe's
REFUSED_FOR = 45  # seconds the stand-in registry refuses the image: kubelet's pulls at about 0, 10 and 30 s fail
SLOW = (
    Slow(
        "ready-after-60s",
        lambda i, _: spec(
            [
                container(
                    i,
                    f"(sleep {READY_AFTER}; touch /tmp/ready) & exec sleep 3600",
                    readinessProbe={"exec": {"command": ["test", "-f", "/tmp/ready"]}, "periodSeconds": 2},
                )
            ]
        ),
        running_not_ready,
    ),
    Slow(
        "pulled-after-retries",
        lambda _, pulled: spec([container(pulled, "exec sleep 3600", imagePullPolicy="IfNotPresent")]),
        pull_retried,
    ),
)


def trimmed(record: Path, names: dict[str, str]) -> list[str]:
    """The record's lines of the given namespaces, each renamed to a fixed name (`names`: random -> fixed) and
    without `managedFields` (who wrote which field: no rule reads it): what tests/data/realnode keeps."""
    kept = []
    for raw in record.read_text().splitlines():
        event = json.loads(raw)
        obj = event.get("object", {})
        if obj.get("metadata", {}).get("namespace") not in names:
            continue
        obj["metadata"].pop("managedFields", None)
        line = json.dumps(event, separators=(",", ":"))
        for random, fixed in names.items():
            line = line.replace(random, fixed)
        kept.append(line)
    return kept


def replayed(log: Path) -> list[dict[str, Any]]:
    done = run("replay", "-o", "json", *GRACES, *WINDOW, str(log))
    assert done.returncode == 0, done.stderr.decode()
    return [json.loads(line) for line in done.stdout.decode().splitlines()]


@pytest.fixture(scope="module")
def session(node: realnode.Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    kube = node.kube()
    kubeconfig = node.plane.kubeconfig
    folder = tmp_path_factory.mktemp("realnode-diagnoses")
    record = folder / "record.jsonl"
    helm = helm_binary()
    manifest: dict[str, Any] = {}
    if helm is not None:
        rendered = subprocess.run([str(helm), "template", RELEASE, str(CHART)], capture_output=True, text=True)
        assert rendered.returncode == 0, rendered.stderr
        (manifest,) = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    began = time.monotonic()
    seen = {case.name: Seen(f"rd-{case.name}-{uuid.uuid4().hex[:6]}") for case in RUNNING}
    by_namespace = {seen[case.name].namespace: (case, seen[case.name]) for case in RUNNING}
    slow = {s.name: Slow(s.name, s.template, s.shows, f"rd-{s.name}-{uuid.uuid4().hex[:6]}") for s in SLOW}
    slow_by_namespace = {s.namespace: s for s in slow.values()}
    lock = threading.Lock()

    def on_pod(now: float, pod: dict[str, Any]) -> None:
        start = slow_by_namespace.get(pod["metadata"]["namespace"])
        if start is not None and start.shows(pod):
            start.shown = True
        found = by_namespace.get(pod["metadata"]["namespace"])
        if found and "deletionTimestamp" not in pod["metadata"]:
            with lock:
                case, s = found
                if s.pod_shows is None and case.shows(pod):
                    s.pod_shows = now
                if s.origin is None and (case.origin or case.shows)(pod):
                    s.origin = now

    def on_dcd(now: float, dcd: dict[str, Any]) -> None:
        namespace = dcd["metadata"]["namespace"]
        if namespace in slow_by_namespace and conditions(dcd).get("Stalled", {}).get("status") == "True":
            with lock:
                slow_by_namespace[namespace].stalled.append(dcd)
        found = by_namespace.get(namespace)
        if found:
            case, s = found
            with lock:
                if s.dcd_stalled is None and stalled(dcd, "True", case.dcd_reason):
                    s.dcd_stalled = now
                if s.dcd_stalled is not None and s.dcd_recovered is None and stalled(dcd, "False", case.cleared):
                    s.dcd_recovered = now

    watches = [
        Watch(kube, "/api/v1/pods", on_pod),
        Watch(kube, dcds("").replace("/namespaces//", "/"), on_dcd),
    ]
    for w in watches:
        w.start()
    for w in watches:
        assert w.listed.wait(60), "the test's own watches never listed"
    for namespace in [*by_namespace, *slow_by_namespace]:
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    # the diagnoses' namespaces with short graces, the slow starts' with the defaults: one `run` each, and a
    # `record` of the former
    cases = [arg for namespace in by_namespace for arg in ("-n", namespace)]
    slow_ones = [arg for namespace in slow_by_namespace for arg in ("-n", namespace)]
    helms: list[HelmRun] = []
    slow_waits: dict[str, subprocess.Popen[str]] = {}
    try:
        with (
            Watcher("run", *cases, "-o", "json", *GRACES, *WINDOW, "--kubeconfig", str(kubeconfig)) as runner,
            Watcher("run", *slow_ones, "-o", "json", *WINDOW, "--kubeconfig", str(kubeconfig)) as slow_runner,
            Watcher("record", *cases, "-o", str(record), *GRACES, *WINDOW, "--kubeconfig", str(kubeconfig)) as rec,
            Registry(node.parts.busybox, "crashwatch-test/slow-worker", "1") as registry,
        ):
            node.plain_http_registry(registry.host)
            for watcher in (runner, slow_runner, rec):
                watcher.wait_synced(60)
            registry.refuse_until = time.monotonic() + REFUSED_FOR
            for start in slow.values():
                make_component(kube, start.namespace, start.template(node.busybox, registry.image))
                slow_waits[start.name] = realnode.wait_for_graph(start.namespace, kubeconfig, "5m", *WINDOW)
            for case in RUNNING:
                namespace = seen[case.name].namespace
                make_component(kube, namespace, case.template(node.busybox))
                if helm is not None:  # Helm adopts the graph's DGD and waits on it (test_kstatus_helm.py says why)
                    adopted_by_helm(kube, namespace, manifest, RELEASE)
                    install = ("install", RELEASE, str(CHART), "--wait", "--timeout", "10m")
                    helms.append(HelmRun(helm, kubeconfig, namespace, folder / namespace, *install))
                    seen[case.name].install = helms[-1]

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
            # helm gives up on the Stalled graph long before its 10 minutes, or not at all: 2 minutes is plenty
            eventually(lambda: all(h.exited is not None for h in helms), 120, "helm install --wait to give up", step=1)
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
                        stalled(dcd, "False", case.cleared)
                        and stalled(dgd, "False", case.cleared)
                        and pod_ready(kube, s.namespace)
                    ):
                        return False
                    s.recovered_dcd, s.recovered_dgd = dcd, dgd
                return True

            eventually(all_recovered, TIMEOUT, "every fix seen and the Stalled conditions cleared", step=1)
            for case in RUNNING:
                s = seen[case.name]
                play_the_operator(kube, s.namespace)
                if helm is not None:
                    upgrade = ("upgrade", RELEASE, str(CHART), "--wait", "--timeout", "2m")
                    helms.append(HelmRun(helm, kubeconfig, s.namespace, folder / s.namespace, *upgrade))
                    s.upgrade = helms[-1]
            fixed = waited(
                {
                    case.name: realnode.wait_for_graph(seen[case.name].namespace, kubeconfig, "2m", *GRACES, *WINDOW)
                    for case in RUNNING
                }
            )
            for case in RUNNING:
                s = seen[case.name]
                s.fixed = fixed[case.name]
                s.fixed_dgd = kube.get(f"{dgds(s.namespace)}/llm")
                s.fixed_dcd = kube.get(f"{dcds(s.namespace)}/llm-worker")
                s.kstatus_fixed = kstatus_of(s.fixed_dgd, s.fixed_dcd)
            eventually(lambda: all(h.exited is not None for h in helms), 150, "helm upgrade --wait to end", step=1)
            # the slow starts: Ready in the end, the operator (played) then says so, and `wait` returns ready
            for start in slow.values():
                eventually(functools.partial(pod_ready, kube, start.namespace), 240, f"{start.name} Ready", step=1)
                start.ready_after = ready_after(kube, start.namespace)
                play_the_operator(kube, start.namespace)
            for name, outcome in waited(slow_waits).items():
                slow[name].waited = outcome
            time.sleep(1)
            lines = [json.loads(line) for line in runner.snapshot(runner.out)]
            slow_lines = [json.loads(line) for line in slow_runner.snapshot(slow_runner.out)]
            refused, served = registry.refused, registry.served
        assert runner.process.returncode == 0, runner.stderr()
        assert slow_runner.process.returncode == 0, slow_runner.stderr()
        assert rec.process.returncode == 0, rec.stderr()
    finally:
        for w in watches:
            w.stopping.set()
        for h in helms:
            h.stop()
        for process in slow_waits.values():
            if process.poll() is None:
                process.kill()
                process.communicate()
    names = {seen[case.name].namespace: f"rd-{case.name}" for case in RUNNING}
    kept = folder / "trimmed.jsonl"
    kept.write_text("".join(f"{line}\n" for line in trimmed(record, names)))
    if os.environ.get("CRASHWATCH_KEEP_RECORDING"):  # how tests/data/realnode/diagnoses.jsonl.gz was made
        Path(os.environ["CRASHWATCH_KEEP_RECORDING"]).write_bytes(gzip.compress(kept.read_bytes(), 9, mtime=0))
    replay, replay_trimmed = replayed(record), replayed(kept)
    for case in RUNNING:
        s = seen[case.name]
        s.lines = [line for line in lines if line["namespace"] == s.namespace and line["kind"] == "component"]
        s.replayed = [line for line in replay if line["namespace"] == s.namespace and line["kind"] == "component"]
        s.replayed_trimmed = [
            line for line in replay_trimmed if line["namespace"] == names[s.namespace] and line["kind"] == "component"
        ]
    for start in slow.values():
        start.lines = [line for line in slow_lines if line["namespace"] == start.namespace]
    print(f"\nreal-node diagnoses shown and fixed in {time.monotonic() - began:.0f}s", file=sys.stderr)
    print(report(seen), file=sys.stderr)
    for start in slow.values():
        said = "nothing said" if not start.lines else f"{len(start.lines)} lines said"
        print(f"  slow start {start.name}: Ready after {start.ready_after or 0:.0f}s, {said}", file=sys.stderr)
    print(f"  the stand-in registry refused {refused} manifest requests, then served {served}", file=sys.stderr)
    for namespace in [*by_namespace, *slow_by_namespace]:
        kube.delete(f"/api/v1/namespaces/{namespace}")
    yield Session(seen, slow, refused, served)


@dataclass
class Session:
    seen: dict[str, Seen]  # by case
    slow: dict[str, Slow]  # by slow start
    refused: int  # the stand-in registry's refusals of the slow pull's manifest
    served: int  # ... and the manifests it served


def report(seen: dict[str, Seen]) -> str:
    """Per diagnosis, the time from the write carrying the reason to the DCD's Stalled=True, less the grace;
    and, where the grace counts from an earlier write (a config error's: the binding), from that one; and when
    `helm install --wait` gave up, from the DCD's Stalled=True as the test's watch saw it."""
    rows = [
        f"  {'diagnosis':<20} {'written by':<45} {'to Stalled':>10} {'grace':>5} {'beyond':>7} {'from origin':>11}"
        f" {'helm gave up':>12}"
    ]
    for case in RUNNING:
        s = seen[case.name]
        if s.pod_shows is None or s.dcd_stalled is None or s.origin is None:
            rows.append(f"  {case.name:<20} {case.source:<45} (not seen)")
            continue
        took, since = s.dcd_stalled - s.pod_shows, s.dcd_stalled - s.origin
        helm = "-" if s.install is None or s.install.exited is None else f"{s.install.exited - s.dcd_stalled:+.2f}s"
        rows.append(
            f"  {case.name:<20} {case.source:<45} {took:>9.2f}s {case.grace:>4.0f}s {took - case.grace:>6.2f}s "
            f"{since - case.grace:>10.2f}s {helm:>12}"
        )
    return "\n".join(rows)


# --- the verdicts -----------------------------------------------------------------------------------------


def seen_running(session: Session, case: Case) -> Seen:
    if case not in RUNNING:
        pytest.skip("cgroup v2: the kubelet OOM-kills the whole container (exit 137: a crash loop, test_realnode.py)")
    return session.seen[case.name]


def summary(lines: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What must agree between run and replay: each line's verdict and finding."""
    keys = ("crash_looping", "pod", "container", "restarts", "exit_code", "diagnosis", "reason", "memory_limit")
    return [tuple(line.get(key) for key in keys) for line in lines]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_real_diagnosis_stalls_the_graph_and_its_fix_clears_it(session: Session, case: Case) -> None:
    s = seen_running(session, case)
    # the kubelet or scheduler wrote the reason, and the verdict followed it
    assert s.pod_shows is not None and s.dcd_stalled is not None, s
    assert s.dcd_recovered is not None and s.dcd_recovered > s.dcd_stalled, s
    # Stalled on both, the finding kept in words; the operator's own verdicts left alone
    assert case.words in conditions(s.stalled_dcd)["Stalled"]["message"], s.stalled_dcd
    assert case.words in conditions(s.stalled_dgd)["Stalled"]["message"], s.stalled_dgd
    if case.state == "pending":  # the operator's Available left alone (a crash loop's is crashwatch's to write)
        assert conditions(s.stalled_dcd)["Available"]["reason"] != case.dcd_reason
    assert s.stalled_dgd["status"]["state"] == case.state
    # `wait` fails naming it
    code, result = s.failing
    assert code == 1 and result["result"] == "failed", result
    (graph,) = result["graphs"]
    assert graph["reason"] == case.wait_reason, graph
    (finding,) = graph["crash_looping"]
    assert (finding.get("diagnosis", ""), finding["exit_code"]) == (case.diagnosis, case.exit_code), finding
    assert case.words in finding["message"], finding
    if case.diagnosis == "oom_killed":
        assert finding["memory_limit"] == "16Mi", finding
    # kstatus (Helm 4, Flux) reads both Failed
    if s.kstatus_failing is not None:
        assert [v["status"] for v in s.kstatus_failing] == ["Failed", "Failed"], s.kstatus_failing
    # after the fix: Stalled False on both, `wait` ready once the graph is, kstatus no longer Failed
    for obj in (s.recovered_dcd, s.recovered_dgd):
        assert stalled(obj, "False", case.cleared), obj
    code, result = s.fixed
    assert code == 0 and result["result"] == "ready", result
    if s.kstatus_fixed is not None:
        assert [v["status"] for v in s.kstatus_fixed] == ["Current", "Current"], s.kstatus_fixed
    # what run said: the diagnosis, then its end
    said = [(line.get("diagnosis", ""), line["pod"] is not None) for line in s.lines]
    assert said and said[0] == (case.diagnosis, True) and not said[-1][1], s.lines


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_helm_wait_gives_up_on_a_real_diagnosis_and_succeeds_once_the_fixed_graph_is_ready(
    session: Session, case: Case
) -> None:
    s = seen_running(session, case)
    if s.install is None or s.upgrade is None:
        pytest.skip("helm is not to be had here (tests/waiters_bin.py says how)")
    output = s.install.output()
    assert s.install.process.returncode != 0, output
    # it gave up on crashwatch's word (kstatus's Failed, the Stalled message), not at its 10 minute timeout
    assert f"DynamoGraphDeployment/{s.namespace}/llm not ready. status: Failed" in output, output
    assert conditions(s.stalled_dgd)["Stalled"]["message"] in output, output
    assert s.install.exited is not None and s.dcd_stalled is not None
    assert s.install.exited - s.install.started < 300, output
    output = s.upgrade.output()
    assert s.upgrade.process.returncode == 0, output


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_argo_cd_reads_a_real_diagnosis_degraded_and_the_fixed_graph_healthy(session: Session, case: Case) -> None:
    s = seen_running(session, case)
    for kind, obj in ((DGD, s.stalled_dgd), (DCD, s.stalled_dcd)):
        status, message = health(kind, obj)
        assert status == "Degraded" and case.words in message, (kind, status, message)
    assert health(DGD, s.fixed_dgd)[0] == "Healthy", s.fixed_dgd
    assert health(DCD, s.fixed_dcd)[0] == "Healthy", s.fixed_dcd


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_replay_of_the_record_and_of_its_trimmed_copy_says_what_run_said(session: Session, case: Case) -> None:
    s = seen_running(session, case)
    assert s.lines and s.lines[0].get("diagnosis", "") == case.diagnosis, s.lines
    assert summary(s.replayed) == summary(s.lines), (s.replayed, s.lines)
    assert summary(s.replayed_trimmed) == summary(s.lines), (s.replayed_trimmed, s.lines)


@pytest.mark.parametrize("slow", SLOW, ids=[slow.name for slow in SLOW])
def test_a_slow_but_healthy_start_trips_no_diagnosis_with_the_default_graces(session: Session, slow: Slow) -> None:
    s = session.slow[slow.name]
    assert s.shown, s  # it was slow: the kubelet said so
    if slow.name == "ready-after-60s":
        assert s.ready_after is not None and s.ready_after >= READY_AFTER, s
    else:  # a manifest refused at least twice (kubelet's retries, ErrImagePull and ImagePullBackOff), then pulled
        assert session.refused >= 2 and session.served >= 1, (session.refused, session.served)
    assert s.stalled == [], s.stalled  # never Stalled
    assert s.lines == [], s.lines  # `run` said nothing
    code, result = s.waited
    assert code == 0 and result["result"] == "ready", result  # `wait` waited it out and returned ready
