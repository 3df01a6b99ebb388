"""Typed projections of the Kubernetes objects crashwatch reads.

Each Struct declares only the fields a diagnosis or a status patch reads, so msgspec skips the rest of a
10 KB Pod without building it. `kind` is the tag of a union, so one decoder picks the type in one pass.
Fields whose camel-case form msgspec would spell wrongly are named explicitly. Structs are gc=False and
sequences are tuples: a decoded event then holds no GC-tracked object (JSON cannot make a cycle), so a
replay of a million events triggers no garbage collection; with lists it spent two thirds of its time there.
"""

from __future__ import annotations

import hashlib
import json
from typing import final

import msgspec

GRAPH_LABEL = "nvidia.com/dynamo-graph-deployment-name"
COMPONENT_LABEL = "nvidia.com/dynamo-component"
SELECTOR_LABEL = "nvidia.com/selector"


class OwnerReference(msgspec.Struct, gc=False, rename="camel", omit_defaults=True):
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool = False


class ObjectMeta(msgspec.Struct, gc=False, rename="camel", omit_defaults=True):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    labels: dict[str, str] = {}
    deletion_timestamp: str | None = None
    owner_references: tuple[OwnerReference, ...] = ()

    def controller_of_kind(self, kind: str) -> str | None:
        """The name of this object's controlling owner of `kind`, if any."""
        for ref in self.owner_references:
            if ref.kind == kind and ref.controller:
                return ref.name
        return None


NO_LABELS = msgspec.Raw(b"{}")


class LabelsProblem(ValueError):
    """A Pod's metadata.labels that is not a map of strings."""


_read_labels = msgspec.json.Decoder(dict[str, str]).decode
_read_nullable_labels = msgspec.json.Decoder(dict[str, str | None] | None).decode
_UNREADABLE = (msgspec.ValidationError, msgspec.DecodeError, RecursionError)


def read_labels(text: bytes | msgspec.Raw) -> dict[str, str]:
    """The labels in a Pod's label text. A null map or value is an absent one, as the API server reads
    it. Raises LabelsProblem for anything but a map of strings."""
    try:
        return _read_labels(text)
    except _UNREADABLE:
        pass
    try:
        labels = _read_nullable_labels(text)
    except _UNREADABLE:
        raise LabelsProblem(_labels_problem(text)) from None
    return {key: value for key, value in labels.items() if value is not None} if labels is not None else {}


_JSON_TYPES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
}


def _labels_problem(text: bytes | msgspec.Raw) -> str:
    """What is wrong with label text the typed reading refused, in the words of the JSON it is."""
    try:
        value = msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return "metadata.labels cannot be read"
    if type(value) is not dict:
        return f"metadata.labels is {_JSON_TYPES.get(type(value), 'not an object')}, not a map of strings"
    for key, item in value.items():
        if item is not None and type(item) is not str:
            what = _JSON_TYPES.get(type(item), "not a string")
            return f"metadata.labels[{json.dumps(key[:100])}] is {what}, not a string"
    return "metadata.labels is not a map of strings"


class PodMeta(msgspec.Struct, gc=False, rename="camel", omit_defaults=True):
    """The metadata of a Pod: fewer fields than ObjectMeta, since Pods are most of the traffic.

    `labels` stays JSON text: most Pod events repeat the labels last seen for the Pod, and comparing the
    text is a fraction of building a dict of them (pipeline.views reads them when they changed). Decoded,
    the text is a view into the buffer it came from (a watch line, a List page); `own_labels` gives it a
    copy of its own where a Pod may be held longer than that buffer should be (a List's items, a relist
    held until its end). A view built from the Pod copies the text anyway."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    labels: msgspec.Raw = NO_LABELS
    deletion_timestamp: str | None = None


def own_labels(pod: Pod) -> None:
    """Give a Pod held past its buffer copies of the text it keeps: its labels, and its spec only where a
    diagnosis may read it (a container restarted twice: pipeline.diagnoses), so a relist holds no specs."""
    pod.metadata.labels = pod.metadata.labels.copy()
    if pod.spec is not NO_SPEC:
        pod.spec = pod.spec.copy() if may_read_spec(pod) else NO_SPEC


def may_read_spec(pod: Pod) -> bool:
    """Whether a diagnosis may read the Pod's spec: only for a container that restarted at least twice."""
    status = pod.status
    for statuses in (status.container_statuses, status.init_container_statuses):
        for container in statuses:
            if container.restart_count >= 2:
                return True
    return False


class PodCondition(msgspec.Struct, gc=False, rename="camel", omit_defaults=True):
    """A Pod condition. `reason`, `message` and `lastTransitionTime` are what the unschedulable diagnosis
    reads of PodScheduled; the API server may send any of them as null (kubelet's and the scheduler's
    conditions often carry `lastTransitionTime: null`), which reads as absent."""

    type: str
    status: str = "Unknown"
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None


