"""The event type every source emits: a live watch and a recorded log both decode to `WatchEvent`.

`time` is when the event was recorded (recorded logs carry it in a top-level "time" key; live sources
stamp arrival), or None when the log has none. (A parallel replay's workers send a Pod event already
reduced to its view, `PodObservation`, which the pipeline takes the same way.)
"""

from __future__ import annotations

from typing import Literal

import msgspec

from stream.objects import KubeObject

EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]


class WatchEvent(msgspec.Struct, gc=False, omit_defaults=True):
    type: EventType
    object: KubeObject
    time: str | None = None


class BadRecord(msgspec.Struct, frozen=True):
    """A record that could not be read: where it is (file:line, item) and what is wrong with it."""

    where: str
    problem: str

    def __str__(self) -> str:
        return f"{self.where}: {self.problem}"
