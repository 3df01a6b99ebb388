"""A backend plugged in from outside the product (tests/gangs.py), live against the real API server: its
kind is discovered and watched, the Pods it claims are heard, its tunable read, its words printed."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import envtest
import pytest
from builders import container, pod_status
from kube import Kube, pod_manifest, set_pod_status
from watcher import Watcher

pytestmark = pytest.mark.e2e

GANGS = Path(__file__).resolve().parent.parent / "gangs.py"
GROUP = "gangs.test.crashwatch.io"
CRD = f"gangsets.{GROUP}"
LABELS = {
    "nvidia.com/dynamo-graph-deployment-name": "g",
    "nvidia.com/dynamo-component": "trainer",
    f"{GROUP}/gang": "team-a",
}


@pytest.fixture
def gangsets(kube: Kube) -> Iterator[None]:
    """The GangSet CRD, for this test alone (no other test's crashwatch knows the kind)."""
    kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd())
    try:
        kube.wait_for(
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD}",
            lambda obj: any(c["type"] == "Established" and c["status"] == "True" for c in obj["status"]["conditions"]),
            timeout=30,
        )
        kube.wait_for(f"/apis/{GROUP}/v1", lambda doc: bool(doc.get("resources")), timeout=30)
        yield
    finally:
        kube.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD}")


def crd() -> dict[str, Any]:
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "gangsets", "singular": "gangset", "kind": "GangSet", "listKind": "GangSetList"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": schema}],
        },
    }


def running(ready: bool) -> dict[str, Any]:
    return pod_status(ready=ready, containers=[container(state="running", ready=ready, realistic=True)])


def test_a_plugged_in_backend_is_watched_live_and_its_verdict_comes_and_goes(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str, gangsets: None
) -> None:
    gangset = {"apiVersion": f"{GROUP}/v1", "kind": "GangSet", "metadata": {"name": "team-a"}, "spec": {"members": 2}}
    kube.create(f"/apis/{GROUP}/v1/namespaces/{namespace}/gangsets", gangset)
    for name, ready in (("a-0", True), ("a-1", False)):
        kube.create(f"/api/v1/namespaces/{namespace}/pods", pod_manifest(name, LABELS))
        set_pod_status(kube, namespace, name, running(ready))
    args = ("tail", "-n", namespace, "-o", "json", "--kubeconfig", str(control_plane.kubeconfig), "--gang-grace", "2s")
    with Watcher(*args, command=[sys.executable, str(GANGS)]) as tail:
        tail.wait_synced()
        assert "gangsets" in tail.stderr()  # its kind is watched, found served
        tail.wait_line('"gang":"team-a"', timeout=60)
        line = json.loads(next(x for x in tail.snapshot(tail.out) if '"gang":"team-a"' in x))
        assert (line["component"], line["short"]) == ("trainer", 1)
        assert line["message"] == "GangSet team-a is short of 1 Ready members for over 2s"
        set_pod_status(kube, namespace, "a-1", running(True))  # the gang is whole: the verdict goes
        tail.wait_line('"crash_looping":false', timeout=60)
        assert tail.stop() == 0
