"""Status planning: which status crashwatch wants on each DCD and DGD, from the verdicts it is handed.

The conditions themselves are pipeline.status's pure decisions; this module keeps what they need beside the
verdicts (which DCDs serve a component, and a graph), and what it last decided for each object. That is a
plan, not a record of writes (what was written and is being written is the status patcher's alone): it lets
a plan read an object as it will be once that status lands, until a newer view of it comes in, so one
decision is never sent twice. The same decision answers another writer's status write (`admit`), made on
the object as that write would leave it. Decisions are keyed by the view's type, never by a name.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from typing import NamedTuple

import msgspec

from pipeline.backends.base import Backend, overrides
from pipeline.findings import Finding
from pipeline.graph import GraphVerdict
from pipeline.index import Index
from pipeline.outputs import Output, StatusWanted
from pipeline.status import dcd_available, dcd_stalled, dgd_ready, dgd_stalled, wanted_status
from pipeline.views import ComponentKey, DcdView, DgdView, GraphKey, ObjectKey, PodView, StatusView, ViewStore
from stream.model.objects import Condition

Decided = tuple[tuple[Condition | None, ...], str | None]  # the conditions wanted, and a DGD's state


class Verdicts(NamedTuple):
    """What the planner is handed: the verdicts as they stand, read where they are kept."""

    component: Mapping[ComponentKey, Finding]  # the failing components' verdicts
    graph: Callable[[GraphKey], GraphVerdict]
    replacing: Container[ComponentKey]  # the components a spec change is replacing
    replacing_in: Callable[[GraphKey], bool]  # whether one of the graph's is


class StatusPlanner:
    def __init__(self, store: ViewStore, backends: Sequence[Backend], all_failed: bool, verdicts: Verdicts) -> None:
        """`all_failed`: a DGD's `failed` state for every diagnosis, not crash loops alone (--failed-state)."""
        self.verdicts = verdicts
        self.dcds, self.dgds = store.dcds, store.dgds
        self.dcds_of_component: Index[ComponentKey, ObjectKey] = Index()
        self.dcds_of_graph: Index[GraphKey, ObjectKey] = Index()
        self._backends = backends
        self._workloads = tuple(b for b in backends if overrides(b, "workload"))
        self.reporters = tuple(b for b in backends if overrides(b, "not_ready"))
        self._all_failed = all_failed
        # per view type, the status last decided for each object and the view it was decided on
        self._decided: dict[type, dict[ObjectKey, tuple[StatusWanted, StatusView]]] = {DcdView: {}, DgdView: {}}

    def dcd_changed(self, key: ObjectKey, old: DcdView | None, new: DcdView | None) -> list[GraphKey]:
        """A DCD came, changed or went: the indexes follow it; the graphs it was or is in."""
        graphs: list[GraphKey] = []
        for view, add in ((old, False), (new, True)):
            if view is None:
                continue
            component = dcd_component(view)
            if component is not None:
                (self.dcds_of_component.add if add else self.dcds_of_component.remove)(component, key)
            if view.graph:
                graph = (view.namespace, view.graph)
                (self.dcds_of_graph.add if add else self.dcds_of_graph.remove)(graph, key)
                if graph not in graphs:
                    graphs.append(graph)
        if new is None:
            self._decided[DcdView].pop(key, None)
        return graphs

    def dcd_name(self, component: ComponentKey, pod: PodView | None) -> str | None:
        """The DCD a component's change names: its own (the first by name), else the one a backend says
        runs the Pod of its finding."""
        dcds = self.dcds_of_component.get(component)
        if dcds:
            return min(dcds)[1]
        if pod is None:
            return None
        return next((n for b in self._backends if (n := b.dcd_name(component, pod)) is not None), None)

    def dgd_gone(self, key: GraphKey) -> None:
        self._decided[DgdView].pop(key, None)

    def forget(self) -> None:
        """Decide every object afresh (a watcher that gains the lease: what a follower decided was not sent)."""
        for decided in self._decided.values():
            decided.clear()

    def plan(self, dcds: Iterable[ObjectKey], graphs: Iterable[GraphKey], now: str) -> list[Output]:
        """The statuses these DCDs, then these DGDs, are to have now (the writes that make them say it)."""
        outputs: list[Output] = []
        for key in dcds:
            dcd = self._effective(DcdView, key, self.dcds.get(key))
            if dcd is not None:
                outputs += self._want(DcdView, key, dcd, self.decide_dcd(key, dcd), now)
        for graph in graphs:
            dgd = self._effective(DgdView, graph, self.dgds.get(graph))
            if dgd is not None:
                outputs += self._want(DgdView, graph, dgd, self.decide_dgd(graph, dgd), now)
        return outputs

    def decide_dcd(self, key: ObjectKey, dcd: StatusView) -> Decided:
        """The DCD's `Available` and `Stalled` as crashwatch wants them, for the object as `dcd` reads. A
        failure withdrawn by a spec change that replaces the component's Pods is not cured, and says so."""
        component = dcd_component(dcd)
        finding = self.verdicts.component.get(component) if component is not None else None
        replacing = component is not None and component in self.verdicts.replacing
        workload = None
        for backend in self._workloads:
            workload = backend.workload(key, component, dcd.generation)
            if workload is not None:
                break
        withdrawn = finding is None and replacing
        return (dcd_available(dcd, finding, workload, self._all_failed), dcd_stalled(dcd, finding, withdrawn)), None

    def decide_dgd(self, key: GraphKey, dgd: StatusView) -> Decided:
        """The DGD's `Ready` and `Stalled`, and its `state`, as crashwatch wants them, for the object as
        `dgd` reads."""
        verdict, replacing = self.verdicts.graph(key), self.verdicts.replacing_in(key)
        dcds = [self._effective(DcdView, k, self.dcds[k]) for k in self.dcds_of_graph.get(key)]
        ready = dgd_ready(dgd, verdict, [d for d in dcds if d is not None], self._all_failed, self.reporters)
        state, condition = ready if ready is not None else (None, None)
        return (condition, dgd_stalled(dgd, verdict, replacing and not verdict.failed)), state

    def admit(self, view: StatusView, now: str) -> tuple[bool, StatusWanted | None]:
        """Another writer's status write of a DCD or DGD, as crashwatch would have it read: the write with
        what crashwatch decides of it merged in (`Stalled`; `Available` on a DCD, `Ready` and `state` on a
        DGD, while it reports a failure there), or None to let it through as it is: the same decision as
        its own next write would make, made on the object as the write would leave it, so that write is
        not needed. First, whether that is known: not while the pipeline has not seen the object at the
        generation the write is made on, since the spec change that may withdraw the failure has yet to
        come in. An object the pipeline does not hold (another shard's, one recreated under its name) is
        not crashwatch's to say anything of."""
        key = (view.namespace, view.name)
        dgd = isinstance(view, DgdView)
        held = (self.dgds if dgd else self.dcds).get(key)
        if held is None or held.uid != view.uid:
            return True, None
        if held.generation < view.generation:
            return False, None
        decided, state = self.decide_dgd(key, view) if dgd else self.decide_dcd(key, view)
        return True, wanted_status(view, tuple(c for c in decided if c is not None), state, now)

    def _effective(self, kind: type, key: ObjectKey, view: StatusView | None) -> StatusView | None:
        """The object as it will read once the status last decided for it lands, while no newer view came in.

        A newer observation replaces it: if another writer overwrote our failure, the plan sees that and
        asserts it again (the patcher sink spaces such retries with backoff).
        """
        decisions = self._decided[kind]
        decided = decisions.get(key)
        if view is None or decided is None:
            return view
        if decided[1] is not view:
            del decisions[key]
            return view
        wanted = decided[0]
        return msgspec.structs.replace(
            view, conditions=wanted.conditions, state=wanted.state if wanted.state is not None else view.state
        )

    def _want(self, kind: type, key: ObjectKey, view: StatusView, decided: Decided, now: str) -> list[Output]:
        conditions, state = decided
        wanted = wanted_status(view, tuple(c for c in conditions if c is not None), state, now)
        if wanted is None:
            return []
        observed = (self.dcds if kind is DcdView else self.dgds).get(key)
        if observed is None:
            return []
        self._decided[kind][key] = (wanted, observed)
        return [wanted]


def dcd_component(dcd: StatusView) -> ComponentKey | None:
    """The component a DCD serves, by its labels."""
    if not dcd.graph or not dcd.component:
        return None
    return (dcd.namespace, dcd.graph, dcd.component)
