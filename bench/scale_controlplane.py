"""bench/scale.py on the real control plane (`--control-plane`): etcd and kube-apiserver from
tests/envtest.py, the Pods created through the API, churn written as a kubelet writes it.

All objects live in one namespace (team-0). The first `--noise-pods` Pods are rewritten by the Go load
generator (bench/loadgen, as bench/latency.py uses it: readiness flips, protobuf answers, at most
`--load-inflight` writes unanswered) at `--rate` writes a second; crash loops start and end on a labelled
set of other Pods, written by this process. A plain watch of those labelled Pods times the API server's
own delivery of each loop's Pod write; a watch of the DCDs sees crashwatch's status writes. The verdict
latency beyond the API server's delivery is the second minus the first.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

import bench.scale as scale
from bench.latency import Load, proc_usage
from bench.scale import (
    DCDS,
    DGDS,
    LOOPING,
    RECOVERED,
    RUNNING,
    Figures,
    Generator,
    Loop,
    Process,
    Renderer,
    crashwatch_args,
    exactly_once,
    free_port,
    graph_objects,
    place,
    pod_name,
    ready_at,
    stalled,
    until,
)

sys.path.insert(0, str(scale.ROOT / "tests"))
import envtest

NAMESPACE = "team-0"
CANDIDATE = "bench.crashwatch.dev/loop-candidate"


def context(plane: envtest.ControlPlane) -> ssl.SSLContext:
    c = plane.certs
    ctx = ssl.create_default_context(cafile=str(c["ca.crt"]))
    ctx.load_cert_chain(str(c["admin.crt"]), str(c["admin.key"]))
    return ctx


async def send(session: aiohttp.ClientSession, method: str, url: str, body: Any, content_type: str) -> None:
    for attempt in range(5):
        async with session.request(method, url, data=json.dumps(body), headers={"Content-Type": content_type}) as r:
            if r.status < 300 or (r.status == 409 and method == "POST"):
                return
            if r.status in (429, 500, 503, 504) and attempt < 4:
                await asyncio.sleep(0.5)
                continue
            raise RuntimeError(f"{method} {url}: {r.status} {(await r.text())[:300]}")


async def populate(plane: envtest.ControlPlane, pods: int, candidates: set[int], gen: Generator) -> None:
    """The namespace, graphs and Pods; each Pod created, then its status written (the API server
    ignores a Pod's status on create)."""
    renderer = Renderer()
    dgds, dcds, deployments = graph_objects(pods)
    base = plane.url
    began = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context(plane), limit=32)) as session:
        await send(
            session,
            "POST",
            f"{base}/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            "application/json",
        )

        def clean(obj: dict[str, Any]) -> dict[str, Any]:
            meta = obj["metadata"]
            for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"):
                meta.pop(key, None)
            for ref in meta.get("ownerReferences", []):
                ref["uid"] = "00000000-0000-4000-8000-000000000000"
            return obj

        async def make(path: str, obj: dict[str, Any], status: dict[str, Any] | None) -> None:
            await send(session, "POST", f"{base}{path}", clean(obj), "application/json")
            if status is not None:
                status = {k: v for k, v in status.items() if k != "qosClass"}  # the server's own to decide
                name = obj["metadata"]["name"]
                await send(
                    session, "PATCH", f"{base}{path}/{name}/status", {"status": status}, "application/merge-patch+json"
                )

        async def many(jobs: list[Any]) -> None:
            queue = list(reversed(jobs))

            async def worker() -> None:
                while queue:
                    await queue.pop()

            await asyncio.gather(*(worker() for _ in range(32)))

        ns = f"/namespaces/{NAMESPACE}"
        await many([make(f"/apis/nvidia.com/v1alpha1{ns}/{DGDS}", o, o["status"]) for o in dgds])
        await many([make(f"/apis/nvidia.com/v1alpha1{ns}/{DCDS}", o, o["status"]) for o in dcds])
        await many([make(f"/apis/apps/v1{ns}/deployments", o, None) for o in deployments])
        print(f"  graphs created in {time.perf_counter() - began:.0f} s", file=sys.stderr)
        from builders import worker_pod

        def pod(i: int) -> dict[str, Any]:
            _, graph, component = place(i)
            obj = worker_pod(NAMESPACE, pod_name(i), graph, component)
            if i in candidates:
                obj["metadata"]["labels"][CANDIDATE] = "true"
            return obj

        jobs = [make(f"/api/v1{ns}/pods", pod(i), renderer.status_dicts[gen.status[i]]) for i in range(pods)]
        await many(jobs)
    print(f"  {pods:,} Pods created in {time.perf_counter() - began:.0f} s", file=sys.stderr)


