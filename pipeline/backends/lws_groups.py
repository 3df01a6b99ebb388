"""The group-recreation rule: LeaderWorkerSet groups that crash-loop by being recreated.

Under LeaderWorkerSet's default restart policy (`RecreateGroupOnPodRestart`, which Dynamo keeps) the
first restart of any container of a group makes LWS delete the group's leader, and with it the whole
group, and create it anew with restart counts at 0: no container reaches the two restarts of the
crash-loop rule, and kubelet's CrashLoopBackOff never builds up. So a group is *recreation-looping*
when its leader was replaced by a new Pod (a new uid for the same group) at least `MIN_RECREATIONS`
times in a row, each time after a container of the group exited non-zero (or a group Pod failed),
with at most the window between consecutive recreations, and its current Pods are not all Ready.
A recreation that follows no failure (a rollout, a manual delete) ends the streak.

Per group only the streak, the last recreation's time and the failures not yet followed by a
recreation are kept: memory is bounded by the number of groups, never by the number of Pods that
came and went. Time comes from the events; an event without a time counts as within the window.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import msgspec

from pipeline.findings import Finding, Part
from pipeline.views import Claim
from stream.model.times import seconds

LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
MIN_RECREATIONS = 2
DEFAULT_WINDOW = 600.0  # seconds: --group-window
LOOP_MARK = " is recreation-looping: "  # in every group finding's text: a status that says it is ours

GroupKey = tuple[str, str, str]  # namespace, LeaderWorkerSet, group index


def group_identity(labels: Mapping[str, str]) -> tuple[tuple[str, str], bool] | None:
    """What a Pod's labels say of its group: its LeaderWorkerSet and group index (the place the backend
    claims it for), and whether it leads the group. None: no group's Pod."""
    lws = labels.get(LWS_NAME)
    if not lws:
        return None
    group = labels.get(LWS_GROUP_INDEX)
    if group is None:
        return None
    return (lws, group), labels.get(LWS_WORKER_INDEX, "0") == "0"


def group_finding(lws: str, group: str, recreations: int, failure: Finding) -> Finding:
    """The finding of a recreation-looping group: what LWS hides by recreating it."""
    container = f"container {failure.container} of " if failure.container else ""
    exited = f"exited with code {failure.exit_code}" if failure.container else "failed"
    why = f" ({failure.reason})" if failure.reason and failure.reason not in ("Error", "PodFailed") else ""
    text = (
        f"LeaderWorkerSet {lws} group {group}{LOOP_MARK}recreated {recreations} times, each after a failure "
        f"(last: {container}Pod {failure.pod} {exited}{why})"
    )
    return msgspec.structs.replace(failure, part=group_part(lws, group, recreations), text=text)


def budget_finding(lws: str, group: str, message: str) -> Finding:
    """LWS itself says the group's restart budget ran out (a `Failed` condition on the LWS)."""
    text = f"LeaderWorkerSet {lws} group {group}{LOOP_MARK}its restart budget is exhausted ({message})"
    return Finding("", "", 0, 0, "RestartBudgetExhausted", part=group_part(lws, group, 0), text=text)


def group_part(lws: str, group: str, recreations: int) -> Part:
    """A group loop's own fields, as lines show them (the last, the recreations, is what climbs)."""
    return (("lws", lws), ("group", group), ("recreations", recreations))


_HELD = re.compile(
    r"LeaderWorkerSet (?P<lws>\S+) group (?P<group>\S+) is recreation-looping: recreated (?P<count>\d+) times"
    r".*\(last: (?:container (?P<container>\S+) of )?Pod (?P<pod>\S+) (?:exited with code (?P<exit>-?\d+)|failed)"
)


def held_finding(text: str) -> Finding:
    """A group loop a status reports, carried over a watcher restart that lost the history: the same
    words, so nothing is rewritten, until the group is Ready again; what the words say of the group and
    its last failure is read back from them."""
    found = _HELD.match(text)
    if found is None:
        return Finding("", "", 0, 0, "", text=text)
    return Finding(
        found["pod"],
        found["container"] or "",
        0,
        int(found["exit"] or 0),
        "",
        part=group_part(found["lws"], found["group"], int(found["count"])),
        text=text,
    )


def is_group_text(message: str) -> bool:
    return message.startswith("LeaderWorkerSet ") and LOOP_MARK in message


class GroupHistory:
    """One group's recent recreations, its current Pods, and the failure a recreation would follow."""

    __slots__ = ("component", "emptied", "failure", "last_failure", "last_time", "leader_uid", "pods", "streak")

    def __init__(self) -> None:
        # the names of its current Pods; their readiness is read from the Pods' views when it is needed,
        # so a readiness flip that cannot change a verdict need not reach the group at all
        self.pods: set[str] = set()
        self.leader_uid = ""
        self.failure: Finding | None = None  # seen on the current incarnation
        self.last_failure: Finding | None = None  # the one the last recreation followed
        self.streak = 0
        self.last_time: float | None = None
        self.component: tuple[str, str, str] | None = None
        self.emptied: float | None = None  # when its last Pod left, while it has none

    def observe(self, name: str, uid: str, pod: Claim | None, time: str | None, window: float) -> None:
        """A Pod of the group appeared, changed (`pod`) or left (None), at `time` (RFC 3339: read only when
        the group was recreated, not on every readiness flip)."""
        if pod is None:
            self.pods.discard(name)
            return
        if pod.lead and uid != self.leader_uid:
            if self.leader_uid:
                self._recreated(seconds(time), window)
            self.leader_uid = uid
        if pod.failure is not None:
            self.failure = pod.failure
        self.pods.add(name)
        self.emptied = None

    def _recreated(self, when: float | None, window: float) -> None:
        if self.failure is None:  # not after a failure: a rollout or a delete by hand ends the streak
            self.streak, self.last_failure, self.last_time = 0, None, None
            return
        if when is not None and self.last_time is not None and when - self.last_time > window:
            self.streak = 0
        self.streak += 1
        self.last_time = when if when is not None else self.last_time
        self.last_failure, self.failure = self.failure, None

    def looping(self, ready: bool) -> bool:
        """Whether the group is recreation-looping, given whether its current Pods are all Ready."""
        return self.streak >= MIN_RECREATIONS and not ready
