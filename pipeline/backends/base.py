"""The one interface between the aggregator and a workload backend (see `pipeline.backends`).

A backend declares what it owns: its kinds (the typed projection of its workload object, the view the
aggregator hands back to it, and where the API serves it), the Pods it claims (by their labels) and what it
reads of them, the words of its own findings (a `Finding`'s `part` and `text`), and its tunables (a setting
with its flag). The core names no backend: it routes to each what it declared.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container, Iterable, Mapping
from typing import Any, ClassVar, NamedTuple

from pipeline.findings import Finding
from pipeline.timing import Due
from pipeline.views import ComponentKey, ObjectKey, PodView, StatusView, ViewStore
from stream.model.kinds import Watched
from stream.model.objects import Condition


class Kind(NamedTuple):
    """One kind a backend reads: the decoded object's type, its view's type and the function that makes
    the view; `watched` when the backend declares the typed projection itself (its CRD may be missing:
    watched where served), None for a kind crashwatch reads anyway (a Deployment)."""

    object: type[Any]
    view: type[Any]
    make: Callable[[Any], Any]
    watched: Watched | None = None


class Tunable(NamedTuple):
    """A setting of a backend's rule, in seconds, with its command-line flag (a duration) and help."""

    name: str
    flag: str
    default: float
    help: str


class Effects(NamedTuple):
    """What a change of a backend's own object means: components whose verdict may have changed, and
    DCDs whose status must be decided again."""

    components: list[ComponentKey]
    dcds: list[ObjectKey]


NO_EFFECTS = Effects([], [])  # shared: never appended to

# What a backend's claim says of a Pod from its labels: its place in the backend's workload (a
# LeaderWorkerSet and a group index), and whether it leads that place; None: not the backend's Pod.
Place = tuple[tuple[str, ...], bool]


class Backend:
    """The narrow interface the aggregator calls; every method has a neutral default, so a backend
    implements only what its workload shows."""

    name: ClassVar[str] = ""  # what its claims say (`Claim.backend`): unique among the registered
    kinds: ClassVar[tuple[Kind, ...]] = ()
    tunables: ClassVar[tuple[Tunable, ...]] = ()

    @staticmethod
    def claim(labels: Mapping[str, str]) -> Place | None:
        """Whether a labelled Pod is one of the backend's (read when its labels change, in any process
        that reads Pods): its place, or None. A backend that claims Pods hears their changes
        (`observe_pod`), and the filter asks it whether a change of the claim alone matters (`quiet`)."""
        return None

    def __init__(self, store: ViewStore, settings: Mapping[str, float]) -> None:
        """`store`: the pipeline's one store of views, which the backend reads and never writes;
        `settings`: the tunables' values by name (a tunable not there is at its default)."""
        self.store = store
        # a heap of (when, what) the backend's deadlines (pipeline.timing): `due` pops those that fell
        self.deadlines: list[tuple[float, Any]] = []
        self.heaps = (self.deadlines,)
        # the components of which the backend holds state (kept while one does; `finding` is asked of
        # them); read as `component in tracked` on every recompute, so a container, not a method
        self.tracked: Container[ComponentKey] = frozenset()
        self.views = {kind.view: store.add_kind(kind.object, kind.view, kind.make) for kind in self.kinds}

    def setting(self, settings: Mapping[str, float], name: str) -> float:
        """A tunable's value: as given, else its default."""
        tunable = next(t for t in self.tunables if t.name == name)
        return settings.get(name, tunable.default)

    def apply(self, key: ObjectKey, old: Any | None, new: Any | None, time: str | None) -> Effects:
        """One of the backend's own objects (of `kinds`) changed: `old` None is new, `new` None is gone."""
        return NO_EFFECTS

    def observe_pod(
        self, key: ObjectKey, old: PodView | None, new: PodView | None, time: str | None
    ) -> list[ComponentKey]:
        """A Pod it claims came, changed or went (`old`/`new` None; a Pod it no longer claims comes as its
        last claimed view and the new one): the components whose verdict it says may have changed."""
        return []

    def quiet(self, old: PodView, new: PodView) -> bool:
        """For the filter: whether a change of a claimed Pod's claim alone (its view otherwise the same,
        its verdict not held) can change nothing the backend decides, so it is kept and not passed on."""
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

    def not_ready(self, dgd: StatusView, covered: Collection[str | None]) -> tuple[int, list[tuple[str, str, str]]]:
        """Of the components with no DCD (not `covered`) that the backend runs, how many the DGD reports,
        and those not ready, as (name, why, the operator's reason)."""
        return 0, []

    def dcd_name(self, component: ComponentKey, pod: PodView) -> str | None:
        """The name of the DCD that runs the Pod, when only the backend's object says it."""
        return None

    def components(self) -> Iterable[ComponentKey]:
        """Every component of which the backend holds state (decided afresh at a sync)."""
        return ()

    def due(self, now: float) -> list[Due]:
        """The deadlines that fell by `now` (popped from `deadlines`), each with the components it touches."""
        return []


def overrides(backend: Backend, method: str) -> bool:
    """Whether the backend implements a hook itself: the aggregator asks on its hot paths only those that do."""
    return getattr(type(backend), method) is not getattr(Backend, method)
