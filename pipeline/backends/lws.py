"""LeaderWorkerSet-backed components: groups that crash-loop by being recreated whole.

The group-recreation rule (pipeline.groups) reads one group's history; this backend keeps those histories
and the indexes that find them: the groups of each component, of each LeaderWorkerSet, the groups on a
loop's streak (the only ones that can be found looping, unless their LWS failed), the LWSs that say their
restart budget ran out, and the groups left without a Pod, which are forgotten once the group window
passes without a recreation. What it reads of a component's verdict (whether it reports one, the DCDs
and DGD that may carry a group loop over a watcher restart) is handed to it; it never asks the aggregator.
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import msgspec

from pipeline.backends.base import Backend, Effects, Kind, Place, Tunable
from pipeline.backends.lws_groups import (
    DEFAULT_WINDOW,
    MIN_RECREATIONS,
    GroupHistory,
    GroupKey,
    budget_finding,
    group_finding,
    group_identity,
    held_finding,
    is_group_text,
)
from pipeline.findings import Finding
from pipeline.graph import GRAPH_MESSAGE_PREFIX, REASON_CRASH_LOOPING
from pipeline.index import EMPTY, Index
from pipeline.status import DCD_CONDITION, DCD_REASON_CRASH_LOOPING, DGD_CONDITION
from pipeline.timing import Due
from pipeline.views import Claim, ComponentKey, DcdView, DgdView, ObjectKey, PodView, ViewStore
from stream.model.kinds import Watched
from stream.model.objects import Condition, ObjectMeta
from stream.model.times import seconds

# --- the LeaderWorkerSet object, as crashwatch reads it ---------------------------------------------


class LeaderWorkerSetSpec(msgspec.Struct, gc=False, omit_defaults=True):
    replicas: int = 1  # the number of groups


class LeaderWorkerSetStatus(msgspec.Struct, gc=False, omit_defaults=True):
    conditions: tuple[Condition, ...] = ()


class LeaderWorkerSet(msgspec.Struct, gc=False, tag_field="kind", tag="LeaderWorkerSet", omit_defaults=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: LeaderWorkerSetSpec = msgspec.field(default_factory=LeaderWorkerSetSpec)
    status: LeaderWorkerSetStatus = msgspec.field(default_factory=LeaderWorkerSetStatus)


class LwsView(msgspec.Struct, frozen=True, gc=False):
    """A LeaderWorkerSet: how many groups it wants, and whether it says its restart budget ran out."""

    uid: str
    namespace: str
    name: str
    replicas: int
    failed: str | None  # the message of a `Failed=True` condition


def lws_view(lws: LeaderWorkerSet) -> LwsView:
    meta = lws.metadata
    failed = next((c for c in lws.status.conditions if c.type == "Failed" and c.status == "True"), None)
    return LwsView(
        meta.uid,
        sys.intern(meta.namespace),
        meta.name,
        lws.spec.replicas,
        (failed.message or failed.reason or "Failed") if failed is not None else None,
    )



# every LeaderWorkerSet: whether Dynamo, a DisaggregatedSet or someone else made it, its groups' Pods carry
# the graph labels, and it says how many groups it wants and whether its restart budget ran out
LEADERWORKERSETS = Watched("LeaderWorkerSet", "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", LeaderWorkerSet)


def _on_streak(history: GroupHistory) -> bool:
    return history.streak >= MIN_RECREATIONS and history.last_failure is not None


class LwsGroups(Backend):
    name = "lws"
    kinds = (Kind(LeaderWorkerSet, LwsView, lws_view, LEADERWORKERSETS),)
    tunables = (
        Tunable(
            "group_window",
            "--group-window",
            DEFAULT_WINDOW,
            "a LeaderWorkerSet group recreated at least twice, each after a failure and at most this long "
            "apart, and not all Ready, is recreation-looping (default: 10m)",
        ),
    )

    @staticmethod
    def claim(labels: Mapping[str, str]) -> Place | None:
        return group_identity(labels)

    def __init__(self, store: ViewStore, settings: Mapping[str, float]) -> None:
        super().__init__(store, settings)
        self.group_window = self.setting(settings, "group_window")
        self.pods = store.pods
        self.lws: dict[ObjectKey, LwsView] = self.views[LwsView]
        self.groups: dict[GroupKey, GroupHistory] = {}
        # `deadlines`: (when its grace ends, group) for groups left without a Pod; stale entries are skipped
        # when due
        self.groups_of: Index[ComponentKey, GroupKey] = Index()
        self.tracked = self.groups_of.sets  # the components with groups
        # the groups on a loop's streak (recreated often enough, each after a failure), by component: the
        # only ones that can be found looping, unless their LeaderWorkerSet failed
        self.streaking: Index[ComponentKey, GroupKey] = Index()
        self._groups_of_lws: Index[ObjectKey, GroupKey] = Index()
        # the LeaderWorkerSets that say their restart budget ran out: most clusters have none, and a
        # group's rules ask for its LWS on every look at it
        self._failed_lws: set[ObjectKey] = set()
        # the components whose verdict has words (a held group loop may clear when any group turns Ready)
        self._reporting: set[ComponentKey] = set()
        # the components a spec change replaced: the group loop their status still reports is the old
        # spec's, not one to carry over, until the status no longer says it
        self._replaced: set[ComponentKey] = set()

    # --- the Backend interface -----------------------------------------------------------------------

    def observe_pod(
        self, key: ObjectKey, old: PodView | None, new: PodView | None, time: str | None
    ) -> list[ComponentKey]:
        """Hand a LeaderWorkerSet Pod's change to its group's history; the components whose group
        verdict may have changed."""
        touched: list[ComponentKey] = []
        namespace, name = key
        was = self._claimed(old)
        new_group = self._claimed(new) if new is not None and new.component is not None else None
        if old is not None and was is not None:
            old_key = (namespace, was.place[0], was.place[1])
            if new_group is None or old_key != (namespace, new_group.place[0], new_group.place[1]):
                history = self.groups.get(old_key)
                if history is not None:
                    history.observe(name, old.uid, None, None, self.group_window)
                    touched += self._left_group(old_key, history, time if new is None else None)
        if new is not None and new_group is not None and new.component is not None:
            touched += self._joined_group((namespace, new_group.place[0], new_group.place[1]), name, old, new, time)
        return touched

    def _claimed(self, view: PodView | None) -> Claim | None:
        """The Pod's claim, if it is this backend's."""
        claim = view.claim if view is not None else None
        return claim if claim is not None and claim.backend == self.name else None

    def apply(self, key: ObjectKey, old: Any | None, new: Any | None, time: str | None) -> Effects:
        """A LeaderWorkerSet changed: groups it no longer wants (scaled down, or it is gone) are forgotten
        with their history, and its `Failed` condition, if any, is weighed for its groups."""
        lws = new if isinstance(new, LwsView) else None
        if lws is not None and lws.failed is not None:
            self._failed_lws.add(key)
        else:
            self._failed_lws.discard(key)
        touched: list[ComponentKey] = []
        for group_key in sorted(self._groups_of_lws.get(key)):
            history = self.groups[group_key]
            wanted = lws is not None and (not group_key[2].isdigit() or int(group_key[2]) < lws.replicas)
            if wanted:
                if history.component is not None:
                    touched.append(history.component)
            else:
                touched += self._drop_group(group_key, history)
        return Effects(list(dict.fromkeys(touched)), [])

    def replaced(self, component: ComponentKey) -> bool:
        """The groups' recreations so far were of the old spec: their streaks end, as a rollout's
        recreation ends one, and a loop of the new spec must build up afresh."""
        forgot = False
        for group_key in self.groups_of.get(component):
            history = self.groups[group_key]
            forgot = forgot or _on_streak(history)
            history.streak, history.last_failure, history.last_time, history.failure = 0, None, None, None
            self.streaking.remove(component, group_key)
        if forgot or component in self._reporting:
            self._replaced.add(component)
        return forgot

    def reported(self, component: ComponentKey, finding: Finding | None) -> None:
        if finding is not None and finding.text:
            self._reporting.add(component)
        else:
            self._reporting.discard(component)

    def finding(self, component: ComponentKey, dcds: Collection[ObjectKey]) -> Finding | None:
        """The first recreation-looping group of the component (in key order); else a group loop its
        status reports while one of its groups is not Ready (a restarted watcher has lost the history
        that found it). Readiness is read only for groups that could be looping: on a path every
        recompute of an LWS-backed component takes."""
        groups = self.groups_of.get(component)
        if not groups:
            return None
        first: GroupKey | None = None
        failed_lws = self._failed_lws
        # with no LeaderWorkerSet failed, only a group on a streak can be looping
        for group_key in groups if failed_lws else self.streaking.get(component):
            if first is not None and group_key > first:
                continue
            history = self.groups[group_key]
            if not _on_streak(history) and (not failed_lws or (group_key[0], group_key[1]) not in failed_lws):
                continue
            if not self.group_ready(group_key):
                first = group_key
        if first is not None:
            history = self.groups[first]
            if history.streak >= MIN_RECREATIONS and history.last_failure is not None:
                return group_finding(first[1], first[2], history.streak, history.last_failure)
            failed = self.lws[(first[0], first[1])].failed
            assert failed is not None
            return budget_finding(first[1], first[2], failed)
        store = self.store
        reported = [store.dcds[key] for key in sorted(dcds)]
        text = _reported_group_loop(component, reported, store.dgds.get((component[0], component[1])))
        if text is None:
            self._replaced.discard(component)
            return None
        if component in self._replaced or all(self.group_ready(group_key) for group_key in groups):
            return None
        return held_finding(text)

    def workload(self, dcd: ObjectKey, component: ComponentKey | None, generation: int) -> Condition | None:
        """The operator's words for its LeaderWorkerSet: Ready when every group's Pods are."""
        groups = self.groups_of.get(component) if component is not None else EMPTY
        if not groups:
            return None
        if all(self.group_ready(g) for g in groups):
            return Condition(
                DCD_CONDITION,
                "True",
                "LeaderWorkerSetReady",
                "LeaderWorkerSet is ready",
                observed_generation=generation,
            )
        return Condition(
            DCD_CONDITION,
            "False",
            "LeaderWorkerSetNotReady",
            "LeaderWorkerSet is not ready",
            observed_generation=generation,
        )

    def components(self) -> Iterable[ComponentKey]:
        return self.groups_of.keys()

    def due(self, now: float) -> list[Due]:
        """The groups without a Pod for the group window by `now` are gone, each when its time ran out."""
        gone, window, due = self.deadlines, self.group_window, []
        while gone and gone[0][0] <= now:
            deadline, group_key = heapq.heappop(gone)
            history = self.groups.get(group_key)
            emptied = history.emptied if history is not None else None
            if history is not None and not history.pods and emptied is not None and emptied + window == deadline:
                due.append((deadline, self._drop_group(group_key, history)))
        return due

    # --- for the filter --------------------------------------------------------------------------------

    def quiet(self, old: PodView, new: PodView) -> bool:
        """A readiness flip of a group's Pod that its group's state says cannot change a verdict."""
        was, now = old.claim, new.claim
        return (
            was is not None
            and now is not None
            and (was.place, was.lead, was.failure) == (now.place, now.lead, now.failure)
            and not self.matters(old.namespace, *was.place)
        )

    def matters(self, namespace: str, lws: str, group: str) -> bool:
        """Whether a readiness flip of a Pod of this group can change a verdict or a status (an unknown
        group: yes, let it through)."""
        group_key = (namespace, lws, group)
        return group_key not in self.groups or self._matters(group_key)

    # --- the groups ----------------------------------------------------------------------------------

    def group_ready(self, group_key: GroupKey) -> bool:
        """Whether the group has its leader and its Pods are all Ready, as their views say now. LWS deletes
        a group's leader first and its workers a moment later: a worker up again after its crash (Ready,
        as the real kubelet runs it) that is left alone meanwhile is a group being torn down, not a Ready
        one."""
        history = self.groups[group_key]
        if not history.pods:
            return False
        namespace, pods = group_key[0], self.pods
        led = False
        for name in history.pods:
            view = pods.get((namespace, name))
            if view is None or view.claim is None or not view.claim.ready:
                return False
            led = led or view.claim.lead
        return led

    def _joined_group(
        self, group_key: GroupKey, name: str, old: PodView | None, new: PodView, time: str | None
    ) -> list[ComponentKey]:
        """A Pod came into the group, or changed in it: its history hears it."""
        new_group, component = new.claim, new.component
        assert new_group is not None and component is not None
        touched: list[ComponentKey] = []
        history = self.groups.get(group_key)
        if history is None:
            history = self.groups[group_key] = GroupHistory()
            self._groups_of_lws.add((group_key[0], group_key[1]), group_key)
        if history.component != component:
            if history.component is not None:
                self.groups_of.remove(history.component, group_key)
                self.streaking.remove(history.component, group_key)
                touched.append(history.component)
            history.component = component
            self.groups_of.add(component, group_key)
            if _on_streak(history):
                self.streaking.add(component, group_key)
        streak = history.streak
        history.observe(name, new.uid, new_group, time, self.group_window)
        if history.streak != streak:
            if _on_streak(history):
                self.streaking.add(component, group_key)
            else:
                self.streaking.remove(component, group_key)
        # a new Pod or a readiness flip may change whether the group is all Ready
        flipped = old is None or old.claim is None or old.claim.ready != new_group.ready
        if history.streak != streak or (flipped and self._matters(group_key)):
            touched.append(component)
        return touched

    def _matters(self, group_key: GroupKey) -> bool:
        """Whether the group's readiness can decide its component's verdict: it is on a streak, its LWS
        says it failed, or the component reports a group loop that no group of it is finding now (a held
        one: any group turning Ready may clear it). While another group loops, that group's finding is
        the verdict, whatever this one's readiness."""
        history = self.groups[group_key]
        if history.streak >= MIN_RECREATIONS:
            return True
        if self._failed_lws and (group_key[0], group_key[1]) in self._failed_lws:
            return True
        component = history.component
        if component is None or component not in self._reporting:
            return False
        return all(not self.groups[other].looping(self.group_ready(other)) for other in self.streaking.get(component))

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
                heapq.heappush(self.deadlines, (when + self.group_window, group_key))
        return [history.component] if history.component is not None and self._matters(group_key) else []

    def _drop_group(self, group_key: GroupKey, history: GroupHistory) -> list[ComponentKey]:
        del self.groups[group_key]
        self._groups_of_lws.remove((group_key[0], group_key[1]), group_key)
        if history.component is None:
            return []
        self.groups_of.remove(history.component, group_key)
        self.streaking.remove(history.component, group_key)
        return [history.component]


def _reported_group_loop(component: ComponentKey, dcds: Sequence[DcdView], dgd: DgdView | None) -> str | None:
    """The group loop the component's DCD (else its DGD) reports, in crashwatch's own words."""
    for dcd in dcds:
        available = dcd.condition(DCD_CONDITION)
        if available is None or available.reason != DCD_REASON_CRASH_LOOPING:
            continue
        if is_group_text(available.message):
            return available.message
    ready = dgd.condition(DGD_CONDITION) if dgd is not None else None
    if ready is None or ready.reason != REASON_CRASH_LOOPING:
        return None
    prefix = f"{component[2]}: "
    for part in ready.message.removeprefix(GRAPH_MESSAGE_PREFIX).split("; "):
        if part.startswith(prefix) and is_group_text(part[len(prefix) :]):
            return part[len(prefix) :]
    return None
