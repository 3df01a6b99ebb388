"""crashwatch beside the real Dynamo operator on a real node (tests/operators.py on tests/realnode.py): the
operator turns a DGD into a DCD, a Deployment and Pods, and a real kubelet runs them, with its own
backoffs, and the HTTP startup, readiness and liveness probes the operator puts on every worker.

The worker is busybox: it serves the probe paths with busybox `httpd` on the system port for a moment and
exits 1, so it is a real crash loop that is Ready for a moment between crashes (the operator then flips the
graph to `successful`). What is shown, with the waiters' own readings (kstatus, the Argo CD checks,
`crashwatch wait`, `helm install --wait`): the graph reads failed soon after the crash that makes the loop,
and no version of the DGD from then on is healthy or kstatus Current while the worker crash-loops, whatever
the operator rewrites; after the fix (a chart upgrade with a worker that stays up) it reads healthy soon
after the operator's `successful`; `crashwatch record` of it replays to the run's verdicts; an operator
restart and a crashwatch restart mid-loop change nothing a waiter reads; and a real LeaderWorkerSet group,
recreated by the real LWS controller at each first restart, is diagnosed as a crash loop and cleared once
the group stays Ready; a healthy LWS of two groups scaled down to one, or rolled out twice in a row (the
whole of each group recreated each time), is no recreation loop to crashwatch, the DCD, the DGD or kstatus;
and a rollout that fixes a looping group clears the verdict once the new group is Ready, its `crashwatch
record` replaying to the run's verdicts. bench/realnode_operator.py measures the status writes of a longer
crash loop.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import gzip
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import argocd
import operators
import pytest
import realnode
import yaml
from cli import run
from dynamo import conditions, dcds, dgds
from helm import Helm
from kube import ApiError, Kube, eventually
from operators import Controllers, Recorder, Seen
from waiters_bin import waiters_bin
from watcher import Watcher, kubeconfig_args

pytestmark = pytest.mark.e2e

CHART = Path(__file__).resolve().parent / "charts" / "dynamo-graph-operator"
GRAPH = "llm"
CRASHWATCH = "crashwatch-realnode-operator"  # crashwatch's identity in the audit log
WINDOW = "30s"  # --recovery-window, as the real-node tier runs it: longer than the worker's runs
# The operator's worker probes: HTTP GET /live (startup, liveness) and /health (readiness) on the system
# port 9090 (deploy/operator internal/dynamo/component_worker.go). busybox httpd serves them as files.
PROBES = "mkdir -p /tmp/www && echo ok > /tmp/www/live && echo ok > /tmp/www/health"
# seconds a crashing run serves its probes before it exits 1: longer than the period of the startup probe
# (10 s, ticking from the Pod's start, not the container's), so that each run is Ready for a moment
UP = 11
CRASHES = f"{PROBES} && httpd -p 9090 -h /tmp/www && sleep {UP} && exit 1"
FIXED = f"{PROBES} && exec httpd -f -p 9090 -h /tmp/www"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[realnode.Node, Controllers]]:
    yield from operators.on_node(tmp_path_factory)


@pytest.fixture
def controllers(cluster: tuple[realnode.Node, Controllers]) -> Controllers:
    return cluster[1]


@pytest.fixture
def node(cluster: tuple[realnode.Node, Controllers]) -> realnode.Node:
    return cluster[0]


@pytest.fixture
def kube(controllers: Controllers) -> Kube:
    return controllers.kube()


@pytest.fixture
def namespace(kube: Kube, controllers: Controllers) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield name
    finally:
        controllers.check_alive()
        kube.delete(f"/api/v1/namespaces/{name}")


# --- what the waiters read ------------------------------------------------------------------------------


def kstatus(objects: list[dict[str, Any]]) -> list[str]:
    """kstatus's own verdict (sigs.k8s.io/cli-utils status.Compute, tests/waiters) on each object."""
    if not objects:
        return []
    done = subprocess.run(
        [str(waiters_bin() / "kstatus")], input=json.dumps(objects).encode(), capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()
    verdicts = [json.loads(line)["status"] for line in done.stdout.decode().splitlines()]
    assert len(verdicts) == len(objects)
    return verdicts


def reading(obj: dict[str, Any], verdict: str) -> str:
    """One version as the waiters read it: kstatus, Argo CD's health, the operator's state."""
    health, _ = argocd.health(argocd.DGD, obj)
    return f"{verdict}/{health}/{obj.get('status', {}).get('state', '-')}"


def healthy(obj: dict[str, Any], verdict: str) -> bool:
    """What any waiter would take as done: kstatus Current, or Argo CD Healthy, or state successful with no
    failure beside it."""
    return verdict == "Current" or argocd.health(argocd.DGD, obj)[0] == "Healthy"


def is_stalled(obj: dict[str, Any]) -> bool:
    return conditions(obj).get("Stalled", {}).get("status") == "True"


def failed(obj: dict[str, Any]) -> bool:
    return obj.get("status", {}).get("state") == "failed" and is_stalled(obj)


# --- the worker's Pods ------------------------------------------------------------------------------------


def worker_main(pod: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in pod.get("status", {}).get("containerStatuses", []) if c["name"] == "main"), None)


def loop_began(pods: list[Seen]) -> float | None:
    """When the crash that makes the loop was seen: a worker container down after a non-zero exit, having
    restarted at least twice (the crash-loop rule), on a Pod not being deleted."""
    for seen in pods:
        main = worker_main(seen.obj)
        if main is None or seen.obj["metadata"].get("deletionTimestamp"):
            continue
        code = main.get("state", {}).get("terminated", {}).get("exitCode")
        if main["restartCount"] >= 2 and code not in (None, 0):
            return seen.at
    return None


