"""The event filter: lets through only events that can change a diagnosis.

An event becomes a view (see `pipeline.views`); when the view equals the last one seen for the object, the
event is dropped, so resourceVersion bumps, annotation edits and status noise never reach the aggregator.
Pods without the graph and component labels are not diagnosed, so they are not held here either, unless
they just lost those labels (the aggregator must hear that they left). A Pod's view is made with its last
one, so labels are read only when their text changed; a Pod whose labels are not a map of strings is
`Rejected` (its event skipped, its last view kept).

A parallel replay's Pods arrive reduced (`stream.model.events.ReducedPod`: the view, msgpack-encoded by
`encode_view`). Most of them repeat the last view passed on for their Pod, so the filter keeps the bytes of
that view and drops an equal one before decoding it: the same rule as for decoded views, on bytes. A Pod
that arrives decoded forgets its bytes, so the two ways never disagree.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import Any, Generic, Literal, TypeVar

import msgspec

from pipeline.backends.base import Backend, overrides
from pipeline.views import (
    ComponentKey,
    Labels,
    ObjectKey,
    PodView,
    View,
    ViewStore,
    decode_view,
    pod_view,
)
from stream.model.events import CrashOutput, ReducedPod, WatchEvent, pod_key
from stream.model.objects import LabelsProblem, Pod

__all__ = ["EventFilter", "ObjectKey", "ObjectUpdate", "Rejected"]


class ObjectUpdate(msgspec.Struct, frozen=True, gc=False):
    """An object's new view (`upsert`) or its departure (`delete`, with its last view). `previous` is
    the view it replaces (None for a new object): the store already holds the new one."""

    op: Literal["upsert", "delete"]
    key: ObjectKey
    view: View
    time: str | None
    previous: View | None


class Rejected(msgspec.Struct, frozen=True, gc=False):
    """An event whose object cannot be read as its kind must be (a Pod whose labels are not a map of
    strings): skipped, and what was held for that object before is kept."""

    time: str | None
    kind: str
    namespace: str
    name: str
    problem: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}: {self.problem}"


T = TypeVar("T", bound=Hashable)


class _ValuePool(Generic[T]):
    """One object per distinct value, counted, so the replicas of a template share their labels tuple
    and component key instead of holding a copy each; a value no view holds any more is forgotten."""

    __slots__ = ("_canonical", "_refs")

    def __init__(self, canonical: Callable[[T], T] | None = None) -> None:
        self._refs: dict[T, list[Any]] = {}
        self._canonical = canonical

    def acquire(self, value: T) -> T:
        entry = self._refs.get(value)
        if entry is None:
            if self._canonical is not None:
                value = self._canonical(value)
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


def _unchanged(time: str | None) -> None:
    """No time passes before a change (an EventFilter on its own)."""


def _intern_key(key: ComponentKey) -> ComponentKey:
    namespace, graph, component = key
    return (sys.intern(namespace), sys.intern(graph), sys.intern(component))


class EventFilter:
    """Keeps the last view of each object it let through, in the pipeline's one `ViewStore`."""

    def __init__(
        self, store: ViewStore | None = None, backends: Sequence[Backend] = (), explains: bool = False
    ) -> None:
        """`backends`: the workload backends over the same store, which say whether a change of a Pod's
        group alone can change anything (pipeline.backends); without them every such change is passed on.
        `explains`: a Pod's views say the crash it shows, and a new one is passed on, for its output to be
        asked for."""
        self.explains = explains
        self.store = store if store is not None else ViewStore()
        self._pods = self.store.pods
        self._others = self.store.by_type
        self._held = self.store.held
        self._awaited = self.store.down_awaited
        # called with an update's time before the store takes it (Pipeline: time passes to it first, so
        # that a deadline that fell before it is decided on the store as it was then)
        self.before_change: Callable[[str | None], None] = _unchanged
        self._labels: _ValuePool[Labels] = _ValuePool()
        self._components: _ValuePool[ComponentKey] = _ValuePool(_intern_key)
        self._reduced: dict[str, msgspec.Raw] = {}  # pod_key -> the encoded view last passed on
        self._makers = self.store.makers
        # the backends that can say a change of their Pods' claim alone is quiet, by name
        self._quiet = {b.name: b for b in backends if overrides(b, "quiet")}

    def __len__(self) -> int:
        return len(self.store)

    def updates(
        self, events: Iterable[WatchEvent | ReducedPod | CrashOutput]
    ) -> Iterator[ObjectUpdate | Rejected | CrashOutput]:
        """The updates of a batch, in order, each yielded before the next event is looked at (the store
        holds the newest view: whoever reads it must see each update in turn). Most of a parallel
        replay's Pods repeat their last view: they are dropped in this loop, at the cost of a dict lookup,
        before any call."""
        reduced = self._reduced
        observe_event, take_reduced = self.observe_event, self._take_reduced
        update: ObjectUpdate | Rejected | None
        for event in events:
            if type(event) is WatchEvent:
                update = observe_event(event)
            elif type(event) is ReducedPod:
                if (event.type == "MODIFIED" or event.type == "ADDED") and reduced.get(event.key) == event.view:
                    continue
                update = take_reduced(event)
            else:  # a crashed run's output: not an object's, and read by the aggregator alone
                yield event  # type: ignore[misc]
                continue
            if update is not None:
                yield update

    def observe(self, event: WatchEvent | ReducedPod) -> ObjectUpdate | Rejected | None:
        if isinstance(event, ReducedPod):
            return self.observe_reduced(event)
        return self.observe_event(event)

    def observe_event(self, event: WatchEvent) -> ObjectUpdate | Rejected | None:
        if event.type == "BOOKMARK" or event.type == "ERROR":
            return None
        obj = event.object
        if type(obj) is Pod:
            meta = obj.metadata
            try:
                pod = pod_view(obj, self._pods.get((meta.namespace, meta.name)), self.store.claimers, self.explains)
            except LabelsProblem as exc:
                return Rejected(event.time, "Pod", meta.namespace, meta.name, str(exc))
            if self._reduced:
                self._reduced.pop(pod_key(meta.namespace, meta.name), None)
            return self.observe_pod(event.type, pod, event.time)
        make = self._makers.get(type(obj))
        if make is None:  # a kind no diagnosis reads (a Status, say)
            return None
        view = make(obj)
        views = self._others[type(view)]
        key = (view.namespace, view.name)
        old = views.get(key)
        if event.type == "DELETED":
            if old is None or old.uid != view.uid:
                return None
            self.before_change(event.time)
            del views[key]
            return ObjectUpdate("delete", key, old, event.time, old)
        if old == view:
            return None
        self.before_change(event.time)
        views[key] = view
        return ObjectUpdate("upsert", key, view, event.time, old)

    def observe_reduced(self, pod: ReducedPod) -> ObjectUpdate | None:
        """A reduced Pod: dropped on equal bytes, else decoded and decided as any Pod."""
        if (pod.type == "ADDED" or pod.type == "MODIFIED") and self._reduced.get(pod.key) == pod.view:
            return None
        return self._take_reduced(pod)

    def _take_reduced(self, pod: ReducedPod) -> ObjectUpdate | None:
        """A reduced Pod whose bytes differ from the last passed on: decoded and decided as any Pod."""
        kind = pod.type
        if kind == "ADDED" or kind == "MODIFIED":
            self._reduced[pod.key] = pod.view.copy()  # the batch it came in is not kept
        elif kind == "DELETED":
            self._reduced.pop(pod.key, None)
        else:
            return None
        return self.observe_pod(kind, decode_view(pod.view), pod.time)

    def observe_pod(self, kind: str, view: PodView, time: str | None) -> ObjectUpdate | None:
        """The hot path: most events are Pod updates, and most of those change nothing we read. `kind`
        is ADDED, MODIFIED or DELETED (the callers leave BOOKMARK and ERROR out)."""
        key = (view.namespace, view.name)
        old = self._pods.get(key)
        if kind == "DELETED":
            return self._deleted(key, old, view, time)
        if old is None:
            return self._keep(key, None, view, time) if view.component is not None else None
        if (
            old.labels == view.labels
            and old.component == view.component
            and old.finding == view.finding
            and old.uid == view.uid
            and old.crash == view.crash  # a new crash (where crashes are asked about) passes
        ):
            # readiness and restarts matter only to a Pod whose crash-loop verdict is held
            # (pipeline.holds: a hold starts with a finding, which passes, so its view is fresh then),
            # and to a LeaderWorkerSet group's Pods as the group's state says
            if old.claim == view.claim:
                if (key not in self._held and key not in self._awaited) or (
                    old.ready == view.ready and old.restarts == view.restarts and old.finished == view.finished
                ):
                    return None
            elif key not in self._held and self._quiet_flip(old, view):
                # kept (whoever reads the group's readiness later reads it here), not passed on; no time
                # passes first: the backend says it changes no verdict, so a deadline decided after it
                # reads what it would have read before (and the flips are many: it saves a time's parse)
                self._pods[key] = msgspec.structs.replace(
                    view, namespace=old.namespace, labels=old.labels, component=old.component
                )
                return None
        if view.component is None:
            self.before_change(time)
            self._forget(key, old)
            return ObjectUpdate("delete", key, old, time, old)
        return self._keep(key, old, view, time)

    def _deleted(self, key: ObjectKey, old: PodView | None, view: PodView, time: str | None) -> ObjectUpdate | None:
        if old is None or old.uid != view.uid:
            return None
        self.before_change(time)
        self._forget(key, old)
        return ObjectUpdate("delete", key, old, time, old)

    def _keep(self, key: ObjectKey, old: PodView | None, view: PodView, time: str | None) -> ObjectUpdate:
        """Hold the Pod's new view, with its labels and component pooled, and pass it on."""
        assert view.component is not None
        self.before_change(time)
        if old is None:
            component = self._components.acquire(view.component)
            labels = self._labels.acquire(view.labels)
        else:
            # most updates keep the Pod's labels and component: keep the pooled ones, no hashing
            if old.component == view.component:
                component = old.component
            else:
                component = self._components.acquire(view.component)
                if old.component is not None:
                    self._components.release(old.component)
            if old.labels == view.labels:
                labels = old.labels
            else:
                labels = self._labels.acquire(view.labels)
                self._labels.release(old.labels)
        if view.labels is not labels or view.component is not component or view.namespace is not component[0]:
            # a view read with its previous one holds the pooled objects already
            view = msgspec.structs.replace(view, namespace=component[0], labels=labels, component=component)
        self._pods[key] = view
        return ObjectUpdate("upsert", key, view, time, old)

    def _quiet_flip(self, old: PodView, new: PodView) -> bool:
        """A change of the Pod's claim alone (a LeaderWorkerSet Pod's readiness flip) that the backend
        that claims it says cannot change a verdict."""
        claim = old.claim
        backend = self._quiet.get(claim.backend) if claim is not None else None
        return backend is not None and backend.quiet(old, new)

    def _forget(self, key: ObjectKey, old: PodView) -> None:
        del self._pods[key]
        self._release(old)

    def _release(self, old: PodView) -> None:
        self._labels.release(old.labels)
        if old.component is not None:
            self._components.release(old.component)
