"""Benchmark on a real node: real crash loops, as a real kubelet reports them, watched by `crashwatch run`.

    python -m bench.realnode                       # 20 crash loops watched for 10 minutes, then the fix
    python -m bench.realnode --loops 20 --duration 3m

It starts the node of tests/realnode.py (containerd, runc, kubelet, kube-scheduler, on a control plane of
its own; needs root and scripts/build-node's parts), `crashwatch run -n bench -o json` with the default
recovery window (1m30s), and 20 graphs of one component each, a Deployment whose container crash-loops in
one of four ways, in turn: `exit 1`, `sleep 3; exit 1` (Ready between crashes: no probe), `sleep 20; exit 1`,
and `sleep 5; exit 1` with a readiness probe that never passes. A watch of its own (Pods and DGDs of the
namespace, each event stamped when it arrives) is the observer.

- Detection: from the observer's sight of the kubelet's status write that makes the crash loop (the first
  Pod resourceVersion for which the rule holds: not Ready, a container restarted twice and down after a
  non-zero exit) to its sight of the DGD `state: failed`. Target p99 under 100 ms (upstream: within 15 s).
- Flaps: for `--duration`, each time a crash-looping graph's DGD left `failed`, each RECOVERED line and each
  `CrashLoopRecovered` Event. Target 0.
- Recovery: the fix (a command that stays up) rolled out to every Deployment at once; from the observer's
  sight of the new Pod Ready to its sight of the DGD no longer `failed`. Target under 5 s.
- Resources: CPU (share of one core) and resident memory of the control plane (etcd, kube-apiserver,
  kube-controller-manager), the node (kubelet, kube-scheduler, containerd and its shims) and crashwatch,
  sampled from /proc every 5 s through the flap window.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import realnode  # noqa: E402
from dynamo import GRAPH, dcds, deployment, make_graph  # noqa: E402
from kube import ApiError, Kube  # noqa: E402
from watcher import Watcher  # noqa: E402

from stream.model.times import parse_duration  # noqa: E402

NAMESPACE = "bench"
TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def container(image: str, script: str, **extra: Any) -> dict[str, Any]:
    return {"name": "main", "image": image, "imagePullPolicy": "Never", "command": ["sh", "-c", script], **extra}


def behaviour(index: int, image: str) -> dict[str, Any]:
    probe = {"readinessProbe": {"exec": {"command": ["false"]}, "periodSeconds": 2}}
    main = [
        container(image, "exit 1"),
        container(image, "sleep 3; exit 1"),
        container(image, "sleep 20; exit 1"),
        container(image, "sleep 5; exit 1", **probe),
    ][index % 4]
    return {"containers": [main], "terminationGracePeriodSeconds": 1, "automountServiceAccountToken": False}


def crash_looping(pod: dict[str, Any]) -> bool:
    """The rule on one observation, as the seed states it (for the observer's clock only)."""
    status = pod.get("status", {})
    if pod["metadata"].get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
        return False
    if any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", [])):
        return False
    for c in status.get("initContainerStatuses", []) + status.get("containerStatuses", []):
        state = c.get("state", {})
        if c.get("restartCount", 0) < 2 or "running" in state:
            continue
        code = state.get("terminated", {}).get("exitCode")
        if code is None:
            code = c.get("lastState", {}).get("terminated", {}).get("exitCode")
        if code:
            return True
    return False


@dataclass
class Observer:
    """Watches one collection and stamps every event when it arrives (monotonic seconds)."""

    kube: Kube
    path: str
    events: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        for _ in range(60):  # a new CRD's watch cache answers 429 while it initializes
            try:
                rv = self.kube.get(self.path)["metadata"]["resourceVersion"]
                break
            except ApiError as exc:
                if exc.status != 429:
                    raise
                time.sleep(1)
        else:
            raise RuntimeError(f"{self.path}: still 429 after a minute")
        connection = http.client.HTTPSConnection(
            self.kube.host, self.kube.port, context=self.kube.context, timeout=3600
        )
        connection.request("GET", f"{self.path}?watch=true&resourceVersion={rv}&timeoutSeconds=3600")
        response = connection.getresponse()
        assert response.status == 200, response.status

        def pump() -> None:
            for line in response:
                event = json.loads(line)
                with self.lock:
                    self.events.append((time.monotonic(), event["type"], event["object"]))

        threading.Thread(target=pump, daemon=True).start()

    def snapshot(self) -> list[tuple[float, str, dict[str, Any]]]:
        with self.lock:
            return list(self.events)


def graph_of(obj: dict[str, Any]) -> str:
    if obj["kind"] == "DynamoGraphDeployment":
        return str(obj["metadata"]["name"])
    return str(obj["metadata"].get("labels", {}).get(GRAPH, ""))


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def usage(pids: list[int]) -> tuple[float, float]:
    """CPU seconds and resident bytes of these processes now (gone ones count 0)."""
    cpu = rss = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / TICKS
            rss += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
        except (OSError, IndexError):
            pass
    return cpu, rss


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def describe(values: list[float]) -> str:
    if not values:
        return "none"
    return (
        f"p50 {statistics.median(values) * 1000:.0f} ms, p99 {percentile(values, 0.99) * 1000:.0f} ms, "
        f"max {max(values) * 1000:.0f} ms (n={len(values)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loops", type=int, default=20)
    parser.add_argument("--duration", default="10m", help="how long the crash loops are watched for flaps")
    args = parser.parse_args()
    duration = parse_duration(args.duration)
    with realnode.bench_node("bench-realnode-") as (node, _):
        run_bench(node, args.loops, duration)


def run_bench(node: realnode.Node, loops: int, duration: float) -> None:
    kube = node.kube()
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    pods = Observer(kube, f"/api/v1/namespaces/{NAMESPACE}/pods")
    graphs = Observer(kube, f"/apis/nvidia.com/v1beta1/namespaces/{NAMESPACE}/dynamographdeployments")
    pods.start()
    graphs.start()
    names = [f"g{i:02d}" for i in range(loops)]
    with Watcher(
        "run", "-n", NAMESPACE, "-o", "json", "--recovery-window", "1m30s", "--kubeconfig", str(node.plane.kubeconfig)
    ) as w:
        w.wait_synced(60)
        for index, name in enumerate(names):
            make_graph(kube, NAMESPACE, graph=name, deployments=False)
            dcd = kube.get(f"{dcds(NAMESPACE)}/{name}-worker")
            manifest = deployment(f"{name}-worker", name, "worker", dcd)
            manifest["spec"]["template"]["spec"] = behaviour(index, node.busybox)
            kube.create(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments", manifest)
        created = time.monotonic()
        node_pids = [p.pid for p in node.processes.values()]
        plane_pids = [p.pid for p in node.plane.processes.values()]
        watcher_pids = [w.process.pid]

        def shims() -> list[int]:
            return [pid for pid in realnode._pids_mentioning(str(node.workdir)) if pid not in node_pids]

        samples: list[tuple[float, tuple[float, float], tuple[float, float], tuple[float, float]]] = []
        while time.monotonic() - created < duration:
            samples.append((time.monotonic(), usage(plane_pids), usage(node_pids + shims()), usage(watcher_pids)))
            time.sleep(5)
        window_end = time.monotonic()
        failed_before_fix = {
            graph_of(obj) for _, _, obj in graphs.snapshot() if obj.get("status", {}).get("state") == "failed"
        }
        lines_before_fix = [json.loads(line) for line in w.snapshot(w.out)]
        events_path = f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events"
        events_before_fix = kube.get(events_path)["items"]
        # the fix, rolled out to every Deployment at once
        fixed_at = time.monotonic()
        for name in names:
            kube.merge_patch(
                f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{name}-worker",
                {"spec": {"template": {"spec": {"containers": [container(node.busybox, "exec sleep 3600")]}}}},
            )

        def healthy() -> bool:
            last = {}
            for _, _, obj in graphs.snapshot():
                last[graph_of(obj)] = obj.get("status", {}).get("state")
            return all(last.get(name) not in (None, "failed") for name in names)

        deadline = time.monotonic() + 180
        while not healthy() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)
        lines = [json.loads(line) for line in w.snapshot(w.out)]

    # detection: the first Pod event where the rule holds, to the first DGD event saying failed
    detection = []
    first_loop: dict[str, float] = {}
    for when, _, pod in pods.snapshot():
        graph = graph_of(pod)
        if graph not in first_loop and crash_looping(pod):
            first_loop[graph] = when
    first_failed: dict[str, float] = {}
    flaps: dict[str, int] = dict.fromkeys(names, 0)
    state: dict[str, str] = {}
    for when, _, obj in graphs.snapshot():
        graph, now = graph_of(obj), obj.get("status", {}).get("state", "")
        if now == "failed" and graph not in first_failed:
            first_failed[graph] = when
        if when < fixed_at and state.get(graph) == "failed" and now != "failed":
            flaps[graph] += 1
        state[graph] = now
    for graph, when in first_failed.items():
        if graph in first_loop:
            detection.append(when - first_loop[graph])
    # recovery: the fix's new Pod Ready, to the DGD no longer failed
    recovery = []
    for name in names:
        new_ready = min(
            (when for when, _, pod in pods.snapshot() if when > fixed_at and graph_of(pod) == name and ready(pod)),
            default=None,
        )
        cleared = min(
            (
                when
                for when, _, obj in graphs.snapshot()
                if when > fixed_at and graph_of(obj) == name and obj.get("status", {}).get("state") != "failed"
            ),
            default=None,
        )
        if new_ready is not None and cleared is not None:
            recovery.append(cleared - new_ready)
    (t0, plane0, node0, cw0), (t1, plane1, node1, cw1) = samples[0], samples[-1]
    elapsed = t1 - t0

    def share(a: tuple[float, float], b: tuple[float, float]) -> str:
        return f"{(b[0] - a[0]) / elapsed * 100:.1f}% of a core, {b[1] / 2**20:.0f} MiB"

    print(f"{loops} crash loops on a real node, watched {duration / 60:.1f} min ({window_end - created:.0f} s)")
    print(f"crash-looping before the fix: {len(failed_before_fix)}/{loops} graphs")
    print(f"detection (the kubelet's write that makes the loop, seen -> the DGD failed, seen): {describe(detection)}")
    recovered_lines = [line for line in lines_before_fix if line["kind"] == "component" and not line["crash_looping"]]
    recovered_events = [e for e in events_before_fix if e["reason"] == "CrashLoopRecovered"]
    print(
        f"flaps before the fix, over {loops} crash-looping graphs: the DGD left failed {sum(flaps.values())} times; "
        f"{len(recovered_lines)} RECOVERED lines; {len(recovered_events)} CrashLoopRecovered Events"
    )
    after = [line for line in lines if line["kind"] == "component" and not line["crash_looping"]]
    print(f"  after the fix: {len(after)} RECOVERED lines in all (one per graph expected)")
    print(f"recovery (the fix's new Pod Ready, seen -> the DGD not failed, seen): {describe(recovery)}")
    print(f"control plane (etcd, kube-apiserver, kube-controller-manager): {share(plane0, plane1)}")
    print(f"node (kubelet, kube-scheduler, containerd and shims): {share(node0, node1)}")
    print(f"crashwatch run: {share(cw0, cw1)}")


if __name__ == "__main__":
    main()
