"""Benchmark on a real node: how soon a crash whose output names a certain cause fails its graph.

    sudo .venv/bin/python -m bench.realnode_causes                      # 20 graphs each way, one every 3 s
    sudo .venv/bin/python -m bench.realnode_causes --graphs 10 --every 0   # all at once: the reader's pacing
    sudo .venv/bin/python -m bench.realnode_causes --ready-between      # workers Ready while they run

It starts the node of tests/realnode.py (needs root and scripts/build-node's parts) and, in two namespaces,
`--graphs` graphs of one worker each, created in pairs every `--every` seconds. Every worker is the same: it
prints vLLM's real output for a gated model (tests/data/crashlogs/vllm-model_access_denied-2.log, from a
ConfigMap) and exits 1, with a readiness probe that never passes while it crashes, as the Dynamo operator
gives every worker (`--ready-between`: no probe, so Ready from each start to its crash). Namespace `certain`
is watched by `crashwatch run` (a certain cause fails the graph at the first crash it reads), namespace
`baseline` by another `run --fail-fast false` (the same cause named, but only the crash-loop rule fails
the graph: at the third crash, after the kubelet's 10 s backoff). A `crashwatch record` of `certain` keeps
each output its own reader read, with the time the read ended, and the time each watch event came. A
graph is scaled to zero once its verdict is seen, so that its later crashes do not queue behind others'
reads (with `--every 0` they all crash at once, and the reader's pacing shows).

A watch of the benchmark's own (realnode.Versions: every version of the Pods and DGDs, each stamped when
it arrives) is the clock:

- first-crash verdict: from the Pod version that first shows the container terminated with exit code 1
  to the DGD version with `Stalled=True` ComponentCrashedCertainCause; and the worker's restart count at
  that DGD write (the Pod's versions written before it);
- baseline: from the same first crash to the DGD `failed` by the crash-loop rule; and the rule's own part,
  from the Pod version that makes the crash loop to that DGD version;
- where the first-crash verdict's time goes, from the record (its own reader, as `run`'s reads the same
  crashes at the same moments): the crash's Pod version as the record saw it to the end of its read of that
  crash's output (the reader's pacing, then the Pod, the log, the Pod again); that read's end to the DGD
  version (the classification, the status writes, the watch's delivery); the reads the record skipped
  because the Pod's status moved while it read (a first crash whose output is never read waits for the
  next crash's);
- the read alone: the reader's own read (stream.sources.crash_output: GET the Pod, its log, the Pod again),
  of the last crash of a crash-looping worker no crashwatch watches, 20 one after the other;
- the classification alone: `pipeline.causes.scan.classify` on the output, its first call (the catalog
  loads then) and a warm one;
- the three slowest graphs step by step, on one clock from the benchmark's sight of the first crash: when
  the record saw that crash, when its read of it ended, when the DGD version came (the steps above, joined
  per graph rather than read from their maxima);
- the graphs of namespace `certain` that the crash-loop rule failed before a certain cause was read (no
  first-crash verdict: the record is then kept in .cache/bench/realnode-causes-record.jsonl).

Target: the first-crash verdict under 1 s with the log read.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import realnode  # noqa: E402
from dynamo import GRAPH, conditions, dgds, make_graph  # noqa: E402
from kube import Kube  # noqa: E402
from realnode import Version, Versions, crash_looping, crashed, make_worker, printing, restarts  # noqa: E402
from watcher import Watcher  # noqa: E402

from stream.model.times import seconds  # noqa: E402

OUTPUT = ROOT / "tests" / "data" / "crashlogs" / "vllm-model_access_denied-2.log"
CERTAIN, BASELINE, READS = "certain", "baseline", "reads"
WINDOW = ("--recovery-window", "30s")


def certain(dgd: dict[str, Any]) -> bool:
    stalled = conditions(dgd).get("Stalled", {})
    return bool(stalled.get("status") == "True" and stalled.get("reason") == "ComponentCrashedCertainCause")


def failed(dgd: dict[str, Any]) -> bool:
    return bool(dgd.get("status", {}).get("state") == "failed")


def graph_of(obj: dict[str, Any]) -> str:
    if obj.get("kind") == "DynamoGraphDeployment":
        return str(obj["metadata"]["name"])
    return str(obj["metadata"].get("labels", {}).get(GRAPH, ""))


def finished_at(pod: dict[str, Any]) -> set[str]:
    """The ends of the runs this version shows terminated (now or as the last state)."""
    ends = set()
    for s in pod.get("status", {}).get("containerStatuses", []):
        for state in (s.get("state", {}), s.get("lastState", {})):
            end = state.get("terminated", {}).get("finishedAt")
            if end:
                ends.add(end)
    return ends


@dataclass
class Graph:
    name: str
    crash: Version | None = None  # the Pod version that first shows a crash
    loop: Version | None = None  # ... on which the crash-loop rule first holds
    verdict: Version | None = None  # the DGD version: certain (namespace certain), failed (baseline)
    restarts: int = 0  # the restart count of the Pod's last version written before the verdict
    missed: Version | None = None  # (namespace certain) the DGD version failed by another rule first
    scaled: bool = False


@dataclass
class Figures:
    first_crash: list[float] = field(default_factory=list)
    restarts: list[int] = field(default_factory=list)
    baseline: list[float] = field(default_factory=list)
    rule: list[float] = field(default_factory=list)
    to_read: list[float] = field(default_factory=list)  # the record: its sight of the crash -> its read's end
    read_to_verdict: list[float] = field(default_factory=list)  # its read's end -> the DGD version (run's)
    skipped: int = 0  # first crashes whose output the record did not read
    missed: list[str] = field(default_factory=list)  # graphs failed by the crash-loop rule before a cause was read
    read_alone: list[float] = field(default_factory=list)
    read_skipped: int = 0
    read_failed: int = 0
    classify_first: float = 0.0
    classify_warm: float = 0.0
    # each graph's first crash, on one clock (wall seconds): the benchmark's sight of it, the record's, the
    # end of the record's read of it (None where the record has none), the DGD version's arrival
    steps: dict[str, tuple[float, float | None, float | None, float]] = field(default_factory=dict)


def describe(values: list[float]) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(values):.3f} s, p99 {p99:.3f} s, max {max(values):.3f} s (n={len(values)})"


def follow(graphs: dict[str, dict[str, Graph]], pods: Versions, dgds_seen: Versions) -> None:
    """Each graph's crash, loop and verdict as the watch saw them so far."""
    for namespace, wanted in ((CERTAIN, certain), (BASELINE, failed)):
        versions = pods.snapshot(namespace)
        for version in dgds_seen.snapshot(namespace):
            g = graphs[namespace].get(graph_of(version.obj))
            if g is None or g.verdict is not None or g.missed is not None:
                continue
            if namespace == CERTAIN and failed(version.obj) and not certain(version.obj):
                g.missed = version  # the crash-loop rule came first: no certain cause read by then
            elif wanted(version.obj):
                g.verdict = version
                before = [v.obj for v in versions if graph_of(v.obj) == g.name and v.revision < version.revision]
                g.restarts = restarts(before[-1]) if before else 0
        for version in versions:
            g = graphs[namespace].get(graph_of(version.obj))
            if g is None:
                continue
            if g.crash is None and crashed(version.obj):
                g.crash = version
            if g.loop is None and crash_looping(version.obj):
                g.loop = version


