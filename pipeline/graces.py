"""Waiting out a grace: the diagnoses of a steady condition that may still resolve by itself.

An image pull that fails, a Secret not there yet, a Pod no node can take: each may resolve by itself (kubelet
retries, the Secret comes, an autoscaler brings a node), so its finding comes into force only once it has
lasted its grace (`Settings.grace`, pipeline.diagnoses), counted from a time the object carries, so a
restarted watcher decides the same. This tracker keeps which Pods wait or are in force, and the deadlines;
time passes as events, as for the holds (pipeline.holds), and it reads no clock.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from pipeline.diagnoses import Settings
from pipeline.findings import Finding
from stream.model.times import seconds


class Graced:
    """One Pod with a graced finding: which incarnation, the finding as last seen, since when its grace
    counts, and whether the grace has passed."""

    __slots__ = ("active", "deadline", "finding", "since", "uid")

    def __init__(self, uid: str, finding: Finding, since: float | None) -> None:
        self.uid = uid
        self.finding = finding
        self.since = since
        self.active = False
        self.deadline: float | None = None  # the one waiting in the heap for it


class Graces:
    """The Pods whose finding waits for a grace or is in force after one, and their deadlines.

    Time passes as events, as for holds: each observation's time, a live clock's ticks. A finding whose
    grace counts from an object's time (`since`) is weighed against it; one that says none counts from
    when it was first seen. Without any time, a graced finding never comes into force."""

    __slots__ = ("deadlines", "now", "settings", "tracked")

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.tracked: dict[tuple[str, str], Graced] = {}
        self.deadlines: list[tuple[float, tuple[str, str], str]] = []
        self.now: float | None = None

    def observe(self, key: tuple[str, str], uid: str, finding: Finding, now: float | None) -> Finding | None:
        """The finding in force for this observation of a graced finding (None while its grace runs)."""
        if now is not None and (self.now is None or now > self.now):
            self.now = now
        now = self.now
        entry = self.tracked.get(key)
        same = entry is not None and entry.uid == uid and entry.finding.diagnosis == finding.diagnosis
        since = seconds(finding.since) if finding.since else None
        if since is None:
            since = entry.since if same and entry is not None else now
        if not same or entry is None:
            entry = self.tracked[key] = Graced(uid, finding, since)
        else:
            if entry.since != since:
                entry.active = False
            entry.finding, entry.since = finding, since
        grace = self.settings.grace(finding)
        if entry.active or grace <= 0:
            entry.active = True
            return finding
        if since is None:
            return None  # no time to count the grace from: never in force
        deadline = since + grace
        if now is not None and now >= deadline:
            entry.active = True
            return finding
        if entry.deadline != deadline:
            entry.deadline = deadline
            heapq.heappush(self.deadlines, (deadline, key, uid))
        return None

    def forget(self, key: tuple[str, str]) -> bool:
        """The Pod no longer shows a graced finding; whether it had one in force."""
        entry = self.tracked.pop(key, None)
        return entry is not None and entry.active

    def due(self, now: float) -> Iterator[tuple[float, tuple[str, str], Finding]]:
        """Time passed to `now`: the findings whose grace ended by then, each with the moment it ended."""
        if self.now is None or now > self.now:
            self.now = now
        deadlines, tracked = self.deadlines, self.tracked
        while deadlines and deadlines[0][0] <= now:
            deadline, key, uid = heapq.heappop(deadlines)
            entry = tracked.get(key)
            if entry is None or entry.active or entry.uid != uid or entry.deadline != deadline:
                continue
            entry.active = True
            yield deadline, key, entry.finding
