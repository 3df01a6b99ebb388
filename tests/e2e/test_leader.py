"""Two `crashwatch run --leader-elect` replicas on one namespace, against the real control plane: only the
holder of the Lease writes, and a successor takes over when the leader is killed, stopped or cut off.

Short durations keep it quick: lease 3 s, renew deadline 2 s, retry period 0.5 s; the bounds asserted
are those (a kill: lease duration + 1 s; a SIGTERM, which releases the lease: 2 s)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import envtest
import pytest
import yaml
from dynamo import dcd_available, dcds, dgd_state, labelled_pod, make_graph
from kube import Kube, crash_loop, make_ready
from tcpproxy import TcpProxy
from watcher import Watcher, http_get

pytestmark = pytest.mark.e2e

LEASE, RENEW, RETRY = 3.0, 2.0, 0.5


def lease_path(namespace: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/crashwatch"


def replica(kubeconfig: Path, namespace: str, *extra: str) -> Watcher:
    return Watcher(
        "run",
        "-n",
        namespace,
        "-o",
        "json",
        "--kubeconfig",
        str(kubeconfig),
        "--leader-elect",
        "--leader-election-namespace",
        namespace,
        "--leader-elect-lease-duration",
        f"{LEASE:g}s",
        "--leader-elect-renew-deadline",
        f"{RENEW:g}s",
        "--leader-elect-retry-period",
        f"{RETRY:g}s",
        *extra,
    )


def leads(w: Watcher) -> bool:
    """It said it acquired the lease, and has not said it lost it since."""
    lines = [line for line in w.snapshot(w.err) if "leading: acquired" in line or "lost the lease" in line]
    return bool(lines) and "leading: acquired" in lines[-1]


def identity(w: Watcher) -> str:
    found = re.search(r"leading: acquired the lease \S+ as (\S+);", w.stderr())
    assert found is not None, w.stderr()
    return found.group(1)


def wait(predicate: object, timeout: float = 30, what: str = "a condition", step: float = 0.02) -> float:
    """Poll; the time it took."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        try:
            if predicate():  # type: ignore[operator]
                return time.monotonic() - began
        except (KeyError, IndexError, StopIteration):
            pass
        time.sleep(step)
    raise AssertionError(f"{what} not reached in {timeout}s")


def failed(kube: Kube, namespace: str) -> bool:
    state, ready = dgd_state(kube, namespace)
    available = dcd_available(kube, namespace, "llm-worker")
    return (
        state == "failed"
        and ready["reason"] == "component_crash_looping"
        and available["reason"] == "ContainerCrashLooping"
    )


@contextmanager
def two_replicas(
    kubeconfig: Path, namespace: str, other: Path | None = None, *extra: str
) -> Iterator[tuple[Watcher, Watcher]]:
    """Two synced replicas, one leading: (leader, follower). `other`, `extra`: the second one's kubeconfig
    and further arguments."""
    with ExitStack() as stack:
        first = stack.enter_context(replica(kubeconfig, namespace))
        wait(lambda: leads(first), 15, "the first replica leading")
        second = stack.enter_context(replica(other or kubeconfig, namespace, *extra))
        for w in (first, second):
            w.wait_synced()
        second.wait_for(lambda: "is held by" in second.stderr(), 10, "the second following")
        assert not leads(second)
        yield first, second


@pytest.fixture
def graph(kube: Kube, namespace: str) -> str:
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, "llm-worker-0", "llm", "worker")
    return namespace


def test_only_the_leader_writes_and_both_diagnose(control_plane: envtest.ControlPlane, kube: Kube, graph: str) -> None:
    namespace = graph
    with two_replicas(control_plane.kubeconfig, namespace) as (leader, follower):
        crash_loop(kube, namespace, "llm-worker-0")
        wait(lambda: failed(kube, namespace), 10, "failed")
        for w in (leader, follower):
            w.wait_line('"kind":"graph"')
        time.sleep(1)
        assert (len(leader.writes()), len(follower.writes())) == (2, 0)
        lease = kube.get(lease_path(namespace))["spec"]
        assert lease["holderIdentity"] == identity(leader)
        assert (lease["leaseDurationSeconds"], lease["leaseTransitions"]) == (3, 0)


