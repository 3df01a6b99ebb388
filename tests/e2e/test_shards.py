"""Two shards of `crashwatch run` over four namespaces, against the real control plane: each graph is
diagnosed and its status written by exactly one shard, the one its namespace hashes to; with
`--namespace-selector`, a namespace relabelled in is picked up and one relabelled out is let go."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import envtest
import pytest
import yaml
from dynamo import dgd_state, labelled_pod, make_graph
from kube import Kube, crash_loop, eventually, make_ready
from watcher import Watcher, http_get

from stream.model.shards import shard_of

pytestmark = pytest.mark.e2e

LEASE, RENEW, RETRY = "3s", "2s", "0.5s"


def namespace_names(per_shard: int, shards: int = 2) -> list[str]:
    """Fresh namespace names, `per_shard` of each shard, in shard order."""
    chosen: dict[int, list[str]] = {s: [] for s in range(shards)}
    while any(len(names) < per_shard for names in chosen.values()):
        name = f"t-{uuid.uuid4().hex[:10]}"
        if len(chosen[shard_of(name, shards)]) < per_shard:
            chosen[shard_of(name, shards)].append(name)
    return [name for s in range(shards) for name in chosen[s]]


@pytest.fixture
def namespaces(kube: Kube) -> Iterator[tuple[str, list[str]]]:
    """Four namespaces, two of each shard, each with a graph (one DCD, one Pod) and the label
    `crashwatch-e2e=<run>`; a fifth of shard 0 with a graph but without the label. (run, names)"""
    label = uuid.uuid4().hex[:8]
    names = namespace_names(3)
    names = [names[0], names[1], names[3], names[4], names[2]]  # shard 0, 0, 1, 1; then a spare of shard 0
    for n, name in enumerate(names):
        labels = {"crashwatch-e2e": label} if n < 4 else {}
        kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
        )
        make_graph(kube, name, deployments=False)
        labelled_pod(kube, name, "llm-worker-0", "llm", "worker")
    try:
        yield label, names
    finally:
        for name in names:
            kube.delete(f"/api/v1/namespaces/{name}")


def shard(kubeconfig: Path, index: int, *scope: str) -> Watcher:
    return Watcher(
        "run",
        *scope,
        "-o",
        "json",
        "--kubeconfig",
        str(kubeconfig),
        "--shard-index",
        str(index),
        "--shard-count",
        "2",
    )


def written(w: Watcher) -> set[str]:
    """The namespaces it wrote a status in, as it says on stderr ("wrote dcd NS/NAME: ...")."""
    found = (re.search(r"wrote \S+ ([^/\s]+)/", line) for line in w.writes())
    return {m.group(1) for m in found if m is not None}


def graph_lines(w: Watcher) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in w.snapshot(w.out)]
    return [line for line in lines if line.get("kind") == "graph"]


def failed(kube: Kube, namespace: str) -> bool:
    return dgd_state(kube, namespace)[0] == "failed"


def test_two_shards_over_four_namespaces_each_graph_is_written_by_its_shard_alone(
    control_plane: envtest.ControlPlane, kube: Kube, namespaces: tuple[str, list[str]]
) -> None:
    """A fixed list of namespaces (-n, four times): each shard watches its own two, no other."""
    _, names = namespaces
    given = [arg for name in names[:4] for arg in ("-n", name)]
    with shard(control_plane.kubeconfig, 0, *given) as zero, shard(control_plane.kubeconfig, 1, *given) as one:
        for w in (zero, one):
            w.wait_synced()
        assert f"in namespace {names[0]}, {names[1]}, keeping those of shard 0 of 2" in zero.stderr()
        assert f"in namespace {names[2]}, {names[3]}, keeping those of shard 1 of 2" in one.stderr()
        for name in names[:4]:
            crash_loop(kube, name, "llm-worker-0")
        for name in names[:4]:
            eventually(lambda: failed(kube, name), 15, f"{name} failed")  # noqa: B023
        time.sleep(1)  # a second writer, were there one, has had its chance
        assert written(zero) == set(names[:2]) and written(one) == set(names[2:4])
        assert len(zero.writes()) == len(one.writes()) == 4  # a DCD and a DGD per graph, once
        assert {line["namespace"] for line in graph_lines(zero)} == set(names[:2])
        assert {line["namespace"] for line in graph_lines(one)} == set(names[2:4])
        assert not failed(kube, names[4])  # in neither list


def test_shards_of_every_namespace_with_a_selector_lead_apart_and_follow_relabelled_namespaces(
    control_plane: envtest.ControlPlane, kube: Kube, namespaces: tuple[str, list[str]]
) -> None:
    """-A: every watch sees every namespace and drops what is not its shard's or does not match."""
    label, names = namespaces
    selector = f"crashwatch-e2e={label}"
    home = names[0]  # the Leases' namespace
    elect = (
        "--leader-elect",
        "--leader-election-namespace",
        home,
        "--leader-elect-lease-duration",
        LEASE,
        "--leader-elect-renew-deadline",
        RENEW,
        "--leader-elect-retry-period",
        RETRY,
    )
    scope = ("-A", "--namespace-selector", selector, *elect)
    with shard(control_plane.kubeconfig, 0, *scope) as zero, shard(control_plane.kubeconfig, 1, *scope) as one:
        for w in (zero, one):
            w.wait_synced()
            w.wait_for(lambda: "leading: acquired" in w.stderr(), 15, "leading")  # noqa: B023
        leases = f"/apis/coordination.k8s.io/v1/namespaces/{home}/leases"
        holders = {n: kube.get(f"{leases}/crashwatch-{n}")["spec"]["holderIdentity"] for n in (0, 1)}
        assert holders[0] != holders[1] and holders[0] in zero.stderr() and holders[1] in one.stderr()
        for name in names:
            crash_loop(kube, name, "llm-worker-0")
        for name in names[:4]:
            eventually(lambda: failed(kube, name), 15, f"{name} failed")  # noqa: B023
        time.sleep(1)
        assert written(zero) == set(names[:2]) and written(one) == set(names[2:4])
        assert not failed(kube, names[4])  # crash-looping, but its namespace does not match

        # relabelled in: its shard (0) lists again, finds the crash loop and writes it; shard 1 never does
        kube.merge_patch(f"/api/v1/namespaces/{names[4]}", {"metadata": {"labels": {"crashwatch-e2e": label}}})
        eventually(lambda: failed(kube, names[4]), 15, f"{names[4]} failed once relabelled in")
        zero.wait_for(lambda: f"namespace {names[4]} now matches {selector}" in zero.stderr(), 5, "said")
        time.sleep(1)
        assert written(zero) == {names[0], names[1], names[4]} and written(one) == set(names[2:4])

        # relabelled out: forgotten (its graph leaves the output as deleted), and no longer written
        kube.merge_patch(f"/api/v1/namespaces/{names[1]}", {"metadata": {"labels": {"crashwatch-e2e": None}}})
        zero.wait_for(lambda: f"namespace {names[1]} no longer matches" in zero.stderr(), 10, "forgotten")
        writes = len(zero.writes())
        make_ready(kube, names[1], "llm-worker-0")  # a fix it would clear the failure for, were it still watching
        time.sleep(2)
        assert failed(kube, names[1]) and len(zero.writes()) == writes
        assert names[1] not in written(one)


