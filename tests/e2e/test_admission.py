"""The status admission webhook on the test control plane: the API server asks `crashwatch run
--admission-address` before it stores another writer's DGD status, over TLS, and stores the answer.

The race it closes (docs/status.md): a fix shipped as a spec change, and the operator's first status of
the new generation, made from the object as it read it, `Stalled=True` kept and status.observedGeneration
moved to the new generation, which kstatus reads as Failed. Here that write is sent right after the spec
change, as the operator does, before crashwatch could have withdrawn anything; the webhook answers it.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import envtest
import pytest
from dynamo import conditions, dgds, labelled_pod, make_graph, operators_successful
from kube import Kube, crash_loop
from operators import WEBHOOKS, Recorder, status_webhook, webhook_certs
from watcher import Watcher, http_get, kubeconfig_args

pytestmark = pytest.mark.e2e

GRAPH = "llm"


def spec(image: str) -> dict[str, Any]:
    return {"services": {"worker": {"componentType": "worker", "extraPodSpec": {"mainContainer": {"image": image}}}}}


def stalled(obj: dict[str, Any]) -> tuple[str, str] | None:
    condition = conditions(obj).get("Stalled")
    return (condition["status"], condition["reason"]) if condition is not None else None


def test_the_operators_first_status_of_the_fixs_generation_is_stored_with_the_withdrawal(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    make_graph(kube, namespace, deployments=False)
    path = f"{dgds(namespace)}/{GRAPH}"
    kube.merge_patch(path, {"spec": spec("registry.invalid/worker:1")})
    labelled_pod(kube, namespace, f"{GRAPH}-worker-0", GRAPH, "worker")
    certs = webhook_certs(()).write(tmp_path / "certs")
    port = envtest.free_port()
    name = f"crashwatch-{namespace}"
    kube.create(WEBHOOKS, status_webhook(name, namespace, port, (certs / "ca.crt").read_bytes()))
    tls = ("--tls-cert-file", str(certs / "tls.crt"), "--tls-private-key-file", str(certs / "tls.key"))
    args = ("run", "-n", namespace, "--admission-address", f"127.0.0.1:{port}", *tls)
    try:
        with Watcher(*args, *kubeconfig_args(control_plane.kubeconfig)) as watcher:
            watcher.wait_synced()
            crash_loop(kube, namespace, f"{GRAPH}-worker-0")
            looping = kube.wait_for(path, lambda dgd: stalled(dgd) == ("True", "ComponentCrashLooping"), 15)
            # the operator's `successful` on a Ready flip of the crash-looping worker is stored as the failure
            stored = operators_successful(kube, path, looping)
            assert (stored["status"]["state"], conditions(stored)["Ready"]["reason"]) == (
                "failed",
                "component_crash_looping",
            )
            versions = Recorder(kube, dgds(namespace))
            try:
                # the fix, and at once the operator's first status of its generation, made from the object
                # as it read it: our Stalled=True kept, status.observedGeneration moved to the new spec
                fixed = kube.merge_patch(path, {"spec": spec("registry.invalid/worker:2")})
                generation = fixed["metadata"]["generation"]
                operators = {"observedGeneration": generation, "conditions": fixed["status"]["conditions"]}
                assert stalled(fixed) == ("True", "ComponentCrashLooping")
                stored = kube.merge_patch(f"{path}/status", {"status": operators})
                assert stored["status"]["observedGeneration"] == generation
                assert stalled(stored) == ("False", "SpecReplaced")
                # and the failure's state and Ready go with it, as crashwatch's own clear would write them
                assert stored["status"]["state"] != "failed"
                assert conditions(stored)["Ready"]["reason"] != "component_crash_looping"
                watcher.wait_for(lambda: any("another writer's status write made to say" in e for e in watcher.err))
                time.sleep(1)  # room for crashwatch's own writes, and any wrong one
                seen = [s.obj for s in versions.snapshot(GRAPH)]
            finally:
                versions.close()
            # no version says Stalled=True of the new generation, whatever landed after the operator's write
            current = [o for o in seen if o.get("status", {}).get("observedGeneration") == generation]
            assert current and all(stalled(o) != ("True", "ComponentCrashLooping") for o in current), seen
        # crashwatch gone: the API server lets status writes through (failurePolicy Ignore)
        after = kube.merge_patch(f"{path}/status", {"status": {"state": "pending"}})
        assert after["status"]["state"] == "pending"
    finally:
        kube.delete(f"{WEBHOOKS}/{name}")


LEASE = ("--leader-elect-lease-duration", "3s", "--leader-elect-renew-deadline", "2s")
LEASE += ("--leader-elect-retry-period", "0.5s")


def test_a_follower_answers_with_no_change_so_no_status_write_is_turned_by_a_replica_behind(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    """Two replicas; the API server asks the follower alone (as a Service may pick it), and is sent every
    status write, the leader's own too (no matchConditions here): the leader's failure write is stored as
    written, and 100 writes that say otherwise are stored as written too, each asked and let through."""
    make_graph(kube, namespace, deployments=False)
    path = f"{dgds(namespace)}/{GRAPH}"
    labelled_pod(kube, namespace, f"{GRAPH}-worker-0", GRAPH, "worker")
    certs = webhook_certs(()).write(tmp_path / "certs")
    port = envtest.free_port()
    name = f"crashwatch-{namespace}"
    elect = ("--leader-elect", "--leader-election-namespace", namespace, *LEASE)
    config = kubeconfig_args(control_plane.kubeconfig)
    tls = ("--tls-cert-file", str(certs / "tls.crt"), "--tls-private-key-file", str(certs / "tls.key"))
    with Watcher("run", "-n", namespace, *elect, *config) as leader:
        leader.wait_for(lambda: "leading: acquired" in leader.stderr(), what="the first replica leads")
        follower_args = ("--admission-address", f"127.0.0.1:{port}", *tls, "--http-address", "127.0.0.1:0")
        with Watcher("run", "-n", namespace, *elect, *follower_args, *config) as follower:
            follower.wait_synced()
            assert "leading: acquired" not in follower.stderr()
            (url,) = re.findall(r"serving /healthz, /readyz and /metrics at (\S+)", follower.stderr())
            kube.create(WEBHOOKS, status_webhook(name, namespace, port, (certs / "ca.crt").read_bytes()))
            try:
                crash_loop(kube, namespace, f"{GRAPH}-worker-0")
                # the leader's failure write, through the follower, stored as the leader wrote it
                kube.wait_for(path, lambda dgd: stalled(dgd) == ("True", "ComponentCrashLooping"), 15)
                kube.wait_for(path, lambda dgd: dgd["status"].get("state") == "failed", 15)
                for _ in range(100):  # writes a replica behind would turn: each stored as written
                    stored = kube.merge_patch(f"{path}/status", {"status": {"state": "pending"}})
                    assert stored["status"]["state"] == "pending"
                let_through = re.compile(r'^crashwatch_admission_reviews_total\{answer="let through"\} (\S+)$', re.M)
                follower.wait_for(
                    lambda: float((let_through.findall(http_get(f"{url}/metrics")[1]) or ["0"])[0]) >= 101,
                    what="the follower asked for the leader's write and the 100",
                )
                assert "another writer's status write made to say" not in follower.stderr()
                # and the leader, which owns the verdict, answers the last of them with its own write (after
                # the backoff of an overwritten failure)
                kube.wait_for(path, lambda dgd: dgd["status"].get("state") == "failed", 90)
            finally:
                kube.delete(f"{WEBHOOKS}/{name}")
