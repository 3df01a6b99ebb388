"""Benchmark: the fix shipped as `helm upgrade --wait`, beside the real Dynamo operator on a real node.

    sudo .venv/bin/python -m bench.realnode_upgrade                # 20 rounds: about 15 minutes
    sudo .venv/bin/python -m bench.realnode_upgrade --rounds 3
    sudo .venv/bin/python -m bench.realnode_upgrade --rounds 20 --load 2   # beside 2 busy processes
    sudo .venv/bin/python -m bench.realnode_upgrade --no-admission  # without crashwatch's admission webhook

It starts the real node of tests/realnode.py with the real operator on its control plane (tests/operators.py
on_node: needs root, scripts/build-node's parts and scripts/build-operator's operator), `crashwatch run`
beside them, and one graph installed by the real Helm 4 from tests/e2e/charts/dynamo-graph-operator. Each
round breaks the worker with `helm upgrade` (a command that exits 1; no --wait), waits until crashwatch has
marked the DGD failed (a real crash loop, real backoffs), then ships the fix with `helm upgrade --wait` (a
command that serves the operator's probes and stays up): the operator rolls a new worker generation while
the crash-looping Pod of the old one lingers. Every version of the DGD from the fix on is read by kstatus:
one that reads Failed at the fix's generation is a moment a `--wait` could have failed on the old Pod.

It is a race: the operator's first status of the fix's generation (status.observedGeneration moved to it,
its other condition types kept) must land after crashwatch's withdrawal of its `Stalled=True`, since
kstatus reads that mark as Failed once the top-level observedGeneration is current. The watch gives every
version in order, so which came first is known exactly (won: the withdrawal); the margin between the two
writes is the API server's own record, its audit log (microseconds, when each answer was complete): the
operator's write is found by the resourceVersion it was based on, crashwatch's (a merge patch, which the
log shows without one) as the n-th of its DGD status patches after Helm's spec write. `--load N` runs N
busy Python loops from the moment the node is up to the end, as a machine busy with a whole test run
would be; each loop ends when the bench does (it watches its parent), whatever way the bench ends.

crashwatch runs with its status admission webhook (`run --admission-address`, registered for the bench's
namespace as docs/status.md shows): the API server asks it before storing the operator's status, and the
operator's first status of the fix's generation then carries the withdrawal ("answered"), whoever is
faster. `--no-admission` measures the race without it.

Targets: the upgrade succeeds in every round, and no version at a fix's generation reads Failed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import operators  # noqa: E402
import yaml  # noqa: E402
from dynamo import conditions, dgds  # noqa: E402
from helm import Helm  # noqa: E402
from kube import Kube, eventually  # noqa: E402
from operators import OPERATOR_USER  # noqa: E402
from waiters_bin import waiters_bin  # noqa: E402
from watcher import Watcher, kubeconfig_args  # noqa: E402

NAMESPACE = "bench"
GRAPH = "llm"
CRASHWATCH = "crashwatch-bench"
HELM_USER = "helm-user"
# the product's default, named: tests/watcher.Watcher gives a live command a 1 s window unless told one
WINDOW = "1m30s"
CHART = ROOT / "tests" / "e2e" / "charts" / "dynamo-graph-operator"
# the operator's worker probes: GET /live and /health on the system port 9090, served by busybox httpd
PROBES = "mkdir -p /tmp/www && echo ok > /tmp/www/live && echo ok > /tmp/www/health"


def broken(round_: int) -> str:
    return f"echo round {round_}; exit 1"


def fixed(round_: int) -> str:
    return f"{PROBES} && echo round {round_} && exec httpd -f -p 9090 -h /tmp/www"


def chart(
    helm: Helm, image: str, verb: str, script: str, *extra: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`helm VERB` of the graph's chart with the worker's script."""
    values = ("--set", f"image={image}", "--set-string", f"script={script}")
    return helm.run(verb, GRAPH, str(CHART), *values, *extra, timeout=timeout)


