"""The one pipeline: the event filter and the aggregator, fed synchronously, events in and outputs out.

Every command runs this same object; only its source and its sinks differ (crashwatch/ wires them).
Tests and benchmarks feed it directly. It does no I/O and knows no event loop: the stage task that
feeds it from a stream lives with the wiring.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pipeline.aggregate import Aggregator
from pipeline.filter import EventFilter
from pipeline.groups import DEFAULT_WINDOW
from pipeline.outputs import Output
from pipeline.views import ViewStore
from stream.events import ReducedPod, WatchEvent


class Pipeline:
    def __init__(
        self,
        clock: Callable[[], str] | None = None,
        synced: bool = True,
        readiness: bool = False,
        group_window: float = DEFAULT_WINDOW,
    ) -> None:
        """`synced=False` decides no status before `sync()` (a live source lists first); `readiness` also
        emits where each graph stands (`wait`, `get`); `group_window` bounds a LeaderWorkerSet group's
        recreation loop. See `Aggregator`."""
        self.store = ViewStore()
        self.filter = EventFilter(self.store)
        self.aggregator = Aggregator(
            self.store, clock=clock, synced=synced, readiness=readiness, group_window=group_window
        )
        self.filter.group_matters = self.aggregator.group_matters

    def feed(self, events: Iterable[WatchEvent | ReducedPod]) -> list[Output]:
        """The outputs these events cause, in order; events that change nothing a diagnosis reads
        stop at the filter."""
        apply = self.aggregator.apply
        outputs: list[Output] = []
        for update in self.filter.updates(events):
            outputs += apply(update)
        return outputs

    def sync(self, time: str | None = None) -> list[Output]:
        """Every object has been listed once: decide what waited for that (statuses, readiness)."""
        return self.aggregator.sync(time)
