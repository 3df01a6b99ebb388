"""The e2e tier: one real control plane per session, a namespace per test."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import envtest
from kube import Kube


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[envtest.ControlPlane]:
    yield from envtest.started(tmp_path_factory)


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
