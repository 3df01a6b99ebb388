"""Benchmark of `crashwatch replay` (issue 2): throughput, memory per tracked Pod, lookup time.

    python -m bench.replay            # the full run: 100,000 events over 10,000 Pods of ~10 KB
    python -m bench.replay --quick    # a small run that checks the benchmark itself still works
    python -m bench.replay --mixed    # the same log against a mix of Deployment, Grove and LWS graphs

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

from pipeline.aggregate import Aggregator
from pipeline.backends.deployments import Deployments
from pipeline.backends.lws import LwsGroups
from pipeline.backends.registry import make_backends
from pipeline.filter import EventFilter
from pipeline.pipeline import Pipeline
from pipeline.views import PodView, ViewStore, selector_matches
from stream.model.events import WatchEvent
from stream.model.objects import Pod, read_labels

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "bench"
sys.path.insert(0, str(ROOT / "tests"))  # the builders the tests use

from builders import (  # noqa: E402
    component_labels,
    container,
    dcd,
    deployment,
    dgd,
    event,
    grove_dgd,
    grove_labels,
    grove_pod,
    lws,
    lws_labels,
    lws_name,
    lws_pod,
    pod,
    set_crashing,
    set_init_crashing,
    set_running,
    worker_pod,
)


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


BACKENDS = ("deployment", "grove", "lws")  # graph n runs on BACKENDS[n % 3]


def _pod_place(i: int) -> tuple[str, str, str, str, int]:
    """Where Pod i lives in the mixed log: namespace, graph, backend, component, replica (0-19)."""
    graph = i // 200
    return f"team-{graph % 10}", f"graph-{graph}", BACKENDS[graph % 3], f"worker-{(i // 20) % 10}", i % 20


def _lws_name(graph: str, component: str) -> str:
    return f"{graph}-{component}-0"


def mixed_pod(i: int) -> dict[str, Any]:
    """Pod i of the mixed log, realistic (tests/builders.py) and labelled as its backend makes it: a
    Deployment's replica, a Grove PodClique's Pod, or the leader (even replicas) or worker of one of the
    10 two-Pod groups of the component's LeaderWorkerSet."""
    ns, graph, backend, component, replica = _pod_place(i)
    node = f"gpu-node-{i % 64:02d}"
    if backend == "deployment":
        return worker_pod(ns, f"{graph}-{component}-{i:06d}", graph, component, node=node)
    if backend == "grove":
        return grove_pod(ns, graph, component, replica, f"{i:06d}", node)
    group_set = _lws_name(graph, component)
    return lws_pod(
        group_set, replica // 2, replica % 2, ready=None, component=component, namespace=ns, graph=graph, node=node
    )


def mixed_graph_objects(pods: int) -> list[dict[str, Any]]:
    """The graphs' own objects: a DGD each; for a Deployment graph a DCD and a Deployment per component,
    for an LWS graph a DCD and a LeaderWorkerSet per component; a Grove graph has only its DGD, whose
    status.components speaks for its PodCliques."""
    out: list[dict[str, Any]] = []
    components = [f"worker-{c}" for c in range(10)]
    for first in range(0, pods, 200):
        ns, graph, backend, _, _ = _pod_place(first)
        if backend == "grove":
            reported = dict.fromkeys(components, ("PodClique", 20, 20, 0))
            out.append(
                grove_dgd(reported, name=graph, namespace=ns, reason="pods_not_ready", message="", realistic=True)
            )
            continue
        out.append(dgd(graph, ns, realistic=True))
        for component in components:
            name = f"{graph}-{component}"
            out.append(dcd(name, graph, component, ns, realistic=True))
            if backend == "deployment":
                out.append(deployment(name, ns, owner_dcd=name, graph=graph, component=component, realistic=True))
            else:
                group_set = _lws_name(graph, component)
                out.append(
                    lws(group_set, 10, namespace=ns, graph=graph, component=component, owner_dcd=name, realistic=True)
                )
    return out


def _mixed_time(n: int, events: int) -> str:
    """Event n's arrival time: the log spans an hour, to the millisecond, as `crashwatch record` writes."""
    ms = n * 3_600_000 // events
    return f"2026-11-20T{10 + ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}Z"


