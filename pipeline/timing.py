"""Time passing in the core: the one protocol every source of deadlines shares.

The core reads no clock. Time passes as events: an event's own time, a live source's tick. Whatever waits
for time (a held Pod's recovery window, a diagnosis's grace, a replacement's grace, a backend's group
window) is a tracker that keeps its deadlines in heaps the aggregator can see at a glance (is any due
before this event's time?), and that is handed `now` to say which fell, each with the moment it fell and the
components it touches. The aggregator then settles those components in the order their deadlines fell.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from pipeline.views import ComponentKey

NEVER = math.inf

# A deadline that fell, and the components whose verdict it may change
Due = tuple[float, list[ComponentKey]]


class Timed(Protocol):
    """A tracker with deadlines: heaps of (when, ...), stale entries allowed (they are skipped when due)."""

    @property
    def heaps(self) -> tuple[Sequence[Any], ...]: ...

    def due(self, now: float) -> list[Due]:
        """The deadlines that fell by `now`, each with the moment it fell; their effect taken on the tracker."""
        ...


def earliest(heaps: tuple[Sequence[Any], ...]) -> float:
    """When the first deadline of these heaps falls (NEVER without one)."""
    first = NEVER
    for heap in heaps:
        if heap and heap[0][0] < first:
            first = heap[0][0]
    return first
