"""Benchmark of the waiters (issue 9): how soon a crash loop makes a CI wait fail, on a real control plane.

    python -m bench.waiters              # 20 crash loops, each in a fresh namespace: about a minute
    python -m bench.waiters --loops 50
    python -m bench.waiters --quick      # 3 crash loops: does it run

It starts etcd, kube-apiserver and kube-controller-manager (tests/envtest.py; the controllers finish the
namespaces it deletes) on loopback, and one `crashwatch run -A` for the whole run, as a cluster would
have it. Per crash loop, in a namespace of its own, it plays the Dynamo operator as
tests/e2e/test_kstatus_helm.py does: a DGD `llm` with the operator's pending status at its generation,
applied with the chart's spec and Helm's ownership metadata so that `helm install` adopts it and waits on
it, a DCD, and the worker's Pod. Then two waiters start and are let settle:

(a) `crashwatch wait dgd/llm -n NS`, until it has printed its first progress line;
(b) the real `helm install --wait --timeout 5m` of tests/e2e/charts/dynamo-graph (Helm 4, kstatus
    watcher), until its debug log says it sees the DGD InProgress.

Playing the kubelet, it writes the Pod's first restart, then the status write that completes the crash
loop (restartCount 2, CrashLoopBackOff after exit 1). The clock starts right after that write's HTTP
answer and stops when each waiter's process exits (a thread blocked in waitpid takes the time); (a) must
exit 1, (b) non-zero, anything else is a failure. As in bench/latency.py a plain second watch of the Pod
times when the API server delivered the write to a client, from just before the write was sent, which
tells the API server's own part from the waiters'; a watch of the DGD times when crashwatch run's
`Stalled=True` was seen, which splits (b) between the watcher and Helm.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import aiohttp
import yaml

from bench.latency import ROOT, Watch, patch_status, percentile, pod_watch, ssl_context

sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import envtest
from dynamo import adopted_by_helm, conditions, dgds, labelled_pod, make_graph
from helm import Helm
from kube import Kube, crash_status
from test_kstatus_helm import CHART, DCD, GRAPH, RELEASE, wait_waiting
from test_wait import progress
from waiters_bin import waiters_bin
from watcher import Watcher

POD = f"{DCD}-0"
EXIT_TIMEOUT = 60.0  # a waiter not gone this long after the crash loop is a failure (helm's own is 5 min)
TARGETS = {"wait": 1000.0, "helm": 2000.0}  # p99, ms


class ExitClock:
    """The moment a process exits, taken by a thread blocked in its waitpid (no polling interval)."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.at: float | None = None
        self.done = threading.Event()
        threading.Thread(target=self._wait, daemon=True).start()

    def _wait(self) -> None:
        self.process.wait()
        self.at = time.perf_counter()
        self.done.set()


class TimedWaiter(Watcher):
    """`crashwatch wait` as test_wait.py's `waiter` runs it, also keeping when its verdict reached stdout
    (which tells its decision from its exit)."""

    def __init__(self, kubeconfig: Path, namespace: str, *args: str) -> None:
        self.verdict_at: float | None = None
        super().__init__("wait", "-n", namespace, "--kubeconfig", str(kubeconfig), *args)

    def _pump(self, stream: IO[bytes] | None, lines: list[str]) -> None:
        assert stream is not None
        for raw in stream:
            if lines is self.out and self.verdict_at is None:
                self.verdict_at = time.perf_counter()
            with self._lock:
                lines.append(raw.decode().rstrip("\n"))


@dataclass
class Loop:
    """One crash loop's times (perf_counter seconds) and what the waiters did."""

    namespace: str
    sent: float | None = None  # just before the completing Pod write was sent
    answered: float | None = None  # right after its HTTP answer: the clock's start
    delivered: float | None = None  # the second watch of the Pod saw it
    stalled: float | None = None  # a watch of the DGD saw crashwatch run's Stalled=True
    wait_verdict: float | None = None  # `crashwatch wait` printed its verdict
    wait_exit: float | None = None
    helm_exit: float | None = None
    wait_code: int | None = None
    helm_code: int | None = None
    failures: list[str] = field(default_factory=list)


def stalled_status(obj: dict[str, Any]) -> str:
    return str(conditions(obj).get("Stalled", {}).get("status", "absent"))