class Condition(msgspec.Struct, gc=False, rename="camel", omit_defaults=True):
    """A metav1.Condition (or a Pod/Deployment condition: the extra fields stay empty)."""

    type: str
    status: str = "Unknown"
    reason: str = ""
    message: str = ""
    observed_generation: int = 0
    last_transition_time: str = ""


# --- Pods -------------------------------------------------------------------------------------------


class StateRunning(msgspec.Struct, gc=False):
    pass


class StateWaiting(msgspec.Struct, gc=False, omit_defaults=True):
    """Why a container waits (ImagePullBackOff, CreateContainerConfigError, CrashLoopBackOff ...)."""

    reason: str | None = None
    message: str | None = None


class StateTerminated(msgspec.Struct, gc=False, rename="camel", omit_defaults=True):
    exit_code: int = 0
    reason: str = ""
    finished_at: str | None = None  # when a waiting diagnosis of a restarted container began


class ContainerState(msgspec.Struct, gc=False, omit_defaults=True):
    running: StateRunning | None = None
    waiting: StateWaiting | None = None
    terminated: StateTerminated | None = None


class ContainerStatus(msgspec.Struct, gc=False, rename="camel", omit_defaults=True):
    name: str
    restart_count: int = 0
    state: ContainerState = msgspec.field(default_factory=ContainerState)
    last_state: ContainerState = msgspec.field(default_factory=ContainerState)


class PodStatus(msgspec.Struct, gc=False, rename="camel", omit_defaults=True):
    phase: str = ""
    conditions: tuple[PodCondition, ...] = ()
    container_statuses: tuple[ContainerStatus, ...] = ()
    init_container_statuses: tuple[ContainerStatus, ...] = ()


class ResourceList(msgspec.Struct, gc=False, omit_defaults=True):
    """Of a container's limits, the memory one alone (what an OOM kill is measured against)."""

    memory: str | None = None


class ContainerResources(msgspec.Struct, gc=False, omit_defaults=True):
    limits: ResourceList | None = None


class ContainerSpec(msgspec.Struct, gc=False, omit_defaults=True):
    name: str = ""
    resources: ContainerResources | None = None


class PodSpec(msgspec.Struct, gc=False, rename="camel", omit_defaults=True):
    """What the diagnoses read of a Pod's spec: whether an exit 0 is restarted, and the memory limits."""

    restart_policy: str | None = None  # the API server defaults it to Always
    containers: tuple[ContainerSpec, ...] = ()
    init_containers: tuple[ContainerSpec, ...] = ()


NO_SPEC = msgspec.Raw(b"{}")
_read_spec = msgspec.json.Decoder(PodSpec).decode


def read_spec(pod: Pod) -> PodSpec:
    """The Pod's spec, read when a diagnosis asks (rarely: a container restarted twice and exited 0);
    one that cannot be read is taken for an empty one (the defaults: restartPolicy Always, no limits)."""
    try:
        return _read_spec(pod.spec)
    except _UNREADABLE:
        return PodSpec()


class Pod(msgspec.Struct, gc=False, tag_field="kind", tag="Pod", omit_defaults=True):
    """`spec` stays JSON text, as labels do (PodMeta): about half of a Pod's bytes, read by a diagnosis
    only for a container that restarted twice (`read_spec`); kept as text it costs no more than skipped."""

    metadata: PodMeta = msgspec.field(default_factory=PodMeta)
    spec: msgspec.Raw = NO_SPEC
    status: PodStatus = msgspec.field(default_factory=PodStatus)


# --- Deployments --------------------------------------------------------------------------------------


class SelectorRequirement(msgspec.Struct, gc=False, omit_defaults=True):
    key: str
    operator: str
    values: tuple[str, ...] = ()


class LabelSelector(msgspec.Struct, gc=False, rename="camel", omit_defaults=True):
    match_labels: dict[str, str] = {}
    match_expressions: tuple[SelectorRequirement, ...] = ()


class DeploymentSpec(msgspec.Struct, gc=False, omit_defaults=True):
    selector: LabelSelector | None = None
    replicas: int | None = None


class DeploymentStatus(msgspec.Struct, gc=False, rename="camel", omit_defaults=True):
    observed_generation: int = 0
    replicas: int = 0
    ready_replicas: int = 0
    available_replicas: int = 0
    updated_replicas: int = 0
    conditions: tuple[Condition, ...] = ()


