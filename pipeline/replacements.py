"""The components a spec change is replacing, and their Pods of the old spec that stop counting meanwhile.

Which components a change replaces is pipeline.rollouts' rule; this tracker keeps what follows from it: the
Pods each replaced component had when the change was seen (by uid: a Pod recreated under its name is new),
when its replacement grace ends, and which components' backends forgot a verdict of the old spec. When the
grace ends with no new Pod of the component, the change replaced none after all and the old Pods count
again. Few entries, and only while a rollout is under way: every path a Pod event takes asks one
truthiness test of it when none is.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Sequence

from pipeline.backends.base import Backend
from pipeline.rollouts import REPLACEMENT_GRACE, replaced
from pipeline.timing import Due
from pipeline.views import ComponentKey, GraphKey, ObjectKey, PodView
from stream.model.objects import GraphTemplates


class Replacements:
    __slots__ = ("backends", "deadlines", "forgot", "heaps", "pods", "pods_of", "replacing", "superseded")

    def __init__(
        self,
        pods: dict[ObjectKey, PodView],
        pods_of: Callable[[ComponentKey], Collection[ObjectKey]],
        backends: Sequence[Backend],
    ) -> None:
        """`pods`: the store's Pods; `pods_of`: a component's Pods (the aggregator's index); `backends`:
        asked whether they forgot a verdict of a replaced component (a rare path: all of them)."""
        self.pods, self.pods_of, self.backends = pods, pods_of, backends
        # Pods of a replaced component, by key, with their uid: their crashes no longer count
        self.superseded: dict[ObjectKey, str] = {}
        # per replaced component, when its replacement grace ends (and the heap of those times)
        self.replacing: dict[ComponentKey, float] = {}
        self.deadlines: list[tuple[float, ComponentKey]] = []
        self.heaps = (self.deadlines,)
        # components whose backend forgot a verdict of the old spec (a LeaderWorkerSet group loop), until
        # their verdict is next decided
        self.forgot: set[ComponentKey] = set()

    def changed(
        self, graph: GraphKey, old: GraphTemplates, new: GraphTemplates, now: float | None
    ) -> list[ComponentKey]:
        """A graph's spec changed at `now`: the components it replaces (pipeline.rollouts) that have Pods,
        whose Pods stop counting until they are gone or the grace ends without a new one. Without a time
        to measure the grace from, nothing is replaced: they go on counting."""
        touched: list[ComponentKey] = []
        if now is None:
            return touched
        for name in replaced(old, new):
            component = (graph[0], graph[1], name)
            pods = self.pods_of(component)
            if not pods:
                continue
            for key in pods:
                self.superseded[key] = self.pods[key].uid
            if any([backend.replaced(component) for backend in self.backends]):  # each is told
                self.forgot.add(component)
            deadline = now + REPLACEMENT_GRACE
            self.replacing[component] = deadline
            heapq.heappush(self.deadlines, (deadline, component))
            touched.append(component)
        return touched

    def forget(self, key: ObjectKey, new: PodView | None) -> None:
        """A Pod is gone, or was replaced under its name: what it was superseded as goes with it."""
        uid = self.superseded.get(key)
        if uid is not None and (new is None or new.uid != uid):
            del self.superseded[key]

    def take_forgotten(self, component: ComponentKey) -> bool:
        """Whether the component's backend forgot a verdict of the old spec (said once)."""
        if self.forgot and component in self.forgot:
            self.forgot.discard(component)
            return True
        return False

    def in_graph(self, graph: GraphKey) -> bool:
        """Whether a spec change is replacing one of the graph's components: a failure that clears now
        was withdrawn with the old spec's Pods, not recovered."""
        return bool(self.replacing) and any(key[0] == graph[0] and key[1] == graph[1] for key in self.replacing)

    def due(self, now: float) -> list[Due]:
        """Components whose replacement grace ended with no new Pod: their Pods count again."""
        due: list[Due] = []
        deadlines = self.deadlines
        while deadlines and deadlines[0][0] <= now:
            deadline, component = heapq.heappop(deadlines)
            if self.replacing.get(component) == deadline:
                del self.replacing[component]
                if self._unreplaced(component):
                    due.append((deadline, [component]))
        return due

    def _unreplaced(self, component: ComponentKey) -> bool:
        """The grace ended: if no Pod of the component came after the change, the change replaced none of
        its Pods after all, and they count again. Whether they did."""
        pods = list(self.pods_of(component))
        superseded = self.superseded
        if any(superseded.get(key) != self.pods[key].uid for key in pods):
            return False  # a new Pod came: the old ones are on their way out
        for key in pods:
            superseded.pop(key, None)
        return bool(pods)
