"""Benchmark of the live watcher (issue 4): how soon a crash loop fails the graph, on a real control plane.

    python -m bench.latency                          # 100 crash loops, 500 unrelated Pod status updates/s
    python -m bench.latency --loops 10 --load 100    # a quick look
    python -m bench.latency --load 0                 # no background load
    python -m bench.latency --server-only            # the same writes and load, no crashwatch
    python -m bench.latency --watcher-arg=--no-events # crashwatch run without its Kubernetes Events

It starts etcd and kube-apiserver (tests/envtest.py, the binaries scripts/build-controlplane makes; no
kube-controller-manager, which these Deployment-less Pods do not need), then `crashwatch run` as a user
runs it. A load process (bench/loadgen, in Go and asking for protobuf answers as a kubelet does, so that
it leaves the API server its CPU) writes status updates of unrelated graph Pods, labelled so that they go
through the whole pipeline, at the given rate. For each crash loop the clock starts just before the Pod
status write that completes it (restartCount 2, CrashLoopBackOff after exit 1) and stops when a separate
watch on the DGD sees `state: failed`; then the Pod becomes Ready and the clock runs again until the DGD
leaves `failed`. It reports the percentiles, split at the moment crashwatch received the Pod event (the
`time` of its verdict line) and at the moment a separate watch of that Pod saw it (the two tell the API
server's delay from crashwatch's), the floor (one write and its echo on a watch, without crashwatch), the
load the API server actually answered, and the watcher's CPU time and memory. `--server-only` runs the
same Pod writes under the same load with no crashwatch at all: what the API server alone takes to deliver
the completing write to a watch, a bound no watcher can beat.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import math
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import envtest  # noqa: E402
from dynamo import dgds, labelled_pod, make_graph  # noqa: E402
from kube import crash_status, ready_status  # noqa: E402
from watcher import Watcher  # noqa: E402

NOISE_PODS = 200


def ssl_context(certs: dict[str, Path]) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs["ca.crt"]))
    context.load_cert_chain(str(certs["admin.crt"]), str(certs["admin.key"]))
    return context


async def patch_status(session: aiohttp.ClientSession, url: str, status: dict[str, Any]) -> None:
    async with session.patch(
        url, data=json.dumps({"status": status}), headers={"Content-Type": "application/merge-patch+json"}
    ) as response:
        if response.status >= 400:
            raise RuntimeError(f"{url}: {response.status} {await response.text()}")


def loadgen() -> Path:
    """The load generator (bench/loadgen, Go's standard library only), built once into .cache/bench."""
    out = ROOT / ".cache" / "bench" / "loadgen"
    source = ROOT / "bench" / "loadgen"
    if not out.exists() or out.stat().st_mtime < (source / "main.go").stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["go", "build", "-o", str(out), "."], cwd=source, check=True)
    return out


