"""Fixtures of the fault tier: the fake API server, and the real client pointed at it (or, `fake`, served
from a thread of its own for the CLI run as a subprocess)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from fakeapi import FakeApi, ServedFake

from stream.sources.client import KubeClient


@pytest.fixture
async def api() -> AsyncIterator[FakeApi]:
    fake = await FakeApi().start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
async def client(api: FakeApi, tmp_path: Path) -> AsyncIterator[KubeClient]:
    kube = await KubeClient.connect(str(api.kubeconfig(tmp_path)))
    try:
        yield kube
    finally:
        await kube.close()


@pytest.fixture
def fake() -> Iterator[ServedFake]:
    served = ServedFake()
    try:
        yield served
    finally:
        served.stop()
