"""The aggregator: per-component Pod sets behind O(1) indexes, and the coordination of the trackers that decide.

It routes each update to the trackers it concerns and decides nothing they decide: which Pods' findings are
in force (`PodFindings`), why a Pod crashed (`CrashCauses`), what a spec change replaces (`Replacements`),
what a workload adds (its backend), which status to want (`StatusPlanner`, handed the verdicts), what a
waiter sees (`ReadinessJudge`); whatever waits for time shares one protocol (pipeline.timing). What stays
here is the level-triggered verdict: a component's is recomputed from its Pods in force (else its backends'
rules) whenever one of them changes, a graph's once after all the components an update touched, and an
output is emitted only when one differs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from pipeline.backends.base import Backend, overrides
from pipeline.crash_causes import CrashCauses
from pipeline.diagnoses import Settings
from pipeline.filter import ObjectUpdate
from pipeline.findings import Finding
from pipeline.graph import Graphs, GraphVerdict
from pipeline.holds import DEFAULT_RECOVERY_WINDOW
from pipeline.index import Index
from pipeline.outputs import ComponentChange, Listed, Output, StatusWanted
from pipeline.planner import StatusPlanner, Verdicts
from pipeline.pod_findings import PodFindings
from pipeline.readiness import ReadinessJudge
from pipeline.replacements import Replacements
from pipeline.timing import Due, Timed, earliest
from pipeline.views import ComponentKey, DcdView, DgdView, GraphKey, ObjectKey, PodView, StatusView, ViewStore
from stream.model.events import CrashOutput
from stream.model.times import rfc3339, seconds

B = TypeVar("B", bound=Backend)
EPOCH = "1970-01-01T00:00:00Z"
NONE_MESSAGE = "no Pod is crash-looping"
REPLACED_MESSAGE = "its crash-looping Pods are of the spec before a change that replaces them"


class Aggregator:
    """Consumes `ObjectUpdate`s from the filter; returns the `Output`s each one causes, in order."""

    def __init__(
        self,
        store: ViewStore,
        backends: tuple[Backend, ...],
        clock: Callable[[], str] | None = None,
        synced: bool = True,
        readiness: bool = False,
        recovery_window: float = DEFAULT_RECOVERY_WINDOW,
        diagnoses: Settings | None = None,
        explains: bool = False,
    ) -> None:
        """`store`: the views of every object (the filter keeps it, this only reads it), and `backends` over
        it; the rest as pipeline.pipeline.Pipeline says."""
        self._clock = clock or (lambda: EPOCH)
        self.store, self.pods, self.dcds, self.dgds = store, store.pods, store.dcds, store.dgds
        self.synced = synced
        settings = diagnoses or Settings()
        self.backends = backends
        self._by_kind: dict[type, Backend] = {kind.view: b for b in self.backends for kind in b.kinds}
        # the backends each hook concerns (the others keep the neutral default): asked on hot paths
        self._claimers = {b.name: b for b in self.backends if overrides(b, "claim")}
        self._finders = tuple(b for b in self.backends if overrides(b, "finding"))
        self._listeners = tuple(b for b in self.backends if overrides(b, "reported"))
        self._pods_of: Index[ComponentKey, ObjectKey] = Index()  # the Pods of each component
        self._reported: dict[ComponentKey, Finding] = {}  # each failing component's verdict
        self.graphs = Graphs()
        self.findings = PodFindings(store, recovery_window, settings)
        self.causes = CrashCauses(self.pods, self.pods_of_component, settings.fail_fast, store.down_awaited, explains)
        self.replacements = replacing = Replacements(self.pods, self.pods_of_component, backends)
        verdicts = Verdicts(self._reported, self.graphs.verdict, replacing.replacing, replacing.in_graph)
        self.planner = planner = StatusPlanner(store, backends, settings.failed_state == "all", verdicts)
        self.judge = ReadinessJudge(store, planner.dcds_of_graph, planner.reporters) if readiness else None
        # what waits for time, in the order of its effects when deadlines tie
        timed = tuple(b for b in self.backends if overrides(b, "due"))
        self._timed: tuple[Timed, ...] = (self.findings, *timed, self.replacements)
        self._heaps = tuple(heap for tracker in self._timed for heap in tracker.heaps)

    # --- queries -------------------------------------------------------------------------------------

    def backend(self, kind: type[B]) -> B:
        """The registered backend of this class."""
        return next(b for b in self.backends if isinstance(b, kind))

    def pods_of_component(self, component: ComponentKey) -> set[ObjectKey]:
        return self._pods_of.get(component)

    def verdicts(self) -> dict[ComponentKey, Finding]:
        """Every component's current reported finding (failing ones only)."""
        return dict(self._reported)

    def graph_verdicts(self) -> dict[GraphKey, GraphVerdict]:
        return self.graphs.failed()

    # --- the entry points ---------------------------------------------------------------------------

    def sync(self, time: str | None = None) -> list[Output]:
        """Every object has been listed once: decide every DCD's and DGD's status now. Called again (a
        watcher gains the leader's lease), it decides them all afresh: a follower sent no write."""
        if self.synced:
            self.planner.forget()
        self.synced = True
        # a group loop reported before a restart holds until its group is Ready: decided now that its DCDs are in
        tracked = sorted({c for b in self.backends for c in b.components()})
        outputs: list[Output] = self._settle(tracked, time, plan=False)
        outputs += self._decide(sorted(self.dcds), sorted(self.dgds), time)
        if self.judge is not None:
            outputs.append(Listed(time))
        return outputs

    def apply(self, change: ObjectUpdate) -> list[Output]:
        """The one dispatch on an object's kind: its view's type (a backend's own kinds go to it)."""
        upsert = change.op == "upsert"
        previous, time = change.previous, change.time
        match change.view:
            case PodView() as pod:
                assert previous is None or type(previous) is PodView
                return self._apply_pod(change.key, previous, pod if upsert else None, time)
            case DcdView() as dcd:
                assert previous is None or type(previous) is DcdView
                graphs = self.planner.dcd_changed(change.key, previous, dcd if upsert else None)
                return self._decide([change.key] if upsert else [], graphs, time)
            case DgdView() as dgd:
                assert previous is None or type(previous) is DgdView
                return self._apply_dgd(change.key, previous, dgd if upsert else None, time)
        effects = self._by_kind[type(change.view)].apply(change.key, previous, change.view if upsert else None, time)
        outputs = self._settle(effects.components, time) if effects.components else []
        return outputs + self._decide(effects.dcds, (), time) if effects.dcds else outputs

    def pending(self) -> bool:
        """Whether something waits for time to pass (only then need events' times be read)."""
        return any(self._heaps)  # a tuple of the trackers' heaps: no generator on this path

    def advance(self, time: str | None) -> list[Output]:
        """Time passed to `time` (an event's, or a live clock's tick): every tracker's deadlines that fell
        by then each take effect at the moment it ran out, one moment at a time (a verdict at one never sees
        a later one's effect, however far a step goes: a batch's end, a tick, an event)."""
        now = seconds(time)
        if now is None:
            return []
        first = earliest(self._heaps)
        if now < first:  # the usual case: nothing due
            self.findings.saw(now)
            return []
        outputs: list[Output] = []
        while first <= now:  # each due() pops at least the heaps' first entry: this ends
            due: list[Due] = []
            for tracker in self._timed:
                due += tracker.due(first)
            for deadline, components in sorted(due, key=lambda d: d[0]):
                outputs += self._settle(components, rfc3339(deadline))
            first = earliest(self._heaps)
        self.findings.saw(now)
        return outputs

    def explain(self, output: CrashOutput) -> list[Output]:
        """A crash's output came (pipeline.crash_causes): its cause names the Pod's finding from now on,
        and, where it is certain, fails the Pod at once."""
        explained = self.causes.explained(output)
        if explained is None:
            return []
        key, finding = explained
        view = self.pods[key]
        if finding is not None:
            self.findings.hold(key, view, finding)
        return self._settle([view.component], output.time) if view.component is not None else []

    def admit(self, view: StatusView, now: str) -> tuple[bool, StatusWanted | None]:
        """Another writer's status write of a DCD or DGD, as crashwatch would have it read (None: as it
        is), and whether that is known yet: not before the first list (pipeline.planner decides)."""
        return self.planner.admit(view, now) if self.synced else (False, None)

    # --- Pods, DGDs -----------------------------------------------------------------------------------

    def _apply_pod(self, key: ObjectKey, old: PodView | None, new: PodView | None, time: str | None) -> list[Output]:
        """A Pod came (`old` None), changed, or went (`new` None): the filter never hands on neither."""
        if self.replacements.superseded:
            self.replacements.forget(key, new)
        asks: list[Output] = []  # a new crash's output, to read why, asked for once
        causes = self.causes
        if causes.asks or causes.asked:
            down, asks = causes.observe(key, old, new, time)
            if down is not None:
                self.findings.hold(key, *down)  # Ready when its certain cause came, down now
        old_component = old.component if old is not None else None
        new_component = new.component if new is not None else None
        in_force, kept = self.findings.observe(key, old_component, new, time)
        if old_component != new_component:  # most updates keep the Pod where it is: nothing to index
            if old_component is not None:
                self._pods_of.remove(old_component, key)
            if new_component is not None:
                self._pods_of.add(new_component, key)
        touched = [c for c in (old_component, new_component) if c is not None]
        if (old is not None and old.claim is not None) or (new is not None and new.claim is not None):
            touched = self._claimed(key, old, new, time, touched, kept or in_force)
        outputs = self._settle(list(dict.fromkeys(touched)), time)
        return outputs + asks if asks else outputs

    def _claimed(self, key: ObjectKey, old: PodView | None, new: PodView | None, time: str | None,
                 touched: list[ComponentKey], failing: bool) -> list[ComponentKey]:  # fmt: skip
        """The components a change of a claimed Pod touches, once the backends that claim it (before and
        after the change) have heard it. A claimed Pod's own flip (a readiness flip, a recreation's steps:
        it came, went or changed with no finding held or in force) touches what its backend says alone."""
        was = old.claim.backend if old is not None and old.claim is not None else None
        now = new.claim.backend if new is not None and new.claim is not None else None
        heard: list[ComponentKey] | None = None
        for name in (was,) if was == now else (was, now):
            backend = self._claimers.get(name) if name is not None else None
            if backend is not None:
                said = backend.observe_pod(key, old, new, time)
                heard = said if heard is None else heard + said
        if heard is None:  # no backend here claims it
            return touched
        return heard if not failing and _same_pod(old, new) else touched + heard

    def _apply_dgd(self, key: GraphKey, old: DgdView | None, new: DgdView | None, time: str | None) -> list[Output]:
        outputs: list[Output] = []
        if new is None:
            self.planner.dgd_gone(key)
        elif old is not None and old.uid == new.uid and old.templates != new.templates:  # a spec change
            now = self.findings.now(time)
            outputs = self._settle(self.replacements.changed(key, old.templates, new.templates, now), time)
        return outputs + self._decide((), [key], time)

    # --- verdicts -----------------------------------------------------------------------------------

    def _settle(self, components: list[ComponentKey], time: str | None, plan: bool = True) -> list[Output]:
        """Recompute the touched components, then their graphs once (a Pod moving between two components of
        one graph never shows the graph recovering for a moment), then the statuses they decide."""
        outputs: list[Output] = []
        changed: list[ComponentKey] = []
        graphs: list[GraphKey] = []
        for component in components:
            change = self._recompute_component(component, time)
            if change is not None:
                outputs.append(change)
                changed.append(component)
                graph = (component[0], component[1])
                if graph not in graphs:
                    graphs.append(graph)
        for graph in graphs:
            graph_change = self.graphs.recompute(graph, time)
            if graph_change is not None:
                outputs.append(graph_change)
        if not changed or not plan:
            return outputs
        dcds = [key for component in changed for key in sorted(self.planner.dcds_of_component.get(component))]
        return outputs + self._decide(dcds, graphs, time)

    def _recompute_component(self, component: ComponentKey, time: str | None) -> ComponentChange | None:
        best, replaced_only = self._finding(component)
        reported = self._reported.get(component)
        if best == reported or (best is not None and best.text and reported is not None and best.text == reported.text):
            return None  # a group loop in the same words (a held one found again) is the same verdict
        if best is None:
            del self._reported[component]
        else:
            self._reported[component] = best
        for backend in self._listeners:
            backend.reported(component, best)
        namespace, graph, name = component
        self.graphs.set(namespace, graph, name, best)
        pod = self.pods.get((namespace, best.pod)) if best is not None else None
        message = best.describe() if best is not None else REPLACED_MESSAGE if replaced_only else NONE_MESSAGE
        return ComponentChange(time, namespace, graph, name, self.planner.dcd_name(component, pod), best, message)

    def _finding(self, component: ComponentKey) -> tuple[Finding | None, bool]:
        """The component's verdict: its Pods' (not those of a spec a change replaces), else its backends'
        rules'; and whether its only failing Pods (or its backend's forgotten verdict) were of a replaced spec."""
        replacements = self.replacements
        best, replaced_only = self.findings.best(component, replacements.superseded)
        if replacements.forgot and replacements.take_forgotten(component):
            replaced_only = True
        tracked: list[Backend] | None = None
        for backend in self._finders:  # no list built unless a backend tracks the component
            if component in backend.tracked:
                tracked = [backend] if tracked is None else [*tracked, backend]
        if best is None and tracked is not None:
            dcds = self.planner.dcds_of_component.get(component)
            best = next((f for b in tracked if (f := b.finding(component, dcds)) is not None), None)
        if best is not None and self.causes.causes:
            best = self.causes.named(component[0], best)  # why it crashed, where its output said
        return best, replaced_only

    # --- what the planner and the judge are handed -----------------------------------------------------

    def _decide(self, dcds: Sequence[ObjectKey], graphs: Sequence[GraphKey], time: str | None) -> list[Output]:
        """What these DCDs' and DGDs' statuses are to be now (the planner decides, from the verdicts), and
        what a waiter sees of these graphs, where it changed; nothing before the first list ends."""
        if not self.synced:
            return []
        outputs = self.planner.plan(dcds, graphs, time or self._clock())
        return outputs + self.judge.judge(graphs, self.graphs.verdict, time) if self.judge is not None else outputs


def _same_pod(old: PodView | None, new: PodView | None) -> bool:
    """Whether an update keeps the Pod's component, uid and labels (or it came or went)."""
    return old is None or new is None or (old.component, old.uid, old.labels) == (new.component, new.uid, new.labels)