def chart_manifest(helm: Helm) -> dict[str, Any]:
    rendered = helm.run("template", RELEASE, str(CHART))
    if rendered.returncode != 0:
        raise RuntimeError(f"helm template: {rendered.stderr}")
    (manifest,) = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    return dict(manifest)


def prepare(kube: Kube, namespace: str, manifest: dict[str, Any]) -> None:
    """The namespace, the operator's pending graph that `helm install` will adopt (its chart spec, Helm's
    ownership metadata, status.observedGeneration at its generation), the DCD and the worker's Pod."""
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    make_graph(kube, namespace, graph=GRAPH, deployments=False)
    adopted_by_helm(kube, namespace, manifest, RELEASE)
    labelled_pod(kube, namespace, POD, GRAPH, "worker")


def wait_log(process: subprocess.Popen[bytes], log: Path, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"helm never logged {text!r} (exit {process.poll()}):\n{log.read_text()[-3000:]}")
        time.sleep(0.02)


async def one_loop(
    session: aiohttp.ClientSession,
    plane: envtest.ControlPlane,
    kube: Kube,
    waiters: Path,
    home: Path,
    manifest: dict[str, Any],
    namespace: str,
) -> Loop:
    loop = Loop(namespace)
    prepare(kube, namespace, manifest)
    tasks: list[asyncio.Task[None]] = []
    with contextlib.ExitStack() as stack:
        wait = stack.enter_context(TimedWaiter(plane.kubeconfig, namespace, f"dgd/{GRAPH}"))
        wait_clock = ExitClock(wait.process)
        (home / namespace).mkdir()
        helm = Helm(home / namespace, plane.kubeconfig, namespace)
        install, log = stack.enter_context(
            helm.start("install", "install", RELEASE, str(CHART), "--wait", "--timeout", "5m")
        )
        helm_clock = ExitClock(install)
        # both settle before the crash loop: wait past its first progress line, helm watching the DGD
        wait.wait_for(lambda: bool(progress(wait)), what="wait's first progress line")
        wait_waiting(install, log)
        wait_log(install, log, "kind=DynamoGraphDeployment expectedStatus=Current actualStatus=InProgress")
        try:
            pod, pod_task = pod_watch(session, plane, namespace)
            dgd = Watch(stalled_status)
            tasks = [pod_task, asyncio.create_task(dgd.run(session, f"{plane.url}{dgds(namespace)}"))]
            await pod.until(lambda s: s != "")  # both watches are up
            await dgd.until(lambda s: s != "")
            pod_url = f"{plane.url}/api/v1/namespaces/{namespace}/pods/{POD}/status"
            await patch_status(session, pod_url, crash_status(1))  # one restart: not yet a loop
            await pod.until(lambda s: s == (1, False))
            await asyncio.sleep(0.2)  # the waiters have it too
            if wait_clock.done.is_set() or helm_clock.done.is_set():
                loop.failures.append("a waiter exited before the crash loop")
            loop.sent = time.perf_counter()
            await patch_status(session, pod_url, crash_status(2))  # the write that makes it a loop
            loop.answered = time.perf_counter()
            deadline = time.perf_counter() + EXIT_TIMEOUT
            while not (wait_clock.done.is_set() and helm_clock.done.is_set()) and time.perf_counter() < deadline:
                await asyncio.sleep(0.05)
            with contextlib.suppress(TimeoutError):
                await pod.until(lambda s: s == (2, False), timeout=5)
                await dgd.until(lambda s: s == "True", timeout=5)
            loop.delivered = next((t for s, t in pod.arrivals if s == (2, False)), None)
            loop.stalled = next((t for s, t in dgd.arrivals if s == "True"), None)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        loop.wait_exit, loop.helm_exit, loop.wait_verdict = wait_clock.at, helm_clock.at, wait.verdict_at
        loop.wait_code, loop.helm_code = wait.process.poll(), install.poll()
    # the ExitStack stopped whatever was still running; now judge what each waiter did
    if loop.wait_code != 1:
        said = (wait.stdout() or wait.stderr())[-300:]
        loop.failures.append(f"crashwatch wait: exit {_code(loop.wait_code, loop.wait_exit)}: {said}")
    helm_said = log.read_text(errors="replace")
    if loop.helm_code in (0, None):
        loop.failures.append(f"helm install: exit {_code(loop.helm_code, loop.helm_exit)}: {helm_said[-300:]}")
    elif f"DynamoGraphDeployment/{namespace}/{GRAPH} not ready. status: Failed" not in helm_said:
        loop.failures.append(f"helm install: exit {loop.helm_code}, not for the Failed DGD: {helm_said[-300:]}")
    if loop.delivered is None:
        loop.failures.append("the second watch of the Pod never saw the completing write")
    return loop