def generate_mixed_log(path: Path, events: int, pods: int, seed: int = 7) -> None:
    """The default mix over Deployment, Grove and LeaderWorkerSet graphs (a third of the graphs each).

    First the graphs' objects (DGDs; DCDs, Deployments, LeaderWorkerSets), then each Pod ADDED, then
    updates spread over an hour. Deployment and Grove Pods get the default log's mix (5% crash-loop, each
    update adding a restart; the rest kubelet noise). 5% of the LWS groups are recreated in a loop, which
    makes 10% of the updates: a worker's container exits 1 and restarts, LWS deletes the leader, the
    worker goes with it (terminating, then DELETED), and both are ADDED again with new uids and start;
    the other LWS Pods flip readiness (a restart would have LWS recreate the group).
    """
    rng = random.Random(seed)
    template = worker_pod("ns", "template", "g", "c")
    pending = template["status"]
    running = set_running(template, ready=False)["status"]
    exited = set_crashing(template, 1)["status"]  # what makes LWS recreate the group
    noise = [running, set_running(template)["status"], exited, set_running(template, restarts=1)["status"]]
    group_noise = noise[:2]
    crash_status: dict[int, dict[str, Any]] = {}
    objects = [mixed_pod(i) for i in range(pods)]
    restarts: dict[int, int] = {}
    looping: dict[int, list[int]] = {}  # leader index -> [step, incarnation]
    for i in range(pods):
        backend, replica = _pod_place(i)[2], _pod_place(i)[4]
        if backend != "lws" and rng.random() < 0.05:
            restarts[i] = 1
        elif backend == "lws" and replica % 2 == 0 and rng.random() < 0.05:
            looping[i] = [7, 1]  # ADDED Pending: next they start
    leaders = sorted(looping)
    graph_objects = mixed_graph_objects(pods)
    encode = msgspec.json.Encoder().encode
    tmp = path.with_suffix(".tmp")

    def recreation_step(leader: int, n: int) -> tuple[str, dict[str, Any]]:
        """The next event of a looping group's life; step 5 makes its next incarnation."""
        state = looping[leader]
        step = state[0]
        state[0] = (step + 1) % 9
        pod = objects[leader + (step in (0, 2, 3, 6, 8))]  # the worker is the Pod after its leader
        meta = pod["metadata"]
        if step == 0:
            pod["status"] = exited
        elif step in (1, 2):
            meta["deletionTimestamp"] = _mixed_time(n, events)
        elif step in (3, 4):
            return "DELETED", pod
        elif step in (5, 6):
            if step == 5:
                state[1] += 1
            meta.pop("deletionTimestamp", None)
            meta["uid"] = f"{meta['name']}-{state[1]}"
            pod["status"] = pending
            return "ADDED", pod
        else:
            pod["status"] = running
        return "MODIFIED", pod

    with open(tmp, "wb") as out:
        for n in range(events):
            if n < len(graph_objects):
                kind, obj = "ADDED", graph_objects[n]
            elif n < len(graph_objects) + pods:
                kind, obj = "ADDED", objects[n - len(graph_objects)]
            elif leaders and rng.random() < 0.10:
                kind, obj = recreation_step(leaders[rng.randrange(len(leaders))], n)
            else:
                index = rng.randrange(pods)
                kind, obj = "MODIFIED", objects[index]
                leader = index - _pod_place(index)[4] % 2
                if leader in looping:
                    kind, obj = recreation_step(leader, n)
                elif index in restarts:
                    restarts[index] += 1
                    count = restarts[index]
                    if count not in crash_status:
                        crash_status[count] = set_crashing(template, count)["status"]
                    obj["status"] = crash_status[count]
                elif _pod_place(index)[2] == "lws":
                    obj["status"] = group_noise[rng.randrange(2)]
                else:
                    obj["status"] = noise[rng.randrange(len(noise))]
            obj["metadata"]["resourceVersion"] = str(10_000 + n)
            out.write(encode({"type": kind, "object": obj, "time": _mixed_time(n, events)}))
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


