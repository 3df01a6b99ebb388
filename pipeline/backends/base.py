"""The one interface between the aggregator and a workload backend (see `pipeline.backends`)."""

from __future__ import annotations

from collections.abc import Collection, Container, Iterable
from typing import Any, ClassVar, NamedTuple

from pipeline.findings import Finding
from pipeline.views import ComponentKey, ObjectKey, PodView, View, ViewStore
from stream.model.objects import Condition


class Settings(NamedTuple):
    group_window: float  # seconds between two LeaderWorkerSet group recreations that still make a loop


class Effects(NamedTuple):
    """What a change of a backend's own object means: components whose verdict may have changed, and
    DCDs whose status must be decided again."""

    components: list[ComponentKey]
    dcds: list[ObjectKey]


NO_EFFECTS = Effects([], [])  # shared: never appended to


class Backend:
    """The narrow interface the aggregator calls; every method has a neutral default, so a backend
    implements only what its workload shows."""

    # the view types of the backend's own objects: the aggregator hands their changes to `apply`
    kinds: ClassVar[tuple[type[View], ...]] = ()
    # whether `observe_pod` wants the changes of the Pods that belong to a group (`PodView.group`): the
    # aggregator calls it only for those, and only on backends that say so
    reads_pods: ClassVar[bool] = False
    # whether it may hold state of components (`tracked`): the aggregator asks only those that may
    tracks_components: ClassVar[bool] = False

    def __init__(self, store: ViewStore, settings: Settings) -> None:
        """`store`: the pipeline's one store of views, which the backend reads and never writes."""
        self.store = store
        # a heap of (when, what) the backend's deadlines: `due` pops those that fell; the aggregator reads
        # only whether it is empty and its first time (it must stay this one list)
        self.deadlines: list[tuple[float, Any]] = []
        # the components of which the backend holds state (kept while one does; `finding` is asked of
        # them); read as `component in tracked` on every recompute, so a container, not a method
        self.tracked: Container[ComponentKey] = frozenset()

    def apply(self, key: ObjectKey, old: View | None, new: View | None, time: str | None) -> Effects:
        """One of the backend's own objects (of `kinds`) changed: `old` None is new, `new` None is gone."""
        return NO_EFFECTS

    def observe_pod(
        self, key: ObjectKey, old: PodView | None, new: PodView | None, time: str | None
    ) -> list[ComponentKey] | None:
        """A Pod changed. None: not one of the backend's Pods (the component is looked at as any Pod's);
        else the components whose verdict the backend says may have changed (maybe none)."""
        return None

    def quiet(self, old: PodView, new: PodView) -> bool:
        """For the filter: whether a change of a Pod's `group` alone (the rest of its view the same, its
        verdict not held) can change nothing the backend decides, so it is kept and not passed on."""
        return False

    def finding(self, component: ComponentKey, dcds: Collection[ObjectKey]) -> Finding | None:
        """The component's verdict by the backend's own rule, asked when none of its Pods has one; `dcds`
        are the keys of its DCDs (their views, and its DGD's, are in the store)."""
        return None

    def replaced(self, component: ComponentKey) -> bool:
        """A spec change replaced the component (pipeline.rollouts): what its old workload showed is of
        the old spec. Whether the backend forgot a verdict of it."""
        return False

    def reported(self, component: ComponentKey, finding: Finding | None) -> None:
        """The component's verdict changed to `finding` (None: none)."""

    def workload(self, dcd: ObjectKey, component: ComponentKey | None, generation: int) -> Condition | None:
        """The DCD's `Available` condition in the operator's words for the backend's workload, when the
        backend runs it (None: not the backend's DCD)."""
        return None

    def dcd_name(self, component: ComponentKey, pod: PodView) -> str | None:
        """The name of the DCD that runs the Pod, when only the backend's object says it."""
        return None

    def components(self) -> Iterable[ComponentKey]:
        """Every component of which the backend holds state (decided afresh at a sync)."""
        return ()

    def due(self, now: float) -> list[tuple[float, list[ComponentKey]]]:
        """The deadlines that fell by `now` (popped from `deadlines`), each with the components it touches."""
        return []
