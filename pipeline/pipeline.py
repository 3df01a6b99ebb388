"""The one pipeline: the event filter and the aggregator, fed synchronously, events in and outputs out.

Every command runs this same object; only its source and its sinks differ (crashwatch/ wires them).
Tests and benchmarks feed it directly. It does no I/O and knows no event loop: the stage task that
feeds it from a stream lives with the wiring.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from pipeline.aggregate import Aggregator
from pipeline.backends.base import overrides
from pipeline.backends.registry import make_backends
from pipeline.diagnoses import Settings
from pipeline.filter import EventFilter, ObjectUpdate, Rejected
from pipeline.holds import DEFAULT_RECOVERY_WINDOW
from pipeline.outputs import Output, StatusWanted
from pipeline.views import StatusView, ViewStore
from stream.model.events import CrashOutput, ReducedPod, WatchEvent


class Pipeline:
    def __init__(
        self,
        clock: Callable[[], str] | None = None,
        synced: bool = True,
        readiness: bool = False,
        tunables: Mapping[str, float] | None = None,
        strict: bool = False,
        recovery_window: float = DEFAULT_RECOVERY_WINDOW,
        diagnoses: Settings | None = None,
        explains: bool = False,
    ) -> None:
        """`synced=False` decides no status before `sync()` (a live source lists first); `readiness` also
        emits where each graph stands (`wait`, `get`); `tunables` are the backends' settings by name
        (pipeline.backends: a LeaderWorkerSet group's window, say); `recovery_window` how long a
        crash-looping Pod must be Ready before its verdict clears (pipeline.holds); `diagnoses` the graces
        of the diagnoses beside the crash loop and which of them fail a DGD (pipeline.diagnoses);
        `explains` asks for each new crash's output (pipeline.crash_causes: a live reader answers). See
        `Aggregator`. `strict`: nothing after the first event the filter rejects is looked at
        (`replay --strict`)."""
        self.strict = strict
        # the events the filter could not read, oldest first, for the caller to report and clear
        self.rejected: list[Rejected] = []
        self.store = ViewStore()
        self.backends = make_backends(self.store, tunables)
        self.store.claimers = tuple((b.name, type(b).claim) for b in self.backends if overrides(b, "claim"))
        self.filter = EventFilter(self.store, self.backends, explains)
        self.aggregator = Aggregator(
            self.store,
            self.backends,
            clock=clock,
            synced=synced,
            readiness=readiness,
            recovery_window=recovery_window,
            diagnoses=diagnoses,
            explains=explains,
        )
        self._outputs: list[Output] = []  # where the outputs of time passing before a change go
        self._time_passes = self._timer()
        self.filter.before_change = self._time_passes

    def feed(self, events: Iterable[WatchEvent | ReducedPod | CrashOutput]) -> list[Output]:
        """The outputs these events cause, in order; events that change nothing a diagnosis reads
        stop at the filter, and events it cannot read are added to `rejected`. Events' times are time
        passing: a recovery window that ended before an update is closed before the update is applied,
        and one that ended by the batch's last event (a dropped one too) by the end of the batch."""
        aggregator = self.aggregator
        apply, pending = aggregator.apply, aggregator.pending
        outputs: list[Output] = []
        if self.strict and self.rejected:
            return outputs
        self._outputs = outputs  # the filter's before_change adds the deadlines' outputs, in their place
        for update in self.filter.updates(events):
            if type(update) is ObjectUpdate:
                outputs += apply(update)
                continue
            if type(update) is CrashOutput:
                self._time_passes(update.time)
                outputs += aggregator.explain(update)
                continue
            self.rejected.append(update)  # type: ignore[arg-type]
            if self.strict:
                return outputs
        if pending() and isinstance(events, list) and events:
            outputs += aggregator.advance(events[-1].time)
        return outputs

    def _timer(self) -> Callable[[str | None], None]:
        """Before the store takes a change: the deadlines that fell by its time, decided on the store as
        it was then (a Pod deleted at 10:01:01 still recovers at 10:01:00, the end of its window, however
        the events before it were batched or dropped). A closure: it runs at every change passed on."""
        pending, advance = self.aggregator.pending, self.aggregator.advance

        def time_passes(time: str | None) -> None:
            if time is not None and pending():
                self._outputs += advance(time)

        return time_passes

    def tick(self, time: str) -> list[Output]:
        """A live source's clock: time passed to `time` with no event (recovery windows and graces end)."""
        return self.aggregator.advance(time)

    def admit(self, view: StatusView, now: str) -> tuple[bool, StatusWanted | None]:
        """The read side of another writer's status write (the admission webhook asks it): whether the
        pipeline knows enough to say, and the write with crashwatch's decision merged in (None: let it be)."""
        return self.aggregator.admit(view, now)

    def sync(self, time: str | None = None) -> list[Output]:
        """Every object has been listed once: decide what waited for that (statuses, readiness)."""
        return self.aggregator.sync(time)