def _code(code: int | None, at: float | None) -> str:
    return f"{code}" if at is not None else f"none in {EXIT_TIMEOUT:.0f}s"


def cleanup(kube: Kube, namespace: str) -> None:
    """No kubelet confirms a Pod's end here: delete it at once, then the namespace."""
    with contextlib.suppress(Exception):
        kube.delete(f"/api/v1/namespaces/{namespace}/pods/{POD}", grace=0)
    with contextlib.suppress(Exception):
        kube.delete(f"/api/v1/namespaces/{namespace}")


def namespaces_left(kube: Kube, names: list[str], timeout: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        present = {item["metadata"]["name"] for item in kube.get("/api/v1/namespaces")["items"]}
        left = [n for n in names if n in present]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def stats_row(label: str, values: list[float], target: float | None = None) -> str:
    if not values:
        return f"| {label} | - | - | - | - | 0 |"
    cells = " | ".join(f"{percentile(values, q):,.0f} ms" for q in (50, 90, 99))
    met = "" if target is None else (" yes" if percentile(values, 99) < target else " **no**")
    return f"| {label} | {cells} | {max(values):,.0f} ms | {len(values)}{met} |"


def report(loops: list[Loop], watcher: Watcher, elapsed: float, left: list[str]) -> int:
    def ms(pairs: list[tuple[float | None, float | None]]) -> list[float]:
        return [(b - a) * 1000 for a, b in pairs if a is not None and b is not None]

    wait = ms([(x.answered, x.wait_exit) for x in loops if x.wait_code == 1])
    helm = ms([(x.answered, x.helm_exit) for x in loops if x.helm_code not in (0, None)])
    answer = ms([(x.sent, x.answered) for x in loops])
    delivered = ms([(x.sent, x.delivered) for x in loops])
    after_answer = ms([(x.answered, x.delivered) for x in loops])
    wait_rest = ms([(x.delivered, x.wait_exit) for x in loops if x.wait_code == 1])
    helm_rest = ms([(x.delivered, x.helm_exit) for x in loops if x.helm_code not in (0, None)])
    wait_said = ms([(x.answered, x.wait_verdict) for x in loops if x.wait_code == 1])
    wait_gone = ms([(x.wait_verdict, x.wait_exit) for x in loops if x.wait_code == 1])
    marked = ms([(x.answered, x.stalled) for x in loops])
    helm_after_mark = ms([(x.stalled, x.helm_exit) for x in loops if x.helm_code not in (0, None)])
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    print(
        f"# the waiters against a crash loop ({len(loops)} crash loops, each in a fresh namespace; "
        f"{os.cpu_count()} cores; control plane, `crashwatch run -A`, the waiters and this script on the same "
        f"machine; crashwatch {head.stdout.strip()}{' with uncommitted changes' if dirty.stdout.strip() else ''})\n"
    )
    print(f"{elapsed:.0f} s in all, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print("| | p50 | p90 | p99 | max | n, p99 target met |\n|---|---|---|---|---|---|")
    print(stats_row("(a) the completing Pod write's answer until `crashwatch wait` exited 1", wait, TARGETS["wait"]))
    print(stats_row("(b) the same until `helm install --wait` exited non-zero", helm, TARGETS["helm"]))
    print(stats_row("server: the Pod write sent until its HTTP answer", answer))
    print(stats_row("server: the Pod write sent until a second watch of the Pod saw it", delivered))
    print(stats_row("  the same, from the answer (negative: seen before the answer came)", after_answer))
    print(stats_row("(a) from the second watch's delivery until `crashwatch wait` exited", wait_rest))
    print(stats_row("(a) part 1: the answer until `crashwatch wait` printed its verdict", wait_said))
    print(stats_row("(a) part 2: that until it exited", wait_gone))
    print(stats_row("(b) from the second watch's delivery until helm exited", helm_rest))
    print(stats_row("(b) part 1: the answer until a DGD watch saw crashwatch run's Stalled=True", marked))
    print(stats_row("(b) part 2: that until helm exited", helm_after_mark))
    waits = collections.Counter(_code(x.wait_code, x.wait_exit) for x in loops)
    helms = collections.Counter(_code(x.helm_code, x.helm_exit) for x in loops)
    print(f"\nexit codes: crashwatch wait {dict(waits)}; helm install {dict(helms)}")
    writes = watcher.writes()
    marks = sum("Stalled=True" in line for line in writes)
    print(
        f"crashwatch run -A: {len(writes)} status writes, {marks} marking a crash loop ({2 * len(loops)} expected: "
        "the DCD and the DGD per loop), the others clearing it when the cleanup deleted the Pod"
    )
    if os.environ.get("CRASHWATCH_BENCH_VERBOSE"):
        print("\n".join(watcher.snapshot(watcher.err)))
    others = [line for line in watcher.snapshot(watcher.err) if not line.startswith("crashwatch: wrote ")]
    if watcher.process.poll() is not None:
        print(f"crashwatch run -A exited early with {watcher.process.returncode}")
    if len(others) > 2:  # more than its start and sync lines
        print("crashwatch run -A said:\n  " + "\n  ".join(others[2:22]))
    if left:
        print(f"namespaces not gone a minute after their deletion: {', '.join(left)}")
    failed = [x for x in loops if x.failures]
    print(f"failures: {sum(len(x.failures) for x in loops)} in {len(failed)} of {len(loops)} crash loops")
    for x in failed:
        for failure in x.failures:
            print(f"  {x.namespace}: {failure}")
    met = bool(wait and helm) and all(percentile(v, 99) < TARGETS[k] for k, v in (("wait", wait), ("helm", helm)))
    print(f"targets (p99 < 1 s for wait, < 2 s for helm): {'met' if met else 'NOT met'}")
    return 1 if failed or left or not met else 0


async def measure(plane: envtest.ControlPlane, waiters: Path, home: Path, loops: int) -> int:
    kube = plane.kube()
    results: list[Loop] = []
    names: list[str] = []
    with Watcher("run", "-A", "-o", "json", "--kubeconfig", str(plane.kubeconfig)) as watcher:
        watcher.wait_synced()
        manifest = chart_manifest(Helm(home, plane.kubeconfig, "default"))
        began = time.perf_counter()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl_context(plane.certs))) as session:
            for n in range(loops):
                namespace = f"waiters-{n:03d}-{uuid.uuid4().hex[:6]}"
                names.append(namespace)
                try:
                    results.append(await one_loop(session, plane, kube, waiters, home, manifest, namespace))
                except Exception as exc:  # a loop that could not be set up or measured: a failure, go on
                    results.append(Loop(namespace, failures=[f"{type(exc).__name__}: {exc}"[:1500]]))
                finally:
                    cleanup(kube, namespace)
                if (n + 1) % 5 == 0 or n + 1 == loops:
                    print(f"  {n + 1} crash loops", file=sys.stderr)
        elapsed = time.perf_counter() - began
        left = namespaces_left(kube, names)
        return report(results, watcher, elapsed, left)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up as Ctrl-C does


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loops", type=int, default=20, help="crash loops, each in a fresh namespace (default 20)")
    parser.add_argument("--quick", action="store_true", help="3 crash loops, to check that it runs")
    args = parser.parse_args()
    loops = 3 if args.quick else args.loops
    signal.signal(signal.SIGTERM, _interrupt)
    waiters = waiters_bin()
    binaries = envtest.binaries()
    code = 1
    with tempfile.TemporaryDirectory(prefix="crashwatch-waiters-") as folder:
        (Path(folder) / "plane").mkdir()
        (Path(folder) / "helm").mkdir()
        plane = envtest.ControlPlane(binaries, Path(folder) / "plane")
        try:
            plane.start()
            code = asyncio.run(measure(plane, waiters, Path(folder) / "helm", loops))
        finally:
            plane.stop()
    sys.exit(code)


if __name__ == "__main__":
    main()
