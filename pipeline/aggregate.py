"""The aggregator: per-component Pod sets behind O(1) indexes, and the coordination of the trackers that decide.

It routes each update to the trackers it concerns and collects their verdicts; it decides nothing they
decide. Which Pods' findings are in force is `PodFindings`' (the holds between restarts and the graces,
pipeline.pod_findings); which components a spec change is replacing is `Replacements`' (pipeline.replacements);
what a workload object adds is its backend's (pipeline.backends: the Pods it claims, its own rule and
deadlines); which status to want is the `StatusPlanner`'s (pipeline.planner), handed the verdicts; what a
waiter sees is the `ReadinessJudge`'s (pipeline.readiness). Every tracker with deadlines shares one protocol
(pipeline.timing) and is handed `now`. What stays here is the level-triggered verdict: a component's is
recomputed from its Pods in force (and, when none has one, its backends' rules) whenever one of them changes,
a graph's after all the components an update touched, and an output is emitted only when one differs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from pipeline.backends.base import Backend, overrides
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
    ) -> None:
        """`store`: the current view of every object (the filter keeps it, this only reads it); `backends`
        over it (pipeline.backends.registry). `synced=False` holds back status decisions until `sync()`:
        a watcher that starts must see every Pod before it may say a failure it reported has cleared.
        `readiness=True` also says, from `sync()` on, what a waiter sees of a graph whenever that changes;
        for the rest see pipeline.pipeline.Pipeline."""
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
        """Every object has been listed once: decide every DCD's and DGD's status now.

        Called again (a watcher that gains the leader's lease, crashwatch.leader), it decides them all
        afresh from what it observes: the writes counted as made meanwhile were not sent by a follower."""
        if self.synced:
            self.planner.forget()
        self.synced = True
        # a group loop reported before a restart holds until its group is Ready: decide that now that
        # the DCDs and DGDs that report it are all in
        tracked = sorted({c for b in self.backends for c in b.components()})
        outputs: list[Output] = self._settle(tracked, time, plan=False)
        outputs += self._plan(sorted(self.dcds), sorted(self.dgds), time)
        if self.judge is not None:
            outputs += self._judged(sorted(self.dgds), time)
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
                return self._plan([change.key] if upsert else [], graphs, time) + self._judged(graphs, time)
            case DgdView() as dgd:
                assert previous is None or type(previous) is DgdView
                return self._apply_dgd(change.key, previous, dgd if upsert else None, time)
        effects = self._by_kind[type(change.view)].apply(change.key, previous, change.view if upsert else None, time)
        outputs = self._settle(effects.components, time) if effects.components else []
        return outputs + self._plan(effects.dcds, (), time) if effects.dcds else outputs

    def pending(self) -> bool:
        """Whether something waits for time to pass (only then need events' times be read)."""
        return any(self._heaps)  # a tuple of the trackers' heaps: no generator on this path

    def advance(self, time: str | None) -> list[Output]:
        """Time passed to `time` (an event's, or a live clock's tick): the deadlines of every tracker that
        fell by then (recovery windows and graces, the backends' own, replacement graces) each take
        effect at the moment its time ran out, in that order."""
        now = seconds(time)
        if now is None:
            return []
        if now < earliest(self._heaps):  # the usual case: nothing due
            self.findings.saw(now)
            return []
        due: list[Due] = []
        for tracker in self._timed:
            due += tracker.due(now)
        outputs: list[Output] = []
        for deadline, components in sorted(due, key=lambda d: d[0]):
            outputs += self._settle(components, rfc3339(deadline))
        return outputs

    def admit(self, view: StatusView, now: str) -> tuple[bool, StatusWanted | None]:
        """Another writer's status write of a DCD or DGD, as crashwatch would have it read (None: as it
        is), and whether that is known yet: not before the first list (pipeline.planner decides)."""
        return self.planner.admit(view, now) if self.synced else (False, None)

    # --- Pods, DGDs -----------------------------------------------------------------------------------

    def _apply_pod(self, key: ObjectKey, old: PodView | None, new: PodView | None, time: str | None) -> list[Output]:
        """A Pod came (`old` None), changed, or went (`new` None): the filter never hands on neither."""
        if self.replacements.superseded:
            self.replacements.forget(key, new)
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
            claimed = self._claimed(key, old, new, time)
            if claimed is not None and not kept and not in_force and _same_pod(old, new):
                touched = claimed  # a claimed Pod's own flip (a readiness flip, a recreation's steps)
            elif claimed is not None:
                touched += claimed
        return self._settle(list(dict.fromkeys(touched)), time)

    def _claimed(
        self, key: ObjectKey, old: PodView | None, new: PodView | None, time: str | None
    ) -> list[ComponentKey] | None:
        """The components the backends that claim the Pod (before and after the change) say it touches;
        None when no backend here claims it."""
        was = old.claim.backend if old is not None and old.claim is not None else None
        now = new.claim.backend if new is not None and new.claim is not None else None
        touched: list[ComponentKey] | None = None
        for name in (was,) if was == now else (was, now):
            backend = self._claimers.get(name) if name is not None else None
            if backend is not None:
                heard = backend.observe_pod(key, old, new, time)
                touched = heard if touched is None else touched + heard
        return touched

    def _apply_dgd(self, key: GraphKey, old: DgdView | None, new: DgdView | None, time: str | None) -> list[Output]:
        if new is None:
            self.planner.dgd_gone(key)
            return self._judged([key], time)
        outputs: list[Output] = []
        if old is not None and old.uid == new.uid and old.templates != new.templates:  # a spec change
            now = self.findings.now(time)
            outputs = self._settle(self.replacements.changed(key, old.templates, new.templates, now), time)
        return outputs + self._plan((), [key], time) + self._judged([key], time)

    # --- verdicts -----------------------------------------------------------------------------------

    def _settle(self, components: list[ComponentKey], time: str | None, plan: bool = True) -> list[Output]:
        """Recompute the touched components, then their graphs once, then the statuses they decide.

        Graphs come after all components, so a Pod moving between two components of one graph never
        shows the graph recovering for a moment.
        """
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
        return outputs + self._plan(dcds, graphs, time) + self._judged(graphs, time)

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
        return ComponentChange(
            time=time,
            namespace=namespace,
            graph=graph,
            component=name,
            dcd=self.planner.dcd_name(component, pod),
            finding=best,
            message=best.describe() if best is not None else REPLACED_MESSAGE if replaced_only else NONE_MESSAGE,
        )

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
        return best, replaced_only

    # --- what the planner and the judge are handed -----------------------------------------------------

    def _plan(self, dcds: Sequence[ObjectKey], graphs: Sequence[GraphKey], time: str | None) -> list[Output]:
        """The statuses these DCDs and DGDs are to have now, decided from the verdicts (none before the sync)."""
        return self.planner.plan(dcds, graphs, time or self._clock()) if self.synced else []

    def _judged(self, graphs: list[GraphKey], time: str | None) -> list[Output]:
        """What a waiter sees of these graphs, where it changed (their verdicts, DGD or DCDs did)."""
        if self.judge is None or not self.synced:
            return []
        return self.judge.judge(graphs, self.graphs.verdict, time)


def _same_pod(old: PodView | None, new: PodView | None) -> bool:
    """Whether an update keeps the Pod's component, uid and labels (or it came or went)."""
    return old is None or new is None or (old.component, old.uid, old.labels) == (new.component, new.uid, new.labels)
