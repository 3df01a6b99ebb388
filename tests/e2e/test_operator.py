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
from kube import CrashLoopingKubelet, Kube, eventually, make_ready
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
    if multinode:
        spec["multinode"] = {"nodeCount": multinode}
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
    dgd = kube.get(f"{dgds(namespace)}/llm")
    assert dgd["status"]["state"] in ("pending", "initializing")


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
            # the Pod stays down after its last crash: whatever the operator wrote last is answered
            eventually(
                lambda: kube.get(f"{dgds(namespace)}/llm")["status"]["state"] == "failed", 30, "failed at the end"
            )
            ended = audit_now()
            restarts = max(kubelet.restarts.values())
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
    # and once the Pod stays down, all is quiet
    quiet_from = audit_now()
    time.sleep(5)
    after = status_writes(controllers.plane, CRASHWATCH, quiet_from, audit_now())
    assert after["dgd"] + after["dcd"] == 0, after
    loop_at = next(at for count, at in kubelet.crashed_at if count >= 2)  # down after its second restart
    print(f"the DGD read `failed` {seen[first_failed].at - loop_at:.3f}s after the crash loop began", file=sys.stderr)
    overwritten = gaps(seen)
    print(f"the DGD's `failed` overwritten {len(overwritten)} times, put back after {overwritten}", file=sys.stderr)
    assert seen[-1].obj["status"]["state"] == "failed"


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


def minutes(since: str, until: str) -> float:
    return (datetime.datetime.fromisoformat(until) - datetime.datetime.fromisoformat(since)).total_seconds() / 60
