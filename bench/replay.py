"""Benchmark of `crashwatch replay` (issue 2): throughput, memory per tracked Pod, lookup time.

    python -m bench.replay            # the full run: 100,000 events over 10,000 Pods of ~10 KB
    python -m bench.replay --quick    # a small run that checks the benchmark itself still works

It measures, in one run, the whole replay pipeline (the installed `crashwatch` command, output to
/dev/null) against the same log decoded by `json.loads` alone and by kubernetes-asyncio's V1Pod
deserialisation; memory per tracked Pod at 10,000 and 100,000 Pods; and the per-component lookup time
next to a label-selector scan at 1,000 / 10,000 / 100,000 unrelated Pods. The log is cached under
.cache/bench. Targets are in docs/benchmarks.md; this script reports, it does not judge.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import os
import platform
import random
import resource
import subprocess
import sys
import time
import timeit
import tracemalloc
from pathlib import Path
from typing import Any

import msgspec

from examples.realistic import set_crashing, set_init_crashing, set_running, worker_pod
from pipeline.aggregate import Aggregator
from pipeline.filter import EventFilter
from pipeline.pipeline import Pipeline
from pipeline.views import selector_matches
from stream.events import WatchEvent
from stream.objects import ContainerState, ContainerStatus, PodCondition, StateTerminated, StateWaiting

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "bench"


def generate_log(path: Path, events: int, pods: int, churn: bool = False, seed: int = 7) -> None:
    """`pods` realistic Pods, 20 replicas per component, 10 components per graph, graphs spread over 10
    namespaces; each Pod is ADDED, then come status updates.

    The default mix is a cluster's: 5% of the Pods crash-loop, and each update of one of them adds a
    restart; the other updates are kubelet noise (readiness flips of running Pods, a first restart
    and recovery, new resourceVersions) that cannot change a diagnosis. `churn=True` is the worst case:
    every update moves a Pod between nine statuses, most of which change its finding.
    """
    rng = random.Random(seed)
    template = worker_pod("ns", "template", "g", "c")
    noise = [
        set_running(template, ready=False)["status"],
        set_running(template)["status"],
        set_crashing(template, 1)["status"],
        set_running(template, restarts=1)["status"],
    ]
    churn_statuses = noise[:3] + [set_crashing(template, r)["status"] for r in range(2, 6)]
    churn_statuses += [
        set_crashing(template, 3, exit_code=137, reason="OOMKilled")["status"],
        set_init_crashing(template, 2)["status"],
    ]
    crash_status: dict[int, dict[str, Any]] = {}
    objects: list[dict[str, Any]] = []
    restarts: dict[int, int] = {}
    for i in range(pods):
        graph = f"graph-{i // 200}"
        component = f"worker-{(i // 20) % 10}"
        ns = f"team-{(i // 200) % 10}"
        objects.append(worker_pod(ns, f"{graph}-{component}-{i:06d}", graph, component, node=f"gpu-node-{i % 64:02d}"))
        if rng.random() < 0.05:
            restarts[i] = 1
    encode = msgspec.json.Encoder().encode
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as out:
        for n in range(events):
            if n < pods:
                index, kind = n, "ADDED"
            else:
                index, kind = rng.randrange(pods), "MODIFIED"
                obj = objects[index]
                if churn:
                    obj["status"] = churn_statuses[rng.randrange(len(churn_statuses))]
                elif index in restarts:
                    restarts[index] += 1
                    count = restarts[index]
                    if count not in crash_status:
                        crash_status[count] = set_crashing(template, count)["status"]
                    obj["status"] = crash_status[count]
                else:
                    obj["status"] = noise[rng.randrange(len(noise))]
            obj = objects[index]
            obj["metadata"]["resourceVersion"] = str(10_000 + n)
            record = {"type": kind, "object": obj, "time": f"2026-11-20T10:{(n // 1000) % 60:02d}:{n % 60:02d}Z"}
            out.write(encode(record))
            out.write(b"\n")
    tmp.rename(path)


def crashwatch_command() -> list[str]:
    script = Path(sys.executable).parent / "crashwatch"
    return [str(script)] if script.exists() else [sys.executable, "-m", "crashwatch"]


def time_pipeline(log: Path, jobs: int | None = None) -> tuple[float, float]:
    """Wall-clock seconds of the whole CLI, and the CPU seconds it used in all its processes."""
    flags = ["-j", str(jobs)] if jobs else []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        subprocess.run(
            [*crashwatch_command(), "replay", "-o", "json", "--no-progress", *flags, str(log)],
            stdout=devnull,
            check=True,
        )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def time_json_loads(log: Path) -> float:
    start = time.perf_counter()
    with open(log, "rb") as f:
        for line in f:
            json.loads(line)
    return time.perf_counter() - start


def time_kubernetes_asyncio(log: Path, sample: int) -> tuple[float, int]:
    """Seconds for `sample` events through kubernetes-asyncio's V1Pod deserialisation (json.loads included)."""
    from kubernetes_asyncio.client import ApiClient

    class Response:
        def __init__(self, data: bytes) -> None:
            self.data = data

    lines: list[bytes] = []
    with open(log, "rb") as f:
        for line in f:
            lines.append(line)
            if len(lines) >= sample:
                break

    async def measure() -> float:
        async with ApiClient() as client:  # it needs a running loop for its connector
            start = time.perf_counter()
            for line in lines:
                event = json.loads(line)
                client.deserialize(Response(json.dumps(event["object"]).encode()), "V1Pod")
            return time.perf_counter() - start

    import asyncio

    return asyncio.run(measure()), len(lines)


