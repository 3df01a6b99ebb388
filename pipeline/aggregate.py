"""The aggregator: per-component Pod sets behind O(1) indexes, and the verdicts drawn from them.

In the manner of client-go's indexer, every lookup a diagnosis makes goes through a named index (Pods by
component; Deployments by selector anchor and by owning DCD; DCDs by component and by graph), so its cost
follows the size of the answer, never the number of Pods held. An index is kept only where a decision
reads it: a selector lookup of Pods would come back as a named index the day a path needs one. Verdicts are
level-triggered: a component's verdict is recomputed from its current crash-looping Pods whenever one of
them changes, and a `ComponentChange` is emitted only when that verdict or its finding differs from the last one.
Index keys are dropped when their sets empty, so churn does not grow memory.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

import msgspec

from pipeline.crashloop import Finding
from pipeline.diagnoses import GRACED, Graces, Settings, rank
from pipeline.filter import ObjectUpdate
from pipeline.graph import GRAPH_MESSAGE_PREFIX, HEALTHY, REASON_CRASH_LOOPING, GraphVerdict, graph_verdict
from pipeline.groups import (
    DEFAULT_WINDOW,
    MIN_RECREATIONS,
    GroupHistory,
    GroupKey,
    budget_finding,
    group_finding,
    held_finding,
    is_group_text,
    seconds,
)
from pipeline.holds import DEFAULT_RECOVERY_WINDOW, Holds, rfc3339
from pipeline.outputs import ComponentChange, GraphChange, GraphReadiness, Listed, Output, StatusWanted
from pipeline.readiness import graph_readiness
from pipeline.rollouts import REPLACEMENT_GRACE, replaced
from pipeline.status import (
    DCD_CONDITION,
    DCD_REASON_CRASH_LOOPING,
    DGD_CONDITION,
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
    LwsView,
    ObjectKey,
    PodView,
    StatusView,
    ViewStore,
    selector_matches,
)
from stream.model.objects import Condition, read_labels

K = TypeVar("K", bound=Hashable)
M = TypeVar("M", bound=Hashable)
EPOCH = "1970-01-01T00:00:00Z"
NONE_MESSAGE = "no Pod is crash-looping"
REPLACED_MESSAGE = "its crash-looping Pods are of the spec before a change that replaces them"


def _on_streak(history: GroupHistory) -> bool:
    return history.streak >= MIN_RECREATIONS and history.last_failure is not None


class Index(Generic[K, M]):
    """A named index: index key -> set of members; a key whose set empties is dropped."""

    __slots__ = ("_sets",)

    def __init__(self) -> None:
        self._sets: dict[K, set[M]] = {}

    def add(self, key: K, obj: M) -> None:
        members = self._sets.get(key)
        if members is None:
            self._sets[key] = {obj}
        else:
            members.add(obj)

    def remove(self, key: K, obj: M) -> bool:
        """Remove a member; True when that emptied (and dropped) the key."""
        members = self._sets.get(key)
        if members is None:
            return False
        members.discard(obj)
        if not members:
            del self._sets[key]
            return True
        return False

    def get(self, key: K) -> set[M]:
        return self._sets.get(key) or _EMPTY

    def keys(self) -> list[K]:
        return list(self._sets)

    def __len__(self) -> int:
        return len(self._sets)


_EMPTY: set[Any] = set()


def _text(finding: Finding | None) -> str:
    return finding.text if finding is not None else ""


class _Component:
    __slots__ = ("looping", "pods", "reported")

    def __init__(self) -> None:
        self.pods: set[ObjectKey] = set()
        self.looping: set[ObjectKey] = set()
        self.reported: Finding | None = None


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
    ) -> None:
        """`store` holds the current view of every object; the filter keeps it, this only reads it.
        `synced=False` holds back status decisions until `sync()`: a watcher that starts must see every
        Pod before it may conclude that a failure it reported earlier has cleared. `readiness=True` also
        emits a `GraphReadiness` whenever what a waiter sees of a graph changes (`wait` and `get`), from
        `sync()` on. `group_window` is the most seconds between two recreations of a LeaderWorkerSet group
        that still make a loop (pipeline.groups); `recovery_window` the seconds a crash-looping Pod must be
        Ready, without a restart, before its verdict clears (pipeline.holds); `diagnoses` the graces of
        the diagnoses beside the crash loop and which of them fail the DGD (pipeline.diagnoses)."""
        self._clock = clock or (lambda: EPOCH)
        self.holds = Holds(store.held, recovery_window)
        self.settings = diagnoses or Settings()
        self.graces = Graces(self.settings)
        self._all_failed = self.settings.failed_state == "all"
        self.group_window = group_window
        self._groups: dict[GroupKey, GroupHistory] = {}
        # (when its grace ends, group) for groups left without a Pod: stale entries are skipped when due
        self._gone_deadlines: list[tuple[float, GroupKey]] = []
        self._groups_of: Index[ComponentKey, GroupKey] = Index()
        # the groups on a loop's streak (recreated often enough, each after a failure), by component: the
        # only ones that can be found looping, unless their LeaderWorkerSet failed
        self._streaking: Index[ComponentKey, GroupKey] = Index()
        self._groups_of_lws: Index[ObjectKey, GroupKey] = Index()
        # the LeaderWorkerSets that say their restart budget ran out: most clusters have none, and a
        # group's rules ask for its LWS on every look at it
        self._failed_lws: set[ObjectKey] = set()
        self.store = store
        self.lws = store.lws
        self.synced = synced
        self._readiness: dict[GraphKey, GraphReadiness] | None = {} if readiness else None
        self.pods = store.pods
        self._components: dict[ComponentKey, _Component] = {}
        self._graphs: dict[GraphKey, _Graph] = {}
        self.deployments = store.deployments
        self._deployment_anchor: Index[tuple[str, str, str], ObjectKey] = Index()
        self._deployment_unanchored: Index[str, ObjectKey] = Index()
        self._deployment_by_dcd: Index[ObjectKey, ObjectKey] = Index()
        self.dcds = store.dcds
        self._dcd_by_component: Index[ComponentKey, ObjectKey] = Index()
        self._dcd_by_graph: Index[GraphKey, ObjectKey] = Index()
        self.dgds = store.dgds
        # Pods of a component that a spec change replaced (pipeline.rollouts), by key, with their uid: their
        # crashes no longer count; and per such component, when its replacement grace ends
        self._superseded: dict[ObjectKey, str] = {}
        self._replacing: dict[ComponentKey, float] = {}
        self._replacing_deadlines: list[tuple[float, ComponentKey]] = []
        # the status last decided for each DCD/DGD and the view it was decided on: a plan, not a record
        # of writes (what was written and is being written is the status patcher's alone); it lets a
        # plan read an object as it will be once that status lands, until a newer view of it comes in
        self._decided: dict[tuple[str, ObjectKey], tuple[StatusWanted, StatusView]] = {}

    # --- queries -------------------------------------------------------------------------------------

    def pods_of_component(self, component: ComponentKey) -> set[ObjectKey]:
        state = self._components.get(component)
        return state.pods if state is not None else _EMPTY

    def deployments_selecting(self, pod: PodView) -> Iterator[DeploymentView]:
        """Deployments whose selector matches the Pod, through the anchor index: no scan of Deployments."""
        candidates = set(self._deployment_unanchored.get(pod.namespace))
        labels = read_labels(pod.labels)  # read when asked: a held Pod's labels were read once already
        for key, value in labels.items():
            candidates |= self._deployment_anchor.get((pod.namespace, key, value))
        for dkey in sorted(candidates):
            deployment = self.deployments[dkey]
            if deployment.selector is not None and selector_matches(deployment.selector, labels):
                yield deployment

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
        outputs: list[Output] = self._settle(sorted(self._groups_of.keys()), time, plan=False)
        for key in sorted(self.dcds):
            outputs += self._plan_dcd(key, now)
        for key in sorted(self.dgds):
            outputs += self._plan_dgd(key, now)
        if self._readiness is not None:
            outputs += self._judge(sorted(self.dgds), time)
            outputs.append(Listed(time))
        return outputs

    def apply(self, change: ObjectUpdate) -> list[Output]:
        """The one dispatch on an object's kind: its view's type."""
        upsert = change.op == "upsert"
        previous = change.previous
        match change.view:
            case PodView() as pod:
                assert previous is None or type(previous) is PodView
                return self._apply_pod(change.key, previous, pod if upsert else None, change.time)
            case DeploymentView() as deployment:
                assert previous is None or type(previous) is DeploymentView
                return self._apply_deployment(change.key, previous, deployment if upsert else None, change.time)
            case DcdView() as dcd:
                assert previous is None or type(previous) is DcdView
                return self._apply_dcd(change.key, previous, dcd if upsert else None, change.time)
            case DgdView() as dgd:
                assert previous is None or type(previous) is DgdView
                return self._apply_dgd(change.key, previous, dgd if upsert else None, change.time)
            case LwsView() as lws:
                return self._apply_lws(change.key, lws if upsert else None, change.time)

    def pending(self) -> bool:
        """Whether something waits for time to pass (only then need events' times be read)."""
        return (
            self.holds.pending()
            or self.graces.pending()
            or bool(self._gone_deadlines)
            or bool(self._replacing_deadlines)
        )

    def advance(self, time: str | None) -> list[Output]:
        """Time passed to `time` (an event's, or a live clock's tick): the Pods whose recovery window
        ended by then are crash-looping no more, and the LeaderWorkerSet groups without a Pod for the
        group window are gone, each at the moment its time ran out, in that order."""
        now = seconds(time)
        if now is None:
            return []
        gone, window, graces = self._gone_deadlines, self.group_window, self.graces
        replacing = self._replacing_deadlines
        if (
            now < self.holds.earliest()
            and now < graces.earliest()
            and (not gone or now < gone[0][0])
            and (not replacing or now < replacing[0][0])
        ):
            if self.holds.now is None or now > self.holds.now:  # the usual case: nothing due
                self.holds.now = now
            if graces.now is None or now > graces.now:
                graces.now = now
            return []
        due: list[tuple[float, list[ComponentKey]]] = []
        for deadline, key, _ in graces.due(now):
            view = self.pods.get(key)
            component = view.component if view is not None else None
            state = self._components.get(component) if component is not None else None
            if state is not None and component is not None:
                if state.looping is _EMPTY:
                    state.looping = set()
                state.looping.add(key)
                due.append((deadline, [component]))
        for deadline, key in self.holds.due(now):
            view = self.pods.get(key)
            component = view.component if view is not None else None
            state = self._components.get(component) if component is not None else None
            if state is not None and component is not None:
                state.looping.discard(key)
                due.append((deadline, [component]))
        while gone and gone[0][0] <= now:
            deadline, group_key = heapq.heappop(gone)
            history = self._groups.get(group_key)
            emptied = history.emptied if history is not None else None
            if history is not None and not history.pods and emptied is not None and emptied + window == deadline:
                due.append((deadline, self._drop_group(group_key, history)))
        while replacing and replacing[0][0] <= now:
            deadline, component = heapq.heappop(replacing)
            if self._replacing.get(component) == deadline:
                del self._replacing[component]
                if self._unreplaced(component):
                    due.append((deadline, [component]))
        outputs: list[Output] = []
        for deadline, components in sorted(due, key=lambda d: d[0]):
            outputs += self._settle(components, rfc3339(deadline))
        return outputs

    # --- Pods ---------------------------------------------------------------------------------------

    def _apply_pod(self, key: ObjectKey, old: PodView | None, new: PodView | None, time: str | None) -> list[Output]:
        if old is None and new is None:
            return []
        if self._superseded:
            uid = self._superseded.get(key)
            if uid is not None and (new is None or new.uid != uid):  # gone, or replaced under its name
                del self._superseded[key]
        old_component = old.component if old is not None else None
        new_component = new.component if new is not None else None
        held = self.holds.held
        was_held = key in held
        tracked = self.graces.tracked
        was_graced = bool(tracked) and key in tracked
        # the finding the Pod's verdict holds: the rule's, or its last crash's while it runs again; or a
        # steady condition's (an image pull, a config error, no node) once its grace has passed
        seen = new.finding if new is not None and new.component is not None and not new.finished else None
        if seen is not None and seen.diagnosis in GRACED:
            if was_held:  # a steady condition now: no crash to hold on to
                del held[key]
            finding = self.graces.observe(key, new.uid, seen, self._seconds(time))  # type: ignore[union-attr]
        else:
            if was_graced:
                self.graces.forget(key)
            finding = self.holds.observe(key, new, time) if was_held or seen is not None else None
        if old_component is not None:
            state = self._components[old_component]
            if old_component != new_component:
                state.pods.discard(key)
            if state.looping and (old_component != new_component or finding is None):
                state.looping.discard(key)
        if new is not None and new_component is not None:
            target = self._components.get(new_component)
            if target is None:
                target = self._components[new_component] = _Component()
            target.pods.add(key)
            if finding is not None:
                if target.looping is _EMPTY:
                    target.looping = set()
                target.looping.add(key)
        grouped = (old is not None and old.group is not None) or (new is not None and new.group is not None)
        same = (
            old is None or new is None or (old.component, old.uid, old.labels) == (new.component, new.uid, new.labels)
        )
        if grouped and same and not was_held and not was_graced and finding is None:
            # a group's Pod came, went or changed, and no crash-looping Pod with it (a readiness flip, a
            # recreation's steps): its component needs a second look only if the group's verdict can have
            # changed, which the group's history says
            touched = []
        else:
            touched = [c for c in (old_component, new_component) if c is not None]
        if grouped:
            touched += self._observe_group(key, old, new, time)
        touched = list(dict.fromkeys(touched))
        return self._settle(touched, time)

    def _observe_group(
        self, key: ObjectKey, old: PodView | None, new: PodView | None, time: str | None
    ) -> list[ComponentKey]:
        """Hand a LeaderWorkerSet Pod's change to its group's history; the components whose group
        verdict may have changed."""
        touched: list[ComponentKey] = []
        namespace, name = key
        new_group = new.group if new is not None and new.component is not None else None
        if old is not None and old.group is not None:
            old_key = (namespace, old.group.lws, old.group.group)
            if new_group is None or old_key != (namespace, new_group.lws, new_group.group):
                history = self._groups.get(old_key)
                if history is not None:
                    history.observe(name, old.uid, None, None, self.group_window)
                    touched += self._left_group(old_key, history, time if new is None else None)
        if new is not None and new_group is not None and new.component is not None:
            group_key = (namespace, new_group.lws, new_group.group)
            history = self._groups.get(group_key)
            if history is None:
                history = self._groups[group_key] = GroupHistory()
                self._groups_of_lws.add((namespace, new_group.lws), group_key)
            if history.component != new.component:
                if history.component is not None:
                    self._groups_of.remove(history.component, group_key)
                    self._streaking.remove(history.component, group_key)
                    touched.append(history.component)
                history.component = new.component
                self._groups_of.add(new.component, group_key)
                if _on_streak(history):
                    self._streaking.add(new.component, group_key)
            streak = history.streak
            history.observe(name, new.uid, new_group, time, self.group_window)
            if history.streak != streak:
                if _on_streak(history):
                    self._streaking.add(new.component, group_key)
                else:
                    self._streaking.remove(new.component, group_key)
            # a new Pod or a readiness flip may change whether the group is all Ready
            flipped = old is None or old.group is None or old.group.ready != new_group.ready
            if history.streak != streak or (flipped and self._group_matters(group_key)):
                touched.append(new.component)
        return touched

    def _group_ready(self, group_key: GroupKey) -> bool:
        """Whether the group has Pods and they are all Ready, as their views say now."""
        history = self._groups[group_key]
        if not history.pods:
            return False
        namespace, pods = group_key[0], self.pods
        for name in history.pods:
            view = pods.get((namespace, name))
            if view is None or view.group is None or not view.group.ready:
                return False
        return True

    def group_matters(self, namespace: str, lws: str, group: str) -> bool:
        """For the filter: whether a readiness flip of a Pod of this group can change a verdict or a status
        (an unknown group: yes, let it through)."""
        group_key = (namespace, lws, group)
        return group_key not in self._groups or self._group_matters(group_key)

    def _group_matters(self, group_key: GroupKey) -> bool:
        """Whether the group's readiness can decide its component's verdict: it is on a streak, its LWS
        says it failed, or the component reports a group loop that no group of it is finding now (a held
        one: any group turning Ready may clear it). While another group loops, that group's finding is
        the verdict, whatever this one's readiness."""
        history = self._groups[group_key]
        if history.streak >= MIN_RECREATIONS:
            return True
        if self._failed_lws and (group_key[0], group_key[1]) in self._failed_lws:
            return True
        component = history.component
        if component is None:
            return False
        state = self._components.get(component)
        if state is None or state.reported is None or not state.reported.text:
            return False
        for other in self._streaking.get(component):
            if self._groups[other].looping(self._group_ready(other)):
                return False
        return True

    def _left_group(self, group_key: GroupKey, history: GroupHistory, deleted: str | None) -> list[ComponentKey]:
        """A Pod left the group: a group with no Pods, no streak and no failure waiting for a recreation has
        nothing to remember and goes; one that has is given the group window from its last Pod's deletion
        (`deleted`: that time; a Pod still terminating has not gone yet, and LWS recreates a group only
        once the old Pods are gone) to come back: a recreation later than that could not go on a loop
        anyway, so the group is gone (scaled down, or its LWS deleted, in a log without the LWS object). Its
        component is returned when its groups changed, or when whether this group's Pods are all Ready can
        decide the verdict."""
        if not (history.pods or history.streak or history.failure is not None):
            return self._drop_group(group_key, history)
        if not history.pods:
            when = seconds(deleted)
            if when is not None:
                history.emptied = when
                heapq.heappush(self._gone_deadlines, (when + self.group_window, group_key))
        return [history.component] if history.component is not None and self._group_matters(group_key) else []

    def _drop_group(self, group_key: GroupKey, history: GroupHistory) -> list[ComponentKey]:
        del self._groups[group_key]
        self._groups_of_lws.remove((group_key[0], group_key[1]), group_key)
        if history.component is None:
            return []
        self._groups_of.remove(history.component, group_key)
        self._streaking.remove(history.component, group_key)
        return [history.component]

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
        groups = self._groups_of.get(component)
        if best is None and groups:
            best = self._group_finding(component, groups)
        if not state.pods and not groups:
            del self._components[component]
        if best == state.reported or (best is not None and best.text and best.text == _text(state.reported)):
            return None  # a group loop in the same words (a held one found again) is the same verdict
        state.reported = best
        namespace, graph, name = component
        graph_key = (namespace, graph)
        graph_state = self._graphs.get(graph_key)
        if graph_state is None:
            graph_state = self._graphs[graph_key] = _Graph()
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

    def _group_finding(self, component: ComponentKey, groups: set[GroupKey]) -> Finding | None:
        """The first recreation-looping group of the component (in key order); else a group loop its
        status reports while one of its groups is not Ready (a restarted watcher has lost the history
        that found it). Readiness is read only for groups that could be looping: on a path every
        recompute of an LWS-backed component takes."""
        first: GroupKey | None = None
        failed_lws = self._failed_lws
        # with no LeaderWorkerSet failed, only a group on a streak can be looping
        for group_key in groups if failed_lws else self._streaking.get(component):
            if first is not None and group_key > first:
                continue
            history = self._groups[group_key]
            looping = history.streak >= MIN_RECREATIONS and history.last_failure is not None
            if not looping and (not failed_lws or (group_key[0], group_key[1]) not in failed_lws):
                continue
            if not self._group_ready(group_key):
                first = group_key
        if first is not None:
            history = self._groups[first]
            if history.streak >= MIN_RECREATIONS and history.last_failure is not None:
                return group_finding(first[1], first[2], history.streak, history.last_failure)
            failed = self.lws[(first[0], first[1])].failed
            assert failed is not None
            return budget_finding(first[1], first[2], failed)
        text = self._reported_group_loop(component)
        if text is None or all(self._group_ready(group_key) for group_key in groups):
            return None
        return held_finding(text)

    def _reported_group_loop(self, component: ComponentKey) -> str | None:
        """The group loop the component's DCD (else its DGD) reports, in crashwatch's own words."""
        for dcd_key in sorted(self._dcd_by_component.get(component)):
            available = self.dcds[dcd_key].condition(DCD_CONDITION)
            if available is None or available.reason != DCD_REASON_CRASH_LOOPING:
                continue
            if is_group_text(available.message):
                return available.message
        dgd = self.dgds.get((component[0], component[1]))
        ready = dgd.condition(DGD_CONDITION) if dgd is not None else None
        if ready is None or ready.reason != REASON_CRASH_LOOPING:
            return None
        prefix = f"{component[2]}: "
        for part in ready.message.removeprefix(GRAPH_MESSAGE_PREFIX).split("; "):
            if part.startswith(prefix) and is_group_text(part[len(prefix) :]):
                return part[len(prefix) :]
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
        if finding is not None:
            pod = self.pods.get((component[0], finding.pod))
            if pod is not None:
                for deployment in self.deployments_selecting(pod):
                    if deployment.owner_dcd is not None:
                        return deployment.owner_dcd
        return None

    # --- Deployments, DCDs, DGDs ------------------------------------------------------------------

    def _apply_deployment(
        self, key: ObjectKey, old: DeploymentView | None, new: DeploymentView | None, time: str | None
    ) -> list[Output]:
        owners: list[ObjectKey] = []
        if old is not None:
            self._unindex_deployment(key, old)
            if old.owner_dcd is not None:
                owners.append((old.namespace, old.owner_dcd))
        if new is not None:
            self._index_deployment(key, new)
            if new.owner_dcd is not None and (new.namespace, new.owner_dcd) not in owners:
                owners.append((new.namespace, new.owner_dcd))
        now = time or self._clock()
        outputs: list[Output] = []
        for owner in owners:
            outputs += self._plan_dcd(owner, now)
        return outputs

    def _anchors(self, deployment: DeploymentView) -> list[tuple[str, str, str]]:
        for term in deployment.selector or ():
            if term.operator == "In":
                return [(deployment.namespace, term.key, value) for value in term.values]
        return []

    def _index_deployment(self, key: ObjectKey, deployment: DeploymentView) -> None:
        anchors = self._anchors(deployment)
        for anchor in anchors:
            self._deployment_anchor.add(anchor, key)
        if not anchors and deployment.selector is not None:
            self._deployment_unanchored.add(deployment.namespace, key)
        if deployment.owner_dcd is not None:
            self._deployment_by_dcd.add((deployment.namespace, deployment.owner_dcd), key)

    def _unindex_deployment(self, key: ObjectKey, deployment: DeploymentView) -> None:
        for anchor in self._anchors(deployment):
            self._deployment_anchor.remove(anchor, key)
        self._deployment_unanchored.remove(deployment.namespace, key)
        if deployment.owner_dcd is not None:
            self._deployment_by_dcd.remove((deployment.namespace, deployment.owner_dcd), key)

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

    def _apply_lws(self, key: ObjectKey, new: LwsView | None, time: str | None) -> list[Output]:
        """A LeaderWorkerSet changed: groups it no longer wants (scaled down, or it is gone) are forgotten
        with their history, and its `Failed` condition, if any, is weighed for its groups."""
        if new is not None and new.failed is not None:
            self._failed_lws.add(key)
        else:
            self._failed_lws.discard(key)
        touched: list[ComponentKey] = []
        for group_key in sorted(self._groups_of_lws.get(key)):
            history = self._groups[group_key]
            wanted = new is not None and (not group_key[2].isdigit() or int(group_key[2]) < new.replicas)
            if wanted:
                if history.component is not None:
                    touched.append(history.component)
            else:
                touched += self._drop_group(group_key, history)
        return self._settle(list(dict.fromkeys(touched)), time)

    def _plan_dcd(self, key: ObjectKey, now: str) -> list[Output]:
        dcd = self._effective(("dcd", key), self.dcds.get(key))
        if dcd is None or not self.synced:
            return []
        component = self._dcd_component(dcd)
        state = self._components.get(component) if component is not None else None
        finding = state.reported if state is not None else None
        owned = sorted(self._deployment_by_dcd.get(key))
        deployment = self.deployments[owned[0]] if owned else None
        groups = self._groups_of.get(component) if component is not None else _EMPTY
        groups_ready = all(self._group_ready(g) for g in groups) if groups else None
        decided = (
            dcd_available(dcd, finding, deployment, groups_ready, self._all_failed),
            dcd_stalled(dcd, finding),
        )
        return self._want(("dcd", key), dcd, decided, None, now)

    def _plan_dgd(self, graph: GraphKey, now: str) -> list[Output]:
        dgd = self._effective(("dgd", graph), self.dgds.get(graph))
        if dgd is None or not self.synced:
            return []
        graph_state = self._graphs.get(graph)
        verdict = graph_state.verdict if graph_state is not None else HEALTHY
        dcds = [self._effective(("dcd", k), self.dcds[k]) for k in self._dcd_by_graph.get(graph)]
        ready = dgd_ready(dgd, verdict, [d for d in dcds if d is not None], self._all_failed)
        state, condition = ready if ready is not None else (None, None)
        return self._want(("dgd", graph), dgd, (condition, dgd_stalled(dgd, verdict)), state, now)

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