class Load:
    """Status writes of the unrelated Pods at a steady rate, from a separate process that costs the API
    server little CPU; it prints the writes answered so far once a second."""

    def __init__(
        self,
        plane: envtest.ControlPlane,
        namespace: str,
        rate: float,
        inflight: int,
        pods: int = NOISE_PODS,
        prefix: str = "noise-",
    ) -> None:
        c = plane.certs
        self.process = subprocess.Popen(
            [
                str(loadgen()),
                f"--server={plane.url}",
                f"--ca={c['ca.crt']}",
                f"--cert={c['admin.crt']}",
                f"--key={c['admin.key']}",
                f"--namespace={namespace}",
                f"--prefix={prefix}",
                f"--pods={pods}",
                f"--rate={rate}",
                f"--inflight={inflight}",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.answered = 0
        self.failed = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.answered, self.failed = map(int, line.split())

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


class Watch:
    """A watch separate from crashwatch: when did the watched object's state (as `state_of` reads it)
    change, as a client sees. `arrivals` keeps the time each state was first seen."""

    def __init__(self, state_of: Any) -> None:
        self.state_of = state_of
        self.state: Any = ""
        self.changed = asyncio.Event()
        self.arrivals: list[tuple[Any, float]] = []

    async def run(self, session: aiohttp.ClientSession, url: str) -> None:
        while True:
            async with session.get(url, params={"watch": "1", "timeoutSeconds": "600"}, timeout=None) as response:
                async for line in response.content:
                    event = json.loads(line)
                    if event["type"] == "ERROR":  # e.g. 410 Gone on a resume: the benchmark cannot go on
                        raise RuntimeError(f"{url}: the watch ended with {event['object']}")
                    state = self.state_of(event["object"])
                    if state != self.state:
                        self.arrivals.append((state, time.perf_counter()))
                        self.state = state
                        self.changed.set()

    async def until(self, predicate: Any, timeout: float = 30) -> float:
        deadline = time.monotonic() + timeout
        while not predicate(self.state):
            self.changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"DGD state still {self.state!r}")
            with contextlib.suppress(TimeoutError):  # checked at the loop's top
                await asyncio.wait_for(self.changed.wait(), remaining)
        return time.perf_counter()


def dgd_state(obj: dict[str, Any]) -> str:
    return str(obj.get("status", {}).get("state", ""))


def pod_restarts(obj: dict[str, Any]) -> tuple[int, bool]:
    """The restart count and readiness of a Pod's one container, or (-1, False) before it has one."""
    statuses = obj.get("status", {}).get("containerStatuses") or [{}]
    return statuses[0].get("restartCount", -1), bool(statuses[0].get("ready"))


def proc_usage(pid: int) -> tuple[float, int, int]:
    """CPU seconds (user+system), resident and peak resident bytes of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    rss = hwm = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) * 1024
    return cpu, rss, hwm


def percentile(values: list[float], q: float) -> float:
    """Nearest rank: the smallest value with at least q% of the values at or below it."""
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q / 100 * len(ordered)))) - 1]


def prepare(plane: envtest.ControlPlane) -> str:
    """The graph, its Pod and the unrelated Pods, in a namespace of their own, whose name it returns."""
    kube = plane.kube()
    namespace = "bench"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    make_graph(kube, namespace, graph="llm", deployments=False)
    labelled_pod(kube, namespace, "llm-worker-0", "llm", "worker")
    for i in range(NOISE_PODS):
        labelled_pod(kube, namespace, f"noise-{i:03d}", f"noise-{i // 10}", "worker")
    return namespace


def pod_watch(session: aiohttp.ClientSession, plane: envtest.ControlPlane, namespace: str) -> tuple[Watch, Any]:
    """A watch of the crash-looping Pod alone (the server filters by name), and its task: when the API
    server delivered a change to a client other than crashwatch, which tells its delay from crashwatch's."""
    pod = Watch(pod_restarts)
    url = f"{plane.url}/api/v1/namespaces/{namespace}/pods?fieldSelector=metadata.name%3Dllm-worker-0"
    return pod, asyncio.create_task(pod.run(session, url))


async def measure_server(plane: envtest.ControlPlane, loops: int, rate: float, inflight: int) -> None:
    """The same Pod writes under the same load with no crashwatch running: the API server's own delay,
    from the completing write to a separate watch of that Pod, which no watcher can beat."""
    namespace = prepare(plane)
    pod_url = f"{plane.url}/api/v1/namespaces/{namespace}/pods/llm-worker-0/status"
    delivered: list[float] = []
    load = Load(plane, namespace, rate, inflight) if rate > 0 else None
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl_context(plane.certs))) as session:
            pod, task = pod_watch(session, plane, namespace)
            await asyncio.sleep(3)  # the load settles
            answered0 = load.answered if load else 0
            began = time.perf_counter()
            for _ in range(loops):
                await patch_status(session, pod_url, crash_status(1))
                await asyncio.sleep(0.05)
                start = time.perf_counter()
                await patch_status(session, pod_url, crash_status(2))
                delivered.append((await pod.until(lambda s: s == (2, False)) - start) * 1000)
                await patch_status(session, pod_url, ready_status(restarts=2))
                await pod.until(lambda s: s == (2, True))
            achieved = ((load.answered if load else 0) - answered0) / (time.perf_counter() - began)
            task.cancel()
    finally:
        if load is not None:
            load.stop()
    print(f"# the API server alone ({loops} crash loops' Pod writes, no crashwatch, {os.cpu_count()} cores)\n")
    print(
        f"background load: {achieved:,.0f} unrelated Pod status updates/s answered "
        f"(asked for {rate:,.0f}, at most {inflight} in flight)\n"
    )
    print("| | p50 | p90 | p99 | max | over 500 ms |\n|---|---|---|---|---|---|")
    print(row("the completing Pod write until a separate watch of that Pod saw it", delivered))


