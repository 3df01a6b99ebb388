"""The aggregator: per-component Pod sets behind O(1) indexes, and the verdicts drawn from them.

In the manner of client-go's indexer, every lookup a diagnosis makes goes through a named index (Pods by
component; DCDs by component and by graph; a backend's own, pipeline.backends), so its cost follows the
size of the answer, never the number of Pods held. Verdicts are level-triggered: a component's verdict is
recomputed from its current crash-looping Pods (and, when none has one, from its backends' rules) whenever
one of them changes, and a `ComponentChange` is emitted only when that verdict or its finding differs from
the last one. What a workload object adds (a Deployment's DCD, a LeaderWorkerSet's groups) is its
backend's: the aggregator calls each through `Backend` and hands it what it needs. Index keys are dropped
when their sets empty, so churn does not grow memory.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import TypeVar

import msgspec

from pipeline.backends.base import Backend, Effects
from pipeline.backends.base import Settings as BackendSettings
from pipeline.backends.deployments import Deployments
from pipeline.backends.registry import make_backends
from pipeline.diagnoses import GRACED, Graces, Settings, rank
from pipeline.filter import ObjectUpdate
from pipeline.findings import Finding
from pipeline.graph import HEALTHY, GraphVerdict, graph_verdict
from pipeline.groups import DEFAULT_WINDOW
from pipeline.holds import DEFAULT_RECOVERY_WINDOW, Holds
from pipeline.index import EMPTY as _EMPTY
from pipeline.index import Index
from pipeline.outputs import ComponentChange, GraphChange, GraphReadiness, Listed, Output, StatusWanted
from pipeline.readiness import graph_readiness
from pipeline.rollouts import REPLACEMENT_GRACE, replaced
from pipeline.status import (
    dcd_available,
    dcd_stalled,
    dgd_ready,
    dgd_stalled,
    wanted_status,
)
from pipeline.views import (
    ComponentKey,
    DcdView,
    DeploymentView,
    DgdView,
    GraphKey,
    ObjectKey,
    PodView,
    StatusView,
    ViewStore,
)
from stream.model.objects import Condition
from stream.model.times import rfc3339, seconds

B = TypeVar("B", bound=Backend)
EPOCH = "1970-01-01T00:00:00Z"
_NEVER = float("inf")
NONE_MESSAGE = "no Pod is crash-looping"
REPLACED_MESSAGE = "its crash-looping Pods are of the spec before a change that replaces them"


def _text(finding: Finding | None) -> str:
    return finding.text if finding is not None else ""


class _Component:
    __slots__ = ("looping", "pods", "reported")

    def __init__(self) -> None:
        self.pods: set[ObjectKey] = set()
        self.looping: set[ObjectKey] = set()
        self.reported: Finding | None = None

    def loop(self, key: ObjectKey) -> None:
        """The Pod has a finding: it counts for the component's verdict."""
        if self.looping is _EMPTY:
            self.looping = set()
        self.looping.add(key)


class _Graph:
    __slots__ = ("looping", "verdict")

    def __init__(self) -> None:
        self.looping: dict[str, Finding] = {}
        self.verdict: GraphVerdict = HEALTHY


