"""crashwatch beside the real Dynamo operator and the real LeaderWorkerSet controller (tests/operators.py),
with no node: kube-controller-manager makes the Pods, and tests/kube.py's CrashLoopingKubelet reports them
as a real kubelet reports a crash-looping container (running and Ready for a moment, crashed through the
backoff, CrashLoopBackOff just before the restart).

What is shown: the operator turns a DGD into DCDs, Deployments and Services; while a worker crash-loops, the
DGD reads `failed` and DGD and DCD `Stalled=True` soon, and no version of the DGD that a waiter could read
after that is healthy with kstatus Current, whatever the operator rewrites; the status writes per minute of
crashwatch and of the operator, from the API server's audit log; and a real LWS group recreated at each
first restart is diagnosed as a crash loop.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import operators
import pytest
from dynamo import GRAPH, conditions, dcds, dgds
from kube import ApiError, CrashLoopingKubelet, Kube, eventually, kubelet_running, make_ready
from operators import Controllers, Recorder, per_minute, status_writes
from waiters_bin import waiters_bin
from watcher import Watcher, kubeconfig_args

pytestmark = pytest.mark.e2e

V = "nvidia.com/v1beta1"
IMAGE = "registry.invalid/dynamo-runtime:1"
CRASHWATCH = "crashwatch-operator-tier"  # crashwatch's identity in the audit log


@pytest.fixture(scope="module")
def controllers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Controllers]:
    yield from operators.started(tmp_path_factory)


@pytest.fixture
def kube(controllers: Controllers) -> Kube:
    return controllers.kube()


@pytest.fixture
def namespace(kube: Kube, controllers: Controllers) -> Iterator[str]:
    import uuid

    name = f"t-{uuid.uuid4().hex[:10]}"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield name
    finally:
        controllers.check_alive()
        kube.delete(f"/api/v1/namespaces/{name}")


def component(name: str, kind: str, command: list[str], multinode: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "type": kind,
        "replicas": 1,
        "podTemplate": {"spec": {"containers": [{"name": "main", "image": IMAGE, "command": command}]}},
    }
    if multinode:  # the operator renders the leader's and workers' commands from the main container's args
        spec["multinode"] = {"nodeCount": multinode}
        spec["podTemplate"]["spec"]["containers"][0]["args"] = ["--model", "Qwen/Qwen3-0.6B"]
    return spec


def graph(name: str, *components: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": V,
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": name},
        "spec": {"backendFramework": "vllm", "components": list(components)},
    }


def pods(kube: Kube, namespace: str, selector: str) -> list[dict[str, Any]]:
    return list(kube.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")["items"])


def by_type(kind: str) -> str:
    return f"nvidia.com/dynamo-component-type%3D{kind}"


def is_stalled(obj: dict[str, Any]) -> bool:
    return conditions(obj).get("Stalled", {}).get("status") == "True"


def crashwatch(controllers: Controllers, namespace: str) -> Watcher:
    kubeconfig = controllers.user_kubeconfig(CRASHWATCH)
    # the default recovery window (90 s): the worker is Ready for a moment between crashes, as on a node
    return Watcher("run", "-n", namespace, "-o", "json", "--recovery-window", "90s", *kubeconfig_args(kubeconfig))


def audit_now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


def test_the_operator_makes_components_deployments_services_and_pods(
    controllers: Controllers, kube: Kube, namespace: str
) -> None:
    kube.create(
        f"/apis/{V}/namespaces/{namespace}/dynamographdeployments",
        graph(
            "llm",
            component("Frontend", "frontend", ["python3", "-m", "dynamo.frontend"]),
            component("VllmDecodeWorker", "worker", ["python3", "-m", "dynamo.vllm"]),
        ),
    )
    made = eventually(lambda: len(kube.get(dcds(namespace))["items"]) == 2, 120, "two DCDs")
    print(f"DCDs made in {made:.1f}s", file=sys.stderr)
    names = sorted(d["metadata"]["name"] for d in kube.get(dcds(namespace))["items"])
    assert names[0] == "llm-frontend" and names[1].startswith("llm-vllmdecodeworker-")
    for dcd in kube.get(dcds(namespace))["items"]:
        assert dcd["metadata"]["labels"][GRAPH] == "llm"
    eventually(
        lambda: len(kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments")["items"]) == 2, 60, "Deployments"
    )
    deployments = sorted(
        d["metadata"]["name"] for d in kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments")["items"]
    )
    assert deployments == names
    eventually(lambda: len(kube.get(f"/api/v1/namespaces/{namespace}/services")["items"]) >= 1, 60, "Services")
    eventually(lambda: len(pods(kube, namespace, f"{GRAPH}%3Dllm")) == 2, 60, "Pods")
    worker = pods(kube, namespace, by_type("worker"))[0]
    # it adds probes to a worker's container: Ready only once its server answers
    assert "readinessProbe" in worker["spec"]["containers"][0]
    # no Pod is Ready (no kubelet runs them): the operator says the graph is pending
    eventually(lambda: kube.get(f"{dgds(namespace)}/llm").get("status", {}).get("state") == "pending", 60, "pending")


def test_a_crash_loop_beside_the_operator_reads_failed_and_never_healthy(
    controllers: Controllers, kube: Kube, namespace: str
) -> None:
    kube.create(
        f"/apis/{V}/namespaces/{namespace}/dynamographdeployments",
        graph(
            "llm",
            component("Frontend", "frontend", ["python3", "-m", "dynamo.frontend"]),
            component("VllmDecodeWorker", "worker", ["sh", "-c", "exit 1"]),
        ),
    )
    eventually(lambda: len(pods(kube, namespace, f"{GRAPH}%3Dllm")) == 2, 120, "the graph's Pods")
    frontend = pods(kube, namespace, by_type("frontend"))[0]
    make_ready(kube, namespace, frontend["metadata"]["name"])
    dgd_versions = Recorder(kube, dgds(namespace))
    dcd_versions = Recorder(kube, dcds(namespace))
    kubelet: CrashLoopingKubelet | None = None
    try:
        with crashwatch(controllers, namespace) as w:
            w.wait_synced(60)
            began = audit_now()
            kubelet = CrashLoopingKubelet(kube, namespace, lambda: pods(kube, namespace, by_type("worker")))
            # restart 2 makes it a crash loop; then keep going and watch what everyone writes
            eventually(lambda: kubelet is not None and kubelet.crashes >= 8, 240, "eight crashes", step=0.5)
            kubelet.stop()
            ended = audit_now()
            restarts = max(kubelet.restarts.values())
            # the Pod stays down after its last crash: the writes die down (no loop), and what the
            # operator wrote last has been answered
            settled = quiet(controllers, seconds=5, timeout=90)
            assert kube.get(f"{dgds(namespace)}/llm")["status"]["state"] == "failed"
            print(f"quiet {settled:.1f}s after the last crash", file=sys.stderr)
    finally:
        if kubelet is not None:
            kubelet.stop()
        dgd_versions.close()
        dcd_versions.close()
    assert not kubelet.errors, kubelet.errors

    seen = dgd_versions.snapshot("llm")
    first_failed = next(i for i, s in enumerate(seen) if s.obj.get("status", {}).get("state") == "failed")
    after = [s.obj for s in seen[first_failed:]]
    assert all(is_stalled(obj) for obj in after), "Stalled=True held on the DGD from the first failure on"
    worker_dcd = [s.obj for s in dcd_versions.snapshot() if "vllmdecodeworker" in s.obj["metadata"]["name"]]
    assert any(is_stalled(obj) for obj in worker_dcd)
    # kstatus on every version of the DGD a waiter could have read from the first failure on
    verdicts = kstatus_verdicts(waiters_bin(), after)
    healthy_and_current = [
        (obj["status"].get("state"), v["status"])
        for obj, v in zip(after, verdicts, strict=True)
        if v["status"] == "Current" or (obj["status"].get("state") == "successful" and v["status"] != "Failed")
    ]
    assert not healthy_and_current
    assert all(v["status"] == "Failed" for v in verdicts)
    # the writes, from the audit log
    ours = status_writes(controllers.plane, CRASHWATCH, began, ended)
    theirs = status_writes(controllers.plane, operators.OPERATOR_USER, began, ended)
    print(
        f"{restarts} restarts in {minutes(began, ended):.2f} min; status writes (409s included): "
        f"crashwatch {ours}, {per_minute(ours, began, ended)}/min; "
        f"operator {theirs}, {per_minute(theirs, began, ended)}/min",
        file=sys.stderr,
    )
    # no write loop: one write per object per new finding (a restart, and the first one or two), and one
    # per operator rewrite it answers (each of which the operator made on a trigger of its own, or set off
    # by one of our DCD writes)
    assert ours["dcd"] <= restarts + 3 + theirs["dcd"]
    assert ours["dgd"] <= restarts + 3 + theirs["dgd"]
    loop_at = next(at for count, at in kubelet.crashed_at if count >= 2)  # down after its second restart
    took = seen[first_failed].at - loop_at
    print(f"the DGD read `failed` {took:.3f}s after the crash loop began", file=sys.stderr)
    assert took < 30  # a generous bound: it takes a fraction of a second even on a loaded machine
    overwritten = gaps(seen)
    print(f"the DGD's `failed` overwritten {len(overwritten)} times, put back after {overwritten}", file=sys.stderr)
    assert overwritten[-1] != float("inf") and seen[-1].obj["status"]["state"] == "failed"


def kstatus_verdicts(waiters: Path, objects: list[dict[str, Any]]) -> list[dict[str, str]]:
    """kstatus's own verdict (sigs.k8s.io/cli-utils status.Compute, tests/waiters) on each object."""
    done = subprocess.run(
        [str(waiters / "kstatus")], input=json.dumps(objects).encode(), capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr.decode()
    verdicts = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert len(verdicts) == len(objects)
    return verdicts


def gaps(seen: list[operators.Seen]) -> list[float]:
    """After the first `failed`: how long each stretch of versions that did not say `failed` lasted (from
    the write that took `failed` away to the write that put it back; open at the end: until the end)."""
    out = []
    since: float | None = None
    failed_once = False
    for s in seen:
        failed = s.obj.get("status", {}).get("state") == "failed"
        if failed:
            if since is not None:
                out.append(s.at - since)
            since, failed_once = None, True
        elif failed_once and since is None:
            since = s.at
    if since is not None:
        out.append(float("inf"))
    return out


def quiet(controllers: Controllers, seconds: float, timeout: float) -> float:
    """Wait for a stretch of `seconds` in which neither crashwatch nor the operator wrote a status; the
    time it took. Fails after `timeout`: the two would be feeding each other."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        since = audit_now()
        time.sleep(seconds)
        until = audit_now()
        writes = [
            status_writes(controllers.plane, user, since, until) for user in (CRASHWATCH, operators.OPERATOR_USER)
        ]
        if not any(w["dgd"] or w["dcd"] for w in writes):
            return time.monotonic() - began - seconds
    raise AssertionError(f"status writes went on for {timeout:.0f}s after the last crash")


def minutes(since: str, until: str) -> float:
    return (datetime.datetime.fromisoformat(until) - datetime.datetime.fromisoformat(since)).total_seconds() / 60


# --- real LeaderWorkerSet groups -------------------------------------------------------------------------------

LWS = "leaderworkerset.sigs.k8s.io"
LWS_NAME = f"{LWS}/name"


class GroupKubelet:
    """Plays the kubelet for the Pods of one LeaderWorkerSet group: each incarnation (a new leader uid) runs
    for `up` seconds, then its worker's container exits 1 and is restarted once, as a kubelet reports it
    (running again, restartCount 1, the crash in lastState). The real LWS controller then recreates the
    group. After `failures` incarnations the next one stays up, Ready."""

    def __init__(self, kube: Kube, namespace: str, lws: str, failures: int, up: float = 1.0) -> None:
        import threading

        self.kube, self.namespace, self.lws, self.failures, self.up = kube, namespace, lws, failures, up
        self.leaders: list[str] = []  # the leader uids seen, in order
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _group(self) -> tuple[dict[str, Any], dict[str, Any]] | None:
        live = [
            p
            for p in pods(self.kube, self.namespace, f"{LWS_NAME}%3D{self.lws}")
            if not p["metadata"].get("deletionTimestamp")
        ]
        leader = [p for p in live if p["metadata"]["labels"].get(f"{LWS}/worker-index") == "0"]
        worker = [p for p in live if p["metadata"]["labels"].get(f"{LWS}/worker-index") == "1"]
        if len(leader) != 1 or len(worker) != 1:
            return None
        return leader[0], worker[0]

    def _set(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        try:
            self.kube.merge_patch(
                f"/api/v1/namespaces/{self.namespace}/pods/{name}/status",
                {"metadata": {"uid": pod["metadata"]["uid"]}, "status": status},
            )
        except ApiError as exc:
            if exc.status not in (404, 409):  # gone, or already replaced by the next incarnation
                self.errors.append(str(exc))

    def _run(self) -> None:
        while not self._stop.is_set():
            group = self._group()
            if group is None or group[0]["metadata"]["uid"] in self.leaders:
                self._stop.wait(0.05)
                continue
            leader, worker = group
            self.leaders.append(leader["metadata"]["uid"])
            name = worker["spec"]["containers"][0]["name"]
            lead = leader["spec"]["containers"][0]["name"]
            healthy = len(self.leaders) > self.failures
            self._set(leader, kubelet_running(0, name=lead))
            self._set(worker, kubelet_running(0, name=name))
            if healthy or self._stop.wait(self.up):
                return
            # the worker's container exits 1, and the kubelet starts it again: restartCount 1
            self._set(worker, kubelet_running(1, last_exit=1, ready=False, name=name))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def test_a_real_lws_group_recreated_at_each_first_restart_is_a_crash_loop(
    controllers: Controllers, kube: Kube, namespace: str
) -> None:
    kube.create(
        f"/apis/{V}/namespaces/{namespace}/dynamographdeployments",
        graph(
            "llm",
            component("Frontend", "frontend", ["python3", "-m", "dynamo.frontend"]),
            component("VllmDecodeWorker", "worker", ["python3", "-m", "dynamo.vllm"], multinode=2),
        ),
    )
    lwss = f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{namespace}/leaderworkersets"
    eventually(lambda: len(kube.get(lwss)["items"]) == 1, 120, "the operator's LeaderWorkerSet")
    lws = kube.get(lwss)["items"][0]
    name = lws["metadata"]["name"]
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    eventually(lambda: len(pods(kube, namespace, f"{LWS_NAME}%3D{name}")) == 2, 120, "the group's two Pods")
    frontend = pods(kube, namespace, by_type("frontend"))[0]
    make_ready(kube, namespace, frontend["metadata"]["name"])
    dcd_name = next(
        d["metadata"]["name"] for d in kube.get(dcds(namespace))["items"] if "worker" in d["metadata"]["name"]
    )
    group: GroupKubelet | None = None
    with crashwatch(controllers, namespace) as w:
        w.wait_synced(60)
        group = GroupKubelet(kube, namespace, name, failures=3)
        try:
            # what crashwatch writes (the operator rewrites `Available` and `state` on its own triggers, and
            # crashwatch answers at once: a read at any one moment may fall between the two)
            seen: dict[str, dict[str, Any]] = {}

            def reported(path: str, key: str, ok: Any) -> bool:
                seen[key] = kube.get(path)
                return bool(ok(seen[key]))

            eventually(
                lambda: reported(
                    f"{dcds(namespace)}/{dcd_name}",
                    "dcd",
                    lambda o: is_stalled(o) and conditions(o)["Available"]["reason"] == "ContainerCrashLooping",
                ),
                120,
                "the DCD reporting the loop",
                step=0.1,
            )
            eventually(
                lambda: reported(f"{dgds(namespace)}/llm", "dgd", lambda o: o["status"]["state"] == "failed"),
                60,
                "the DGD failed",
                step=0.1,
            )
            dcd, dgd = seen["dcd"], seen["dgd"]
            w.wait_line('"recreations"', 30)
            # the group's fourth incarnation comes up and stays Ready: the loop is over
            eventually(lambda: group is not None and len(group.leaders) >= 4, 120, "the fourth incarnation")
            eventually(
                lambda: not is_stalled(kube.get(f"{dcds(namespace)}/{dcd_name}")), 60, "the DCD cleared", step=0.2
            )
        finally:
            group.stop()
        lines = [json.loads(line) for line in w.snapshot(w.out) if line.startswith("{")]
    assert not group.errors, group.errors
    assert conditions(dcd)["Available"]["reason"] == "ContainerCrashLooping"
    assert "is recreation-looping" in conditions(dcd)["Stalled"]["message"]
    assert is_stalled(dgd) and conditions(dgd)["Ready"]["reason"] == "component_crash_looping"
    looping = next(line for line in lines if line.get("kind") == "component" and line.get("crash_looping"))
    assert looping["lws"] == name and looping["group"] == "0" and looping["recreations"] >= 2
    assert looping["exit_code"] == 1 and looping["pod"] == f"{name}-0-1"
    assert len(set(group.leaders)) == len(group.leaders) >= 4  # each incarnation's leader a new uid
