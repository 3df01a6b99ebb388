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
import itertools
import operator
from dataclasses import dataclass

import msgspec

from stream.model.events import BadRecord, CrashOutput, ReducedPod, WatchEvent

Item = WatchEvent | ReducedPod | CrashOutput | BadRecord

_parse = datetime.datetime.fromisoformat
_time = operator.attrgetter("time")


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


def _read(batch: list[Item]) -> tuple[list[str | None], list[datetime.datetime | None], bool]:
    """Each record's time, as text and as a moment (None: none, or one that cannot be read; a bad record
    has none), and whether every record had one that was read (then a moment may lack an offset)."""
    times: list[str | None] = list(map(_time, batch))
    try:  # the usual batch: each time read once, in C
        return times, list(map(_parse, times)), True  # type: ignore[arg-type]
    except (TypeError, ValueError):  # none, or one that cannot be read
        return times, [_moment(time) if time is not None else None for time in times], False


def _moment(text: str) -> datetime.datetime | None:
    """An RFC 3339 time, comparable with any other (a time without an offset is local, as the core reads it)."""
    try:
        moment = _parse(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.astimezone()


def _in_order(moments: list[datetime.datetime], latest: datetime.datetime | None) -> bool:
    """Whether these moments, each with an offset, go on from `latest` without going back."""
    try:
        return (
            moments[0].tzinfo is not None  # then none lacks one: comparing it with one that has raises
            and (latest is None or moments[0] >= latest)
            and all(map(operator.le, moments, itertools.islice(moments, 1, None)))
        )
    except TypeError:  # a time without an offset among times with one
        return False


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
        if not batch:
            return None
        first = self.first
        times, moments, whole = _read(batch)
        latest = self._latest
        if whole and _in_order(moments, latest):  # type: ignore[arg-type]  # the usual batch: kept as it is
            self.latest, self._latest = times[-1], moments[-1]
            return None
        text, moved = self.latest, 0
        for index, moment in enumerate(moments):
            if moment is not None:
                try:
                    later = latest is None or moment >= latest
                except TypeError:  # a time without an offset, beside the latest with one: local
                    moment = moment.astimezone()
                    later = moment >= latest  # type: ignore[operator]
                if later:
                    text, latest = times[index], moment if moment.tzinfo is not None else moment.astimezone()
                    continue
                moved += 1
                if self.first is None:
                    self.first = Backwards(log, text, str(times[index]), index)  # type: ignore[arg-type]
            elif text is None or type(batch[index]) is BadRecord:  # nothing read yet to take it at; no record
                continue
            item = batch[index]
            if type(item) is WatchEvent:  # most records: no call
                item.time = text
            else:
                batch[index] = _at(item, text)  # type: ignore[arg-type]
        self.latest, self._latest = text, latest
        self.moved += moved
        return self.first if first is None else None


def _at(item: WatchEvent | ReducedPod | CrashOutput, time: str | None) -> Item:
    if isinstance(item, CrashOutput):  # a frozen struct
        return msgspec.structs.replace(item, time=time)
    item.time = time
    return item