def test_a_killed_leaders_successor_reports_a_crash_loop_once_the_lease_runs_out(
    control_plane: envtest.ControlPlane, kube: Kube, graph: str
) -> None:
    namespace = graph
    with two_replicas(control_plane.kubeconfig, namespace) as (leader, follower):
        leader.process.kill()  # kill -9: no release, the lease runs out
        began = time.monotonic()
        crash_loop(kube, namespace, "llm-worker-0")
        wait(lambda: failed(kube, namespace), LEASE + 5, "failed")
        took = time.monotonic() - began
        # liveness with room for a loaded machine; how soon (under LEASE + 1 s) is bench/failover.py's figure
        assert took < LEASE + 5, f"{took:.2f}s"
        # a write is said once its answer is in, which may come after this test read the DGD back
        follower.wait_for(lambda: len(follower.writes()) >= 2, 10, "both writes said")
        assert leads(follower) and len(follower.writes()) == 2
        lease = kube.get(lease_path(namespace))["spec"]
        assert lease["holderIdentity"] == identity(follower) and lease["leaseTransitions"] == 1
    assert leader.writes() == []


def test_a_leader_stopped_by_sigterm_releases_the_lease_and_the_other_takes_over(
    control_plane: envtest.ControlPlane, kube: Kube, graph: str
) -> None:
    namespace = graph
    with two_replicas(control_plane.kubeconfig, namespace) as (leader, follower):
        began = time.monotonic()
        assert leader.stop() == 0
        wait(lambda: leads(follower), 10, "the follower leading")
        took = time.monotonic() - began
        # released, not run out: the follower need not wait LEASE after the last renewal (how soon, under 2 s,
        # is bench/failover.py's figure; a loaded machine gets the rest of the lease as room)
        assert "released the lease" in leader.stderr()
        assert took < LEASE + 2, f"{took:.2f}s"
        crash_loop(kube, namespace, "llm-worker-0")
        wait(lambda: failed(kube, namespace), 10, "failed")
        follower.wait_for(lambda: len(follower.writes()) >= 2, 10, "both writes said")
        time.sleep(0.5)  # and no more
        assert len(follower.writes()) == 2


def test_a_leader_cut_off_stops_writing_before_its_lease_expires_and_never_writes_with_its_successor(
    control_plane: envtest.ControlPlane, kube: Kube, graph: str
) -> None:
    namespace = graph
    port = int(control_plane.url.rsplit(":", 1)[1])
    proxy = TcpProxy(port)
    cut_off = control_plane.user_kubeconfig("partitioned", ("system:masters",), server=proxy.url)
    try:
        with two_replicas(cut_off, namespace, control_plane.kubeconfig, "--http-address", "127.0.0.1:0") as (
            leader,
            follower,
        ):
            url = follower.served_at()
            assert http_get(f"{url}/readyz")[1].startswith("ok: following")
            proxy.cut()
            lost = wait(lambda: "lost the lease" in leader.stderr(), 10, "the leader giving up")
            took_over = wait(lambda: leads(follower), 10, "the follower leading") + lost
            # It gives up RENEW after its last renewal, which came before the cut, so before the lease can run
            # out for anyone else (LEASE after that renewal). `lost` is when this test saw it, later than it
            # happened, never earlier: the bound is sound, and it leaves the loaded machine LEASE - RENEW of room
            # (how soon exactly is bench/failover.py's to measure, not a test's).
            assert lost < LEASE, f"gave up after {lost:.2f}s"
            assert took_over < LEASE + 10, f"{took_over:.2f}s"  # the follower took over: liveness, not speed
            crash_loop(kube, namespace, "llm-worker-0")
            wait(lambda: failed(kube, namespace), 10, "failed")
            assert http_get(f"{url}/readyz")[1].startswith("ok: leading")
            status, metrics = http_get(f"{url}/metrics")
            assert status == 200
            assert "crashwatch_leader 1.0" in metrics
            # the old leader comes back as a follower; the recovery is written by the new one alone
            proxy.restore()
            leader.wait_for(lambda: "is held by" in leader.stderr(), 15, "the old leader following")
            make_ready(kube, namespace, "llm-worker-0")
            wait(lambda: dgd_state(kube, namespace)[0] != "failed", 10, "cleared")
            follower.wait_for(lambda: len(follower.writes()) >= 4, 10, "the four writes said")
            time.sleep(1)  # and no more
            assert leader.writes() == []
            assert len(follower.writes()) == 4
            assert not leads(leader)
            # Read while the new leader still holds the lease. Once it stops it releases the lease, and the
            # old leader, whose watches may still be replaying the crash loop they missed while cut off,
            # takes over and writes what it has seen so far: its own verdict, not this test's subject.
            dcd = kube.get(f"{dcds(namespace)}/llm-worker")
            stalled = next(c for c in dcd["status"]["conditions"] if c["type"] == "Stalled")
            assert stalled["status"] == "False"
    finally:
        proxy.close()


