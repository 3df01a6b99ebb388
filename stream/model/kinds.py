"""The kinds a workload backend adds to what crashwatch reads: their typed projections, and where the API
serves them.

Pods, Deployments and the Dynamo kinds are read by the one typed decode of `stream.model.objects`. A
backend's own workload object (a LeaderWorkerSet, say) is declared by the backend itself (pipeline.backends)
and registered here, so that a log, a List and a live watch read it as they read every kind, by the generic
path of `stream.model.decode` (a backend's objects are few beside the Pods), and the live wiring watches it
where the API server serves it. Nothing here knows any backend by name.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from stream.model.events import EventType, WatchEvent


@dataclass(frozen=True)
class Watched:
    """A backend's kind: its typed projection (a msgspec Struct tagged by `kind`, with `metadata`) and where
    the API serves it. Watched where the cluster serves it, and absent without stopping anything else."""

    kind: str
    group: str
    version: str
    plural: str
    type: type[Any]
    label_selector: str | None = None


_registered: dict[str, Watched] = {}
_events: dict[str, type[Any]] = {}  # the event type that reads each registered kind in its `object`


def register(watched: Watched) -> None:
    """Read `watched.kind` from now on (registering a kind twice is the same kind)."""
    _registered[watched.kind] = watched
    _events[watched.kind] = msgspec.defstruct(
        f"{watched.kind}Event",
        [("type", EventType), ("object", watched.type), ("time", str | None, None)],
    )


def unregister(kind: str) -> None:
    _registered.pop(kind, None)
    _events.pop(kind, None)


def registered() -> Iterator[Watched]:
    return iter(tuple(_registered.values()))


def is_registered(kind: str) -> bool:
    return kind in _registered


def convert(value: dict[str, Any]) -> WatchEvent:
    """A parsed watch event of a registered kind, typed. Raises msgspec.ValidationError, with the path of
    the field from the event's top (`$.object...`), as the typed decode of the other kinds says it."""
    event = msgspec.convert(value, _events[value["object"]["kind"]])
    return WatchEvent(type=event.type, object=event.object, time=event.time)