def worker_event(ns: str, name: str, graph: str, component: str, crash_looping: bool = False) -> WatchEvent:
    """A small worker Pod (labels and status, no spec) ADDED: Ready, or crash-looping (3 restarts, down
    after exit 1 with no reason given)."""
    labels = component_labels(graph, component, template_hash="6d9f7c8b5")
    main = container(restarts=3, reason=None) if crash_looping else container(state="running")
    uid = f"{name}-0c9d8e7f-1a2b-3c4d-5e6f-7a8b9c0d1e2f"  # unique, and as long as the per-Pod figures assume
    return event("ADDED", pod(name, ns, uid, labels, [main], ready=not crash_looping))


def fill(pods: int, namespace_count: int = 1) -> tuple[EventFilter, Aggregator]:
    pipeline = Pipeline()
    f, a = pipeline.filter, pipeline.aggregator
    for i in range(pods):
        # 20 replicas per component, 100 components per graph, graphs spread over the namespaces
        graph = f"graph-{i // 2000}"
        component = f"worker-{i // 20}"
        ns = f"team-{(i // 2000) % namespace_count}"
        ev = worker_event(ns, f"{graph}-{component}-{i:06d}", graph, component)
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
        # some crash-loop, so verdicts are decided too
        events.append(worker_event(ns, name, graph, component, crash_looping=i % 50 == 0))
    adds_best = deletes_best = math.inf
    digest = ""
    for _ in range(rounds):
        # the filter's updates prepared by a filter of its own; the aggregator's store is written as the
        # filter would write it, update by update (the aggregator itself did that before it shared it)
        prepare = EventFilter()
        adds = [prepare.observe(ev) for ev in events]
        deletes = [prepare.observe(WatchEvent("DELETED", ev.object)) for ev in events]
        assert all(c is not None and isinstance(c.view, PodView) for c in adds + deletes)
        store = ViewStore()
        apply, held = Aggregator(store, make_backends(store)).apply, store.pods
        outputs: list[Any] = []
        gc.collect()
        start = time.perf_counter()
        for change in adds:
            held[change.key] = change.view  # type: ignore[union-attr,assignment]
            outputs += apply(change)  # type: ignore[arg-type]
        middle = time.perf_counter()
        for change in deletes:
            del held[change.key]  # type: ignore[union-attr]
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


def remembered_per_pod(pods: int, held: list[WatchEvent] | None = None) -> float:
    """Bytes per Pod that a parallel replay holds on top of the filter and the aggregator: the encoded view
    the filter last passed on for each Pod (`EventFilter.observe_reduced`), measured as a replay builds
    it, against the same Pods fed decoded. `held`: the Pods (their last events), else `pods` of the
    default layout."""
    from pipeline.views import decode_view, encode_view
    from stream.model.events import ReducedPod, pod_key

    if held is None:
        held = []
        for i in range(pods):
            ns = f"team-{(i // 2000) % 10}"
            graph, component = f"graph-{i // 2000}", f"worker-{i // 20}"
            held.append(worker_event(ns, f"{graph}-{component}-{i:06d}", graph, component))
    encode = msgspec.msgpack.Encoder().encode
    decode = msgspec.msgpack.Decoder(list[ReducedPod]).decode
    batches: list[bytes] = []
    batch: list[ReducedPod] = []
    for line, last in enumerate(held):
        obj = last.object
        assert isinstance(obj, Pod)
        key = pod_key(obj.metadata.namespace, obj.metadata.name)
        batch.append(ReducedPod(line, key, "ADDED", msgspec.Raw(encode_view(obj)), None))
        if len(batch) == 500:
            batches.append(encode(batch))
            batch = []
    batches.append(encode(batch))

    def filled(reduced: bool) -> int:
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        kept = EventFilter()
        for data in batches:
            for item in decode(data):
                if reduced:
                    kept.observe_reduced(item)
                else:
                    kept.observe_pod(item.type, decode_view(item.view), None)
        size = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        assert len(kept) == len(held)
        return size

    return (filled(True) - filled(False)) / pods


