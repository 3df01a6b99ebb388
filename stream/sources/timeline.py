"""Time read from recorded logs never goes back: one rule for every way a replay reads them.

The core takes time from the events (a recovery window or a grace ends by an event's time, and by a
batch's last one), so a log whose times go back (two recordings one after the other, clocks that
disagree) would give verdicts that depend on where batches happen to end: a file read in one process,
by worker processes, from a pipe record by record, or as several files. Here every record passes, in
the log's order, before the pipeline sees it, and one whose time is earlier than the latest time read so
far is taken at that latest time; so is one without a time (or with one that cannot be read) once a
time has been read, which is the time the core gives such an observation anyway. Times in order are left
exactly as they are, and a log without times stays without, so such logs replay as before.

Why this rule rather than starting afresh where time jumps back: the objects carry times of their own
(a condition's lastTransitionTime, a container's startedAt) that a replay cannot rewrite, and what a
graph looks like at the end depends on everything read before; a live watcher, which stamps records as
they arrive, never sees time go back either, and this reads the log as it would have seen it.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import msgspec

from stream.model.events import BadRecord, CrashOutput, ReducedPod, WatchEvent

Item = WatchEvent | ReducedPod | CrashOutput | BadRecord

_decode_time = msgspec.msgpack.Decoder(str | None).decode
_encode = msgspec.msgpack.encode
_parse = datetime.datetime.fromisoformat


@dataclass(frozen=True)
class Backwards:
    """The first time that went back: in which log, from which time to which, and where in the batch
    it was met."""

    log: str
    latest: str
    time: str
    index: int

    def __str__(self) -> str:
        return (
            f"{self.log}: time goes back from {self.latest} to {self.time} (recordings one after the other?): "
            "a record older than the latest time read is taken at that time (said once)"
        )


def _moment(text: str) -> datetime.datetime | None:
    """An RFC 3339 time, comparable with any other (a time without an offset is local, as the core reads it)."""
    try:
        moment = _parse(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.astimezone()


class Timeline:
    """The latest time read across a replay's logs, and how many records were taken at it."""

    def __init__(self) -> None:
        self.latest: str | None = None
        self._latest: datetime.datetime | None = None  # the latest as a moment, with its offset
        self.moved = 0  # records taken at a later time than their own (not counting those without one)
        self.first: Backwards | None = None

    def forward(self, log: str, batch: list[Item]) -> Backwards | None:
        """Take each record of the batch, in place, at the latest time read when its own is earlier or
        missing; the first time that went back, once in a replay (None otherwise)."""
        first = self.first
        for index, item in enumerate(batch):
            kind = type(item)
            if kind is BadRecord:
                continue
            text: str | None = _decode_time(item.time) if kind is ReducedPod else item.time  # type: ignore[union-attr,arg-type,assignment]
            if text == self.latest:
                continue
            moment: datetime.datetime | None
            try:  # the usual record: a time with an offset, not earlier than the latest
                moment = _parse(text)  # type: ignore[arg-type]
                later = moment >= self._latest  # type: ignore[operator]
            except (TypeError, ValueError):  # no time, none readable, none before, or one without an offset
                moment = _moment(text) if text is not None else None
                later = moment is not None and (self._latest is None or moment >= self._latest)
            if later:
                self.latest, self._latest = text, moment
            elif self.latest is not None:  # (before any time is read there is nothing to take it at)
                if moment is not None:
                    self.moved += 1
                    if self.first is None:
                        self.first = Backwards(log, self.latest, str(text), index)
                batch[index] = _at(item, self.latest)  # type: ignore[arg-type]
        return self.first if first is None else None


def _at(item: WatchEvent | ReducedPod | CrashOutput, time: str | None) -> Item:
    if type(item) is ReducedPod:
        item.time = msgspec.Raw(_encode(time))
        return item
    if type(item) is WatchEvent:
        item.time = time
        return item
    return msgspec.structs.replace(item, time=time)
