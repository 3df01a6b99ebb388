"""`--namespace-selector`: which namespaces match a label selector, as they are relabelled, created and deleted.

A reflector lists and watches Namespaces with the selector (the API server matches it: a namespace that
stops matching arrives as DELETED, one that starts as ADDED; a relist after 410 turns the difference into
the same events). Each change is applied to the watcher's `NamespaceFilter`; once the objects' reflectors
run, a namespace that stops being kept has its objects handed on as DELETED (`Reflector.forget`), and one
that starts being kept makes every object reflector list again (`Reflector.relist`): its objects were
dropped as they came, so only a list can bring them back. Relabelling a namespace is rare; a list then is
the price of never missing an object.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import msgspec

from stream.model.events import EventType
from stream.model.objects import ObjectMeta, Status
from stream.model.shards import NamespaceFilter
from stream.sources.client import KubeClient
from stream.sources.reflector import Log, Reflector, WatchSettings
from stream.sources.resources import Resource


class Namespace(msgspec.Struct, gc=False, tag_field="kind", tag="Namespace", omit_defaults=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


class _NamespaceEvent(msgspec.Struct, gc=False, omit_defaults=True):
    type: EventType
    object: Namespace | Status
    time: str | None = None


_read_namespace_event = msgspec.json.Decoder(_NamespaceEvent).decode
STATUS_KINDS = ("DynamoGraphDeployment", "DynamoComponentDeployment")


def namespaces(selector: str) -> Resource:
    return Resource("Namespace", "", "v1", "namespaces", Namespace, label_selector=selector)


class SelectedNamespaces:
    """The namespaces a selector matches, kept in `filter`, and what the object reflectors must do when
    that set changes after they started."""

    def __init__(
        self,
        client: KubeClient,
        namespace_filter: NamespaceFilter,
        settings: WatchSettings | None = None,
        log: Log | None = None,
    ) -> None:
        assert namespace_filter.selector is not None
        self.filter = namespace_filter
        self.log = log or (lambda message: None)
        self.reflectors: Sequence[Reflector] = ()  # those of the objects, once they run
        self.reflector = Reflector(
            client,
            namespaces(namespace_filter.selector.text),
            None,
            self._take,  # type: ignore[arg-type]
            settings,
            log,
            read=_read_namespace_event,  # type: ignore[arg-type]
        )

    async def run(self, listed: Callable[[], Awaitable[None]] | None = None) -> None:
        """List (then tell `listed`, before which no object reflector should list), then watch for ever."""
        await self.reflector.run(listed)

    async def _take(self, events: list[_NamespaceEvent]) -> None:
        grew: list[str] = []
        dropped: list[str] = []
        for event in events:
            obj = event.object
            if not isinstance(obj, Namespace):
                continue
            meta = obj.metadata
            change = self.filter.select(meta.name, None if event.type == "DELETED" else meta.labels)
            if change is True:
                grew.append(meta.name)
            elif change is False:
                dropped.append(meta.name)
        if not self.reflectors:  # the first list: the object reflectors have not listed yet
            return
        # the objects whose status is written go first: their Pods going next then writes nothing (a
        # namespace let go is no longer this watcher's to write, whatever it last wrote there stays)
        order = sorted(self.reflectors, key=lambda r: r.resource.kind not in STATUS_KINDS)
        for name in dropped:
            self.log(f"namespace {name} no longer matches {self.filter.selector}: forgetting its objects")
            for reflector in order:
                await reflector.forget(name)
        if grew:
            self.log(f"namespace {', '.join(grew)} now matches {self.filter.selector}: listing again")
            for reflector in self.reflectors:
                reflector.relist()