def mixed_small_events(pods: int, looping: float = 0.05, seed: int = 7) -> tuple[list[WatchEvent], list[WatchEvent]]:
    """The mixed log's Pods as small events (their labels and status, no spec): every Pod ADDED Running and
    Ready with its backend's labels, except the groups that loop (5% of the LWS groups), which get there
    after two recreations a minute apart, each after their worker exited 1, and are not Ready: their
    histories hold a streak and a finding, and their components a verdict. Returns every event, and the
    last event of each Pod still held."""
    rng = random.Random(seed)

    def raw(kind: str, i: int, ready: bool, uid: str, exited: bool, time: str) -> WatchEvent:
        """Pod i Running; its main container running, or (exited) restarted once after exit 1."""
        ns, graph, backend, component, replica = _pod_place(i)
        if backend == "deployment":
            name = f"{graph}-{component}-{i:06d}"
            labels = component_labels(graph, component, template_hash="6d9f7c8b5")
        elif backend == "grove":
            name = f"{graph}-0-{component}-{i:06d}"
            labels = grove_labels(graph, component, replica)
        else:
            group_set, group = _lws_name(graph, component), replica // 2
            name = lws_name(group_set, group, replica % 2)
            labels = lws_labels(ns, graph, component, group_set, group, replica % 2)
        main = container(restarts=1) if exited else container(state="running", ready=ready)
        return event(kind, pod(name, ns, uid or f"{name}-1", labels, [main], ready=ready), time)

    events: list[WatchEvent] = []
    held: dict[int, WatchEvent] = {}
    for i in range(pods):
        backend, replica = _pod_place(i)[2], _pod_place(i)[4]
        if backend == "lws" and replica % 2 == 0 and rng.random() < looping:
            for incarnation in (1, 2, 3):
                at = f"2026-11-20T10:0{incarnation}:00Z"
                uid = f"uid-{i}-{incarnation}"
                leader = raw("ADDED", i, False, uid, False, at)
                worker = raw("ADDED", i + 1, False, f"w{uid}", False, at)
                events += [leader, worker]
                held[i], held[i + 1] = leader, worker
                if incarnation < 3:
                    events.append(raw("MODIFIED", i + 1, False, f"w{uid}", True, at))
                    events += [WatchEvent("DELETED", worker.object), WatchEvent("DELETED", leader.object)]
        elif i not in held:
            held[i] = raw("ADDED", i, True, "", False, "2026-11-20T10:00:00Z")
            events.append(held[i])
    return events, [held[i] for i in range(pods)]


def mixed_memory_per_pod(pods: int) -> tuple[float, float, int, int]:
    """Bytes held per tracked Pod of the mixed layout (filter and aggregator together, the group
    histories included), a full GC pass's time in ms, the groups remembered, the components crash-looping."""
    events, _ = mixed_small_events(pods)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    pipeline = Pipeline()
    f, a = pipeline.filter, pipeline.aggregator
    for ev in events:
        change = f.observe(ev)
        if change is not None:
            a.apply(change)
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    start = time.perf_counter()
    gc.collect()
    gc_ms = (time.perf_counter() - start) * 1000
    assert len(a.pods) == pods and len(f) == pods
    return held / pods, gc_ms, len(a.backend(LwsGroups).groups), len(a.verdicts())


def _verdict_counts(log: Path) -> tuple[int, int, int]:
    """The mixed log's verdict lines: component lines, of which LWS group loops, and graph lines."""
    result = subprocess.run(
        [*crashwatch_command(), "replay", "-o", "json", "--no-progress", str(log)],
        capture_output=True,
        check=True,
    )
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    components = [line for line in lines if line["kind"] == "component"]
    return len(components), sum(1 for line in components if "lws" in line), len(lines) - len(components)


