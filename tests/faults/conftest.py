"""Fixtures of the fault tier: the fake API server, and the real client pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fakeapi import FakeApi

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