class Aggregator:
    """Consumes `ObjectUpdate`s from the filter; returns the `Output`s each one causes, in order."""

    def __init__(
        self,
        store: ViewStore,
        clock: Callable[[], str] | None = None,
        synced: bool = True,
        readiness: bool = False,
        group_window: float = DEFAULT_WINDOW,
        recovery_window: float = DEFAULT_RECOVERY_WINDOW,
        diagnoses: Settings | None = None,
        backends: tuple[Backend, ...] | None = None,
    ) -> None:
        """`store` holds the current view of every object; the filter keeps it, this only reads it.
        `synced=False` holds back status decisions until `sync()`: a watcher that starts must see every
        Pod before it may conclude that a failure it reported earlier has cleared. `readiness=True` also
        emits a `GraphReadiness` whenever what a waiter sees of a graph changes (`wait` and `get`), from
        `sync()` on. `group_window` is the most seconds between two recreations of a LeaderWorkerSet group
        that still make a loop (pipeline.groups); `recovery_window` the seconds a crash-looping Pod must be
        Ready, without a restart, before its verdict clears (pipeline.holds); `diagnoses` the graces of
        the diagnoses beside the crash loop and which of them fail the DGD (pipeline.diagnoses).
        `backends`: the workload backends over this store (pipeline.backends; by default one of each)."""
        self._clock = clock or (lambda: EPOCH)
        self.holds = Holds(store.held, recovery_window)
        self.settings = diagnoses or Settings()
        self.graces = Graces(self.settings)
        self._all_failed = self.settings.failed_state == "all"
        self.backends = backends if backends is not None else make_backends(store, BackendSettings(group_window))
        self._by_kind: dict[type, Backend] = {kind: b for b in self.backends for kind in b.kinds}
        # the backends each hook concerns (the others keep the neutral default): asked on hot paths
        self._pod_readers = tuple(b for b in self.backends if b.reads_pods)
        self._timed = tuple(b for b in self.backends if type(b).due is not Backend.due)
        self._heaps = tuple(b.deadlines for b in self._timed)
        self._trackers = tuple(b for b in self.backends if b.tracks_components)
        self._listeners = tuple(b for b in self.backends if type(b).reported is not Backend.reported)
        self.store = store
        self.synced = synced
        self._readiness: dict[GraphKey, GraphReadiness] | None = {} if readiness else None
        self.pods = store.pods
        self._components: dict[ComponentKey, _Component] = {}
        self._graphs: dict[GraphKey, _Graph] = {}
        self.deployments = store.deployments
        self.dcds = store.dcds
        self._dcd_by_component: Index[ComponentKey, ObjectKey] = Index()
        self._dcd_by_graph: Index[GraphKey, ObjectKey] = Index()
        self.dgds = store.dgds
        # Pods of a component that a spec change replaced (pipeline.rollouts), by key, with their uid: their
        # crashes no longer count; and per such component, when its replacement grace ends
        self._superseded: dict[ObjectKey, str] = {}
        self._replacing: dict[ComponentKey, float] = {}
        self._replacing_deadlines: list[tuple[float, ComponentKey]] = []
        # components whose backend forgot a verdict of the old spec (a LeaderWorkerSet group loop), until
        # their verdict is next decided
        self._backend_replaced: set[ComponentKey] = set()
        # the status last decided for each DCD/DGD and the view it was decided on: a plan, not a record
        # of writes (what was written and is being written is the status patcher's alone); it lets a
        # plan read an object as it will be once that status lands, until a newer view of it comes in
        self._decided: dict[tuple[str, ObjectKey], tuple[StatusWanted, StatusView]] = {}

    # --- queries -------------------------------------------------------------------------------------

    def backend(self, kind: type[B]) -> B:
        """The registered backend of this class."""
        return next(b for b in self.backends if isinstance(b, kind))

    def pods_of_component(self, component: ComponentKey) -> set[ObjectKey]:
        state = self._components.get(component)
        return state.pods if state is not None else _EMPTY

    def deployments_selecting(self, pod: PodView) -> Iterator[DeploymentView]:
        """Deployments whose selector matches the Pod (pipeline.backends.deployments)."""
        return self.backend(Deployments).selecting(pod)

    # --- the entry points ---------------------------------------------------------------------------

    def sync(self, time: str | None = None) -> list[Output]:
        """Every object has been listed once: decide every DCD's and DGD's status now.

        Called again (a watcher that gains the leader's lease, crashwatch.leader), it decides them all
        afresh from what it observes: the writes counted as made meanwhile were not sent by a follower."""
        if self.synced:
            self._decided.clear()
        self.synced = True
        now = time or self._clock()
        # a group loop reported before a restart holds until its group is Ready: decide that now that
        # the DCDs and DGDs that report it are all in
        tracked = sorted({c for b in self.backends for c in b.components()})
        outputs: list[Output] = self._settle(tracked, time, plan=False)
        for key in sorted(self.dcds):
            outputs += self._plan_dcd(key, now)
        for key in sorted(self.dgds):
            outputs += self._plan_dgd(key, now)
        if self._readiness is not None:
            outputs += self._judge(sorted(self.dgds), time)
            outputs.append(Listed(time))
        return outputs

    def apply(self, change: ObjectUpdate) -> list[Output]:
        """The one dispatch on an object's kind: its view's type (a backend's own kinds go to it)."""
        upsert = change.op == "upsert"
        previous = change.previous
        match change.view:
            case PodView() as pod:
                assert previous is None or type(previous) is PodView
                return self._apply_pod(change.key, previous, pod if upsert else None, change.time)
            case DcdView() as dcd:
                assert previous is None or type(previous) is DcdView
                return self._apply_dcd(change.key, previous, dcd if upsert else None, change.time)
            case DgdView() as dgd:
                assert previous is None or type(previous) is DgdView
                return self._apply_dgd(change.key, previous, dgd if upsert else None, change.time)
        backend = self._by_kind[type(change.view)]
        effects = backend.apply(change.key, previous, change.view if upsert else None, change.time)
        return self._effect(effects, change.time)

    def pending(self) -> bool:
        """Whether something waits for time to pass (only then need events' times be read)."""
        if self.holds.pending() or self.graces.pending() or self._replacing_deadlines:
            return True
        return any(self._heaps)  # a tuple of the backends' heaps: no generator on this path

    def advance(self, time: str | None) -> list[Output]:
        """Time passed to `time` (an event's, or a live clock's tick): the Pods whose recovery window
        or grace ended by then, the components whose replacement grace ended and the backends' deadlines
        (LeaderWorkerSet groups without a Pod for the group window are gone) each take effect at the
        moment its time ran out, in that order."""
        now = seconds(time)
        if now is None:
            return []
        if now < self._earliest():
            if self.holds.now is None or now > self.holds.now:  # the usual case: nothing due
                self.holds.now = now
            if self.graces.now is None or now > self.graces.now:
                self.graces.now = now
            return []
        due = self._due_pods(now)
        for backend in self._timed:
            due += backend.due(now)
        due += self._due_replacements(now)
        outputs: list[Output] = []
        for deadline, components in sorted(due, key=lambda d: d[0]):
            outputs += self._settle(components, rfc3339(deadline))
        return outputs

    def _earliest(self) -> float:
        """When the next deadline of any kind falls."""
        replacing = self._replacing_deadlines
        earliest = min(self.holds.earliest(), self.graces.earliest(), replacing[0][0] if replacing else _NEVER)
        for heap in self._heaps:
            if heap:
                earliest = min(earliest, heap[0][0])
        return earliest

    def _due_pods(self, now: float) -> list[tuple[float, list[ComponentKey]]]:
        """Pods whose grace ran out start to count; Pods whose recovery window ended stop."""
        due: list[tuple[float, list[ComponentKey]]] = []
        for deadline, key, _ in self.graces.due(now):
            state, component = self._state_of_pod(key)
            if state is not None and component is not None:
                state.loop(key)
                due.append((deadline, [component]))
        for deadline, key in self.holds.due(now):
            state, component = self._state_of_pod(key)
            if state is not None and component is not None:
                state.looping.discard(key)
                due.append((deadline, [component]))
        return due

    def _due_replacements(self, now: float) -> list[tuple[float, list[ComponentKey]]]:
        """Components whose replacement grace ended with no new Pod: their Pods count again."""
        due: list[tuple[float, list[ComponentKey]]] = []
        replacing = self._replacing_deadlines
        while replacing and replacing[0][0] <= now:
            deadline, component = heapq.heappop(replacing)
            if self._replacing.get(component) == deadline:
                del self._replacing[component]
                if self._unreplaced(component):
                    due.append((deadline, [component]))
        return due

    def _state_of_pod(self, key: ObjectKey) -> tuple[_Component | None, ComponentKey | None]:
        view = self.pods.get(key)
        component = view.component if view is not None else None
        return (self._components.get(component) if component is not None else None), component

    # --- Pods ---------------------------------------------------------------------------------------

    def _apply_pod(self, key: ObjectKey, old: PodView | None, new: PodView | None, time: str | None) -> list[Output]:
        """A Pod came (`old` None), changed, or went (`new` None): the filter never hands on neither."""
        if self._superseded:
            self._unsupersede(key, new)
        finding, kept = self._pod_finding(key, new, time)
        old_component = old.component if old is not None else None
        new_component = new.component if new is not None else None
        if old_component is not None:
            state = self._components[old_component]
            if old_component != new_component:
                state.pods.discard(key)
            if state.looping and (old_component != new_component or finding is None):
                state.looping.discard(key)
        if new_component is not None:
            target = self._components.get(new_component)
            if target is None:
                target = self._components[new_component] = _Component()
            target.pods.add(key)
            if finding is not None:
                target.loop(key)
        touched = [c for c in (old_component, new_component) if c is not None]
        if (old is not None and old.group is not None) or (new is not None and new.group is not None):
            touched = self._backends_touched(key, old, new, time, touched, kept or finding is not None)
        return self._settle(list(dict.fromkeys(touched)), time)

    def _backends_touched(
        self,
        key: ObjectKey,
        old: PodView | None,
        new: PodView | None,
        time: str | None,
        touched: list[ComponentKey],
        crashing: bool,
    ) -> list[ComponentKey]:
        """The components a change of a group's Pod touches, once the backends that read such Pods have
        heard it. A backend's Pod that came, went or changed with no crash-looping Pod in it (a readiness
        flip, a recreation's steps) needs its component looked at only where the backend says so."""
        claimed: list[ComponentKey] | None = None
        for backend in self._pod_readers:
            extra = backend.observe_pod(key, old, new, time)
            if extra is not None:
                claimed = extra if claimed is None else claimed + extra
        if claimed is None:
            return touched
        if not crashing and _same_pod(old, new):
            return claimed
        return touched + claimed

    def _unsupersede(self, key: ObjectKey, new: PodView | None) -> None:
        """A Pod a spec change replaced is gone, or was replaced under its name: forget it."""
        uid = self._superseded.get(key)
        if uid is not None and (new is None or new.uid != uid):
            del self._superseded[key]

    def _pod_finding(self, key: ObjectKey, new: PodView | None, time: str | None) -> tuple[Finding | None, bool]:
        """The finding the Pod's verdict holds: the rule's, or its last crash's while it runs again; or a
        steady condition's (an image pull, a config error, no node) once its grace has passed. And whether
        a hold or a grace knew the Pod before this change."""
        held, tracked = self.holds.held, self.graces.tracked
        was_held = key in held
        was_graced = bool(tracked) and key in tracked
        seen = new.finding if new is not None and new.component is not None and not new.finished else None
        if seen is not None and seen.diagnosis in GRACED:
            if was_held:  # a steady condition now: no crash to hold on to
                del held[key]
            return self.graces.observe(key, new.uid, seen, self._seconds(time)), was_held or was_graced  # type: ignore[union-attr]
        if was_graced:
            self.graces.forget(key)
        finding = self.holds.observe(key, new, time) if was_held or seen is not None else None
        return finding, was_held or was_graced

    # --- verdicts -----------------------------------------------------------------------------------

    def _effect(self, effects: Effects, time: str | None) -> list[Output]:
        """What a backend's object change causes: its components settled, its DCDs decided again."""
        outputs = self._settle(effects.components, time) if effects.components else []
        if effects.dcds:
            now = time or self._clock()
            for dcd in effects.dcds:
                outputs += self._plan_dcd(dcd, now)
        return outputs

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
            graph_change = self._recompute_graph(graph, time)
            if graph_change is not None:
                outputs.append(graph_change)
        if not changed or not plan:
            return outputs
        now = time or self._clock()
        for component in changed:
            for dcd_key in sorted(self._dcd_by_component.get(component)):
                outputs += self._plan_dcd(dcd_key, now)
        for graph in graphs:
            outputs += self._plan_dgd(graph, now)
        if self._readiness is not None:
            outputs += self._judge(graphs, time)
        return outputs

    def _judge(self, graphs: list[GraphKey], time: str | None) -> list[Output]:
        """What a waiter sees of these graphs, where it changed (their verdicts, DGD or DCDs did)."""
        sent = self._readiness
        if sent is None or not self.synced:
            return []
        outputs: list[Output] = []
        for graph in graphs:
            state = self._graphs.get(graph)
            dcds = (self.dcds[key] for key in self._dcd_by_graph.get(graph))
            judged = graph_readiness(
                graph[0], graph[1], self.dgds.get(graph), state.verdict if state else HEALTHY, dcds, None
            )
            if sent.get(graph) == judged:
                continue
            if judged.found:
                sent[graph] = judged
            else:
                sent.pop(graph, None)
            outputs.append(msgspec.structs.replace(judged, time=time))
        return outputs

    def _recompute_component(self, component: ComponentKey, time: str | None) -> ComponentChange | None:
        state = self._components[component]
        best, replaced_only = self._best_pod_finding(state)
        if self._backend_replaced and component in self._backend_replaced:
            self._backend_replaced.discard(component)
            replaced_only = True
        tracked: list[Backend] | None = None
        for backend in self._trackers:
            if component in backend.tracked:
                tracked = [backend] if tracked is None else [*tracked, backend]
        if best is None and tracked is not None:
            best = self._backend_finding(component, tracked)
        if not state.pods and tracked is None:
            del self._components[component]
        if best == state.reported or (best is not None and best.text and best.text == _text(state.reported)):
            return None  # a group loop in the same words (a held one found again) is the same verdict
        state.reported = best
        for backend in self._listeners:
            backend.reported(component, best)
        namespace, graph, name = component
        graph_state = self._graphs.get((namespace, graph))
        if graph_state is None:
            graph_state = self._graphs[(namespace, graph)] = _Graph()
        if best is None:
            graph_state.looping.pop(name, None)
        else:
            graph_state.looping[name] = best
        return ComponentChange(
            time=time,
            namespace=namespace,
            graph=graph,
            component=name,
            dcd=self._dcd_name(component, best),
            finding=best,
            message=best.describe() if best is not None else REPLACED_MESSAGE if replaced_only else NONE_MESSAGE,
        )

    def _best_pod_finding(self, state: _Component) -> tuple[Finding | None, bool]:
        """The component's verdict from its Pods (a crash loop first, then by Pod name), and whether
        Pods a spec change replaced were all that had one."""
        best: Finding | None = None
        held, graced, superseded = self.holds.held, self.graces.tracked, self._superseded
        replaced_only = False
        for key in state.looping:
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

    def _backend_finding(self, component: ComponentKey, backends: list[Backend]) -> Finding | None:
        """The verdict of the backends that track the component, when none of its Pods has one."""
        dcds = self._dcd_by_component.get(component)
        for backend in backends:
            found = backend.finding(component, dcds)
            if found is not None:
                return found
        return None

    def _recompute_graph(self, graph_key: GraphKey, time: str | None) -> GraphChange | None:
        graph_state = self._graphs[graph_key]
        verdict = graph_verdict(graph_state.looping)
        if not graph_state.looping:
            del self._graphs[graph_key]
        if verdict == graph_state.verdict:
            return None
        graph_state.verdict = verdict
        return GraphChange(
            time=time,
            namespace=graph_key[0],
            graph=graph_key[1],
            failed=verdict.failed,
            reason=verdict.reason,
            components=verdict.components,
            message=verdict.message,
            findings=verdict.findings,
        )

    def _dcd_name(self, component: ComponentKey, finding: Finding | None) -> str | None:
        dcds = self._dcd_by_component.get(component)
        if dcds:
            return min(dcds)[1]
        pod = self.pods.get((component[0], finding.pod)) if finding is not None else None
        if pod is None:
            return None
        for backend in self.backends:
            name = backend.dcd_name(component, pod)
            if name is not None:
                return name
        return None

    # --- DCDs, DGDs -------------------------------------------------------------------------------

    @staticmethod
    def _dcd_component(dcd: StatusView) -> ComponentKey | None:
        if not dcd.graph or not dcd.component:
            return None
        return (dcd.namespace, dcd.graph, dcd.component)

    def _apply_dcd(self, key: ObjectKey, old: DcdView | None, new: DcdView | None, time: str | None) -> list[Output]:
        graphs: list[GraphKey] = []
        for view, add in ((old, False), (new, True)):
            if view is None:
                continue
            component = self._dcd_component(view)
            graph = (view.namespace, view.graph) if view.graph else None
            if component is not None:
                (self._dcd_by_component.add if add else self._dcd_by_component.remove)(component, key)
            if graph is not None:
                (self._dcd_by_graph.add if add else self._dcd_by_graph.remove)(graph, key)
                if graph not in graphs:
                    graphs.append(graph)
        if new is None:
            self._decided.pop(("dcd", key), None)
        now = time or self._clock()
        outputs: list[Output] = self._plan_dcd(key, now) if new is not None else []
        for graph in graphs:
            outputs += self._plan_dgd(graph, now)
        return outputs + self._judge(graphs, time)

    def _apply_dgd(self, key: ObjectKey, old: DgdView | None, new: DgdView | None, time: str | None) -> list[Output]:
        if new is None:
            self._decided.pop(("dgd", key), None)
            return self._judge([key], time)
        outputs: list[Output] = []
        if old is not None and old.uid == new.uid and old.templates != new.templates:
            outputs = self._settle(self._replace(key, replaced(old.templates, new.templates), time), time)
        return outputs + self._plan_dgd(key, time or self._clock()) + self._judge([key], time)

    def _replace(self, graph: GraphKey, names: list[str], time: str | None) -> list[ComponentKey]:
        """A spec change replaced these components of the graph: the Pods they have now are of the old spec
        and stop counting (pipeline.rollouts), until they are gone or the replacement grace ends without a
        new Pod. Without a time to measure that grace from, nothing is replaced: they go on counting."""
        now = self._seconds(time)
        if now is None:
            return []
        touched: list[ComponentKey] = []
        deadline = now + REPLACEMENT_GRACE
        for name in names:
            component = (graph[0], graph[1], name)
            state = self._components.get(component)
            if state is None or not state.pods:
                continue
            for pod_key in state.pods:
                self._superseded[pod_key] = self.pods[pod_key].uid
            for backend in self.backends:  # a rare path: ask them all
                if backend.replaced(component):
                    self._backend_replaced.add(component)
            self._replacing[component] = deadline
            heapq.heappush(self._replacing_deadlines, (deadline, component))
            touched.append(component)
        return touched

    def _unreplaced(self, component: ComponentKey) -> bool:
        """The replacement grace of the component ended: if no Pod of it came after the change, the change
        replaced none of its Pods after all, and they count again. Whether they did."""
        state = self._components.get(component)
        pods = state.pods if state is not None else _EMPTY
        superseded = self._superseded
        if any(superseded.get(key) != self.pods[key].uid for key in pods):
            return False  # a new Pod came: the old ones are on their way out
        for key in pods:
            superseded.pop(key, None)
        return bool(pods)

    def _plan_dcd(self, key: ObjectKey, now: str) -> list[Output]:
        dcd = self._effective(("dcd", key), self.dcds.get(key))
        if dcd is None or not self.synced:
            return []
        return self._want(("dcd", key), dcd, self._decide_dcd(key, dcd), None, now)

    def _decide_dcd(self, key: ObjectKey, dcd: StatusView) -> tuple[Condition | None, ...]:
        """The DCD's `Available` and `Stalled` as crashwatch wants them, for the object as `dcd` reads."""
        component, finding = self._dcd_finding(dcd)
        workload = None
        for backend in self.backends:
            workload = backend.workload(key, component, dcd.generation)
            if workload is not None:
                break
        replaced = finding is None and component is not None and component in self._replacing
        return dcd_available(dcd, finding, workload, self._all_failed), dcd_stalled(dcd, finding, replaced)

    def _dcd_finding(self, dcd: StatusView) -> tuple[ComponentKey | None, Finding | None]:
        """The DCD's component, and the finding reported for it (None while it does not crash-loop)."""
        component = self._dcd_component(dcd)
        state = self._components.get(component) if component is not None else None
        return component, (state.reported if state is not None else None)

    def _plan_dgd(self, graph: GraphKey, now: str) -> list[Output]:
        dgd = self._effective(("dgd", graph), self.dgds.get(graph))
        if dgd is None or not self.synced:
            return []
        decided, state = self._decide_dgd(graph, dgd)
        return self._want(("dgd", graph), dgd, decided, state, now)

    def _decide_dgd(self, graph: GraphKey, dgd: StatusView) -> tuple[tuple[Condition | None, ...], str | None]:
        """The DGD's `Ready` and `Stalled`, and its `state`, as crashwatch wants them, for the object as
        `dgd` reads."""
        graph_state = self._graphs.get(graph)
        verdict = graph_state.verdict if graph_state is not None else HEALTHY
        dcds = [self._effective(("dcd", k), self.dcds[k]) for k in self._dcd_by_graph.get(graph)]
        ready = dgd_ready(dgd, verdict, [d for d in dcds if d is not None], self._all_failed)
        state, condition = ready if ready is not None else (None, None)
        replaced = bool(self._replacing) and not verdict.failed and self._replacing_in(graph)
        return (condition, dgd_stalled(dgd, verdict, replaced)), state

    def admit(self, view: StatusView, now: str) -> tuple[bool, StatusWanted | None]:
        """Another writer's status write of a DCD or DGD, as crashwatch would have it read: the write with
        what crashwatch decides of it merged in (`Stalled`; `Available` on a DCD, `Ready` and `state` on a
        DGD, while it reports a failure there), or None to let it through as it is (sinks.admission asks,
        before the write lands): the same decision as its own next write would make, made on the object as
        the write would leave it, so that write is not needed. First, whether that is known: not while
        the pipeline has not seen the object at the generation the write is made on, since the spec change
        that may withdraw the failure has yet to come in. An object the pipeline does not hold (another
        shard's, one recreated under its name) is not crashwatch's to say anything of."""
        if not self.synced:
            return False, None
        dgd = isinstance(view, DgdView)
        key = (view.namespace, view.name)
        held = self.dgds.get(key) if dgd else self.dcds.get(key)
        if held is None or held.uid != view.uid:
            return True, None
        if held.generation < view.generation:
            return False, None
        decided, state = self._decide_dgd(key, view) if dgd else (self._decide_dcd(key, view), None)
        return True, wanted_status(view, tuple(c for c in decided if c is not None), state, now)

    def _replacing_in(self, graph: GraphKey) -> bool:
        """Whether a spec change is replacing one of the graph's components: a failure that clears now
        was withdrawn with the old spec's Pods, not recovered. (Few entries, and only during rollouts.)"""
        return any(key[0] == graph[0] and key[1] == graph[1] for key in self._replacing)

    def _effective(self, decided_key: tuple[str, ObjectKey], view: StatusView | None) -> StatusView | None:
        """The object as it will read once the status last decided for it lands, while no newer view came in.

        A newer observation replaces it: if another writer overwrote our failure, the plan sees that and
        asserts it again (the patcher sink spaces such retries with backoff).
        """
        decided = self._decided.get(decided_key)
        if view is None or decided is None:
            return view
        if decided[1] is not view:
            del self._decided[decided_key]
            return view
        wanted = decided[0]
        return msgspec.structs.replace(
            view, conditions=wanted.conditions, state=wanted.state if wanted.state is not None else view.state
        )

    def _want(
        self,
        decided_key: tuple[str, ObjectKey],
        view: StatusView,
        decided: tuple[Condition | None, ...],
        state: str | None,
        now: str,
    ) -> list[Output]:
        wanted = wanted_status(view, tuple(c for c in decided if c is not None), state, now)
        if wanted is None:
            return []
        observed = self.dcds.get(decided_key[1]) if decided_key[0] == "dcd" else self.dgds.get(decided_key[1])
        if observed is None:
            return []
        self._decided[decided_key] = (wanted, observed)
        return [wanted]

    def _seconds(self, time: str | None) -> float | None:
        """An event's time in seconds, else the latest time seen (None: no time yet)."""
        when = seconds(time)
        if when is not None:
            return when
        return self.holds.now if self.graces.now is None else self.graces.now

    # --- introspection for tests and benchmarks ----------------------------------------------------

    def verdicts(self) -> dict[ComponentKey, Finding]:
        """Every component's current reported finding (crash-looping ones only)."""
        return {key: state.reported for key, state in self._components.items() if state.reported is not None}

    def graph_verdicts(self) -> dict[GraphKey, GraphVerdict]:
        return {key: state.verdict for key, state in self._graphs.items() if state.verdict.failed}


def _same_pod(old: PodView | None, new: PodView | None) -> bool:
    """Whether an update keeps the Pod's component, uid and labels (or it came or went)."""
    return old is None or new is None or (old.component, old.uid, old.labels) == (new.component, new.uid, new.labels)