def pipeline_split(log: Path, rounds: int) -> tuple[float, float, float, int, int]:
    """CPU seconds, in this process, of the record decoder alone, the event filter alone, and the filter
    and aggregator together over the whole log (best of rounds); the events the filter let through, and
    of those the LeaderWorkerSet group Pods' that changed no verdict and no status."""
    from pipeline.views import PodView
    from stream.model.decode import decode_event

    with open(log, "rb") as f:
        lines = f.read().splitlines()
    decode = filtering = both = math.inf
    passed = idle_group = 0
    for _ in range(rounds):
        gc.collect()
        start = time.process_time()
        decoded = [decode_event(line) for line in lines]
        decode = min(decode, time.process_time() - start)
        start = time.process_time()
        only = EventFilter()
        for decoded_event in decoded:
            only.observe(decoded_event)
        filtering = min(filtering, time.process_time() - start)
        pipeline = Pipeline()
        observe, apply = pipeline.filter.observe, pipeline.aggregator.apply
        start = time.process_time()
        for decoded_event in decoded:
            change = observe(decoded_event)
            if change is not None:
                apply(change)
        both = min(both, time.process_time() - start)
        del decoded
    # once more, counting: which updates reach the aggregator, and which of them change nothing
    pipeline = Pipeline()  # the filter and the aggregator over one store: fed update by update
    only, aggregator = pipeline.filter, pipeline.aggregator
    for line in lines:
        change = only.observe(decode_event(line))
        if change is None:
            continue
        passed += 1
        if not aggregator.apply(change) and isinstance(change.view, PodView) and change.view.claim is not None:
            idle_group += 1
    return decode, filtering, both, passed, idle_group


def mixed_benchmark(events: int, pods: int, rounds: int, memory_sizes: tuple[int, ...]) -> None:
    """The default log and the mixed one, measured in turn in the same run, and memory per tracked Pod."""
    CACHE.mkdir(parents=True, exist_ok=True)
    plain = CACHE / f"replay-v3-{events}-{pods}.jsonl"
    mixed = CACHE / f"replay-mixed-v1-{events}-{pods}.jsonl"
    for path, make in ((plain, generate_log), (mixed, generate_mixed_log)):
        if not path.exists():
            print(f"generating {path} ({events:,} events over {pods:,} Pods) ...", file=sys.stderr)
            make(path, events, pods)
    print(
        f"# crashwatch replay benchmark, mixed backends ({platform.python_implementation()} "
        f"{platform.python_version()}, {os.cpu_count()} cores)\n"
    )
    for name, path in (("default log", plain), ("mixed log", mixed)):
        size = path.stat().st_size
        print(
            f"{name}: {events:,} events over {pods:,} Pods, {size / 1e6:,.0f} MB "
            f"({size / events / 1000:.1f} KB per event)"
        )
    time_json_loads(plain)  # warm the page cache for both
    time_json_loads(mixed)
    runs: dict[str, list[tuple[float, float]]] = {key: [] for key in ("plain", "mixed", "plain1", "mixed1")}
    loads: dict[str, list[float]] = {"plain": [], "mixed": []}
    for _ in range(rounds):  # taken in turn, so that the ratios compare runs made at the same time
        runs["plain"].append(time_pipeline(plain))
        runs["mixed"].append(time_pipeline(mixed))
        runs["plain1"].append(time_pipeline(plain, jobs=1))
        runs["mixed1"].append(time_pipeline(mixed, jobs=1))
        loads["plain"].append(time_json_loads(plain))
        loads["mixed"].append(time_json_loads(mixed))
    best = {key: min(values) for key, values in runs.items()}
    print(f"\n(best of {rounds} rounds; the whole CLI took, default log / mixed log:")
    for key, label in (("plain", "default"), ("plain1", "-j 1")):
        mine, theirs = runs[key], runs[key.replace("plain", "mixed")]
        print(f"  {label}: " + ", ".join(f"{a[0]:.2f} / {b[0]:.2f}" for a, b in zip(mine, theirs, strict=True)) + " s")
    print(
        "  json.loads: "
        + ", ".join(f"{a:.2f} / {b:.2f}" for a, b in zip(loads["plain"], loads["mixed"], strict=True))
        + " s)\n"
    )
    cpus = os.cpu_count()
    print("| what | default log | mixed log | mixed / default, events/s |")
    print("|---|---|---|---|")
    for key, label in (("plain", f"whole CLI, by default ({cpus} decoding processes)"), ("plain1", "whole CLI, -j 1")):
        (pw, pc), (mw, mc) = best[key], best[key.replace("plain", "mixed")]
        print(
            f"| {label} | {pw:.2f} s ({events / pw:,.0f} events/s, CPU {pc:.2f} s) | "
            f"{mw:.2f} s ({events / mw:,.0f} events/s, CPU {mc:.2f} s) | {pw / mw:.2f} |"
        )
    lp, lm = min(loads["plain"]), min(loads["mixed"])
    print(
        f"| json.loads alone | {lp:.2f} s ({events / lp:,.0f} events/s) | "
        f"{lm:.2f} s ({events / lm:,.0f} events/s) | {lp / lm:.2f} |"
    )
    print(
        f"| pipeline faster than json.loads by | "
        f"{lp / best['plain'][0]:.1f}x (one process: {lp / best['plain1'][0]:.1f}x) | "
        f"{lm / best['mixed'][0]:.1f}x (one process: {lm / best['mixed1'][0]:.1f}x) | - |"
    )
    print(
        "\n| in this process, CPU for the whole log | decode | filter | filter + aggregator | events let through "
        "(of them LWS group Pods' with no output) |"
    )
    print("|---|---|---|---|---|")
    for name, path in (("default log", plain), ("mixed log", mixed)):
        dec, fil, agg, passed, idle = pipeline_split(path, rounds)
        print(f"| {name} | {dec:.2f} s | {fil:.2f} s | {agg:.2f} s | {passed:,} ({idle:,}) |")
    components, loops, graphs = _verdict_counts(mixed)
    print(
        f"\nthe mixed log's verdict lines: {components:,} component lines ({loops:,} of them LWS group loops), "
        f"{graphs:,} graph lines"
    )

    print(
        "\n| tracked Pods | default layout: bytes per Pod | mixed: bytes per Pod (groups, components crash-looping) "
        "| full GC pass, mixed | a parallel replay remembers in addition, default / mixed |"
    )
    print("|---|---|---|---|---|")
    for n in memory_sizes:
        plain_bytes, _ = memory_per_pod(n)
        mixed_bytes, gc_ms, groups, looping = mixed_memory_per_pod(n)
        _, held = mixed_small_events(n)
        print(
            f"| {n:,} | {plain_bytes:,.0f} B | {mixed_bytes:,.0f} B ({groups:,}, {looping:,}) | {gc_ms:.1f} ms | "
            f"{remembered_per_pod(n):,.0f} / {remembered_per_pod(n, held):,.0f} B |"
        )