def row(label: str, values: list[float]) -> str:
    slow = sum(v > 500 for v in values)
    cells = " | ".join(f"{percentile(values, q):.0f} ms" for q in (50, 90, 99))
    return f"| {label} | {cells} | {max(values):.0f} ms | {slow} of {len(values)} |"


async def measure(
    plane: envtest.ControlPlane, loops: int, rate: float, inflight: int, extra: tuple[str, ...] = ()
) -> None:
    namespace = prepare(plane)
    watcher = Watcher("run", "-n", namespace, "-o", "json", "--kubeconfig", str(plane.kubeconfig), *extra)
    watcher.wait_synced()
    pid = watcher.process.pid
    load: Load | None = None
    connector = aiohttp.TCPConnector(ssl=ssl_context(plane.certs))
    failing: list[float] = []
    recovering: list[float] = []
    starts: list[float] = []  # wall-clock starts of the failing measures, to split them (see below)
    writes: list[float] = []  # how long the completing Pod write itself took to be answered
    clocks: list[float] = []  # the same starts on the benchmark's clock
    try:
        async with aiohttp.ClientSession(connector=connector) as session:
            dgd = Watch(dgd_state)
            watch_task = asyncio.create_task(dgd.run(session, f"{plane.url}{dgds(namespace)}"))
            pod, pod_task = pod_watch(session, plane, namespace)
            await dgd.until(lambda s: s == "pending")
            pod_url = f"{plane.url}/api/v1/namespaces/{namespace}/pods/llm-worker-0/status"
            if rate > 0:
                load = Load(plane, namespace, rate, inflight)
                await asyncio.sleep(3)  # the load settles
            # the floor: one status write and its echo on a watch, as the API server serves them now
            floor = []
            for _ in range(20):
                start = time.perf_counter()
                await patch_status(session, f"{plane.url}{dgds(namespace)}/llm/status", {"state": "initializing"})
                floor.append(await dgd.until(lambda s: s == "initializing") - start)
                await patch_status(session, f"{plane.url}{dgds(namespace)}/llm/status", {"state": "pending"})
                await dgd.until(lambda s: s == "pending")
            pod.arrivals.clear()
            cpu0, _, _ = proc_usage(pid)
            answered0 = load.answered if load else 0
            began = time.perf_counter()
            for n in range(loops):
                await patch_status(session, pod_url, crash_status(1))  # one restart: not yet a loop
                await asyncio.sleep(0.05)
                start = time.perf_counter()
                starts.append(time.time())
                clocks.append(start)
                await patch_status(session, pod_url, crash_status(2))  # the write that makes it a loop
                writes.append(time.perf_counter() - start)
                failing.append(await dgd.until(lambda s: s == "failed") - start)
                start = time.perf_counter()
                await patch_status(session, pod_url, ready_status(restarts=2))
                recovering.append(await dgd.until(lambda s: s != "failed") - start)
                if (n + 1) % 10 == 0:
                    print(f"  {n + 1} crash loops", file=sys.stderr)
            elapsed = time.perf_counter() - began
            achieved = ((load.answered if load else 0) - answered0) / elapsed
            cpu1, rss, hwm = proc_usage(pid)
            watch_task.cancel()
            pod_task.cancel()
    finally:
        if load is not None:
            load.stop()
        watcher.stop()
    ms = [x * 1000 for x in failing]
    rec = [x * 1000 for x in recovering]
    print(
        f"# crashwatch live latency ({loops} crash loops, {NOISE_PODS} unrelated Pods, "
        f"{os.cpu_count()} cores, control plane on the same machine)\n"
    )
    print(
        f"background load: {achieved:,.0f} unrelated Pod status updates/s answered by the API server "
        f"(asked for {rate:,.0f}, at most {inflight} in flight)\n"
    )
    fl = [x * 1000 for x in floor]

    print(
        "| from the completing Pod status write to the DGD change seen by a separate watch "
        "| p50 | p90 | p99 | max | over 500 ms |"
    )
    print("|---|---|---|---|---|---|")
    print(row("failed (crash loop)", ms))
    print(row("recovered (Pod Ready)", rec))
    print(row("floor: one status write to its echo on a watch, without crashwatch", fl))
    # split: the Pod write until crashwatch received its event (the `time` of its verdict line), and
    # from there until the separate watch saw the DGD fail (crashwatch's writes and their echo)
    received = [
        datetime.datetime.fromisoformat(line["time"].replace("Z", "+00:00")).timestamp()
        for line in map(json.loads, watcher.snapshot(watcher.out))
        if line["kind"] == "component" and line["crash_looping"]
    ]
    if len(received) == len(starts):
        arrive = [(r - s) * 1000 for r, s in zip(received, starts, strict=True)]
        rest = [m - a for m, a in zip(ms, arrive, strict=True)]
        print(row("failed, part 1: the Pod write until crashwatch received its event", arrive))
        print(row("  of which the Pod write's own answer from the API server", [w * 1000 for w in writes]))
        seen = [t for state, t in pod.arrivals if state == (2, False)]
        if len(seen) == len(clocks):
            delivered = [(t - c) * 1000 for t, c in zip(seen, clocks, strict=True)]
            print(row("  the Pod write until a separate watch of that Pod saw it", delivered))
        print(row("failed, part 2: crashwatch's writes until the separate watch saw the DGD fail", rest))
    print(f"\nmean {statistics.mean(ms):.0f} ms to fail, {statistics.mean(rec):.0f} ms to recover")
    print(
        f"watcher: {(cpu1 - cpu0) / elapsed * 100:.0f}% of a core over {elapsed:.0f} s "
        f"({cpu1 - cpu0:.1f} CPU s), RSS {rss / 2**20:.0f} MiB (peak {hwm / 2**20:.0f} MiB)"
    )
    if os.environ.get("CRASHWATCH_BENCH_VERBOSE"):
        print("\n".join(watcher.snapshot(watcher.err)))
    others = [line for line in watcher.snapshot(watcher.err) if not line.startswith("crashwatch: wrote ")]
    if len(others) > 2:  # more than its start and sync lines: show what it said
        print("watcher said:\n  " + "\n  ".join(others[2:22]))
    writes = watcher.writes()
    print(f"status writes: {len(writes)} ({2 * 2 * loops} expected: DCD and DGD, on failure and on recovery)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loops", type=int, default=100)
    parser.add_argument("--load", type=float, default=500, help="unrelated Pod status updates per second")
    parser.add_argument(
        "--load-inflight",
        type=int,
        default=256,
        metavar="N",
        help="most background writes waiting for an answer at once (default: 256, which keeps the rate "
        "steady whatever the server's delay; a few, like a handful of kubelets, let a slow server slow the load)",
    )
    parser.add_argument("--apiserver-arg", action="append", default=[], help="an extra kube-apiserver flag")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        type=lambda t: tuple(t.split("=", 1)),
        help="NAME=VALUE for the control plane",
    )
    parser.add_argument(
        "--watcher-arg", action="append", default=[], help="an extra `crashwatch run` argument (--no-events)"
    )
    parser.add_argument(
        "--server-only",
        action="store_true",
        help="no crashwatch: time the completing Pod write to a separate watch, the API server's own share",
    )
    args = parser.parse_args()
    binaries = envtest.binaries()
    with tempfile.TemporaryDirectory(prefix="crashwatch-latency-") as folder:
        # no kube-controller-manager: the Pods here have no Deployment, and it would only take CPU
        plane = envtest.ControlPlane(
            binaries, Path(folder), controllers=False, apiserver_args=args.apiserver_arg, env=dict(args.env)
        )
        try:
            plane.start()
            if args.server_only:
                asyncio.run(measure_server(plane, args.loops, args.load, args.load_inflight))
            else:
                asyncio.run(measure(plane, args.loops, args.load, args.load_inflight, tuple(args.watcher_arg)))
        finally:
            plane.stop()


if __name__ == "__main__":
    main()