def test_the_shards_manifests_pass_the_api_servers_validation(kube: Kube, namespace: str) -> None:
    """k8s/shards' StatefulSet (with its downward-API shard index), Service and budget, as the API server
    takes them (dry run: no Pod is made)."""
    folder = Path(__file__).resolve().parents[2] / "k8s" / "shards"
    for name, path in (
        ("service", f"/api/v1/namespaces/{namespace}/services?dryRun=All"),
        ("statefulset", f"/apis/apps/v1/namespaces/{namespace}/statefulsets?dryRun=All"),
        ("poddisruptionbudget", f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets?dryRun=All"),
    ):
        created = kube.create(path, yaml.safe_load((folder / f"{name}.yaml").read_text()))
        assert created["metadata"]["namespace"] == namespace


def test_a_shard_given_no_namespace_of_its_own_idles_ready_until_stopped(
    control_plane: envtest.ControlPlane, kube: Kube, namespaces: tuple[str, list[str]]
) -> None:
    """Four shards over a fixed list of one namespace: three of them have nothing to watch, and wait
    (ready, as a StatefulSet's Pod must be) rather than exit and be restarted for ever."""
    _, names = namespaces
    index = next(i for i in range(4) if i != shard_of(names[0], 4))
    with Watcher(
        "run",
        "-n",
        names[0],
        "--kubeconfig",
        str(control_plane.kubeconfig),
        "--shard-index",
        str(index),
        "--shard-count",
        "4",
        "--http-address",
        "127.0.0.1:0",
    ) as w:
        w.wait_synced()
        assert f"in no namespace (of namespace {names[0]}, none is this shard's), keeping those of shard" in w.stderr()
        assert http_get(f"{w.served_at()}/readyz")[0] == 200
        crash_loop(kube, names[0], "llm-worker-0")
        time.sleep(1)
        assert w.process.poll() is None and w.writes() == []
    assert w.process.returncode == 0
