"""Shared test setup. Tests import crashwatch from the installed package (pytest runs with
--import-mode=importlib), and helpers from this folder."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def anyio_backend() -> str:
    # aiohttp and kubernetes-asyncio need asyncio; the tests run on it alone.
    return "asyncio"
