"""Benchmark: the status writes of crashwatch and of the real Dynamo operator over a real crash loop.

    sudo .venv/bin/python -m bench.realnode_operator                   # a 5-minute crash loop: ~7 minutes
    sudo .venv/bin/python -m bench.realnode_operator --duration 2m
    sudo .venv/bin/python -m bench.realnode_operator --no-admission    # without the status admission webhook

It starts the real node of tests/realnode.py with the real operator on its control plane
(tests/operators.py on_node: needs root, scripts/build-node's parts and scripts/build-operator's
controllers), `crashwatch run` beside them as a user of its own, and one graph whose worker serves the
operator's probes for 11 seconds and exits 1 (Ready for a moment between crashes, real backoffs). From
the crash that makes the loop on, for `--duration`, the API server's audit log gives the status writes (patch
or update of the status subresource, 409s included) of each writer on the DGD and the DCD; a watch of the
DGD (every version, stamped as it arrives) gives the operator's rewrites crashwatch had to answer (a version
that left `failed`) and how long each lasted.

crashwatch runs with its status admission webhook (`run --admission-address`, registered for the
bench's namespace as the chart registers it): the operator's writes are stored with crashwatch's decision
in them, so they need no answer. `--no-admission` measures crashwatch answering them with writes of its own.

Targets: no write loop; crashwatch at most one DGD and one DCD write per restart, plus one per operator
rewrite it must answer.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import operators  # noqa: E402
from dynamo import dgds  # noqa: E402
from kube import Kube, eventually  # noqa: E402
from waiters_bin import waiters_bin  # noqa: E402
from watcher import Watcher, kubeconfig_args  # noqa: E402

NAMESPACE = "bench"
GRAPH = "llm"
CRASHWATCH = "crashwatch-bench"
# the product's default, named: tests/watcher.Watcher gives a live command a 1 s window unless told one
WINDOW = "1m30s"
PROBES = "mkdir -p /tmp/www && echo ok > /tmp/www/live && echo ok > /tmp/www/health"
# up 11 s, longer than the startup probe's period (10 s): each run is Ready for a moment
CRASHES = f"{PROBES} && httpd -p 9090 -h /tmp/www && sleep 11 && exit 1"


def graph(image: str) -> dict[str, Any]:
    container = {"name": "main", "image": image, "imagePullPolicy": "Never", "command": ["sh", "-c", CRASHES]}
    return {
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": GRAPH},
        "spec": {
            "backendFramework": "vllm",
            "components": [
                {
                    "name": "VllmDecodeWorker",
                    "type": "worker",
                    "replicas": 1,
                    "podTemplate": {"spec": {"terminationGracePeriodSeconds": 1, "containers": [container]}},
                }
            ],
        },
    }


def restarts(kube: Kube) -> int:
    counts = [
        c["restartCount"]
        for p in kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
        if not p["metadata"].get("deletionTimestamp")
        for c in p.get("status", {}).get("containerStatuses", [])
    ]
    return max(counts, default=0)


def parse_duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)


def audit_now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


def left_failed(seen: list[operators.Seen]) -> list[tuple[str, float]]:
    """Each stretch in which the DGD did not read `failed`: the state written, and how long it lasted."""
    out: list[tuple[str, float]] = []
    since: tuple[str, float] | None = None
    for s in seen:
        state = s.obj.get("status", {}).get("state", "")
        if state != "failed" and since is None:
            since = (state, s.at)
        elif state == "failed" and since is not None:
            out.append((since[0], s.at - since[1]))
            since = None
    if since is not None:
        out.append((since[0], float("inf")))
    return out


KINDS = {"dynamographdeployments": "DGD", "dynamocomponentdeployments": "DCD"}


def dgd_conflicts(plane: Any, user: str, began: str, ended: str) -> int:
    """The 409s among `user`'s DGD status writes: requests that another writer's beat, writing nothing."""
    start, end = datetime.datetime.fromisoformat(began), datetime.datetime.fromisoformat(ended)
    return sum(
        1
        for event in plane.audit_events(user)
        if event.get("objectRef", {}).get("resource") == "dynamographdeployments"
        and event.get("objectRef", {}).get("subresource") == "status"
        and event.get("responseStatus", {}).get("code") == 409
        and start <= datetime.datetime.fromisoformat(event["requestReceivedTimestamp"]) <= end
    )


def timeline(plane: Any, seen: list[operators.Seen], wall_offset: float, began: str, ended: str) -> list[str]:
    """Each status write of either writer (the audit log) and each DGD version the watch delivered, in time
    order: what each of crashwatch's writes answered."""
    start = datetime.datetime.fromisoformat(began).timestamp()
    end = datetime.datetime.fromisoformat(ended).timestamp()
    rows: list[tuple[float, str]] = []
    for who, user in (("crashwatch", CRASHWATCH), ("operator", operators.OPERATOR_USER)):
        for event in plane.audit_events(user):
            ref = event.get("objectRef", {})
            if ref.get("subresource") != "status" or event["verb"] not in ("patch", "update"):
                continue
            when = datetime.datetime.fromisoformat(event["requestReceivedTimestamp"]).timestamp()
            if start <= when <= end:
                code = event.get("responseStatus", {}).get("code")
                kind = KINDS.get(ref.get("resource", ""), "?")
                rows.append((when, f"{who:<10} {event['verb']:<6} {kind} {ref.get('name', '')} -> {code}"))
    for s in seen:
        status = s.obj.get("status", {})
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions", [])}
        stalled = next((c for c in status.get("conditions", []) if c.get("type") == "Stalled"), {})
        rows.append(
            (
                s.at + wall_offset,
                f"  version rv={s.obj['metadata'].get('resourceVersion')} state={status.get('state')} "
                f"Ready={conditions.get('Ready')} Stalled={conditions.get('Stalled')} "
                f"msg={stalled.get('message', '')[:90]!r}",
            )
        )
    rows.sort()
    return [f"{when - start:9.3f}  {text}" for when, text in rows]