def adopt(kube: Kube, helm: Helm, image: str, script: str) -> None:
    """The chart's DGD applied as Helm would, so that `helm install` adopts an object that already has the
    operator's status (a custom resource with no status at all reads Current to kstatus)."""
    rendered = chart(helm, image, "template", script)
    (manifest,) = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    manifest["metadata"] = {
        "name": GRAPH,
        "labels": {"app.kubernetes.io/managed-by": "Helm"},
        "annotations": {"meta.helm.sh/release-name": GRAPH, "meta.helm.sh/release-namespace": NAMESPACE},
    }
    kube.request("PATCH", f"{dgds(NAMESPACE)}/{GRAPH}?fieldManager=helm", manifest, "application/apply-patch+yaml")


def kstatus(objects: list[dict[str, Any]]) -> list[str]:
    if not objects:
        return []
    done = subprocess.run(
        [str(waiters_bin() / "kstatus")], input=json.dumps(objects).encode(), capture_output=True, timeout=300
    )
    return [json.loads(line)["status"] for line in done.stdout.decode().splitlines()]


def failed(obj: dict[str, Any]) -> bool:
    return obj.get("status", {}).get("state") == "failed" and conditions(obj).get("Stalled", {}).get("status") == "True"


# A busy loop at normal priority that ends once its parent (the bench) is gone, even one killed outright
BUSY = """
import os, sys
parent = int(sys.argv[1])
while os.getppid() == parent:
    for _ in range(100_000):
        pass
"""


