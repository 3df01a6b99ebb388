"""The resources crashwatch watches: where each lives in the API, and what of it to ask for.

Pods and Deployments are asked for with a label selector, so the API server drops everything that is no
graph's business before it reaches us (a Pod that loses a label arrives as DELETED, one that gains it as
ADDED, as watch semantics promise). The Dynamo CRDs may be served at v1beta1, v1alpha1 or both:
discovery picks v1beta1 when it serves both kinds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import msgspec

from stream.model.kinds import Watched
from stream.model.objects import (
    COMPONENT_LABEL,
    GRAPH_LABEL,
    Deployment,
    DynamoComponentDeployment,
    DynamoGraphDeployment,
    KubeObject,
    ObjectMeta,
    Pod,
    PodMeta,
)
from stream.sources.client import ApiError, KubeClient

DYNAMO_GROUP = "nvidia.com"
DYNAMO_VERSIONS = ("v1beta1", "v1alpha1")  # in order of preference
DCD_PLURAL = "dynamocomponentdeployments"
DGD_PLURAL = "dynamographdeployments"

T = TypeVar("T")


class ListMeta(msgspec.Struct, rename="camel"):
    resource_version: str = ""
    continue_: str = msgspec.field(default="", name="continue")


class Page(msgspec.Struct, Generic[T]):
    """One page of a List: items lack `kind`, which the typed decoders do not need."""

    metadata: ListMeta = msgspec.field(default_factory=ListMeta)
    items: list[T] = []


@dataclass(frozen=True)
class Resource:
    kind: str
    group: str  # "" for the core group
    version: str
    plural: str
    type: type[Any]
    label_selector: str | None = None
    optional: bool = False  # a watch that may be forbidden or not served without stopping the others
    _decoders: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base

    def describe(self, namespace: str | None) -> str:
        return f"{self.plural} in {'all namespaces' if namespace is None else f'namespace {namespace}'}"

    def page_decoder(self, raw: bool) -> Any:
        """A decoder of List pages: typed items, or raw ones (for the recorder, which keeps them whole)."""
        key = "raw" if raw else "typed"
        decoder = self._decoders.get(key)
        if decoder is None:
            decoder = msgspec.json.Decoder(Page[msgspec.Raw] if raw else Page[self.type])  # type: ignore[name-defined]
            self._decoders[key] = decoder
        return decoder

    def object_decoder(self) -> Any:
        decoder = self._decoders.get("object")
        if decoder is None:
            decoder = self._decoders["object"] = msgspec.json.Decoder(self.type)
        return decoder

    @classmethod
    def of(cls, watched: Watched) -> Resource:
        """A backend's own kind (stream.model.kinds): watched where the cluster serves it."""
        return cls(
            watched.kind,
            watched.group,
            watched.version,
            watched.plural,
            watched.type,
            label_selector=watched.label_selector,
            optional=True,
        )

    def tombstone(self, namespace: str, name: str, uid: str) -> KubeObject:
        """An object gone while nobody watched (found missing by a relist), as a DELETED event carries it."""
        if self.type is Pod:
            return Pod(metadata=PodMeta(name=name, namespace=namespace, uid=uid))
        obj: KubeObject = self.type(metadata=ObjectMeta(name=name, namespace=namespace, uid=uid))
        if isinstance(obj, DynamoComponentDeployment | DynamoGraphDeployment):
            obj.api_version = self.api_version
        return obj


PODS = Resource("Pod", "", "v1", "pods", Pod, label_selector=f"{GRAPH_LABEL},{COMPONENT_LABEL}")
DEPLOYMENTS = Resource("Deployment", "apps", "v1", "deployments", Deployment, label_selector=GRAPH_LABEL)

def dynamo_resources(version: str) -> tuple[Resource, Resource]:
    return (
        Resource("DynamoComponentDeployment", DYNAMO_GROUP, version, DCD_PLURAL, DynamoComponentDeployment),
        Resource("DynamoGraphDeployment", DYNAMO_GROUP, version, DGD_PLURAL, DynamoGraphDeployment),
    )


class _ResourceList(msgspec.Struct):
    resources: list[_APIResource] = []


class _APIResource(msgspec.Struct):
    name: str


class NotAnApiServer(Exception):
    """The server answered an API discovery request with something that is not JSON (an HTML login page,
    a proxy's error page): it is not the Kubernetes API server the configuration means."""


def _resource_names(client: KubeClient, path: str, body: bytes) -> set[str]:
    try:
        return {r.name for r in msgspec.json.decode(body, type=_ResourceList).resources}
    except msgspec.ValidationError:
        return set()  # JSON, but no APIResourceList: nothing of ours is served there
    except msgspec.DecodeError:
        start = body[:60].decode("utf-8", "replace").strip()
        raise NotAnApiServer(
            f"{client.server} answered {path} with something that is not JSON ({start!r}...): "
            "is it a Kubernetes API server?"
        ) from None


async def discover_dynamo(client: KubeClient, timeout: float = 30.0) -> str | None:
    """The served version of the Dynamo CRDs that serves both DCDs and DGDs (v1beta1 first), or None."""
    for version in DYNAMO_VERSIONS:
        try:
            response = await client.request("GET", f"/apis/{DYNAMO_GROUP}/{version}", timeout=timeout)
        except ApiError as exc:
            if exc.status == 404:
                continue
            raise
        names = _resource_names(client, f"/apis/{DYNAMO_GROUP}/{version}", response.body)
        if {DCD_PLURAL, DGD_PLURAL} <= names:
            return version
    return None


async def served(client: KubeClient, resource: Resource, timeout: float = 30.0) -> bool:
    """Whether the cluster serves this resource (its CRD installed); absent is not an error."""
    path = f"/apis/{resource.group}/{resource.version}"
    try:
        response = await client.request("GET", path, timeout=timeout)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return resource.plural in _resource_names(client, path, response.body)