def lookup_times(unrelated: int) -> tuple[float, float, float]:
    """µs per lookup of one component's Pods: component index, Deployment (selector) index, selector scan."""
    f, a = fill(unrelated)
    # the component looked up: 5 Pods, and its Deployment selecting them by nvidia.com/selector
    for i in range(5):
        change = f.observe(worker_event("team-0", f"target-{i}", "target", "worker"))
        assert change is not None
        a.apply(change)
    dep = deployment("target-worker", "team-0", owner_dcd="target-worker", graph="target", realistic=True)
    change = f.observe(event("ADDED", dep))
    assert change is not None
    a.apply(change)
    key = ("team-0", "target", "worker")
    deployments = a.backend(Deployments)
    selector = deployments.deployments[("team-0", "target-worker")].selector
    assert selector is not None
    pods = a.pods

    def by_component() -> list[Any]:
        return [pods[k] for k in a.pods_of_component(key)]

    target = pods[("team-0", "target-0")]

    def by_deployment() -> list[Any]:  # what the aggregator asks: the Deployments selecting a Pod
        return list(deployments.selecting(target))

    def scan() -> list[Any]:
        return [
            v for v in pods.values() if v.namespace == "team-0" and selector_matches(selector, read_labels(v.labels))
        ]

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
    parser.add_argument(
        "--mixed",
        action="store_true",
        help="the default log against a mix of Deployment, Grove and LeaderWorkerSet graphs, and memory per Pod",
    )
    args = parser.parse_args()
    if args.aggregator:
        aggregator_tables((10_000, 100_000) if not args.quick else (1_000,))
        return
    if args.quick:
        args.events, args.pods, args.k8s_sample, args.rounds = 2_000, 200, 100, 1
    memory_sizes = (1_000, 2_000) if args.quick else (10_000, 100_000)
    if args.mixed:
        if args.quick:  # three graphs at least: one per backend
            args.events, args.pods = 4_000, 600
        mixed_benchmark(args.events, args.pods, args.rounds, memory_sizes)
        return
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