def breakdown(figures: Figures, graphs: dict[str, Graph], record: Path, offset: float) -> None:
    """From the record: its sight of each graph's first crash read, and when that read ended."""
    seen_crash: dict[tuple[str, str], float] = {}  # (pod, finishedAt) -> when the record first saw it
    reads: dict[str, list[tuple[float, dict[str, Any]]]] = {}  # pod -> its reads, in order
    pod_graph: dict[str, str] = {}
    for raw in record.read_text().splitlines():
        entry = json.loads(raw)
        obj, when = entry["object"], seconds(entry.get("time"))
        if when is None:
            continue
        if entry["type"] == "CRASH_OUTPUT":
            reads.setdefault(obj["pod"], []).append((when, obj))
        elif obj.get("kind") == "Pod" and entry["type"] in ("ADDED", "MODIFIED"):
            pod_graph[obj["metadata"]["name"]] = graph_of(obj)
            for end in finished_at(obj):
                seen_crash.setdefault((obj["metadata"]["name"], end), when)
    for pod, done in reads.items():
        g = graphs.get(pod_graph.get(pod, ""))
        if g is None or g.verdict is None:
            continue
        when, first = done[0]
        if first.get("restarts", 0) > 0:
            figures.skipped += 1  # the first crash's read was skipped: the one read is a later crash's
        saw = seen_crash.get((pod, first["finishedAt"]))
        if saw is not None:
            figures.to_read.append(when - saw)
        figures.read_to_verdict.append(g.verdict.arrived + offset - when)
        if g.crash is not None:
            figures.steps[g.name] = (g.crash.arrived + offset, saw, when, g.verdict.arrived + offset)


