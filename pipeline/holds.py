"""Holding a crash-loop verdict between restarts: the recovery window.

The crash-loop rule reads one observation, and a real kubelet runs a crash-looping container again between
two crashes (for a second, or for minutes), when nothing is "down" and a Pod without a readiness probe is
even Ready. Taken alone, the rule would clear and fire again at every restart: a flap that every waiter,
status and Event would see. So a Pod found crash-looping stays so, with the finding of its last crash, until
it has been Ready for the recovery window without a restart in between, or it is replaced (a new uid),
deleted, being deleted or finished, which clear at once (a rollout with the fix is not held back).

Time passes as events, never from the wall: each event's time, a live source's clock tick. A Ready held
Pod has one deadline; when time passes it, the Pod is released (`due`). Without times (a log that has
none) the window never passes, and a held Pod clears only by being replaced, deleted or finished.
The aggregator asks this module what a Pod's verdict holds and when a deadline fell due; the filter reads
which Pods are held (`ViewStore.held`), the only ones whose readiness and restarts it passes on.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from pipeline.findings import Finding
from pipeline.views import ObjectKey, PodView
from stream.model.times import seconds

DEFAULT_RECOVERY_WINDOW = 90.0  # seconds: --recovery-window


class Hold:
    """One held Pod: which incarnation, the finding of its last crash, its restarts when last seen, and
    since when it has been Ready (None while it is not)."""

    __slots__ = ("finding", "ready_since", "restarts", "uid")

    def __init__(self, uid: str, finding: Finding, restarts: int) -> None:
        self.uid = uid
        self.finding = finding
        self.restarts = restarts
        self.ready_since: float | None = None


class Holds:
    """The held Pods (in the store's `held`, which the filter reads) and their deadlines."""

    __slots__ = ("deadlines", "held", "now", "window")

    def __init__(self, held: dict[ObjectKey, Hold], window: float = DEFAULT_RECOVERY_WINDOW) -> None:
        self.held = held
        self.window = window
        # (when the window ends, Pod, uid): entries whose hold went or changed are skipped when they fall due
        self.deadlines: list[tuple[float, ObjectKey, str]] = []
        self.now: float | None = None  # the latest time seen, seconds since the epoch

    def observe(self, key: ObjectKey, view: PodView | None, time: str | None) -> Finding | None:
        """The finding the Pod's verdict holds after this observation of it (None: not crash-looping).
        `view` None: the Pod is gone; a view without a component: it is being deleted or left its graph."""
        held = self.held
        hold = held.get(key)
        if view is None or view.component is None or view.finished:
            if hold is not None:
                del held[key]
            return None
        if view.finding is not None:  # crash-looping as the rule reads it now: the hold starts, or goes on
            if hold is None or hold.uid != view.uid:
                hold = held[key] = Hold(view.uid, view.finding, view.restarts)
            else:
                hold.finding, hold.restarts, hold.ready_since = view.finding, view.restarts, None
            return view.finding
        if hold is None:
            return None
        if hold.uid != view.uid:  # replaced under the same name
            del held[key]
            return None
        if view.restarts != hold.restarts:  # it restarted: whatever readiness came before does not count
            hold.restarts, hold.ready_since = view.restarts, None
        if not view.ready:
            hold.ready_since = None
            return hold.finding
        if self.window <= 0:  # no window: Ready is recovered, as the rule alone reads it
            del held[key]
            return None
        if hold.ready_since is None:
            when = seconds(time)
            if when is None:
                when = self.now
            if when is None:  # no time to measure the window from: held until replaced, deleted or finished
                return hold.finding
            if self.now is None or when > self.now:
                self.now = when
            hold.ready_since = when
            heapq.heappush(self.deadlines, (when + self.window, key, hold.uid))
        if self.now is not None and self.now >= hold.ready_since + self.window:
            del held[key]
            return None
        return hold.finding

    def start(self, key: ObjectKey, view: PodView, finding: Finding) -> None:
        """Hold the Pod to `finding`, found by other means than its view (pipeline.crash_causes); a hold of
        its view's own finding stays as it is."""
        hold = self.held.get(key)
        if hold is None or hold.uid != view.uid:
            self.held[key] = Hold(view.uid, finding, view.restarts)
        elif view.finding is None:
            hold.finding = finding

    def due(self, now: float) -> Iterator[tuple[float, ObjectKey]]:
        """Time passed to `now`: the Pods released by it, each with the moment its window ended, in order.
        A Pod is released as each is yielded."""
        if self.now is None or now > self.now:
            self.now = now
        deadlines, held = self.deadlines, self.held
        while deadlines and deadlines[0][0] <= now:
            deadline, key, uid = heapq.heappop(deadlines)
            hold = held.get(key)
            if (
                hold is None
                or hold.uid != uid
                or hold.ready_since is None
                or hold.ready_since + self.window != deadline
            ):
                continue  # it went, restarted or stopped being Ready since: not this deadline's to release
            del held[key]
            yield deadline, key