def ready_flips(pods: list[Seen], since: float) -> int:
    """How many times a worker Pod turned Ready after `since` (the operator's `successful` triggers)."""
    flips, last = 0, False
    for seen in pods:
        ready = any(
            c["type"] == "Ready" and c["status"] == "True" for c in seen.obj.get("status", {}).get("conditions", [])
        )
        if ready and not last and seen.at >= since:
            flips += 1
        last = ready
    return flips


def crashed_after(pods: Recorder, restarts: int, since: float) -> bool:
    """Whether a run of the worker since its `restarts`-th restart crashed after `since` (time.time()). Asked
    of every version the watch delivered, not of the Pod now: that run may have crashed while the test was
    busy (restarting crashwatch, say), and the next crash is a backoff of minutes away."""
    for seen in pods.snapshot():
        main = worker_main(seen.obj)
        if main is None or seen.obj["metadata"].get("deletionTimestamp") or main["restartCount"] < restarts:
            continue
        terminated = main.get("state", {}).get("terminated", {})
        if terminated.get("exitCode") not in (None, 0) and _epoch(terminated.get("finishedAt")) >= since - 1:
            return True
    return False


def _epoch(stamp: str | None) -> float:
    """An RFC 3339 time the kubelet wrote, as time.time() reads it (0 when absent)."""
    return datetime.datetime.fromisoformat(stamp).timestamp() if stamp else 0.0


# the longest a crash-looping worker waits before its next run: kubelet's backoff cap (5 minutes), its run,
# and room for a busy machine
NEXT_CRASH = 300 + UP + 60


def restarts(kube: Kube, namespace: str) -> int:
    counts = [
        (worker_main(p) or {}).get("restartCount", 0)
        for p in kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
        if not p["metadata"].get("deletionTimestamp")
    ]
    return max(counts, default=0)


# --- helm ---------------------------------------------------------------------------------------------------


def chart_values(image: str, script: str) -> tuple[str, ...]:
    return ("--set", f"image={image}", "--set-string", f"script={script}")


def adopt(kube: Kube, namespace: str, manifest: dict[str, Any]) -> None:
    """Apply the chart's DGD as Helm would (its field manager and ownership metadata), so that `helm install`
    adopts an object that already has the operator's status: a custom resource with no status at all reads
    as Current to kstatus, and a DGD created by `helm install` itself would race the operator's first write."""
    name = manifest["metadata"]["name"]
    manifest = {
        **manifest,
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": GRAPH, "meta.helm.sh/release-namespace": namespace},
        },
    }
    kube.request("PATCH", f"{dgds(namespace)}/{name}?fieldManager=helm", manifest, "application/apply-patch+yaml")


def crashwatch(controllers: Controllers, namespace: str, *extra: str) -> Watcher:
    kubeconfig = controllers.user_kubeconfig(CRASHWATCH)
    watching = ("run", "-n", namespace, "-o", "json", "--recovery-window", WINDOW, *extra)
    return Watcher(*watching, *kubeconfig_args(kubeconfig))