def read_alone(kube: Kube, kubeconfig: str, namespace: str, times: int) -> tuple[list[float], int, int]:
    """The reader's own read (stream.sources.crash_output: GET the Pod, its log, the Pod again), of the last
    crash of a crash-looping worker, one after the other; and how many gave no output: skipped (the run
    moved while it was read) and failed (said on stderr)."""
    import anyio

    from stream.sources.client import KubeClient
    from stream.sources.crash_output import CrashOutputReader, Wanted

    async def emit(outputs: list[Any]) -> None:
        return None

    async def reads() -> tuple[list[float], int, int]:
        client = await KubeClient.connect(kubeconfig)
        reader = CrashOutputReader(client, emit, log=lambda message: print(message, file=sys.stderr))
        took, none = [], 0
        try:
            for _ in range(times):
                (pod,) = kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
                (status,) = pod["status"]["containerStatuses"]
                run = status["state"].get("terminated") or status["lastState"]["terminated"]
                wanted = Wanted(namespace, pod["metadata"]["name"], pod["metadata"]["uid"], "main", run["finishedAt"])
                start = time.monotonic()
                output = await reader.read(wanted)
                took.append(time.monotonic() - start)
                if output is None:
                    none += 1
                else:
                    assert "401 Client Error" in output.text, output.text[-200:]
        finally:
            await client.close()
        return took, none - reader.stats.failed, reader.stats.failed

    return anyio.run(reads)


def classification() -> tuple[float, float]:
    """`classify` on the output: its first call in this process (the catalog loads) and the best of 20."""
    lines = OUTPUT.read_text().splitlines()
    start = time.perf_counter()
    from pipeline.causes.scan import classify

    assert classify(lines).kind == "model_access_denied"
    first = time.perf_counter() - start
    warm = []
    for _ in range(20):
        start = time.perf_counter()
        classify(lines)
        warm.append(time.perf_counter() - start)
    return first, min(warm)


def run_bench(node: realnode.Node, folder: Path, count: int, every: float, probed: bool) -> Figures:
    kube, kubeconfig = node.kube(), str(node.plane.kubeconfig)
    for namespace in (CERTAIN, BASELINE, READS):
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        kube.create(f"/api/v1/namespaces/{namespace}/configmaps", realnode.output_map(OUTPUT.read_text()))
    all_ns = "/namespaces//"
    pods, graph_versions = realnode.watched(kube, "/api/v1/pods", dgds("").replace(all_ns, "/"))
    offset = time.time() - time.monotonic()
    names = [f"g{i:02d}" for i in range(count)]
    graphs = {namespace: {name: Graph(name) for name in names} for namespace in (CERTAIN, BASELINE)}
    record = folder / "record.jsonl"
    try:
        with (
            Watcher("run", "-n", CERTAIN, "-o", "json", *WINDOW, "--kubeconfig", kubeconfig) as runner,
            Watcher(
                "run", "-n", BASELINE, "-o", "json", "--fail-fast", "false", *WINDOW, "--kubeconfig", kubeconfig
            ) as base,
            Watcher("record", "-n", CERTAIN, "-o", str(record), *WINDOW, "--kubeconfig", kubeconfig) as rec,
        ):
            for w in (runner, base, rec):
                w.wait_synced(120)
            for name in names:
                for namespace in (CERTAIN, BASELINE):
                    make_graph(kube, namespace, graph=name, deployments=False)
                    make_worker(kube, namespace, printing(node.busybox, probed), graph=name)
                if every:
                    time.sleep(every)  # the load's shape: one pair of new workers every `every` seconds
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                follow(graphs, pods, graph_versions)
                for namespace, by_name in graphs.items():
                    for g in by_name.values():
                        if (g.verdict is not None or g.missed is not None) and not g.scaled:
                            kube.merge_patch(
                                f"/apis/apps/v1/namespaces/{namespace}/deployments/{g.name}-worker",
                                {"spec": {"replicas": 0}},
                            )
                            g.scaled = True
                if all(g.scaled for by_name in graphs.values() for g in by_name.values()):
                    break
                time.sleep(0.5)
            follow(graphs, pods, graph_versions)
            # the read alone, against one more crash-looping worker that no crashwatch watches
            make_graph(kube, READS, deployments=False)
            make_worker(kube, READS, printing(node.busybox, probed=True))
            deadline = time.monotonic() + 300
            while not any(restarts(v.obj) >= 1 for v in pods.snapshot(READS)) and time.monotonic() < deadline:
                time.sleep(0.5)
            figures = Figures()
            figures.read_alone, figures.read_skipped, figures.read_failed = read_alone(kube, kubeconfig, READS, 20)
        for w in (runner, base, rec):
            assert w.process.returncode == 0, w.stderr()
    finally:
        pods.stop()
        graph_versions.stop()
    for name in names:
        c, b = graphs[CERTAIN][name], graphs[BASELINE][name]
        if c.crash is not None and c.verdict is not None:
            figures.first_crash.append(c.verdict.arrived - c.crash.arrived)
            figures.restarts.append(c.restarts)
        if b.crash is not None and b.verdict is not None:
            figures.baseline.append(b.verdict.arrived - b.crash.arrived)
        if b.loop is not None and b.verdict is not None:
            figures.rule.append(b.verdict.arrived - b.loop.arrived)
    breakdown(figures, graphs[CERTAIN], record, offset)
    figures.missed = [n for n in names if graphs[CERTAIN][n].missed is not None]
    if figures.missed:  # kept for a look at what the reader did (the node's folder goes with the node)
        kept = ROOT / ".cache" / "bench" / "realnode-causes-record.jsonl"
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(record, kept)
        print(f"the record of namespace {CERTAIN} kept in {kept}", file=sys.stderr)
    figures.classify_first, figures.classify_warm = classification()
    missing = [n for n in names if graphs[BASELINE][n].verdict is None or not _decided(graphs[CERTAIN][n])]
    if missing:
        print(f"no verdict seen within 10 minutes for {', '.join(missing)}", file=sys.stderr)
    return figures


