"""Benchmark of leader election: how soon a successor reports a crash loop once the leader is gone.

    python -m bench.failover                       # 10 kills -9, then 10 SIGTERMs; lease 3s, renew 2s, retry 0.5s
    python -m bench.failover --kills 5 --signal term
    python -m bench.failover --lease-duration 15s --renew-deadline 10s --retry-period 2s   # client-go's defaults

It starts etcd and kube-apiserver (tests/envtest.py; no kube-controller-manager), a graph with one DCD and
one Pod, and two `crashwatch run --leader-elect` replicas on its namespace. Per trial: the clock starts
just before the leader is killed (SIGKILL: its lease must run out; SIGTERM: it releases it), the Pod is
made to crash-loop at once, and the clock stops when a separate poll of the DGD (every 10 ms) sees
`state: failed`, which only the successor can have written. Then the Pod becomes Ready, the successor
clears the failure, and a fresh replica replaces the one stopped, following, for the next trial.
Targets: under the lease duration + 1 s for a kill, under 2 s for a SIGTERM.
"""

from __future__ import annotations

import argparse
import random
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import envtest  # noqa: E402
from dynamo import dgd_state, labelled_pod, make_graph  # noqa: E402
from kube import Kube, crash_loop, make_ready  # noqa: E402
from watcher import Watcher  # noqa: E402

NAMESPACE = "bench"


def leads(w: Watcher) -> bool:
    lines = [line for line in w.snapshot(w.err) if "leading: acquired" in line or "lost the lease" in line]
    return bool(lines) and "leading: acquired" in lines[-1]


def until(predicate: object, timeout: float, what: str, step: float = 0.01) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if predicate():  # type: ignore[operator]
            return time.monotonic() - began
        time.sleep(step)
    raise RuntimeError(f"{what} not seen in {timeout}s")


def state(kube: Kube) -> str:
    return dgd_state(kube, NAMESPACE)[0]


def trials(plane: envtest.ControlPlane, args: argparse.Namespace, sig: int) -> list[float]:
    kube = plane.kube()

    def replica() -> Watcher:
        return Watcher(
            "run",
            "-n",
            NAMESPACE,
            "--kubeconfig",
            str(plane.kubeconfig),
            "--leader-elect",
            "--leader-elect-lease-duration",
            args.lease_duration,
            "--leader-elect-renew-deadline",
            args.renew_deadline,
            "--leader-elect-retry-period",
            args.retry_period,
        )

    replicas = [replica()]
    until(lambda: leads(replicas[0]), 60, "a first leader")
    replicas.append(replica())
    results = []
    try:
        for trial in range(args.kills):
            for w in replicas:
                w.wait_synced()
            leader = next(w for w in replicas if leads(w))
            follower = next(w for w in replicas if w is not leader)
            until(lambda: "is held by" in follower.stderr(), 30, "the follower following")  # noqa: B023
            time.sleep(random.uniform(args.settle, args.settle + 1.0))  # a random phase of the leader's renewals
            began = time.monotonic()
            leader.process.send_signal(sig)
            crash_loop(kube, NAMESPACE, "llm-worker-0")
            until(lambda: state(kube) == "failed", 60, "failed")
            took = time.monotonic() - began
            results.append(took)
            name = signal.Signals(sig).name
            print(f"  {name} {trial + 1:2d}: successor wrote the failure after {took:.3f}s", file=sys.stderr)
            leader.stop()
            make_ready(kube, NAMESPACE, "llm-worker-0")
            until(lambda: state(kube) != "failed", 60, "cleared")
            replicas = [follower, replica()]
    finally:
        for w in replicas:
            w.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=10, help="trials per signal (default: 10)")
    parser.add_argument("--signal", choices=("kill", "term", "both"), default="both")
    parser.add_argument("--lease-duration", default="3s")
    parser.add_argument("--renew-deadline", default="2s")
    parser.add_argument("--retry-period", default="0.5s")
    parser.add_argument(
        "--settle",
        type=float,
        default=1.0,
        help="at least this long (plus up to 1 s at random) between a follower and the next kill",
    )
    args = parser.parse_args()
    lease = _seconds(args.lease_duration)
    binaries = envtest.binaries()
    with tempfile.TemporaryDirectory(prefix="crashwatch-failover-") as folder:
        plane = envtest.ControlPlane(binaries, Path(folder), controllers=False)
        try:
            plane.start()
            kube = plane.kube()
            kube.create(
                "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
            )
            make_graph(kube, NAMESPACE, deployments=False)
            labelled_pod(kube, NAMESPACE, "llm-worker-0", "llm", "worker")
            make_ready(kube, NAMESPACE, "llm-worker-0")
            signals = {"kill": [signal.SIGKILL], "term": [signal.SIGTERM], "both": [signal.SIGKILL, signal.SIGTERM]}
            print(
                f"lease {args.lease_duration}, renew deadline {args.renew_deadline}, retry period {args.retry_period}"
            )
            for sig in signals[args.signal]:
                results = trials(plane, args, sig)
                target = lease + 1 if sig == signal.SIGKILL else 2.0
                print(
                    f"{signal.Signals(sig).name}: {len(results)} failovers, p50 {statistics.median(results):.2f}s, "
                    f"min {min(results):.2f}s, max {max(results):.2f}s (target: under {target:g}s)"
                )
        finally:
            plane.stop()


def _seconds(text: str) -> float:
    found = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)?", text)
    if found is None:
        raise SystemExit(f"not a duration: {text}")
    return float(found.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[found.group(2)]


if __name__ == "__main__":
    main()
