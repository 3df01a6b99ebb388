"""The event type every source emits: a live watch and a recorded log both decode to `WatchEvent`.

`time` is when the event was recorded (recorded logs carry it in a top-level "time" key; live sources
stamp arrival), or None when the log has none. A parallel replay's workers send a Pod event already
reduced (`ReducedPod`): its view is encoded by whoever reduced it, and the pipeline decodes it only when it
differs from the last one it passed on for that Pod.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import msgspec

from stream.model.objects import KubeObject

EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]


class WatchEvent(msgspec.Struct, gc=False, omit_defaults=True):
    type: EventType
    object: KubeObject
    time: str | None = None


def pod_key(namespace: str, name: str) -> str:
    """One string for a Pod's namespace and name, unambiguous even for names a bad log makes up."""
    return f"{len(namespace)}:{namespace}{name}"


class ReducedPod(msgspec.Struct, array_like=True, gc=False):
    """A Pod event as a decoding worker sends it: the Pod's key and the event's time decoded at once (every
    record's time is read: stream.sources.timeline), its view still msgpack-encoded (a few hundred bytes
    instead of a ~10 KB Pod), `line` its number in the worker's range."""

    line: int
    key: str  # pod_key(namespace, name)
    type: str
    view: msgspec.Raw
    time: str | None


class CrashOutput(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """What a crashed container's run printed, read from the kubelet once per crash (or from a record of
    it): the core reads the cause of the crash from it. The crash is the container's run that ended at
    `finished_at` (its `terminated.finishedAt`) in the Pod of that `uid`; `text` is the output's end, bounded
    by the reader (whole lines, UTF-8 with what is not replaced). `time` as for a `WatchEvent`."""

    namespace: str
    pod: str
    uid: str
    container: str
    finished_at: str
    text: str
    time: str | None = None
    # how the run ended, as the Pod said when its output was asked for (ExplainWanted): the container's
    # restart count then, its exit code and the kubelet's reason
    restarts: int = 0
    exit_code: int = 0
    reason: str = ""


class BadRecord(msgspec.Struct, frozen=True):
    """A record that could not be read: where it is (file:line, item) and what is wrong with it."""

    where: str
    problem: str
    time: ClassVar[None] = None  # it has none: read alike with every record's (stream.sources.timeline)

    def __str__(self) -> str:
        return f"{self.where}: {self.problem}"