def verdicts_of(lines: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What must agree between a live run and the replay of its recording: each component verdict."""
    return [
        (line["dcd"], line.get("crash_looping"), line.get("container"), line.get("restarts"), line.get("exit_code"))
        for line in lines
        if line.get("kind") == "component"
    ]


def versions_after(recorder: Recorder, since: float) -> list[dict[str, Any]]:
    return [s.obj for s in recorder.snapshot(GRAPH) if s.at >= since and s.type != "DELETED"]


# --- the tests ----------------------------------------------------------------------------------------------


def test_a_real_crash_loop_beside_the_real_operator_reads_failed_until_the_fix(
    controllers: Controllers, node: realnode.Node, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    helm = Helm(tmp_path, controllers.user_kubeconfig("helm-user"), namespace)
    rendered = helm.run("template", GRAPH, str(CHART), *chart_values(node.busybox, CRASHES))
    assert rendered.returncode == 0, rendered.stderr
    (manifest,) = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    path = f"{dgds(namespace)}/{GRAPH}"
    dgd_versions = Recorder(kube, dgds(namespace))
    pod_versions = Recorder(kube, f"/api/v1/namespaces/{namespace}/pods")
    dcd_versions = Recorder(kube, dcds(namespace))
    user = controllers.user_kubeconfig("waiter")
    try:
        recording = tmp_path / "recording.jsonl"
        record = ("record", "-n", namespace, "-o", str(recording), "--recovery-window", WINDOW)
        # with its status admission webhook, so that the operator's first status of the fix's generation
        # carries crashwatch's withdrawal even when it lands first (docs/status.md)
        webhook = operators.admission_args(kube, namespace, tmp_path / "webhook", f"crashwatch-{namespace}")
        with crashwatch(controllers, namespace, *webhook) as w, Watcher(*record, *kubeconfig_args(user)) as recorder:
            w.wait_synced(60)
            recorder.wait_synced(60)
            adopt(kube, namespace, manifest)
            generation = kube.get(path)["metadata"]["generation"]
            eventually(
                lambda: kube.get(path).get("status", {}).get("observedGeneration") == generation,
                60,
                "the operator's first status",
            )
            began = eventually(lambda: loop_began(pod_versions.snapshot()) is not None, 240, "the crash loop")
            print(f"the crash loop began {began:.1f}s after the DGD's first status", file=sys.stderr)
            eventually(lambda: failed(kube.get(path)), 60, "the DGD failed", step=0.1)
            # the waiters, started while the loop runs (before it, the worker's first run is Ready for a
            # moment and the graph `successful`: a waiter then is done, rightly, before any crash)
            waiter = realnode.wait_for_graph(namespace, user, "10m", "--recovery-window", WINDOW)
            install_args = ("install", GRAPH, str(CHART), *chart_values(node.busybox, CRASHES), "--wait")
            with helm.start("install", *install_args, "--timeout", "10m") as (install, install_log):
                eventually(lambda: install.poll() is not None, 60, "helm install --wait to give up")
                waited_out, waited_err = waiter.communicate(timeout=60)
                # through one more run of the container (Ready for a moment) and its crash: the operator
                # writes `successful` on the Ready flip, crashwatch's verdict must hold
                seen_restarts, seen_at = restarts(kube, namespace), time.time()
                crashed = functools.partial(crashed_after, pod_versions, seen_restarts + 1, seen_at)
                eventually(crashed, NEXT_CRASH, "one more run's crash", step=0.2)
            install_output = install_log.read_text(errors="replace")
            loop_at = loop_began(pod_versions.snapshot())
            assert loop_at is not None
            first_failed = next(s.at for s in dgd_versions.snapshot(GRAPH) if failed(s.obj))
            looping = versions_after(dgd_versions, first_failed)
            worker_dcds = [s.obj for s in dcd_versions.snapshot() if s.at >= first_failed and s.type != "DELETED"]

            # the fix, as a chart upgrade
            fix_at = time.monotonic()
            upgrade_args = ("upgrade", GRAPH, str(CHART), *chart_values(node.busybox, FIXED), "--wait")
            with helm.start("upgrade", *upgrade_args, "--timeout", "5m") as (upgrade, upgrade_log):
                eventually(lambda: upgrade.poll() is not None, 300, "helm upgrade --wait to end")
            upgrade_output = upgrade_log.read_text(errors="replace")
            fixed = kube.get(path)
            eventually(lambda: not is_stalled(kube.get(path)), 60, "the DGD cleared")
            # the rollout ends when the operator says `successful` at the fix's generation (the upgrade may
            # have ended before it: see below); a `crashwatch wait` started then is ready at once
            new_generation = fixed["metadata"]["generation"]

            def rolled_out() -> bool:
                obj = kube.get(path)
                state = obj.get("status", {}).get("state")
                return bool(obj["metadata"]["generation"] == new_generation and state == "successful")

            eventually(rolled_out, 180, "the operator's `successful` at the fix's generation", step=0.2)
            recovered = realnode.wait_for_graph(namespace, user, "1m")
            recovered_out, recovered_err = recovered.communicate(timeout=90)
            time.sleep(1)  # the last lines
            run_lines = [json.loads(line) for line in w.snapshot(w.out) if line.startswith("{")]
    finally:
        with contextlib.suppress(ApiError):
            kube.delete(f"{operators.WEBHOOKS}/crashwatch-{namespace}")
        dgd_versions.close()
        pod_versions.close()
        dcd_versions.close()

    # the loop: read failed soon, and never healthy after that, by any waiter
    took = first_failed - loop_at
    print(f"the DGD read failed {took:.3f}s after the crash that made the loop", file=sys.stderr)
    assert took < 30  # a fraction of a second even on a loaded machine
    verdicts = kstatus(looping)
    readings = [reading(obj, v) for obj, v in zip(looping, verdicts, strict=True)]
    flips = ready_flips(pod_versions.snapshot(), first_failed)
    print(
        f"{len(looping)} DGD versions from the first failure through the loop, {flips} Ready flips of the "
        f"worker: {sorted(set(readings))}",
        file=sys.stderr,
    )
    assert flips >= 1  # the worker was Ready for a moment after the verdict: the operator's `successful` case
    assert not [r for obj, v, r in zip(looping, verdicts, readings, strict=True) if healthy(obj, v)], readings
    assert all(v == "Failed" for v in verdicts), readings
    dcd_verdicts = kstatus(worker_dcds)
    assert "Current" not in [
        v for obj, v in zip(worker_dcds, dcd_verdicts, strict=True) if "worker" in obj["metadata"]["name"]
    ]
    assert waiter.returncode == 1, waited_out + waited_err
    assert json.loads(waited_out)  # its reason, on stdout
    assert install.returncode != 0, install_output
    assert f"DynamoGraphDeployment/{namespace}/{GRAPH} not ready. status: Failed" in install_output

    # the fix: the operator's `successful` at the new generation, then healthy
    at_new = [
        s for s in dgd_versions.snapshot(GRAPH) if s.at >= fix_at and s.obj["metadata"]["generation"] == new_generation
    ]
    new_verdicts = kstatus([s.obj for s in at_new])
    failed_at_new = [
        (round(s.at - fix_at, 2), reading(s.obj, v)) for s, v in zip(at_new, new_verdicts, strict=True) if v == "Failed"
    ]
    successful = next(s.at for s in at_new if s.obj.get("status", {}).get("state") == "successful")
    healthy_at = next(s.at for s, v in zip(at_new, new_verdicts, strict=True) if healthy(s.obj, v) and v == "Current")
    print(
        f"after the fix: healthy {healthy_at - successful:+.3f}s from the operator's `successful`; "
        f"{len(at_new)} versions at the new generation, {len(failed_at_new)} read kstatus Failed: {failed_at_new}; "
        f"helm upgrade --wait exited {upgrade.returncode}",
        file=sys.stderr,
    )
    assert healthy_at - successful < 30  # within 5 s on an idle machine: bench and docs/benchmarks.md
    # The rollout's old crash-looping Pod lingers until the new one is Ready, but the spec change replaced it
    # (pipeline/rollouts.py): crashwatch withdraws its mark as it sees the change, and the operator's first
    # status of the new generation, sent as soon as it sees the change too, is given that withdrawal by the
    # webhook when it comes first: no version at the new generation reads Failed, and the upgrade succeeds
    assert (upgrade.returncode, failed_at_new) == (0, []), upgrade_output
    assert recovered.returncode == 0, recovered_out + recovered_err

    # the recording replays to the same component verdicts as the live run
    replayed = run("replay", "-o", "json", "--recovery-window", WINDOW, str(recording))
    assert replayed.returncode == 0, replayed.stderr
    replay_lines = [json.loads(line) for line in replayed.stdout.decode().splitlines()]
    assert verdicts_of(replay_lines) == verdicts_of(run_lines)
    assert any(line[1] for line in verdicts_of(run_lines))  # the crash loop, then its end


def graph(image: str, script: str) -> dict[str, Any]:
    """The chart's DGD, created directly (no Helm)."""
    return {
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": GRAPH},
        "spec": {
            "backendFramework": "vllm",
            "components": [
                {
                    "name": "VllmDecodeWorker",
                    "type": "worker",
                    "replicas": 1,
                    "podTemplate": {
                        "spec": {
                            "terminationGracePeriodSeconds": 1,
                            "containers": [
                                {
                                    "name": "main",
                                    "image": image,
                                    "imagePullPolicy": "Never",
                                    "command": ["sh", "-c", script],
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }


# --- a real LeaderWorkerSet group on the node -----------------------------------------------------------------

LWS = "leaderworkerset.sigs.k8s.io"
# The leader (LWS_WORKER_INDEX 0) serves the probes and stays up; the worker counts its incarnations (one
# folder per Pod uid, in a hostPath that outlives the group's recreations) and exits 1 after 2 s in the
# first three, then stays up too: three recreations of the whole group, then a group that stays Ready.
SERVE = f"{PROBES} && exec httpd -f -p 9090 -h /tmp/www"


def group_script(failures: int) -> str:
    return (
        f'if [ "$LWS_WORKER_INDEX" = 0 ]; then {SERVE}; fi; mkdir -p "/count/$POD_UID"; '
        f"if [ $(ls /count | wc -l) -gt {failures} ]; then {SERVE}; fi; sleep 2; exit 1"
    )


GROUP = group_script(3)


def multinode_graph(image: str, count: Path, script: str = GROUP) -> dict[str, Any]:
    manifest = graph(image, script)
    worker = manifest["spec"]["components"][0]
    worker["multinode"] = {"nodeCount": 2}
    pod = worker["podTemplate"]["spec"]
    # the operator refuses an LWS Pod whose main container has no args: the script goes there
    pod["containers"][0]["command"], pod["containers"][0]["args"] = ["sh", "-c"], [script]
    pod["containers"][0]["env"] = [{"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}]
    pod["containers"][0]["volumeMounts"] = [{"name": "count", "mountPath": "/count"}]
    pod["volumes"] = [{"name": "count", "hostPath": {"path": str(count), "type": "DirectoryOrCreate"}}]
    return manifest


def test_a_real_lws_group_recreated_by_the_real_controller_on_the_node_is_a_crash_loop_until_it_stays_ready(
    controllers: Controllers, node: realnode.Node, kube: Kube, namespace: str
) -> None:
    lwss = f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{namespace}/leaderworkersets"
    pod_versions = Recorder(kube, f"/api/v1/namespaces/{namespace}/pods")
    dgd_versions = Recorder(kube, dgds(namespace))
    try:
        with crashwatch(controllers, namespace) as w:
            w.wait_synced(60)
            kube.create(dgds(namespace), multinode_graph(node.busybox, node.workdir / f"count-{namespace}"))
            eventually(lambda: len(kube.get(lwss)["items"]) == 1, 120, "the operator's LeaderWorkerSet")
            lws = kube.get(lwss)["items"][0]
            name = lws["metadata"]["name"]
            assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
            dcd_name = next(
                d["metadata"]["name"] for d in kube.get(dcds(namespace))["items"] if "worker" in d["metadata"]["name"]
            )
            dcd_path = f"{dcds(namespace)}/{dcd_name}"

            # the versions that read as asked, kept: a second read could meet the operator's next rewrite
            # (its `pending` on a Ready flip) before crashwatch answers it
            read: dict[str, dict[str, Any]] = {}

            def reported() -> bool:
                dcd = read["dcd"] = kube.get(dcd_path)
                return is_stalled(dcd) and conditions(dcd)["Available"]["reason"] == "ContainerCrashLooping"

            def graph_failed() -> bool:
                dgd = read["dgd"] = kube.get(f"{dgds(namespace)}/{GRAPH}")
                return failed(dgd)

            eventually(reported, 240, "the DCD reporting the recreation loop", step=0.1)
            eventually(graph_failed, 60, "the DGD failed", step=0.1)
            dcd, dgd = read["dcd"], read["dgd"]
            w.wait_line('"recreations"', 30)
            # the fourth incarnation stays up, Ready: the loop is over
            eventually(lambda: not is_stalled(kube.get(dcd_path)), 240, "the DCD cleared", step=0.5)
            eventually(
                lambda: (
                    kube.get(f"{dgds(namespace)}/{GRAPH}")["status"].get("state") == "successful"
                    and not is_stalled(kube.get(f"{dgds(namespace)}/{GRAPH}"))
                ),
                120,
                "the DGD healthy",
            )
            lines = [json.loads(line) for line in w.snapshot(w.out) if line.startswith("{")]
    finally:
        pod_versions.close()
        dgd_versions.close()
    leaders = {
        s.obj["metadata"]["uid"]
        for s in pod_versions.snapshot(f"{name}-0")
        if s.obj["metadata"]["labels"].get(f"{LWS}/worker-index") == "0"
    }
    worker_restarts = [(worker_main(s.obj) or {}).get("restartCount", 0) for s in pod_versions.snapshot(f"{name}-0-1")]
    print(
        f"the group: {len(leaders)} leader uids, worker restartCount at most {max(worker_restarts, default=0)}; "
        f"DCD: {conditions(dcd)['Stalled']['message']}",
        file=sys.stderr,
    )
    assert len(leaders) >= 3  # the whole group recreated, the leader under the same name with a new uid
    assert max(worker_restarts) <= 1  # LWS recreates at the first restart: never a CrashLoopBackOff
    assert "is recreation-looping" in conditions(dcd)["Stalled"]["message"]
    assert is_stalled(dgd) and conditions(dgd)["Ready"]["reason"] == "component_crash_looping"
    components = [line for line in lines if line.get("kind") == "component"]
    at = next(i for i, line in enumerate(components) if line.get("crash_looping"))
    looping = components[at]
    assert looping["lws"] == name and looping["group"] == "0" and looping["recreations"] >= 2
    assert looping["exit_code"] == 1 and looping["pod"] == f"{name}-0-1"
    assert not components[-1]["crash_looping"] and len(components) > at + 1  # cleared, once


def test_one_recreation_of_a_real_lws_group_followed_by_a_healthy_group_is_no_crash_loop(
    controllers: Controllers, node: realnode.Node, kube: Kube, namespace: str
) -> None:
    lwss = f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{namespace}/leaderworkersets"
    pod_versions = Recorder(kube, f"/api/v1/namespaces/{namespace}/pods")
    dcd_versions = Recorder(kube, dcds(namespace))
    dgd_versions = Recorder(kube, dgds(namespace))
    try:
        with crashwatch(controllers, namespace) as w:
            w.wait_synced(60)
            script = group_script(1)
            kube.create(dgds(namespace), multinode_graph(node.busybox, node.workdir / f"count-{namespace}", script))
            eventually(lambda: len(kube.get(lwss)["items"]) == 1, 120, "the operator's LeaderWorkerSet")
            name = kube.get(lwss)["items"][0]["metadata"]["name"]

            def leaders() -> set[str]:
                return {s.obj["metadata"]["uid"] for s in pod_versions.snapshot(f"{name}-0")}

            eventually(lambda: len(leaders()) >= 2, 180, "the group recreated once", step=0.5)
            eventually(
                lambda: kube.get(f"{dgds(namespace)}/{GRAPH}")["status"].get("state") == "successful",
                180,
                "the second incarnation Ready",
                step=0.5,
            )
            time.sleep(10)  # the group stays up: nothing is to be said about it
            lines = [json.loads(line) for line in w.snapshot(w.out) if line.startswith("{")]
    finally:
        pod_versions.close()
        dcd_versions.close()
        dgd_versions.close()
    print(f"the group: {len(leaders())} leader uids; {len(lines)} lines of crashwatch", file=sys.stderr)
    assert len(leaders()) == 2  # recreated once, as LWS does at the first restart
    assert not [line for line in lines if line.get("crash_looping") or line.get("failed")], lines
    assert not [s.obj for s in dcd_versions.snapshot() if is_stalled(s.obj)]
    assert not [s.obj for s in dgd_versions.snapshot(GRAPH) if is_stalled(s.obj) or failed(s.obj)]


# --- a healthy LWS scaled down and rolled out, a looping one fixed by a rollout -------------------------------
# Neither a scale-down (LWS deletes the groups it no longer wants) nor a rollout (a change of the Pod template,
# which LWS rolls out group by group, the highest index first, deleting each group's leader and recreating the
# group) follows a failure: no recreation loop, whatever the number of groups recreated in a row.


def lws_list(namespace: str) -> str:
    return f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{namespace}/leaderworkersets"


def lws_graph(image: str, count: Path, script: str, replicas: int) -> dict[str, Any]:
    """multinode_graph with `replicas` groups (the DGD's replicas are the LeaderWorkerSet's)."""
    manifest = multinode_graph(image, count, script)
    manifest["spec"]["components"][0]["replicas"] = replicas
    return manifest


def is_ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def settled(kube: Kube, namespace: str, groups: int) -> bool:
    """One LeaderWorkerSet, `groups` groups of 2 Pods, every Pod of the namespace Ready, none terminating,
    all of one template revision, and the operator's `successful` at the DGD's generation."""
    if len(kube.get(lws_list(namespace))["items"]) != 1:
        return False
    pods = kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    revisions = {p["metadata"]["labels"].get(f"{LWS}/template-revision-hash") for p in pods}
    if len(pods) != 2 * groups or len(revisions) != 1:
        return False
    if any(p["metadata"].get("deletionTimestamp") or not is_ready(p) for p in pods):
        return False
    dgd = kube.get(f"{dgds(namespace)}/{GRAPH}")
    status = dgd.get("status", {})
    return bool(
        status.get("state") == "successful" and status.get("observedGeneration") == dgd["metadata"]["generation"]
    )


def patch_worker(kube: Kube, namespace: str, change: Any) -> None:
    """Change the DGD's worker component (`change` edits it in place) as `kubectl edit` would: the whole
    component list, merge-patched."""
    path = f"{dgds(namespace)}/{GRAPH}"
    components = kube.get(path)["spec"]["components"]
    change(components[0])
    kube.merge_patch(path, {"spec": {"components": components}})


class Watched:
    """An LWS-backed graph's namespace and what watches it: every version of its Pods, DCDs and DGD as the API
    server delivered them, and `crashwatch run` and `crashwatch tail` (and `record`, if asked) beside them."""

    def __init__(self, controllers: Controllers, kube: Kube, namespace: str, record: Path | None = None) -> None:
        self.kube, self.namespace = kube, namespace
        self.pods = Recorder(kube, f"/api/v1/namespaces/{namespace}/pods")
        self.dcds = Recorder(kube, dcds(namespace))
        self.dgds = Recorder(kube, dgds(namespace))
        self.run = crashwatch(controllers, namespace)
        tail = ("tail", "-n", namespace, "-o", "json", "--log-lines", "0", "--recovery-window", WINDOW)
        self.tail = Watcher(*tail, *kubeconfig_args(controllers.user_kubeconfig(f"{CRASHWATCH}-tail")))
        self.watchers = [self.run, self.tail]
        if record is not None:
            user = controllers.user_kubeconfig(f"{CRASHWATCH}-record")
            self.watchers.append(
                Watcher(
                    "record", "-n", namespace, "-o", str(record), "--recovery-window", WINDOW, *kubeconfig_args(user)
                )
            )
        for watcher in self.watchers:
            watcher.wait_synced(60)

    def close(self) -> None:
        for watcher in self.watchers:
            watcher.stop()
        for recorder in (self.pods, self.dcds, self.dgds):
            recorder.close()

    def lines(self, watcher: Watcher) -> list[dict[str, Any]]:
        return [json.loads(line) for line in watcher.snapshot(watcher.out) if line.startswith("{")]

    def lws(self) -> str:
        return str(self.kube.get(lws_list(self.namespace))["items"][0]["metadata"]["name"])

    def leaders(self, lws: str) -> dict[str, list[tuple[float, str]]]:
        """Each group's leader Pods, by group index: (when first seen, uid), in order."""
        found: dict[str, list[tuple[float, str]]] = {}
        for seen in self.pods.snapshot():
            labels = seen.obj["metadata"].get("labels", {})
            if labels.get(f"{LWS}/name") != lws or labels.get(f"{LWS}/worker-index") != "0":
                continue
            uids = found.setdefault(labels[f"{LWS}/group-index"], [])
            if seen.obj["metadata"]["uid"] not in [uid for _, uid in uids]:
                uids.append((seen.at, seen.obj["metadata"]["uid"]))
        return found

    def unready_since(self, since: float) -> bool:
        """Whether a Pod version not Ready arrived at or after `since`."""
        return any(s.at >= since and not is_ready(s.obj) for s in self.pods.snapshot())

    def said_nothing(self) -> None:
        """Neither crashwatch said a crash loop, nor any version of a DCD or the DGD read one, nor kstatus
        Failed on any of them, from the graph's creation on."""
        for watcher in (self.run, self.tail):
            said = self.lines(watcher)
            assert not [line for line in said if line.get("crash_looping") or line.get("failed")], said
        dcd_versions = [s.obj for s in self.dcds.snapshot() if s.type != "DELETED"]
        dgd_versions = [s.obj for s in self.dgds.snapshot(GRAPH) if s.type != "DELETED"]
        looping = [
            (d["metadata"]["name"], conditions(d).get("Available", {}).get("reason"))
            for d in dcd_versions
            if is_stalled(d) or conditions(d).get("Available", {}).get("reason") == "ContainerCrashLooping"
        ]
        assert not looping, looping
        assert not [d.get("status") for d in dgd_versions if is_stalled(d) or failed(d)]
        dcd_verdicts, dgd_verdicts = kstatus(dcd_versions), kstatus(dgd_versions)
        print(
            f"{len(dcd_versions)} DCD versions (kstatus {sorted(set(dcd_verdicts))}), {len(dgd_versions)} DGD "
            f"versions (kstatus {sorted(set(dgd_verdicts))}); crashwatch run said {len(self.lines(self.run))} "
            f"lines, tail {len(self.lines(self.tail))}",
            file=sys.stderr,
        )
        assert "Failed" not in dcd_verdicts + dgd_verdicts


@pytest.fixture
def watched(controllers: Controllers, kube: Kube, namespace: str) -> Iterator[Watched]:
    w = Watched(controllers, kube, namespace)
    try:
        yield w
    finally:
        w.close()


def heard_out() -> None:
    """What crashwatch says in answer to the last events (a status write, a line) takes it milliseconds;
    given seconds here, so that a verdict it would make is made before the test reads what it said."""
    time.sleep(5)


def test_a_real_lws_scaled_down_from_two_groups_to_one_on_the_node_is_no_recreation_loop(
    node: realnode.Node, kube: Kube, namespace: str, watched: Watched
) -> None:
    count = node.workdir / f"count-{namespace}"
    kube.create(dgds(namespace), lws_graph(node.busybox, count, SERVE, replicas=2))
    eventually(lambda: settled(kube, namespace, 2), 240, "two groups Ready", step=0.5)
    name = watched.lws()
    before = watched.leaders(name)
    began = time.monotonic()
    patch_worker(kube, namespace, lambda worker: worker.update(replicas=1))
    took = eventually(lambda: settled(kube, namespace, 1), 180, "the scale-down to one group", step=0.2)
    heard_out()
    after = watched.leaders(name)
    gone = {s.obj["metadata"]["name"] for s in watched.pods.snapshot() if s.type == "DELETED" and s.at >= began}
    print(f"scaled down from 2 groups to 1 in {took:.1f}s: deleted {sorted(gone)}", file=sys.stderr)
    assert kube.get(f"{lws_list(namespace)}/{name}")["spec"]["replicas"] == 1
    assert {f"{name}-1", f"{name}-1-1"} <= gone  # group 1, its leader and its worker
    assert after["0"] == before["0"]  # group 0 untouched
    watched.said_nothing()


def restart(kube: Kube, namespace: str, n: int) -> None:
    """The DGD's own restart (a new `spec.restart.id`): the operator stamps its time on the worker's Pod
    templates (annotation nvidia.com/restartAt) in place, and LWS rolls the new template out group by group.
    (A change of the worker's own spec, an env var or the command, is no rollout of the LWS with this operator:
    it names a new DCD after the new spec's hash and makes a new LWS beside the old one, which it leaves running,
    with a `RollingUpdateNotSupported` Warning: "custom rolling updates are not supported for Grove/multinode
    deployments".)"""
    kube.merge_patch(f"{dgds(namespace)}/{GRAPH}", {"spec": {"restart": {"id": f"rollout-{n}"}}})


def test_two_rollouts_in_a_row_of_a_healthy_real_lws_of_two_groups_on_the_node_are_no_recreation_loop(
    node: realnode.Node, kube: Kube, namespace: str, watched: Watched
) -> None:
    count = node.workdir / f"count-{namespace}"
    kube.create(dgds(namespace), lws_graph(node.busybox, count, SERVE, replicas=2))
    eventually(lambda: settled(kube, namespace, 2), 240, "two groups Ready", step=0.5)
    names = [watched.lws()]
    # two in a row: each group recreated twice within the group window, as many times as make a loop
    for n in (1, 2):
        began = time.monotonic()
        restart(kube, namespace, n)
        eventually(
            functools.partial(watched.unready_since, began),
            60,
            "the rollout under way",
            step=0.2,
        )
        took = eventually(lambda: settled(kube, namespace, 2), 300, f"rollout {n} done", step=0.2)
        names.append(watched.lws())
        print(f"rollout {n} done in {took:.1f}s; LeaderWorkerSet {names[-1]}", file=sys.stderr)
    heard_out()
    for name in dict.fromkeys(names):
        leaders = watched.leaders(name)
        per_group = {group: len(uids) for group, uids in leaders.items()}
        order = [group for _, group in sorted((at, group) for group, uids in leaders.items() for at, _ in uids[1:])]
        print(f"{name}: leader uids per group {per_group}; groups recreated in the order {order}", file=sys.stderr)
    assert names == [names[0]] * 3  # rolled out in place, by LWS
    assert {group: len(uids) for group, uids in watched.leaders(names[0]).items()} == {"0": 3, "1": 3}
    watched.said_nothing()


# The worker of a group that a rollout fixes: it fails (exit 1 after 2 s) until its Pod template has a restart
# time, which the operator's restart stamps there and the downward API hands it; the leader serves throughout.
RESTARTED_AT = {
    "name": "RESTARTED_AT",
    "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['nvidia.com/restartAt']"}},
}
FIXED_BY_A_RESTART = f'if [ "$LWS_WORKER_INDEX" = 0 ] || [ -n "$RESTARTED_AT" ]; then {SERVE}; fi; sleep 2; exit 1'


def test_a_restart_that_fixes_a_recreation_looping_real_lws_group_clears_the_verdict_at_its_spec_change_for_good(
    controllers: Controllers, node: realnode.Node, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    recording = tmp_path / "recording.jsonl"
    count = node.workdir / f"count-{namespace}"
    w = Watched(controllers, kube, namespace, record=recording)
    try:
        # the worker fails in every incarnation, until a rollout gives its Pod template a restart time
        manifest = lws_graph(node.busybox, count, FIXED_BY_A_RESTART, replicas=1)
        manifest["spec"]["components"][0]["podTemplate"]["spec"]["containers"][0]["env"].append(RESTARTED_AT)
        kube.create(dgds(namespace), manifest)
        eventually(lambda: len(kube.get(lws_list(namespace))["items"]) == 1, 120, "the operator's LeaderWorkerSet")
        looping_lws = w.lws()
        dgd_path = f"{dgds(namespace)}/{GRAPH}"

        def reported() -> bool:
            return any(
                is_stalled(d) and conditions(d)["Available"]["reason"] == "ContainerCrashLooping"
                for d in kube.get(dcds(namespace))["items"]
            )

        eventually(reported, 240, "the DCD reporting the recreation loop", step=0.2)
        eventually(lambda: failed(kube.get(dgd_path)), 60, "the DGD failed", step=0.2)
        # the fix: a new Pod template, rolled out by LWS, whose worker stays up
        fix_at = time.monotonic()
        restart(kube, namespace, 1)
        eventually(lambda: settled(kube, namespace, 1), 300, "the fixed group Ready", step=0.2)
        eventually(lambda: not is_stalled(kube.get(dgd_path)), 60, "the DGD cleared", step=0.2)
        heard_out()
        run_lines = w.lines(w.run)
        tail_lines = w.lines(w.tail)
    finally:
        w.close()
    fixed_lws = w.lws()

    # when the new group was first all Ready (every Pod of the namespace Ready, none terminating, two of them)
    current: dict[str, dict[str, Any]] = {}
    ready_at: float | None = None
    for seen in w.pods.snapshot():
        name = seen.obj["metadata"]["name"]
        if seen.type == "DELETED":
            current.pop(name, None)
        else:
            current[name] = seen.obj
        pods = list(current.values())
        if (
            seen.at >= fix_at
            and len(pods) == 2
            and all(is_ready(p) and not p["metadata"].get("deletionTimestamp") for p in pods)
        ):
            ready_at = seen.at
            break
    assert ready_at is not None
    cleared_dgd = next(s.at for s in w.dgds.snapshot(GRAPH) if s.at >= fix_at and not is_stalled(s.obj))
    cleared_dcds = [
        (s.obj["metadata"]["name"], s.at)
        for s in w.dcds.snapshot()
        if s.at >= fix_at and s.type != "DELETED" and not is_stalled(s.obj)
    ]
    leaders = w.leaders(looping_lws)
    print(
        f"the loop: {looping_lws}, {len(leaders.get('0', []))} leader uids of group 0; the fix rolled out as "
        f"{'the same' if fixed_lws == looping_lws else 'a new'} LeaderWorkerSet ({fixed_lws}): its group Ready "
        f"{ready_at - fix_at:.1f}s after the fix, the DGD cleared {cleared_dgd - ready_at:+.3f}s from then; "
        f"DCDs without Stalled after the fix: {[(n, round(at - ready_at, 3)) for n, at in cleared_dcds]}",
        file=sys.stderr,
    )
    for said in (run_lines, tail_lines):
        components = [line for line in said if line.get("kind") == "component"]
        graphs = [line for line in said if line.get("kind") == "graph"]
        at = next(i for i, line in enumerate(components) if line.get("crash_looping"))
        assert components[at]["lws"] == looping_lws and components[at]["recreations"] >= 2
        assert not components[-1]["crash_looping"] and len(components) > at + 1  # cleared
        assert graphs[0]["failed"] and not graphs[-1]["failed"]
    assert not is_stalled(kube.get(f"{dgds(namespace)}/{GRAPH}"))

    # the recording replays to the live run's verdicts, and so does its trimmed copy (what tests/replay keeps)
    trimmed = tmp_path / "trimmed.jsonl"
    trimmed.write_text("".join(f"{line}\n" for line in trim_record(recording)))
    for log in (recording, trimmed):
        replayed = run("replay", "-o", "json", "--recovery-window", WINDOW, str(log))
        assert replayed.returncode == 0, replayed.stderr
        assert verdicts_of([json.loads(line) for line in replayed.stdout.decode().splitlines()]) == verdicts_of(
            run_lines
        )
    patches = [run("replay", "--patches", "--recovery-window", WINDOW, str(log)).stdout for log in (recording, trimmed)]
    assert patches[0] == patches[1]
    if os.environ.get("CRASHWATCH_KEEP_RECORDING"):  # how tests/replay/recordings/realnode-lws-*.jsonl.gz was made
        Path(os.environ["CRASHWATCH_KEEP_RECORDING"]).write_bytes(gzip.compress(trimmed.read_bytes(), 9, mtime=0))

    # The restart is a change of the DGD's spec that replaces its worker (docs/status.md, "A fix as a spec
    # change"): the loop the old spec's groups made is held until the change is seen, withdrawn then (a
    # new generation must not read Failed because of the old groups on their way out, or a `helm upgrade
    # --wait` of the fix would fail), and never raised again: the old worker, up and Ready after its last
    # crash while LWS tears its group down (the leader first), is no Ready group, and its last crash is
    # of the old spec.
    versions = w.dgds.snapshot(GRAPH)
    first_failed = next(s.at for s in versions if failed(s.obj))
    generation = versions[0].obj["metadata"]["generation"]
    changed_at = next(s.at for s in versions if s.obj["metadata"]["generation"] > generation)
    held = [
        round(s.at - changed_at, 3) for s in versions if first_failed <= s.at < changed_at and not is_stalled(s.obj)
    ]
    assert not held, f"the DGD read not Stalled before the spec change (seconds from then): {held}"
    withdrawn = next(s.at for s in versions if s.at >= changed_at and not is_stalled(s.obj))
    assert withdrawn - changed_at < 5, f"withdrawn {withdrawn - changed_at:.3f}s after the spec change"
    again = [round(s.at - withdrawn, 3) for s in versions if s.at > withdrawn and is_stalled(s.obj)]
    assert not again, f"the DGD read Stalled again after the withdrawal (seconds from then): {again}"
    for said in (run_lines, tail_lines):
        components = [line for line in said if line.get("kind") == "component"]
        at = next(i for i, line in enumerate(components) if line.get("crash_looping"))
        assert [line["crash_looping"] for line in components[at:]] == [True] * (len(components) - at - 1) + [False]


def trim_record(record: Path) -> list[str]:
    """The record without what no diagnosis reads: `managedFields`, and in every Pod spec and Pod template the
    containers cut to their names and images, and the volumes."""

    def cut(node: Any) -> None:
        if isinstance(node, dict):
            for key in ("containers", "initContainers"):
                if isinstance(node.get(key), list):
                    node[key] = [{k: c[k] for k in ("name", "image") if k in c} for c in node[key]]
                    node.pop("volumes", None)
            if isinstance(node.get("metadata"), dict):
                node["metadata"].pop("managedFields", None)
            for value in node.values():
                cut(value)
        elif isinstance(node, list):
            for value in node:
                cut(value)

    kept = []
    for raw in record.read_text().splitlines():
        event = json.loads(raw)
        cut(event)
        kept.append(json.dumps(event, separators=(",", ":")))
    return kept


# --- last: the restarted operator is not the one the tests above were set up with ---------------------------


def test_an_operator_restart_and_a_crashwatch_restart_mid_loop_change_nothing_a_waiter_reads(
    controllers: Controllers, node: realnode.Node, kube: Kube, namespace: str
) -> None:
    path = f"{dgds(namespace)}/{GRAPH}"
    dgd_versions = Recorder(kube, dgds(namespace))
    pod_versions = Recorder(kube, f"/api/v1/namespaces/{namespace}/pods")
    try:
        with crashwatch(controllers, namespace) as first:
            first.wait_synced(60)
            kube.create(f"{dgds(namespace)}", graph(node.busybox, CRASHES))
            eventually(lambda: loop_began(pod_versions.snapshot()) is not None, 240, "the crash loop")
            eventually(lambda: failed(kube.get(path)), 60, "the DGD failed", step=0.1)
            since = time.monotonic()
            # the operator restarts: it reconciles every graph afresh, and rewrites `state`
            controllers.stop_operator()
            operators.wait_operator_ready(controllers)
            seen_restarts, seen_at = restarts(kube, namespace), time.time()
        # crashwatch restarts (the first one stopped), while the worker still crash-loops: the run it has now
        # crashes within UP seconds, or, if it waits in backoff (minutes, once the loop is old), the next one
        with crashwatch(controllers, namespace) as second:
            second.wait_synced(60)
            crashed = functools.partial(crashed_after, pod_versions, seen_restarts, seen_at)
            eventually(crashed, NEXT_CRASH, "one more run's crash", step=0.2)
            controllers.stop_operator()
            operators.wait_operator_ready(controllers)
            eventually(lambda: failed(kube.get(path)), 60, "the DGD failed after the second operator restart")
            time.sleep(2)  # what the operator and crashwatch write in answer to each other, recorded
            writes = second.writes()
    finally:
        dgd_versions.close()
        pod_versions.close()
    looping = versions_after(dgd_versions, since)
    verdicts = kstatus(looping)
    readings = [reading(obj, v) for obj, v in zip(looping, verdicts, strict=True)]
    print(
        f"{len(looping)} DGD versions through two operator restarts and a crashwatch restart: "
        f"{sorted(set(readings))}; the second crashwatch wrote {len(writes)} statuses",
        file=sys.stderr,
    )
    assert not [r for obj, v, r in zip(looping, verdicts, readings, strict=True) if healthy(obj, v)], readings
    assert all(v == "Failed" for v in verdicts), readings
    assert failed(kube.get(path))
