"""The event filter: lets through only events that can change a diagnosis.

An event becomes a view (see `pipeline.views`); when the view equals the last one seen for the object, the
event is dropped, so resourceVersion bumps, annotation edits and status noise never reach the aggregator.
Pods without the graph and component labels are not diagnosed, so they are not held here either, unless
they just lost those labels (the aggregator must hear that they left).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Generic, Literal, TypeVar

import msgspec

from pipeline.views import (
    ComponentKey,
    DeploymentView,
    Labels,
    PodView,
    StatusView,
    View,
    deployment_view,
    pod_view,
    status_view,
)
from stream.events import WatchEvent
from stream.objects import Deployment, DynamoComponentDeployment, DynamoGraphDeployment, Pod

# Objects are keyed by namespace and name: a delete and a recreate that arrive as one update are then
# just an update, and the uid guards against a late DELETED of an object that was already replaced.
ObjectKey = tuple[str, str]


class ObjectChange(msgspec.Struct, frozen=True, gc=False):
    """An object's new view (`upsert`) or its departure (`delete`, with its last view)."""

    op: Literal["upsert", "delete"]
    key: ObjectKey
    view: View
    time: str | None


def view_of(event: WatchEvent) -> View | None:
    obj = event.object
    if isinstance(obj, Pod):
        return pod_view(obj)
    if isinstance(obj, Deployment):
        return deployment_view(obj)
    if isinstance(obj, DynamoComponentDeployment | DynamoGraphDeployment):
        return status_view(obj)
    return None


def _tracked(view: View) -> bool:
    return not isinstance(view, PodView) or view.component is not None


T = TypeVar("T", bound=Hashable)


class _Shared(Generic[T]):
    """One object per distinct value, counted, so the replicas of a template share their labels tuple
    and component key instead of holding a copy each; a value no view holds any more is forgotten."""

    __slots__ = ("_refs",)

    def __init__(self) -> None:
        self._refs: dict[T, list[Any]] = {}

    def acquire(self, value: T) -> T:
        entry = self._refs.get(value)
        if entry is None:
            self._refs[value] = [value, 1]
            return value
        entry[1] += 1
        return entry[0]  # type: ignore[no-any-return]

    def release(self, value: T) -> None:
        entry = self._refs[value]
        entry[1] -= 1
        if not entry[1]:
            del self._refs[value]

    def __len__(self) -> int:
        return len(self._refs)


class EventFilter:
    """Remembers the last view of each object it let through."""

    def __init__(self) -> None:
        self._views: dict[tuple[type, str], dict[ObjectKey, View]] = {}
        self._labels: _Shared[Labels] = _Shared()
        self._components: _Shared[ComponentKey] = _Shared()

    def __len__(self) -> int:
        return sum(len(views) for views in self._views.values())

    def observe(self, event: WatchEvent) -> ObjectChange | None:
        if event.type in ("BOOKMARK", "ERROR"):
            return None
        view = view_of(event)
        if view is None:
            return None
        kind = view.kind if isinstance(view, StatusView) else type(view).__name__
        views = self._views.setdefault((type(view), kind), {})
        key = (view.namespace, view.name)
        old = views.get(key)
        if event.type == "DELETED":
            if old is None or old.uid != view.uid:
                return None
            self._forget(views, key, old)
            return ObjectChange("delete", key, old, event.time)
        if old == view:
            return None
        if not _tracked(view):
            if old is None:
                return None
            self._forget(views, key, old)
            return ObjectChange("delete", key, old, event.time)
        if isinstance(view, PodView) and view.component is not None:
            view = msgspec.structs.replace(
                view, labels=self._labels.acquire(view.labels), component=self._components.acquire(view.component)
            )
            if isinstance(old, PodView):
                self._release(old)
        views[key] = view
        return ObjectChange("upsert", key, view, event.time)

    def _forget(self, views: dict[ObjectKey, View], key: ObjectKey, old: View) -> None:
        del views[key]
        if isinstance(old, PodView):
            self._release(old)

    def _release(self, old: PodView) -> None:
        self._labels.release(old.labels)
        if old.component is not None:
            self._components.release(old.component)


__all__ = ["DeploymentView", "EventFilter", "ObjectChange", "ObjectKey", "PodView", "StatusView", "view_of"]