def small_pod(ns: str, name: str, graph: str, component: str, selector: str) -> WatchEvent:
    labels = {
        "nvidia.com/dynamo-graph-deployment-name": graph,
        "nvidia.com/dynamo-component": component,
        "nvidia.com/selector": selector,
        "nvidia.com/dynamo-component-type": "worker",
        "nvidia.com/dynamo-namespace": f"{graph}-ns",
        "app.kubernetes.io/managed-by": "dynamo-operator",
        "app.kubernetes.io/part-of": graph,
        "app.kubernetes.io/name": selector,
        "pod-template-hash": "6d9f7c8b5",
    }
    raw = {
        "type": "ADDED",
        "object": {
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": f"{name}-0c9d8e7f-1a2b-3c4d-5e6f-7a8b9c0d1e2f",
                "labels": labels,
            },
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "main", "restartCount": 0, "state": {"running": {}}}],
            },
        },
    }
    return msgspec.convert(raw, WatchEvent)


def fill(pods: int, namespace_count: int = 1) -> tuple[EventFilter, Aggregator]:
    pipeline = Pipeline()
    f, a = pipeline.filter, pipeline.aggregator
    for i in range(pods):
        # 20 replicas per component, 100 components per graph, graphs spread over the namespaces
        graph = f"graph-{i // 2000}"
        component = f"worker-{i // 20}"
        ns = f"team-{(i // 2000) % namespace_count}"
        ev = small_pod(ns, f"{graph}-{component}-{i:06d}", graph, component, f"{graph}-{component}")
        change = f.observe(ev)
        assert change is not None
        a.apply(change)
    return f, a


def aggregator_times(pods: int, rounds: int = 3) -> tuple[float, float, str]:
    """µs per Pod the aggregator alone spends on adds, then on deletes (the filter's changes prepared
    beforehand), and a digest of every output, so a change to the aggregator can show it is faster and
    says the same."""
    events = []
    for i in range(pods):
        graph, component = f"graph-{i // 2000}", f"worker-{i // 20}"
        ns = f"team-{(i // 2000) % 10}"
        name = f"{graph}-{component}-{i:06d}"
        added = small_pod(ns, name, graph, component, f"{graph}-{component}")
        if i % 50 == 0:  # some crash-loop, so verdicts are decided too
            added.object.status.container_statuses = (  # type: ignore[union-attr]
                ContainerStatus(
                    "main",
                    restart_count=3,
                    state=ContainerState(waiting=StateWaiting()),
                    last_state=ContainerState(terminated=StateTerminated(exit_code=1)),
                ),
            )
            added.object.status.conditions = (PodCondition("Ready", "False"),)  # type: ignore[union-attr]
        events.append(added)
    adds_best = deletes_best = math.inf
    digest = ""
    for _ in range(rounds):
        pipeline = Pipeline()
        adds = [pipeline.filter.observe(ev) for ev in events]
        deletes = [pipeline.filter.observe(WatchEvent("DELETED", ev.object)) for ev in events]
        apply = pipeline.aggregator.apply
        outputs: list[Any] = []
        gc.collect()
        start = time.perf_counter()
        for change in adds:
            outputs += apply(change)  # type: ignore[arg-type]
        middle = time.perf_counter()
        for change in deletes:
            outputs += apply(change)  # type: ignore[arg-type]
        end = time.perf_counter()
        adds_best = min(adds_best, (middle - start) / pods * 1e6)
        deletes_best = min(deletes_best, (end - middle) / pods * 1e6)
        digest = hashlib.sha256(msgspec.json.encode(outputs)).hexdigest()[:16]
    return adds_best, deletes_best, digest