class Observer:
    """Two plain watches: the loop candidates' Pods (when the API server delivered each loop's write)
    and the DCDs (crashwatch's status writes)."""

    def __init__(self, plane: envtest.ControlPlane) -> None:
        self.plane = plane
        self.pod_seen: list[tuple[str, str, float]] = []  # (pod, "start" | "end", when)
        self.dcd_writes: list[tuple[tuple[str, str], str, float]] = []  # (key, Stalled status, when)
        self.tasks: list[asyncio.Task[None]] = []

    async def _watch(self, session: aiohttp.ClientSession, path: str, on: Any) -> None:
        rv = ""
        while True:
            params = {"watch": "1", "timeoutSeconds": "3600", "allowWatchBookmarks": "true"}
            if rv:
                params["resourceVersion"] = rv
            async with session.get(self.plane.url + path, params=params, timeout=None) as response:
                async for line in response.content:
                    event = json.loads(line)
                    obj = event["object"]
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        on(event["type"], obj, time.perf_counter())

    def on_pod(self, kind: str, obj: dict[str, Any], at: float) -> None:
        statuses = obj.get("status", {}).get("containerStatuses") or [{}]
        restarts, ready = statuses[0].get("restartCount", 0), statuses[0].get("ready", False)
        if kind == "MODIFIED" and restarts == 2:
            self.pod_seen.append((obj["metadata"]["name"], "end" if ready else "start", at))

    def on_dcd(self, kind: str, obj: dict[str, Any], at: float) -> None:
        if kind != "MODIFIED":
            return
        state = stalled({"status": obj.get("status", {})})
        if state is not None:
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            self.dcd_writes.append((key, state, at))

    def start(self, session: aiohttp.ClientSession) -> None:
        ns = f"/namespaces/{NAMESPACE}"
        self.tasks = [
            asyncio.create_task(
                self._watch(session, f"/api/v1{ns}/pods?labelSelector={CANDIDATE}%3Dtrue", self.on_pod)
            ),
            asyncio.create_task(self._watch(session, f"/apis/nvidia.com/v1alpha1{ns}/{DCDS}", self.on_dcd)),
        ]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
                await task


async def churn(
    plane: envtest.ControlPlane,
    session: aiohttp.ClientSession,
    gen: Generator,
    args: argparse.Namespace,
    process: Process,
    figures: Figures,
) -> tuple[float, float]:
    """Load on the noise Pods and crash loops on the candidates for the duration; the window."""
    renderer = Renderer()
    pid = process.process.pid
    cpu0, _, _ = proc_usage(pid)
    load = Load(plane, NAMESPACE, args.rate, args.load_inflight, pods=args.noise_pods, prefix="pod-")
    began = time.perf_counter()
    writes = 0
    try:
        await asyncio.sleep(1)
        answered0 = load.answered
        began = time.perf_counter()
        cpu0, _, _ = proc_usage(pid)
        period = 1 / args.loops if args.loops else args.duration
        while time.perf_counter() - began < args.duration:
            what, i = gen.next(1.0)
            if what != "noise":
                status = {k: v for k, v in renderer.status_dicts[gen.status[i]].items() if k != "qosClass"}
                url = f"{plane.url}/api/v1/namespaces/{NAMESPACE}/pods/{pod_name(i)}/status"
                kind, loop = gen.record[-1]
                at = time.perf_counter()
                if kind == "start":
                    loop.started = at
                else:
                    loop.ended = at
                await send(session, "PATCH", url, {"status": status}, "application/merge-patch+json")
                writes += 1
            await asyncio.sleep(period)
        ended = time.perf_counter()
        answered = load.answered - answered0
    finally:
        load.stop()
    cpu1, rss, hwm = proc_usage(pid)
    figures.events = answered + writes
    figures.rate = figures.events / (ended - began)
    figures.cpu_per_1000 = (cpu1 - cpu0) / max(1, figures.events) * 1000
    figures.core_share = (cpu1 - cpu0) / (ended - began)
    figures.steady_rss, figures.peak_rss = rss, hwm
    return began, ended