def kstatus(objects: list[dict[str, Any]]) -> list[str]:
    """kstatus's own verdict on each version (tests/waiters' helper around status.Compute)."""
    done = subprocess.run(
        [str(waiters_bin() / "kstatus")],
        input=json.dumps(objects).encode(),
        capture_output=True,
        timeout=300,
        check=True,
    )
    return [json.loads(line)["status"] for line in done.stdout.decode().splitlines()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="5m", help="how long to count, from the crash that makes the loop")
    parser.add_argument("--timeline", action="store_true", help="print every status write and DGD version in order")
    parser.add_argument(
        "--no-admission",
        dest="admission",
        action="store_false",
        help="crashwatch without its status admission webhook: it answers the operator's rewrites with writes",
    )
    args = parser.parse_args()
    duration = parse_duration(args.duration)
    folders = operators.Folders("bench-realnode-operator")
    cluster = operators.on_node(folders, lws=False)  # type: ignore[arg-type]
    try:
        node, controllers = next(cluster)
    except BaseException as exc:  # pytest's skip outside pytest: its one line
        if type(exc).__name__ in ("Skipped", "Failed"):
            print(f"bench.realnode_operator: {exc}", file=sys.stderr)
            return 3
        raise
    try:
        kube = controllers.kube()
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        kubeconfig = controllers.user_kubeconfig(CRASHWATCH)
        watching = ("run", "-n", NAMESPACE, "-o", "json", "--recovery-window", WINDOW)
        if args.admission:
            watching += operators.admission_args(kube, NAMESPACE, folders.mktemp("webhook"), "crashwatch-bench")
        print(f"crashwatch {'with' if args.admission else 'without'} its status admission webhook", file=sys.stderr)
        with Watcher(*watching, *kubeconfig_args(kubeconfig)) as w:
            w.wait_synced(60)
            versions = operators.Recorder(kube, dgds(NAMESPACE))
            try:
                kube.create(dgds(NAMESPACE), graph(node.busybox))
                eventually(
                    lambda: kube.get(f"{dgds(NAMESPACE)}/{GRAPH}").get("status", {}).get("state") == "failed",
                    300,
                    "the crash loop diagnosed",
                    step=0.1,
                )
                first = restarts(kube)
                began, since = audit_now(), time.monotonic()
                wall_offset = time.time() - time.monotonic()
                print(f"crash loop at restart {first}; counting for {duration:.0f}s", file=sys.stderr)
                time.sleep(duration)
                ended = audit_now()
                last = restarts(kube)
                seen = [s for s in versions.snapshot(GRAPH) if s.at >= since]
                written = w.writes()
            finally:
                versions.close()
        ours = operators.status_writes(controllers.plane, CRASHWATCH, began, ended)
        theirs = operators.status_writes(controllers.plane, operators.OPERATOR_USER, began, ended)
        ours_lost = dgd_conflicts(controllers.plane, CRASHWATCH, began, ended)
        rows = timeline(controllers.plane, seen, wall_offset, began, ended) if args.timeline else []
    finally:
        cluster.close()
    minutes = duration / 60
    runs = last - first
    stretches = left_failed(seen)
    print(f"\n{runs} restarts of the worker in {minutes:.1f} min (restart {first} to {last}), one graph")
    print("status writes per minute (409s included; DGD / DCD / 409s):")
    for who, counts in (("crashwatch", ours), ("operator", theirs)):
        rate = operators.per_minute(counts, began, ended)
        print(f"  {who:<10} {rate['dgd']:5.1f} / {rate['dcd']:5.1f} / {rate['conflicts']:5.1f}   totals {counts}")
    if runs:
        print(
            f"crashwatch per restart: {ours['dgd'] / runs:.1f} DGD, {ours['dcd'] / runs:.1f} DCD writes; "
            f"the operator's rewrites it answered: {len(stretches)}"
        )
    worst = max((d for _, d in stretches), default=0.0)
    print(
        f"the DGD left `failed` {len(stretches)} times ({sorted({s for s, _ in stretches})}), "
        f"back after at most {worst:.3f}s"
    )
    verdicts = kstatus([s.obj for s in seen]) if seen else []
    print(f"kstatus of the {len(seen)} DGD versions in the window: {sorted(set(verdicts))}")
    budget_dgd, budget_dcd = runs + len(stretches), runs + theirs["dcd"]
    print(f"budget (one per restart + one per rewrite answered): DGD {budget_dgd}, DCD {budget_dcd}")
    print(
        f"crashwatch's DGD writes: {ours['dgd']} requests, {ours_lost} of them 409s (beaten by the operator's "
        f"write of the same moment), {ours['dgd'] - ours_lost} landed"
    )
    print(f"crashwatch said it wrote ({len(written)} lines, the whole run):")
    for line in written:
        print(f"  {line.removeprefix('crashwatch: wrote ')}")
    if rows:
        print("timeline (seconds from the first failed; audit log's request times, the watch's arrival times):")
        for row in rows:
            print(f"  {row}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
