"""Benchmark: the fix shipped as `helm upgrade --wait`, beside the real Dynamo operator on a real node.

    sudo .venv/bin/python -m bench.realnode_upgrade                # 20 rounds: about 15 minutes
    sudo .venv/bin/python -m bench.realnode_upgrade --rounds 3

It starts the real node of tests/realnode.py with the real operator on its control plane (tests/operators.py
on_node: needs root, scripts/build-node's parts and scripts/build-operator's operator), `crashwatch run`
beside them, and one graph installed by the real Helm 4 from tests/e2e/charts/dynamo-graph-operator. Each
round breaks the worker with `helm upgrade` (a command that exits 1; no --wait), waits until crashwatch has
marked the DGD failed (a real crash loop, real backoffs), then ships the fix with `helm upgrade --wait` (a
command that serves the operator's probes and stays up): the operator rolls a new worker generation while
the crash-looping Pod of the old one lingers. Every version of the DGD from the fix on is read by kstatus:
one that reads Failed at the fix's generation is a moment a `--wait` could have failed on the old Pod.

Targets: the upgrade succeeds in every round, and no version at a fix's generation reads Failed.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import operators  # noqa: E402
import yaml  # noqa: E402
from dynamo import conditions, dgds  # noqa: E402
from helm import Helm  # noqa: E402
from kube import Kube, eventually  # noqa: E402
from waiters_bin import waiters_bin  # noqa: E402
from watcher import Watcher, kubeconfig_args  # noqa: E402

NAMESPACE = "bench"
GRAPH = "llm"
CRASHWATCH = "crashwatch-bench"
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="how many times to break and fix the worker")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the node and its control plane on the way out
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
    try:
        kube = controllers.kube()
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        helm = Helm(folders.mktemp("helm"), controllers.user_kubeconfig("helm-user"), NAMESPACE)
        image = node.busybox
        path = f"{dgds(NAMESPACE)}/{GRAPH}"
        kubeconfig = controllers.user_kubeconfig(CRASHWATCH)
        watching = ("run", "-n", NAMESPACE, "-o", "json", "--recovery-window", WINDOW)
        with Watcher(*watching, *kubeconfig_args(kubeconfig)) as w:
            w.wait_synced(60)
            adopt(kube, helm, image, broken(0))
            installed = chart(helm, image, "install", broken(0))
            assert installed.returncode == 0, installed.stderr
            versions = operators.Recorder(kube, dgds(NAMESPACE))
            try:
                for round_ in range(1, args.rounds + 1):
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
                    seen = [
                        s
                        for s in versions.snapshot(GRAPH)
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
            finally:
                versions.close()
    finally:
        cluster.close()
    ok = sum(1 for _, code, _, _ in results if code == 0)
    clean = sum(1 for *_, bad in results if not bad)
    times = [t for _, code, t, _ in results if code == 0]
    print(f"\n{ok} of {len(results)} `helm upgrade --wait` with the fix succeeded")
    print(f"{clean} of {len(results)} rounds had no DGD version at the fix's generation reading kstatus Failed")
    if times:
        print(f"upgrade time: median {statistics.median(times):.1f}s, max {max(times):.1f}s")
    return 0 if ok == len(results) and clean == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