async def run_control_plane(args: argparse.Namespace) -> list[Figures]:
    scale.NAMESPACES = 1
    scale.POD_NAME = "pod-{i:03d}"
    pods = args.pods
    args.noise_pods = min(args.noise_pods, pods // 2)
    gen = Generator(pods, skip=-(-args.noise_pods // scale.REPLICAS) * scale.REPLICAS)
    # loops start and end on Pods past the noise ones, two per component at most
    candidates = [i for i in range(args.noise_pods, pods) if i % scale.REPLICAS in (3, 4)]
    gen.candidates = candidates
    results: list[Figures] = []
    with tempfile.TemporaryDirectory(prefix="crashwatch-scale-") as folder:
        plane = envtest.ControlPlane(
            envtest.binaries(), Path(folder), controllers=False, apiserver_args=args.apiserver_arg
        )
        try:
            plane.start()  # CRDs included
            await populate(plane, pods, set(candidates), gen)
            connector = aiohttp.TCPConnector(ssl=context(plane))
            async with aiohttp.ClientSession(connector=connector) as session:
                for subject in args.subjects:
                    observer = Observer(plane)
                    observer.start(session)
                    await asyncio.sleep(1)
                    if subject == "crashwatch":
                        results.append(await crashwatch_phase(plane, session, gen, args, observer))
                    else:
                        results.append(await peer_phase(plane, session, gen, args))
                    await observer.stop()
                    print(f"  {subject}: done: {results[-1]}", file=sys.stderr)
        finally:
            plane.stop()
    return results


async def crashwatch_phase(
    plane: envtest.ControlPlane,
    session: aiohttp.ClientSession,
    gen: Generator,
    args: argparse.Namespace,
    observer: Observer,
) -> Figures:
    figures = Figures("crashwatch")
    port = free_port()
    initial = {loop.component for loop in gen.looping.values()}
    process = Process(crashwatch_args(plane.kubeconfig, port, NAMESPACE))
    try:
        async with aiohttp.ClientSession() as local:
            ready = await ready_at(local, port, process, args.timeout)
        figures.ready = ready - process.started

        def first_writes() -> bool:
            return initial <= {k for k, s, _ in observer.dcd_writes if s == "True"}

        await until(first_writes, process, args.timeout, "the initial crash loops' status writes")
        figures.cpu_to_complete = proc_usage(process.process.pid)[0]
        last = max(at for k, s, at in observer.dcd_writes if k in initial and s == "True")
        figures.complete = max(ready, last) - process.started
        await asyncio.sleep(args.settle)
        began, _ = await churn(plane, session, gen, args, process, figures)
        await asyncio.sleep(args.settle + 2)
    finally:
        process.stop()
    record = [(k, loop) for k, loop in gen.record if loop.started >= began]
    writes = [(k, s) for k, s, at in observer.dcd_writes if at >= began]
    lines = scale.component_lines(process, began)
    figures.checked, figures.lost, figures.repeated = exactly_once(record, writes, lines)
    figures.latency, delivered = beyond_delivery(record, observer)
    figures.notes.append(
        "the API server's delivery of the loops' Pod writes to a plain watch: "
        f"p50 {scale.percentile(delivered, 50):.0f} ms, "
        f"p99 {scale.percentile(delivered, 99):.0f} ms; the latency above is counted from that delivery"
    )
    own = [
        float(line.rsplit("(", 1)[1].split()[0])
        for line in process.err
        if line.startswith("crashwatch: wrote DynamoComponentDeployment") and "ms after the event" in line
    ]
    if own:
        figures.notes.append(
            f"crashwatch's own count, event received to DCD write answered ({len(own)} writes): "
            f"p50 {scale.percentile(own, 50):.0f} ms, p99 {scale.percentile(own, 99):.0f} ms"
        )
    figures.notes.append(f"churn: {figures.rate:,.0f} Pod writes/s answered (asked {args.rate:,.0f}/s)")
    figures.notes += [line for line in process.err if "synced in" in line or "watching" in line]
    return figures


def beyond_delivery(record: list[tuple[str, Loop]], observer: Observer) -> tuple[list[float], list[float]]:
    """Per loop start or end: ms from the plain watch seeing the Pod write to the DCD watch seeing
    crashwatch's write; and ms from sending the Pod write to the plain watch seeing it."""
    beyond, delivered = [], []
    for kind, loop in record:
        sent = loop.started if kind == "start" else loop.ended
        name = pod_name(loop.pod)
        seen = [at for pod, what, at in observer.pod_seen if pod == name and what == kind and at >= sent]
        want = "True" if kind == "start" else "False"
        written = [at for key, s, at in observer.dcd_writes if key == loop.component and s == want and at >= sent]
        if seen and written:
            delivered.append((min(seen) - sent) * 1000)
            beyond.append((min(written) - min(seen)) * 1000)
    return beyond, delivered


async def peer_phase(
    plane: envtest.ControlPlane, session: aiohttp.ClientSession, gen: Generator, args: argparse.Namespace
) -> Figures:
    figures = Figures("peer")
    process = Process([str(args.peer), f"--kubeconfig={plane.kubeconfig}", f"--namespace={NAMESPACE}", "--interval=1s"])
    try:
        await scale.peer_synced(process, args, figures)
        await churn(plane, session, gen, args, process, figures)
    finally:
        process.stop()
    return figures


__all__ = ["LOOPING", "RECOVERED", "RUNNING", "run_control_plane"]
