"""What a reflector hands on, kept for the fault tests to wait on and assert about."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from stream.model.events import WatchEvent


class Collector:
    def __init__(self) -> None:
        self.events: list[WatchEvent] = []

    async def emit(self, events: list[WatchEvent]) -> None:
        self.events += events

    def seen(self) -> list[tuple[str, str, str]]:
        """(type, name, resourceVersion) of each event, in order."""
        return [(e.type, e.object.metadata.name, e.object.metadata.resource_version) for e in self.events]  # type: ignore[union-attr]

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10) -> None:
        """Until `predicate` holds, polled every 10 ms, at most `timeout` seconds."""
        with anyio.fail_after(timeout):
            while not predicate():
                await anyio.sleep(0.01)