def memory_per_pod(pods: int) -> tuple[float, float]:
    """Bytes held per tracked Pod (filter and aggregator together), and a full GC pass's time in ms."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    f, a = fill(pods, namespace_count=10)
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    start = time.perf_counter()
    gc.collect()
    gc_ms = (time.perf_counter() - start) * 1000
    assert len(a.pods) == pods and len(f) == pods
    return held / pods, gc_ms


def remembered_per_pod(pods: int) -> float:
    """Bytes per Pod that a parallel replay's main process holds on top of the filter and the aggregator:
    the encoded view it last passed on for each Pod (crashwatch.parallel), measured as a replay builds it."""
    from crashwatch.parallel import ParallelDecoder, _encode, _pod_key, _PodLine
    from pipeline.views import pod_view

    decode = msgspec.msgpack.Decoder(list[_PodLine]).decode
    batches: list[bytes] = []
    batch: list[_PodLine] = []
    for i in range(pods):
        ns = f"team-{(i // 2000) % 10}"
        graph, component = f"graph-{i // 2000}", f"worker-{i // 20}"
        pod = small_pod(ns, f"{graph}-{component}-{i:06d}", graph, component, f"{graph}-{component}")
        view = msgspec.Raw(_encode(pod_view(pod.object)))  # type: ignore[arg-type]
        key = _pod_key(ns, pod.object.metadata.name)  # type: ignore[union-attr]
        batch.append(_PodLine(key, "ADDED", view, msgspec.Raw(_encode(None))))
        if len(batch) == 500:
            batches.append(_encode(batch))
            batch = []
    batches.append(_encode(batch))
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    decoder = ParallelDecoder(2)
    for data in batches:
        lines = decode(data)
        decoder._pass_on_changed(lines, 0, len(lines), [])
        del lines
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return held / pods


def lookup_times(unrelated: int) -> tuple[float, float, float]:
    """µs per lookup of one component's Pods: component index, Deployment (selector) index, selector scan."""
    from examples.realistic import deployment as make_deployment

    f, a = fill(unrelated)
    # the component looked up: 5 Pods, and its Deployment selecting them by nvidia.com/selector
    for i in range(5):
        change = f.observe(small_pod("team-0", f"target-{i}", "target", "worker", "target-worker"))
        assert change is not None
        a.apply(change)
    dep = make_deployment("team-0", "target", "worker", "target-worker")
    change = f.observe(msgspec.convert({"type": "ADDED", "object": dep}, WatchEvent))
    assert change is not None
    a.apply(change)
    key = ("team-0", "target", "worker")
    selector = a.deployments[("team-0", "target-worker")].selector
    assert selector is not None
    pods = a.pods

    def by_component() -> list[Any]:
        return [pods[k] for k in a.pods_of_component(key)]

    target = pods[("team-0", "target-0")]

    def by_deployment() -> list[Any]:  # what the aggregator asks: the Deployments selecting a Pod
        return list(a.deployments_selecting(target))

    def scan() -> list[Any]:
        return [v for v in pods.values() if v.namespace == "team-0" and selector_matches(selector, v.labels)]

    assert len(by_component()) == len(scan()) == 5 and len(by_deployment()) == 1

    def best(fn: Any, number: int) -> float:
        return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6

    return best(by_component, 20_000), best(by_deployment, 20_000), best(scan, max(3, 200_000 // unrelated))


def aggregator_tables(sizes: tuple[int, ...]) -> None:
    print("\n| tracked Pods | aggregator, per add | per delete | outputs digest | bytes per Pod | full GC pass |")
    print("|---|---|---|---|---|---|")
    for n in sizes:
        adds, deletes, digest = aggregator_times(n)
        per_pod, gc_ms = memory_per_pod(n)
        print(f"| {n:,} | {adds:.2f} µs | {deletes:.2f} µs | {digest} | {per_pod:,.0f} B | {gc_ms:.1f} ms |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--k8s-sample", type=int, default=500, help="events timed through kubernetes-asyncio")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the throughput measures (best is shown)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to check that the benchmark runs")
    parser.add_argument(
        "--aggregator", action="store_true", help="only the aggregator's time per Pod and memory per Pod (a minute)"
    )
    args = parser.parse_args()
    if args.aggregator:
        aggregator_tables((10_000, 100_000) if not args.quick else (1_000,))
        return
    if args.quick:
        args.events, args.pods, args.k8s_sample, args.rounds = 2_000, 200, 100, 1
    memory_sizes = (1_000, 2_000) if args.quick else (10_000, 100_000)
    lookup_sizes = (100, 1_000) if args.quick else (1_000, 10_000, 100_000)

    CACHE.mkdir(parents=True, exist_ok=True)
    log = CACHE / f"replay-v3-{args.events}-{args.pods}.jsonl"
    worst = CACHE / f"replay-v3-{args.events}-{args.pods}-churn.jsonl"
    for path, churn in ((log, False), (worst, True)):
        if not path.exists():
            print(f"generating {path} ({args.events:,} events over {args.pods:,} Pods) ...", file=sys.stderr)
            generate_log(path, args.events, args.pods, churn=churn)
    size = log.stat().st_size
    print(
        f"# crashwatch replay benchmark ({platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} cores)\n"
    )
    print(
        f"log: {args.events:,} events over {args.pods:,} Pods, {size / 1e6:,.0f} MB "
        f"({size / args.events / 1000:.1f} KB per event)\n"
    )

    time_json_loads(log)  # warm the page cache for all three
    # the machine's speed drifts (a shared VM): each measure is the best of rounds taken in turn, so that
    # the ratios compare runs made at the same time
    pipelines, serials, loads_runs, k8s_runs = [], [], [], []
    for _ in range(args.rounds):
        pipelines.append(time_pipeline(log))
        serials.append(time_pipeline(log, jobs=1))
        loads_runs.append(time_json_loads(log))
        k8s_elapsed, k8s_n = time_kubernetes_asyncio(log, args.k8s_sample)
        k8s_runs.append(k8s_elapsed / k8s_n * args.events)
    pipeline, serial, loads, k8s_total = min(pipelines), min(serials), min(loads_runs), min(k8s_runs)
    worst_case = time_pipeline(worst)
    print(
        f"(best of {args.rounds} rounds; the whole CLI took {', '.join(f'{w:.2f}' for w, _ in pipelines)} s, "
        f"json.loads {', '.join(f'{x:.2f}' for x in loads_runs)} s)\n"
    )
    cpus = os.cpu_count()
    print("| what | time for the log | CPU time | events/s | pipeline is faster by |")
    print("|---|---|---|---|---|")
    rows = [
        (f"crashwatch replay (whole CLI, -o json > /dev/null; by default {cpus} decoding processes)", pipeline),
        ("the same in one process (-j 1)", serial),
        ("the same, default, worst case: every update changes a finding", worst_case),
    ]
    for label, (wall, cpu) in rows:
        print(f"| {label} | {wall:.2f} s | {cpu:.2f} s | {args.events / wall:,.0f} | - |")
    print(
        f"| json.loads alone | {loads:.2f} s | - | {args.events / loads:,.0f} | "
        f"{loads / pipeline[0]:.1f}x (one process: {loads / serial[0]:.1f}x) |"
    )
    print(
        f"| kubernetes-asyncio V1Pod (timed on {k8s_n:,} events) | {k8s_total:.1f} s | - | "
        f"{args.events / k8s_total:,.0f} | {k8s_total / pipeline[0]:.0f}x (one process: {k8s_total / serial[0]:.0f}x) |"
    )

    aggregator_tables(memory_sizes)
    print("\n| tracked Pods | a parallel replay remembers in addition |")
    print("|---|---|")
    for n in memory_sizes:
        print(f"| {n:,} | {remembered_per_pod(n):,.0f} B per Pod |")

    print("\n| unrelated Pods | component index | Deployment index | label-selector scan |")
    print("|---|---|---|---|")
    for n in lookup_sizes:
        comp, dep, scan = lookup_times(n)
        print(f"| {n:,} | {comp:.2f} µs | {dep:.2f} µs | {scan:,.1f} µs |")


if __name__ == "__main__":
    main()
