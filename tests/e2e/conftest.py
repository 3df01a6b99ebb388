"""The e2e tier: one real control plane per session, a namespace per test."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import envtest
from kube import Kube

ENABLE = "install Go >= 1.26 (the control plane is built from the Go module proxy by scripts/build-controlplane)"


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[envtest.ControlPlane]:
    try:
        binaries = envtest.binaries()
    except envtest.ControlPlaneUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"e2e tests must run under CI, but {exc}: {ENABLE}")
        pytest.skip(f"e2e tests skipped: {exc}; to run them, {ENABLE}")
    plane = envtest.ControlPlane(binaries, tmp_path_factory.mktemp("controlplane"))
    try:
        plane.start()
        print(f"\ncontrol plane up in {plane.started_in:.1f}s at {plane.url}", file=sys.stderr)
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def kube(control_plane: envtest.ControlPlane) -> Kube:
    return control_plane.kube()


@pytest.fixture
def namespace(kube: Kube) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield name
    finally:
        kube.delete(f"/api/v1/namespaces/{name}")