def start_load(n: int) -> list[subprocess.Popen[bytes]]:
    """N CPU-bound processes, in a session of their own (a Ctrl-C reaches the bench, which stops them)."""
    return [
        subprocess.Popen(
            [sys.executable, "-c", BUSY, str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for _ in range(n)
    ]


def stop_load(load: list[subprocess.Popen[bytes]]) -> None:
    for process in load:
        process.terminate()
    for process in load:
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


class Audit:
    """The API server's audit log of the DGD's writes, read on from where the last read ended."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.writes = path, 0, list[dict[str, Any]]()

    def read(self) -> list[dict[str, Any]]:
        """Every successful write (patch or update, any subresource) of the graph's DGD logged so far."""
        if not self.path.exists():
            return self.writes
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            chunk = log.read()
        complete = chunk.rfind(b"\n") + 1  # a line being written is read next time
        self.offset += complete
        for line in chunk[:complete].splitlines():
            if b'"dynamographdeployments"' not in line:
                continue
            event = json.loads(line)
            ref = event.get("objectRef", {})
            if (
                event.get("stage") == "ResponseComplete"
                and event["verb"] in ("patch", "update")
                and ref.get("namespace") == NAMESPACE
                and ref.get("name") == GRAPH
                and 200 <= event.get("responseStatus", {}).get("code", 0) < 300
            ):
                self.writes.append(event)
        return self.writes


def when(event: dict[str, Any]) -> datetime.datetime:
    """When the API server had answered the write (it commits before it answers)."""
    return datetime.datetime.fromisoformat(event["stageTimestamp"])


def stalled(obj: dict[str, Any]) -> bool:
    return conditions(obj).get("Stalled", {}).get("status") == "True"


@dataclass
class Race:
    """One round's race at the fix's generation."""

    # won (the withdrawal came first), lost, answered (the operator's write carried it: the admission
    # webhook's answer), or why none can be said
    outcome: str
    margin_ms: float | None = None  # the operator's status minus the withdrawal, by the audit log
    detail: str = ""


def race(history: list[operators.Seen], new: int, began: float, audit: list[dict[str, Any]]) -> Race:
    """Who won the race at the fix's generation: crashwatch's withdrawal of its mark, or the operator's
    first status of that generation; and by how much, from the audit log, when it can be matched."""
    versions = [s for s in history if s.type != "DELETED"]
    at_new = [i for i, s in enumerate(versions) if s.at >= began and s.obj["metadata"]["generation"] == new]
    if not at_new:
        return Race("unknown (the watch saw no version at the fix's generation)")
    spec = at_new[0]
    if spec == 0 or not stalled(versions[spec].obj):
        return Race("unknown (no mark on the version Helm's spec write made)")
    after = range(spec + 1, len(versions))
    status = next((i for i in after if versions[i].obj.get("status", {}).get("observedGeneration") == new), None)
    withdrawal = next((i for i in after if stalled(versions[i - 1].obj) and not stalled(versions[i].obj)), None)
    if status is None:
        return Race("unknown (the watch saw no status of the fix's generation)")
    outcome = "lost" if withdrawal is None or status < withdrawal else "won"
    if withdrawal is None:
        return Race(outcome, None, "no withdrawal seen")
    if withdrawal == status:
        return Race("answered", None, "the operator's first status of the generation carried the withdrawal")
    watch_ms = (versions[status].at - versions[withdrawal].at) * 1000
    watch = f"watch arrivals {watch_ms:+.1f} ms"
    rv = [s.obj["metadata"]["resourceVersion"] for s in versions]
    # an update names the resourceVersion it was based on: the operator's writes, by the version before
    operator = {e["objectRef"].get("resourceVersion"): e for e in audit if e["user"]["username"] == OPERATOR_USER}
    status_write = operator.get(rv[status - 1])
    helm = [when(e) for e in audit if e["user"]["username"] == HELM_USER and not e["objectRef"].get("subresource")]
    spec_at = max((t for t in helm if status_write and t <= when(status_write)), default=None)
    if status_write is None or spec_at is None:
        missing = "the operator's status write" if status_write is None else "Helm's spec write"
        return Race(outcome, None, f"{missing} not found in the audit log; {watch}")
    # the versions after the spec write that the operator did not write are crashwatch's, in order
    theirs = [i for i in range(spec + 1, withdrawal + 1) if rv[i - 1] not in operator]
    patches = sorted(when(e) for e in audit if e["user"]["username"] == CRASHWATCH and when(e) >= spec_at)
    if not theirs or theirs[-1] != withdrawal or len(patches) < len(theirs):
        why = f"{len(theirs)} versions not the operator's up to it, {len(patches)} of crashwatch's patches logged"
        return Race(outcome, None, f"the withdrawal not matched in the audit log ({why}); {watch}")
    withdrawn = patches[len(theirs) - 1]
    ms = (when(status_write) - withdrawn).total_seconds() * 1000
    return Race(
        outcome,
        ms,
        f"after the spec write: withdrawal {(withdrawn - spec_at).total_seconds() * 1000:.1f} ms, the operator's "
        f"status {(when(status_write) - spec_at).total_seconds() * 1000:.1f} ms; {watch}",
    )


def settled(versions: operators.Recorder, new: int, timeout: float = 10) -> list[operators.Seen]:
    """The DGD's versions once the watch has seen crashwatch's withdrawal at the fix's generation (or after
    `timeout`): an upgrade that failed ended before it, and the margin it lost by needs both writes."""
    deadline = time.monotonic() + timeout
    while True:
        history = versions.snapshot(GRAPH)
        withdrawn = any(s.obj["metadata"]["generation"] == new and not stalled(s.obj) for s in history)
        if withdrawn or time.monotonic() > deadline:
            return history
        time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="how many times to break and fix the worker")
    parser.add_argument("--load", type=int, default=0, help="busy Python processes to run beside it all along")
    parser.add_argument(
        "--no-admission",
        dest="admission",
        action="store_false",
        help="crashwatch without its status admission webhook: the race as it is without it",
    )
    args = parser.parse_args()
    if args.rounds < 1 or args.load < 0:
        parser.error("--rounds must be at least 1 and --load at least 0")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the node and its control plane on the way out
    return bench(args.rounds, args.load, args.admission)


def bench(rounds: int, load: int, admission: bool = True) -> int:
    folders = operators.Folders("bench-realnode-upgrade")
    cluster = operators.on_node(folders, lws=False)  # type: ignore[arg-type]
    try:
        node, controllers = next(cluster)
    except BaseException as exc:  # pytest's skip outside pytest: its one line
        if type(exc).__name__ in ("Skipped", "Failed"):
            print(f"bench.realnode_upgrade: {exc}", file=sys.stderr)
            return 3
        raise
    results: list[tuple[int, int, float, list[float]]] = []  # round, helm's exit, seconds, Failed versions' times
    races: list[Race] = []
    # once the node is ours (its lock is held): waiting for another user's node, it would load theirs
    busy = start_load(load)
    try:
        kube = controllers.kube()
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        helm = Helm(folders.mktemp("helm"), controllers.user_kubeconfig(HELM_USER), NAMESPACE)
        image = node.busybox
        path = f"{dgds(NAMESPACE)}/{GRAPH}"
        kubeconfig = controllers.user_kubeconfig(CRASHWATCH)
        audit = Audit(controllers.plane.audit_log)
        watching = ("run", "-n", NAMESPACE, "-o", "json", "--recovery-window", WINDOW)
        if admission:
            watching += operators.admission_args(kube, NAMESPACE, folders.mktemp("webhook"), "crashwatch-bench")
        with Watcher(*watching, *kubeconfig_args(kubeconfig)) as w:
            w.wait_synced(60)
            adopt(kube, helm, image, broken(0))
            installed = chart(helm, image, "install", broken(0))
            assert installed.returncode == 0, installed.stderr
            versions = operators.Recorder(kube, dgds(NAMESPACE))
            try:
                for round_ in range(1, rounds + 1):
                    if round_ > 1:
                        upgraded = chart(helm, image, "upgrade", broken(round_))
                        assert upgraded.returncode == 0, upgraded.stderr
                    generation = kube.get(path)["metadata"]["generation"]

                    def marked(generation: int = generation) -> bool:
                        obj = kube.get(path)
                        return bool(obj["metadata"]["generation"] == generation and failed(obj))

                    eventually(marked, 300, "the crash loop marked", step=0.2)
                    began = time.monotonic()
                    done = chart(helm, image, "upgrade", fixed(round_), "--wait", "--timeout", "5m", timeout=360)
                    took = time.monotonic() - began
                    new = kube.get(path)["metadata"]["generation"]
                    history = settled(versions, new)
                    seen = [
                        s
                        for s in history
                        if s.at >= began and s.type != "DELETED" and s.obj["metadata"]["generation"] == new
                    ]
                    verdicts = kstatus([s.obj for s in seen])
                    bad = [round(s.at - began, 3) for s, v in zip(seen, verdicts, strict=True) if v == "Failed"]
                    results.append((round_, done.returncode, took, bad))
                    print(
                        f"round {round_}: helm upgrade --wait exited {done.returncode} after {took:.1f}s; "
                        f"{len(seen)} versions at generation {new}, Failed at: {bad or 'none'}"
                        + (f"\n  {done.stderr.strip().splitlines()[-1]}" if done.returncode else ""),
                        file=sys.stderr,
                    )
                    races.append(race(history, new, began, audit.read()))
                    margin = "" if races[-1].margin_ms is None else f" by {races[-1].margin_ms:+.1f} ms"
                    print(f"  race: {races[-1].outcome}{margin} ({races[-1].detail})", file=sys.stderr)
            finally:
                versions.close()
    finally:
        stop_load(busy)
        cluster.close()
    ok = sum(1 for _, code, _, _ in results if code == 0)
    clean = sum(1 for *_, bad in results if not bad)
    times = [t for _, code, t, _ in results if code == 0]
    print(f"\n{ok} of {len(results)} `helm upgrade --wait` with the fix succeeded")
    print(f"{clean} of {len(results)} rounds had no DGD version at the fix's generation reading kstatus Failed")
    if times:
        print(f"upgrade time: median {statistics.median(times):.1f}s, max {max(times):.1f}s")
    won = sum(1 for r in races if r.outcome == "won")
    lost = sum(1 for r in races if r.outcome == "lost")
    answered = sum(1 for r in races if r.outcome == "answered")
    other = len(races) - won - lost - answered
    webhook = "with" if admission else "without"
    print(
        f"race beside {load} busy processes, {webhook} the admission webhook: {won} won, {lost} lost, "
        f"{answered} answered by the webhook (the operator's first status carried the withdrawal), {other} unknown"
    )
    margins = [r.margin_ms for r in races if r.margin_ms is not None]
    if margins:
        print(
            f"margin (the operator's first status of the fix's generation after crashwatch's withdrawal, "
            f"{len(margins)} rounds): median {statistics.median(margins):+.1f} ms, min {min(margins):+.1f} ms"
        )
    return 0 if ok == len(results) and clean == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