def report(figures: Figures, count: int, every: float, probed: bool) -> None:
    shape = "Ready while they run" if not probed else "a readiness probe that never passes"
    print(f"{count} graphs each way, a pair every {every:g} s; workers with {shape}")
    print("first-crash verdict (the first crash's Pod version -> DGD Stalled=True ComponentCrashedCertainCause, seen):")
    print(f"  {describe(figures.first_crash)}")
    counts = {n: figures.restarts.count(n) for n in sorted(set(figures.restarts))}
    print(f"  the worker's restart count at that DGD write: {counts}")
    print("baseline, --fail-fast false (the same first crash -> DGD failed by the crash-loop rule, seen):")
    print(f"  {describe(figures.baseline)}")
    print(f"  of which the rule (the Pod version that makes the loop -> the DGD failed): {describe(figures.rule)}")
    print("where the first-crash verdict's time goes (the record's own reader, same crashes):")
    print(f"  the crash seen -> its read ended (pacing, the Pod, the log, the Pod): {describe(figures.to_read)}")
    print(f"  the read ended -> the DGD version seen (classify, write, deliver): {describe(figures.read_to_verdict)}")
    print(f"  graphs whose first crash's read was skipped (the Pod's status moved during it): {figures.skipped}")
    missed = f" ({', '.join(figures.missed)})" if figures.missed else ""
    print(f"  graphs failed by the crash-loop rule before a certain cause was read: {len(figures.missed)}{missed}")
    alone = describe(figures.read_alone)
    print(f"  the reader's read alone (GET Pod, GET log, GET Pod), 20 in a row: {alone}")
    print(f"    of which skipped (the run moved while read): {figures.read_skipped}, failed: {figures.read_failed}")
    print(
        f"  the classification alone: first call {figures.classify_first * 1000:.1f} ms (the catalog loads), "
        f"warm {figures.classify_warm * 1000:.2f} ms"
    )
    slowest = sorted(figures.steps.items(), key=lambda item: item[1][0] - item[1][3])[:3]
    if slowest:
        print("the slowest graphs, from the benchmark's sight of the first crash (s):")
    for name, (crash, saw, read, verdict) in slowest:
        seen, ended, written = (_after(crash, moment) for moment in (saw, read, verdict))
        print(f"  {name}: the record saw it {seen}, its read ended {ended}, the DGD version seen {written}")


def _decided(g: Graph) -> bool:
    return g.verdict is not None or g.missed is not None


def _after(start: float, moment: float | None) -> str:
    return "-" if moment is None else f"{moment - start:+.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graphs", type=int, default=20, help="graphs in each namespace")
    parser.add_argument("--every", type=float, default=3.0, help="seconds between two pairs of new workers")
    parser.add_argument("--ready-between", action="store_true", help="no readiness probe: Ready while they run")
    args = parser.parse_args()
    with realnode.bench_node("bench-realnode-causes-") as (node, top):
        figures = run_bench(node, top, args.graphs, args.every, not args.ready_between)
    report(figures, args.graphs, args.every, not args.ready_between)


if __name__ == "__main__":
    main()
