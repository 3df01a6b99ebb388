"""Shared test setup. Tests import crashwatch from the installed package (pytest runs with
--import-mode=importlib), and helpers from this folder."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def anyio_backend() -> str:
    # aiohttp and kubernetes-asyncio need asyncio; the tests run on it alone.
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_leaked_tasks_in_async_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every anyio test is checked for tasks it leaves behind; set up first, so checked last."""
    if request.node.get_closest_marker("anyio") is not None:
        request.getfixturevalue("no_leaked_tasks")
    yield


# Loop iterations a task that is already on its way out (a closed connection's callbacks, a cancelled
# task's last step) may take to finish before it counts as left behind. Iterations, not seconds: a test
# that leaves nothing behind pays nothing, and one that does fails however fast the machine is.
SETTLING_ITERATIONS = 5


@pytest.fixture
async def no_leaked_tasks() -> AsyncIterator[None]:
    """Fail a test that leaves asyncio tasks running on its loop.

    The tasks of the loop are taken before the test's other async fixtures are set up and compared after
    they are torn down: a task still pending then was started by the test or a fixture and never awaited
    or cancelled, and would run on (or be cancelled silently when the loop closes) behind the next test.
    """
    before = asyncio.all_tasks()
    yield
    left: set[asyncio.Task[object]] = set()
    for _ in range(SETTLING_ITERATIONS):
        left = {task for task in asyncio.all_tasks() - before if not _runs_the_test_runner(task)}
        if not left:
            return
        await asyncio.sleep(0)
    for task in left:
        task.cancel()  # so that they do not run on into other tests
    await asyncio.gather(*left, return_exceptions=True)
    described = "\n".join(f"  {task.get_name()}: {task.get_coro()!r}" for task in left)
    pytest.fail(f"{len(left)} asyncio task(s) left running by the test:\n{described}", pytrace=False)


def _runs_the_test_runner(task: asyncio.Task[object]) -> bool:
    """anyio's test runner drives each fixture and test through a task of its own (the one awaiting this
    teardown among them): those are the runner's, not the test's."""
    return getattr(task.get_coro(), "__qualname__", "").startswith("TestRunner.")
