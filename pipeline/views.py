"""Diagnostic views: what of each object a diagnosis or a status decision reads, and nothing else.

Views are frozen, GC-untracked Structs of strings, bytes, ints and tuples: cheap to hold for 100,000 Pods
and comparable with `==`, which is all the event filter needs. A Pod's labels are the JSON text they came
in, which the filter pools, so the replicas of a template share one; the names in a view that many views
repeat (namespaces, components, selector terms) are interned.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol, TypeVar

import msgspec

from pipeline.crashloop import Crash, last_crash, pod_failure, pod_ready
from pipeline.diagnoses import diagnose
from pipeline.findings import Finding
from stream.model.objects import (
    COMPONENT_LABEL,
    GRAPH_LABEL,
    ComponentReplicas,
    Condition,
    DynamoComponentDeployment,
    DynamoGraphDeployment,
    GraphTemplates,
    LabelSelector,
    Pod,
    graph_templates,
    read_labels,
)

# A component is (namespace, graph, component name); a graph is (namespace, graph).
ComponentKey = tuple[str, str, str]
GraphKey = tuple[str, str]
# A Pod's labels as the JSON text of its metadata.labels, as received: most Pod events repeat it, so the
# filter compares the text and reads it only when it changed (and a selector reads it when it must).
Labels = bytes

_intern = sys.intern


def component_of(namespace: str, labels: dict[str, str]) -> ComponentKey | None:
    graph = labels.get(GRAPH_LABEL)
    component = labels.get(COMPONENT_LABEL)
    if not graph or not component:
        return None
    return (namespace, graph, component)


class Claim(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """A backend's hold on a Pod it hears (pipeline.backends): which backend, the Pod's place in its
    workload in the backend's words (a LeaderWorkerSet and a group index), whether it leads that place,
    and what the backend reads of it at each change: whether it is Ready, and its last failure."""

    backend: str
    place: tuple[str, ...]
    lead: bool
    ready: bool
    failure: Finding | None  # a container down or restarted after a non-zero exit, or the Pod failed


# A backend's claim on a Pod by its labels (pipeline.backends.base.Backend.claim), by the backend's name
Claimer = tuple[str, Callable[[Mapping[str, str]], "tuple[tuple[str, ...], bool] | None"]]


class PodView(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """array_like: views also travel between processes (stream.sources.parallel), as compact msgpack arrays."""

    uid: str
    namespace: str
    name: str
    labels: Labels
    component: ComponentKey | None
    finding: Finding | None  # a crash loop, or another diagnosis (pipeline.diagnoses)
    claim: Claim | None = None  # a backend's Pod (a LeaderWorkerSet group's): what its rule reads
    # what holding a crash-loop verdict between restarts reads (pipeline.holds): whether the Pod is Ready,
    # its containers' restarts in all (a restart while Ready starts the recovery window over), and
    # whether it finished (Succeeded or Failed: it will not run again)
    ready: bool = False
    restarts: int = 0
    finished: bool = False
    # where crashes are asked about, a Pod that is not Ready: its container down after a run that ended
    # non-zero (pipeline.crash_causes asks for that run's output, once per crash)
    crash: Crash | None = None


def pod_view(
    pod: Pod, previous: PodView | None = None, claimers: tuple[Claimer, ...] = (), crashes: bool = False
) -> PodView:
    """The Pod's view. With the Pod's `previous` view, labels whose text did not change are not read
    again: the component and claim they name are the previous view's, and so are the (pooled) objects
    that hold them, which the filter then keeps as they are; new labels are offered to the `claimers`
    (the first that claims the Pod has it). `crashes`: say a crash the Pod shows (`crash`), for its output to
    be asked for (pipeline.crash_causes; the one read that only a live reader needs). Raises
    stream.model.objects.LabelsProblem."""
    meta = pod.metadata
    namespace = meta.namespace
    text = bytes(meta.labels)
    ready = pod_ready(pod)
    claim: Claim | None = None
    if previous is not None and previous.labels == text and previous.component is not None:
        namespace, text = previous.namespace, previous.labels
        component: ComponentKey | None = previous.component
        was = previous.claim
        if was is not None:
            claim = Claim(was.backend, was.place, was.lead, ready, pod_failure(pod))
    else:
        labels = read_labels(text)
        component = component_of(namespace, labels)
        for backend, claims in claimers:
            place = claims(labels)
            if place is not None:
                claim = Claim(backend, place[0], place[1], ready, pod_failure(pod))
                break
    status = pod.status
    restarts = 0
    for container in status.container_statuses:
        restarts += container.restart_count
    if status.init_container_statuses:
        for container in status.init_container_statuses:
            restarts += container.restart_count
    return PodView(
        meta.uid,
        namespace,
        meta.name,
        text,
        component if meta.deletion_timestamp is None else None,
        diagnose(pod, ready),
        claim,
        ready,
        restarts,
        status.phase == "Succeeded" or status.phase == "Failed",
        last_crash(pod) if crashes and not ready else None,
    )


_encode_view = msgspec.msgpack.Encoder().encode
decode_view = msgspec.msgpack.Decoder(PodView).decode


def encode_view(pod: Pod, claimers: tuple[Claimer, ...] = ()) -> bytes:
    """A Pod's view, msgpack-encoded: what a parallel replay's workers send instead of the Pod (with the
    registered backends' `claimers`, pipeline.backends.registry)."""
    return _encode_view(pod_view(pod, None, claimers))


class Requirement(msgspec.Struct, frozen=True, gc=False):
    """One term of a label selector; matchLabels entries become `In` with one value."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    @property
    def positive(self) -> bool:
        """Whether the term can only match Pods that carry its key (so an index can find them)."""
        return self.operator in ("In", "Exists")

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value in self.values
        if self.operator == "NotIn":
            return value not in self.values
        if self.operator == "Exists":
            return value is not None
        if self.operator == "DoesNotExist":
            return value is None
        return False


Selector = tuple[Requirement, ...]


def parse_selector(selector: LabelSelector | None) -> Selector | None:
    """None for a missing selector (selects nothing); unknown operators select nothing, as in Kubernetes."""
    if selector is None:
        return None
    terms = [Requirement(_intern(k), "In", (_intern(v),)) for k, v in sorted(selector.match_labels.items())]
    for expr in selector.match_expressions:
        terms.append(Requirement(_intern(expr.key), expr.operator, tuple(_intern(v) for v in expr.values)))
    return tuple(terms)


def selector_matches(selector: Selector, labels: Mapping[str, str]) -> bool:
    for term in selector:  # noqa: SIM110 - a loop, not all(...): no generator to build on a per-lookup path
        if not term.matches(labels):
            return False
    return True


class StatusView(msgspec.Struct, frozen=True, gc=False):
    """A DCD or DGD: who it is, and the status fields crashwatch may write. Each kind has its own view
    type (`DcdView`, `DgdView`), so the aggregator dispatches on the type alone."""

    kind: ClassVar[str]
    api_version: str
    uid: str
    namespace: str
    name: str
    generation: int
    resource_version: str  # the precondition of a write made from this observation
    graph: str | None
    component: str | None
    state: str
    conditions: tuple[Condition, ...]
    observed_generation: int = 0  # status.observedGeneration: which spec the operator's status speaks for

    def condition(self, type_: str) -> Condition | None:
        for condition in self.conditions:
            if condition.type == type_:
                return condition
        return None


class DcdView(StatusView, frozen=True, gc=False):
    kind: ClassVar[str] = "DynamoComponentDeployment"


class DgdView(StatusView, frozen=True, gc=False):
    kind: ClassVar[str] = "DynamoGraphDeployment"
    # status.components (v1beta1) or status.services (v1alpha1), sorted: what the operator reports of
    # each component's replicas, the one account of Grove-backed components, which have no DCD
    components: tuple[tuple[str, ComponentReplicas], ...] = ()
    templates: GraphTemplates = GraphTemplates()  # what shapes each component's Pods (pipeline.rollouts)


def status_view(obj: DynamoComponentDeployment | DynamoGraphDeployment) -> DcdView | DgdView:
    if isinstance(obj, DynamoGraphDeployment):
        reported = obj.status.components or obj.status.services or {}
        return msgspec.structs.replace(
            _status_view(obj, True, DgdView),
            components=tuple(sorted(reported.items())),
            templates=graph_templates(obj),
        )
    return _status_view(obj, False, DcdView)


V = TypeVar("V", DcdView, DgdView)


def _status_view(obj: DynamoComponentDeployment | DynamoGraphDeployment, is_dgd: bool, view: type[V]) -> V:
    meta = obj.metadata
    return view(
        api_version=obj.api_version or "nvidia.com/v1alpha1",
        uid=meta.uid,
        namespace=_intern(meta.namespace),
        name=meta.name,
        generation=meta.generation,
        resource_version=meta.resource_version,
        graph=meta.name if is_dgd else meta.labels.get(GRAPH_LABEL),
        component=None if is_dgd else meta.labels.get(COMPONENT_LABEL),
        state=obj.status.state,
        conditions=tuple(obj.status.conditions),
        observed_generation=obj.status.observed_generation,
    )


class ObjectView(Protocol):
    """What every view says of its object (a backend's own views too): who it is."""

    @property
    def uid(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...


View = PodView | DcdView | DgdView | ObjectView

# Objects are keyed by namespace and name: a delete and a recreate that arrive as one update are then
# just an update, and the uid guards against a late DELETED of an object that was already replaced.
ObjectKey = tuple[str, str]


class ViewStore:
    """The current view of every object the pipeline holds, once: the filter writes it (it decides what
    changed) and the aggregator and the backends read it, so no object is held twice."""

    __slots__ = ("by_type", "claimers", "dcds", "dgds", "down_awaited", "held", "makers", "pods")

    def __init__(self, claimers: tuple[Claimer, ...] = ()) -> None:
        """`claimers`: the backends that claim Pods by their labels (pipeline.backends)."""
        self.pods: dict[ObjectKey, PodView] = {}  # only Pods with the graph and component labels
        self.dcds: dict[ObjectKey, DcdView] = {}
        self.dgds: dict[ObjectKey, DgdView] = {}
        # the Pods whose crash-loop verdict is held between restarts (the aggregator's, pipeline.holds):
        # the only ones whose readiness and restart count the filter must pass on
        self.held: dict[ObjectKey, Any] = {}
        # the Pods Ready again when their crash's certain cause came (pipeline.crash_causes), failed when
        # they go down: their readiness the filter must pass on too
        self.down_awaited: dict[ObjectKey, Any] = {}
        self.claimers = claimers
        # the views of every kind but Pods, by their type: the filter's generic path; and the one place a
        # decoded object's kind picks its view (the aggregator dispatches on the view's type)
        self.by_type: dict[type, dict[ObjectKey, Any]] = {DcdView: self.dcds, DgdView: self.dgds}
        self.makers: dict[type, Callable[[Any], Any]] = {
            DynamoComponentDeployment: status_view,
            DynamoGraphDeployment: status_view,
        }

    def add_kind(self, decoded: type, view: type, make: Callable[[Any], Any]) -> dict[ObjectKey, Any]:
        """A backend's kind: its objects' views are made by `make` and held here; the dict that holds them."""
        self.makers[decoded] = make
        return self.by_type.setdefault(view, {})

    def __len__(self) -> int:
        return sum(len(views) for views in (self.pods, *self.by_type.values()))
