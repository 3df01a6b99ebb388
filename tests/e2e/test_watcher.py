"""The live watcher against the real control plane: `crashwatch run`, `tail` and `record` as users run them."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import envtest
import pytest
import yaml
from cli import run
from dynamo import (
    dcd_available,
    dcds,
    dgd_state,
    dgds,
    labelled_pod,
    make_graph,
    not_ready,
    other_condition,
    pods_of,
)
from kube import ApiError, Kube, crash_loop, eventually, make_ready
from tcpproxy import TcpProxy
from watcher import Watcher, http_get

pytestmark = pytest.mark.e2e


def wait(predicate: Any, timeout: float = 30, what: str = "a condition") -> None:
    eventually(predicate, timeout, what)


def failed(kube: Kube, namespace: str) -> bool:
    state, ready = dgd_state(kube, namespace)
    return state == "failed" and ready["reason"] == "component_crash_looping"


def crash_looping(kube: Kube, namespace: str, dcd: str) -> bool:
    return bool(dcd_available(kube, namespace, dcd)["reason"] == "ContainerCrashLooping")


def json_lines(watcher: Watcher) -> list[dict[str, Any]]:
    return [json.loads(line) for line in watcher.snapshot(watcher.out)]


def watch(kubeconfig: Path, namespace: str, command: str = "run", *extra: str) -> Watcher:
    return Watcher(command, "-n", namespace, "-o", "json", "--kubeconfig", str(kubeconfig), *extra)


def test_a_crash_loop_fails_the_dcd_and_the_graph_and_the_fix_clears_both(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    with watch(control_plane.kubeconfig, namespace) as w:
        w.wait_synced()
        make_graph(kube, namespace)
        wait(lambda: len(pods_of(kube, namespace, "llm-worker")) == 1, 60, "the Deployment's Pod")
        old = pods_of(kube, namespace, "llm-worker")[0]["metadata"]["name"]
        crash_loop(kube, namespace, old)  # restartCount 1, then 2: CrashLoopBackOff after exit 1
        wait(lambda: crash_looping(kube, namespace, "llm-worker") and failed(kube, namespace), 10, "failed")
        available = dcd_available(kube, namespace, "llm-worker")
        assert (available["status"], available["observedGeneration"]) == ("False", 1)
        assert available["message"] == f"container main of Pod {old} restarted 2 times and is down after exit code 1"
        _, ready = dgd_state(kube, namespace)
        assert ready["message"] == f"Components crash-looping: worker: {available['message']}"
        # the kstatus condition Helm 4, Flux and kpt fail on, with the same findings
        for path, reason, message in (
            (f"{dcds(namespace)}/llm-worker", "ContainerCrashLooping", available["message"]),
            (f"{dgds(namespace)}/llm", "ComponentCrashLooping", ready["message"]),
        ):
            stalled = next(c for c in kube.get(path)["status"]["conditions"] if c["type"] == "Stalled")
            assert (stalled["status"], stalled["reason"], stalled["message"]) == ("True", reason, message)
        # the fix: a rollout brings a new Pod, which becomes Ready; the old one is deleted
        kube.merge_patch(
            f"/apis/apps/v1/namespaces/{namespace}/deployments/llm-worker",
            {"spec": {"template": {"metadata": {"annotations": {"fix": "1"}}}}},
        )
        wait(lambda: len(pods_of(kube, namespace, "llm-worker")) == 2, 60, "the new Pod")
        new = next(
            p["metadata"]["name"] for p in pods_of(kube, namespace, "llm-worker") if p["metadata"]["name"] != old
        )
        make_ready(kube, namespace, new)
        try:  # the ReplicaSet controller may have been first: an unscheduled Pod goes at once
            kube.delete(f"/api/v1/namespaces/{namespace}/pods/{old}", grace=0)
        except ApiError as exc:
            assert exc.status == 404
        wait(lambda: not crash_looping(kube, namespace, "llm-worker") and not failed(kube, namespace), 10, "cleared")
        lines = json_lines(w)
    # cleared in the operator's words, the DCD from the Deployment's availability, the DGD from the DCDs'
    available = dcd_available(kube, namespace, "llm-worker")
    state, ready = dgd_state(kube, namespace)
    if available["reason"] == "DeploymentReady":
        assert available["status"] == "True" and (state, ready["reason"]) == ("successful", "all_resources_are_ready")
    else:
        assert available["reason"] == "DeploymentNotReady"
        assert (state, ready["reason"]) == ("pending", "some_resources_are_not_ready")
        assert ready["message"] == "Resources not ready: llm-worker: Deployment is not ready"
    # the condition crashwatch does not own came through both writes untouched
    dcd = kube.get(f"{dcds(namespace)}/llm-worker")
    assert [c for c in dcd["status"]["conditions"] if c["type"] not in ("Available", "Stalled")] == [other_condition()]
    # and the kstatus condition crashwatch owns says the crash loop is over, on both
    for obj in (dcd, kube.get(f"{dgds(namespace)}/llm")):
        stalled = next(c for c in obj["status"]["conditions"] if c["type"] == "Stalled")
        assert (stalled["status"], stalled["reason"], stalled["observedGeneration"]) == ("False", "NoCrashLoop", 1)
    # one line per change, in order, naming the DCD
    summary = [(line["kind"], line.get("crash_looping", line.get("failed"))) for line in lines]
    assert summary == [("component", True), ("graph", True), ("component", False), ("graph", False)]
    assert lines[0]["dcd"] == "llm-worker" and lines[0]["pod"] == old and lines[0]["restarts"] == 2


def test_a_restarted_watcher_writes_nothing_that_is_already_right_and_ends_in_the_same_status(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, "llm-worker-0", "llm", "worker")
    with watch(control_plane.kubeconfig, namespace) as first:
        first.wait_synced()
        crash_loop(kube, namespace, "llm-worker-0")
        wait(lambda: failed(kube, namespace), 10, "failed")
        wait(lambda: len(first.writes()) == 2, 5, "two writes")
    versions = (kube.get(f"{dcds(namespace)}/llm-worker"), kube.get(f"{dgds(namespace)}/llm"))
    with watch(control_plane.kubeconfig, namespace) as second:
        second.wait_synced()
        time.sleep(2)
        assert second.writes() == []
        assert (kube.get(f"{dcds(namespace)}/llm-worker"), kube.get(f"{dgds(namespace)}/llm")) == versions
        assert second.snapshot(second.out) != []  # it did see the crash loop, and said so
    # the fix comes while no watcher runs; the next one clears both, once each
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/llm-worker-0", grace=0)
    with watch(control_plane.kubeconfig, namespace) as third:
        third.wait_synced()
        wait(lambda: not failed(kube, namespace) and not crash_looping(kube, namespace, "llm-worker"), 10, "cleared")
        time.sleep(1)
        assert len(third.writes()) == 2
    state, ready = dgd_state(kube, namespace)
    assert (state, ready["reason"]) == ("pending", "some_resources_are_not_ready")


def test_the_watcher_resumes_after_the_api_server_restarts_and_catches_a_crash_loop_meanwhile(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, "llm-worker-0", "llm", "worker")
    with watch(control_plane.kubeconfig, namespace) as w:
        w.wait_synced()
        control_plane.restart_apiserver()
        crash_loop(kube, namespace, "llm-worker-0")  # as soon as the server is back
        wait(lambda: failed(kube, namespace), 60, "failed after the restart")
        w.wait_line('"crash_looping":true')
        lines = json_lines(w)
    assert [(line["kind"], line.get("crash_looping", line.get("failed"))) for line in lines] == [
        ("component", True),
        ("graph", True),
    ]


@pytest.fixture(scope="module")
def uncached_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[envtest.ControlPlane]:
    """A control plane whose API server serves watches from etcd itself (no watch cache): then a watch
    from a resourceVersion that etcd compacted away is answered with 410 Gone, as in a busy cluster."""
    try:
        binaries = envtest.binaries()
    except envtest.ControlPlaneUnavailable as exc:
        pytest.skip(str(exc))
    plane = envtest.ControlPlane(binaries, tmp_path_factory.mktemp("uncached"), apiserver_args=["--watch-cache=false"])
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()


def test_compaction_past_the_watchers_resource_version_relists_without_lost_or_repeated_verdicts(
    uncached_plane: envtest.ControlPlane,
) -> None:
    kube = uncached_plane.kube()
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    make_graph(kube, namespace, components=("frontend", "worker"), deployments=False)
    for component in ("frontend", "worker"):
        labelled_pod(kube, namespace, f"llm-{component}-0", "llm", component)
    port = int(uncached_plane.url.rsplit(":", 1)[1])
    proxy = TcpProxy(port)
    config = uncached_plane.user_kubeconfig("partitioned", ("system:masters",), server=proxy.url)
    try:
        with watch(config, namespace) as w:
            w.wait_synced()
            crash_loop(kube, namespace, "llm-worker-0")
            wait(lambda: crash_looping(kube, namespace, "llm-worker"), 10, "worker failed")
            proxy.cut()  # the watcher is cut off; meanwhile the worker is fixed and the frontend crashes
            kube.delete(f"/api/v1/namespaces/{namespace}/pods/llm-worker-0", grace=0)
            crash_loop(kube, namespace, "llm-frontend-0")
            uncached_plane.compact_etcd()  # the history the watcher would resume from is gone
            time.sleep(1)
            proxy.restore()
            wait(lambda: crash_looping(kube, namespace, "llm-frontend"), 60, "frontend failed")
            wait(lambda: not crash_looping(kube, namespace, "llm-worker"), 10, "worker cleared")
            wait(lambda: dgd_state(kube, namespace)[1]["message"].startswith("Components crash-looping: frontend:"))
            time.sleep(0.5)
            lines = json_lines(w)
            assert "is gone, listing again" in w.stderr()
    finally:
        proxy.close()
    components = [(line["component"], line["crash_looping"]) for line in lines if line["kind"] == "component"]
    assert components == [("worker", True), ("worker", False), ("frontend", True)]
    graphs = [tuple(line["components"]) for line in lines if line["kind"] == "graph"]
    assert graphs[0] == ("worker",) and graphs[-1] == ("frontend",)
    assert all(a != b for a, b in itertools.pairwise(graphs))  # no line repeats its predecessor


def test_a_failure_another_writer_overwrites_is_reasserted_at_once_then_with_growing_backoff(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, "llm-worker-0", "llm", "worker")
    with watch(control_plane.kubeconfig, namespace) as w:
        w.wait_synced()
        crash_loop(kube, namespace, "llm-worker-0")
        wait(lambda: crash_looping(kube, namespace, "llm-worker"), 10, "failed")
        seen = [time.monotonic()]
        for _ in range(3):
            # the operator puts its own verdict back, as it does on each reconcile
            current = kube.get(f"{dcds(namespace)}/llm-worker")["status"]["conditions"]
            overwritten = [not_ready() if c["type"] == "Available" else c for c in current]
            kube.merge_patch(f"{dcds(namespace)}/llm-worker/status", {"status": {"conditions": overwritten}})
            wait(lambda: crash_looping(kube, namespace, "llm-worker"), 15, "reasserted")
            seen.append(time.monotonic())

        def dcd_writes() -> int:
            return len([line for line in w.writes() if "DynamoComponentDeployment" in line])

        # a write's line is printed once its answer is in, which may be after this test read the status back
        wait(lambda: dcd_writes() >= 4, 10, "the fourth write said")
        time.sleep(1)
        writes = dcd_writes()
    gaps = [b - a for a, b in itertools.pairwise(seen)]
    assert writes == 4  # the first write and one per overwrite: no tight loop
    assert gaps[1] > gaps[0] + 0.5 and gaps[2] > gaps[1] + 0.5  # at once, then 1 s, 2 s after the last write


def test_tail_needs_only_read_rights_and_writes_nothing(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": ["nvidia.com"],
            "resources": ["dynamographdeployments", "dynamocomponentdeployments"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    role = f"viewer-{namespace}"
    kube.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": role}, "rules": rules},
    )
    kube.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"kind": "User", "name": role, "apiGroup": "rbac.authorization.k8s.io"}],
        },
    )
    viewer = control_plane.user_kubeconfig(role)
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, "llm-worker-0", "llm", "worker")
    before = kube.get(f"{dcds(namespace)}/llm-worker")
    with watch(viewer, namespace, "tail") as w:
        w.wait_synced()
        crash_loop(kube, namespace, "llm-worker-0")
        w.wait_line('"kind":"graph"')
        time.sleep(0.5)
    assert [line["kind"] for line in json_lines(w)] == ["component", "graph"]
    assert kube.get(f"{dcds(namespace)}/llm-worker") == before
    # the same rights are not enough for everything-namespaces, and it says so
    with Watcher("tail", "-A", "--kubeconfig", str(viewer)) as w:
        w.wait_for(lambda: w.process.poll() is not None, 30, "exit")
    assert w.process.returncode == 77
    assert "not allowed to list and watch" in w.stderr()


def test_a_recorded_session_replays_to_the_same_lines(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    record = tmp_path / "session.jsonl"
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, "llm-worker-0", "llm", "worker")
    with (
        watch(control_plane.kubeconfig, namespace, "tail") as tail,
        Watcher(
            "record",
            "-n",
            namespace,
            "--format",
            "json",
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "-o",
            str(record),
        ) as recorder,
    ):
        tail.wait_synced()
        recorder.wait_synced()
        crash_loop(kube, namespace, "llm-worker-0", restarts=3)
        make_ready(kube, namespace, "llm-worker-0")
        kube.delete(f"/api/v1/namespaces/{namespace}/pods/llm-worker-0", grace=0)
        for w in (tail, recorder):
            w.wait_line('"failed":false')
        time.sleep(0.5)
    assert recorder.stop() == 0
    replayed = run("replay", "-o", "json", str(record))
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.decode().splitlines() == recorder.snapshot(recorder.out)  # times included

    def timeless(lines: list[str]) -> list[dict[str, Any]]:
        return [{k: v for k, v in json.loads(line).items() if k != "time"} for line in lines]

    assert timeless(replayed.stdout.decode().splitlines()) == timeless(tail.snapshot(tail.out))
    assert len(tail.snapshot(tail.out)) == 6  # looping (2 restarts, then 3) and recovered, component and graph


def test_the_watcher_pods_rbac_is_enough_to_run(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    """k8s/watcher's service account, role and binding, as applied: `run` with that identity writes
    both statuses, and the Deployment manifest passes the API server's validation."""
    folder = Path(__file__).resolve().parent.parent.parent / "k8s" / "watcher"
    manifests = {path.stem: yaml.safe_load(path.read_text()) for path in folder.glob("*.yaml")}
    if not any(n["metadata"]["name"] == "crashwatch" for n in kube.get("/api/v1/namespaces")["items"]):
        kube.create("/api/v1/namespaces", manifests["namespace"])
    kube.create("/api/v1/namespaces/crashwatch/serviceaccounts", manifests["serviceaccount"])
    kube.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", manifests["clusterrole"])
    kube.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", manifests["clusterrolebinding"])
    kube.create("/apis/apps/v1/namespaces/crashwatch/deployments?dryRun=All", manifests["deployment"])
    token = kube.create(
        "/api/v1/namespaces/crashwatch/serviceaccounts/crashwatch/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )["status"]["token"]
    config = envtest.write_kubeconfig(tmp_path / "sa", control_plane.url, control_plane.certs["ca.crt"], token=token)
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, "llm-worker-0", "llm", "worker")
    with watch(config, namespace, "run", "--http-address", "127.0.0.1:0") as w:
        w.wait_synced()
        url = w.served_at()
        assert http_get(f"{url}/readyz") == (200, "ok\n")
        crash_loop(kube, namespace, "llm-worker-0")
        wait(lambda: failed(kube, namespace) and crash_looping(kube, namespace, "llm-worker"), 10, "failed")
        time.sleep(0.5)
        status, metrics = http_get(f"{url}/metrics")
    assert len(w.writes()) == 2
    assert status == 200 and 'crashwatch_status_writes_total{result="written"} 2.0' in metrics
    assert f'crashwatch_crash_looping_components{{graph="llm",namespace="{namespace}"}} 1.0' in metrics
    assert "not allowed" not in w.stderr() and "cannot write" not in w.stderr()