class Deployment(msgspec.Struct, gc=False, tag_field="kind", tag="Deployment", omit_defaults=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: DeploymentSpec = msgspec.field(default_factory=DeploymentSpec)
    status: DeploymentStatus = msgspec.field(default_factory=DeploymentStatus)


# --- Dynamo ---------------------------------------------------------------------------------------------


class ComponentReplicas(msgspec.Struct, frozen=True, gc=False, rename="camel", omit_defaults=True):
    """A component's replicas as the operator reports them on the DGD (from its Deployment, LWS or Grove)."""

    component_kind: str = ""  # PodClique, PodCliqueScalingGroup, Deployment or LeaderWorkerSet
    replicas: int = 0
    updated_replicas: int = 0
    ready_replicas: int = 0
    available_replicas: int | None = None


class DynamoStatus(msgspec.Struct, gc=False, rename="camel", omit_defaults=True):
    """The status fields of a DCD or DGD that crashwatch reads back before it writes."""

    state: str = ""
    observed_generation: int = 0
    conditions: tuple[Condition, ...] = ()
    components: dict[str, ComponentReplicas] | None = None  # DGD v1beta1
    services: dict[str, ComponentReplicas] | None = None  # DGD v1alpha1


class DynamoComponentDeployment(
    msgspec.Struct, gc=False, tag_field="kind", tag="DynamoComponentDeployment", omit_defaults=True
):
    api_version: str = msgspec.field(default="", name="apiVersion")
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    status: DynamoStatus = msgspec.field(default_factory=DynamoStatus)


class DynamoGraphDeployment(
    msgspec.Struct, gc=False, tag_field="kind", tag="DynamoGraphDeployment", omit_defaults=True
):
    """`spec` stays JSON text: it is read (`graph_templates`) only to tell which components a spec change
    replaces, and a spec that cannot be read must not cost the status of the graph."""

    api_version: str = msgspec.field(default="", name="apiVersion")
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: msgspec.Raw = NO_SPEC
    status: DynamoStatus = msgspec.field(default_factory=DynamoStatus)


# The fields of a component's spec that scale it without changing its Pods' template: a change of these
# alone replaces no Pod (the Dynamo operator leaves them out of its worker generation hash too).
SCALING_FIELDS = frozenset({"replicas", "minAvailable", "scalingAdapter", "autoscaling"})
_read_json = msgspec.json.Decoder().decode
_canonical = msgspec.json.Encoder(order="sorted").encode


class ComponentTemplate(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """One component of a graph's spec: its name, its type, and a digest of what shapes its Pods."""

    name: str
    type: str
    digest: str


class GraphTemplates(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """A digest of the graph-wide spec (what every component's Pods inherit), and each component's."""

    shared: str = ""
    components: tuple[ComponentTemplate, ...] = ()


def _digest(value: object) -> str:
    return hashlib.blake2b(_canonical(value), digest_size=8).hexdigest()


def graph_templates(dgd: DynamoGraphDeployment) -> GraphTemplates:
    """What shapes the Pods of each component of the graph: `spec.components` (v1beta1, a list of named
    components) or `spec.services` (v1alpha1, a map by name), scaling fields left out. A spec that cannot
    be read, or holds neither, gives no components (no change is then ever seen as replacing Pods)."""
    try:
        spec = _read_json(dgd.spec)
    except _UNREADABLE:
        return GraphTemplates()
    if type(spec) is not dict:
        return GraphTemplates()
    listed = spec.get("components")
    named: list[tuple[str, dict[str, object]]] = []
    if type(listed) is list:
        named = [(c["name"], c) for c in listed if type(c) is dict and type(c.get("name")) is str]
    elif type(spec.get("services")) is dict:
        named = [(name, c) for name, c in spec["services"].items() if type(c) is dict]
    else:
        return GraphTemplates()
    shared = {key: value for key, value in spec.items() if key not in ("components", "services")}
    components = []
    for name, component in sorted(named, key=lambda item: item[0]):
        kind = component.get("type", component.get("componentType", ""))
        shape = {key: value for key, value in component.items() if key not in SCALING_FIELDS}
        components.append(ComponentTemplate(name, kind if type(kind) is str else "", _digest(shape)))
    return GraphTemplates(_digest(shared), tuple(components))


@final  # so that `type(obj) is Status` tells the type checker every other kind has metadata
class Status(msgspec.Struct, gc=False, tag_field="kind", tag="Status", omit_defaults=True):
    """The object of an ERROR watch event (410 Gone among others)."""

    code: int = 0
    reason: str = ""
    message: str = ""


KubeObject = Pod | Deployment | DynamoComponentDeployment | DynamoGraphDeployment | Status

KINDS: frozenset[str] = frozenset(
    t.__struct_config__.tag  # type: ignore[misc]
    for t in (
        Pod,
        Deployment,
        DynamoComponentDeployment,
        DynamoGraphDeployment,
        Status,
    )
)
