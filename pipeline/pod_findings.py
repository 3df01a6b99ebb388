"""Which Pods' findings are in force, by component: the crash loops held between restarts and the steady
conditions whose grace has passed.

A Pod's view says what its latest observation shows (pipeline.views); what counts for its component's
verdict is decided here, by the two trackers of time: a crash loop holds while its container runs again,
until the recovery window passes (pipeline.holds), and a steady condition (an image pull, a config error, no
node) counts once its grace has passed (pipeline.graces). The Pods in force are indexed by component, so a
component's verdict reads only them; which one is reported is decided here too, in one pass (a crash loop
first, then by name). Time is handed in (an event's, or `now` when deadlines fall), never read.
"""

from __future__ import annotations

from pipeline.diagnoses import GRACED, Settings, rank
from pipeline.findings import Finding
from pipeline.graces import Graces
from pipeline.holds import Holds
from pipeline.index import Index
from pipeline.timing import Due
from pipeline.views import ComponentKey, ObjectKey, PodView, ViewStore
from stream.model.times import seconds


class PodFindings:
    """The held and graced Pods, and the Pods in force by component (`looping`)."""

    __slots__ = ("graces", "heaps", "holds", "looping", "pods")

    def __init__(self, store: ViewStore, recovery_window: float, settings: Settings) -> None:
        self.holds = Holds(store.held, recovery_window)
        self.graces = Graces(settings)
        self.pods = store.pods
        # the Pods whose finding counts for their component's verdict (a key drops when its set empties)
        self.looping: Index[ComponentKey, ObjectKey] = Index()
        self.heaps = (self.holds.deadlines, self.graces.deadlines)

    def observe(
        self, key: ObjectKey, old: ComponentKey | None, new: PodView | None, time: str | None
    ) -> tuple[bool, bool]:
        """A Pod came, changed or went (`new` None; `old`: the component it was in): whether its finding is
        in force now, and whether a hold or a grace knew it before this change."""
        held, tracked = self.holds.held, self.graces.tracked
        was_held = key in held
        was_graced = bool(tracked) and key in tracked
        seen = new.finding if new is not None and new.component is not None and not new.finished else None
        if seen is not None and seen.diagnosis in GRACED:
            if was_held:  # a steady condition now: no crash to hold on to
                del held[key]
            finding = self.graces.observe(key, new.uid, seen, self.now(time))  # type: ignore[union-attr]
        else:
            if was_graced:
                self.graces.forget(key)
            finding = self.holds.observe(key, new, time) if was_held or seen is not None else None
        component = new.component if new is not None else None
        looping = self.looping
        if old is not None and (old != component or finding is None) and old in looping.sets:
            looping.remove(old, key)
        if component is not None and finding is not None:
            looping.add(component, key)
        return finding is not None, was_held or was_graced

    def hold(self, key: ObjectKey, view: PodView, finding: Finding) -> None:
        """Hold the Pod to a finding no rule of its view reads (a crash whose cause is certain,
        pipeline.crash_causes), as a crash loop is held, until it recovers or is replaced; a crash loop
        its view shows already stays what is held."""
        if view.component is None or view.finished:
            return
        self.holds.start(key, view, finding)
        self.looping.add(view.component, key)

    def best(self, component: ComponentKey, superseded: dict[ObjectKey, str]) -> tuple[Finding | None, bool]:
        """The component's verdict from its Pods in force (a crash loop first, then by Pod name), and
        whether Pods of a spec that a change replaces (`superseded`: key to uid) were all that had one."""
        best: Finding | None = None
        held, graced = self.holds.held, self.graces.tracked
        replaced_only = False
        for key in self.looping.get(component):
            if superseded and key in superseded:
                pod = self.pods.get(key)
                if pod is not None and pod.uid == superseded[key]:
                    replaced_only = True  # of the spec before a change that replaces it
                    continue
            hold = held.get(key)
            finding = hold.finding if hold is not None else graced[key].finding
            if best is None or (finding.diagnosis == best.diagnosis and finding.pod < best.pod):
                best = finding
            elif finding.diagnosis != best.diagnosis and (rank(finding), finding.pod) < (rank(best), best.pod):
                best = finding  # a crash loop first: the upstream verdict
        return best, replaced_only

    def due(self, now: float) -> list[Due]:
        """Pods whose grace ran out start to count; Pods whose recovery window ended stop."""
        due: list[Due] = []
        for deadline, key, _ in self.graces.due(now):
            component = self._component(key)
            if component is not None:
                self.looping.add(component, key)
                due.append((deadline, [component]))
        for deadline, key in self.holds.due(now):
            component = self._component(key)
            if component is not None:
                self.looping.remove(component, key)
                due.append((deadline, [component]))
        return due

    def saw(self, now: float) -> None:
        """Time passed to `now` with nothing due: the latest time seen, for observations without one."""
        for tracker in (self.holds, self.graces):
            if tracker.now is None or now > tracker.now:
                tracker.now = now

    def now(self, time: str | None) -> float | None:
        """An event's time in seconds, else the latest time seen (None: no time yet)."""
        when = seconds(time)
        if when is not None:
            return when
        return self.holds.now if self.graces.now is None else self.graces.now

    def _component(self, key: ObjectKey) -> ComponentKey | None:
        view = self.pods.get(key)
        return view.component if view is not None else None