def test_the_watcher_pods_role_is_enough_to_elect_a_leader(
    control_plane: envtest.ControlPlane, kube: Kube, graph: str, tmp_path: Path
) -> None:
    """k8s/watcher's rules as applied (here in the test's namespace, as kustomize's `namespace:` puts them
    in theirs): its service account, with the ClusterRole and the namespaced Role for Leases, elects
    itself in its own namespace (the kubeconfig context's, as the Pod's in a cluster) and writes; the
    Deployment and the PodDisruptionBudget pass the API server's validation."""
    namespace = graph
    folder = Path(__file__).resolve().parents[2] / "k8s" / "watcher"
    manifests = {path.stem: yaml.safe_load(path.read_text()) for path in folder.glob("*.yaml")}
    cluster_name = f"crashwatch-{namespace}"  # cluster-scoped: a name of its own, removed at the end
    manifests["clusterrole"]["metadata"]["name"] = cluster_name
    binding = manifests["clusterrolebinding"]
    binding["metadata"]["name"] = binding["roleRef"]["name"] = cluster_name
    for bound in (binding, manifests["rolebinding"]):
        bound["subjects"][0]["namespace"] = namespace
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    for path, name in (
        (f"/api/v1/namespaces/{namespace}/serviceaccounts", "serviceaccount"),
        (f"{rbac}/clusterroles", "clusterrole"),
        (f"{rbac}/clusterrolebindings", "clusterrolebinding"),
        (f"{rbac}/namespaces/{namespace}/roles", "role"),
        (f"{rbac}/namespaces/{namespace}/rolebindings", "rolebinding"),
        (f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets?dryRun=All", "poddisruptionbudget"),
        (f"/apis/apps/v1/namespaces/{namespace}/deployments?dryRun=All", "deployment"),
    ):
        kube.create(path, manifests[name])
    try:
        token = kube.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/crashwatch/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
        )["status"]["token"]
        config = envtest.write_kubeconfig(
            tmp_path / "sa", control_plane.url, control_plane.certs["ca.crt"], namespace=namespace, token=token
        )
        with Watcher("run", "--kubeconfig", str(config), "--leader-elect") as w:
            w.wait_synced()
            wait(lambda: leads(w), 10, "leading")
            crash_loop(kube, namespace, "llm-worker-0")
            wait(lambda: failed(kube, namespace), 10, "failed")
            assert kube.get(lease_path(namespace))["spec"]["holderIdentity"] == identity(w)
        assert w.process.returncode == 0 and "not allowed" not in w.stderr()
        assert "released the lease" in w.stderr()
        assert kube.get(lease_path(namespace))["spec"].get("holderIdentity") in ("", None)
    finally:
        kube.delete(f"{rbac}/clusterrolebindings/{cluster_name}")
        kube.delete(f"{rbac}/clusterroles/{cluster_name}")
