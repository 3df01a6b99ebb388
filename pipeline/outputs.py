"""What the aggregator emits: verdict changes for people and scripts, wanted statuses for the patcher, and
what a waiter (`wait`, `get`) sees of each graph.

Sinks receive these and nothing else, so a sink never needs to re-derive a diagnosis: a status write
that meets a newer object (a 409) is rebased by the output itself (`StatusWanted.onto`), not decided again.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from pipeline.findings import Finding
from pipeline.views import StatusView
from stream.model.objects import Condition


class ComponentChange(msgspec.Struct, frozen=True, gc=False):
    """A component started or stopped crash-looping, or its finding changed."""

    time: str | None
    namespace: str
    graph: str
    component: str
    dcd: str | None
    finding: Finding | None
    message: str


class GraphChange(msgspec.Struct, frozen=True, gc=False):
    """A graph's verdict changed: failed (with the sorted crash-looping components) or no longer failed."""

    time: str | None
    namespace: str
    graph: str
    failed: bool
    reason: str | None
    components: tuple[str, ...]
    message: str
    findings: tuple[Finding, ...] = ()


class StatusWanted(msgspec.Struct, frozen=True, gc=False):
    """The status crashwatch wants a DCD or DGD to have, against the status last observed on it.

    `decided` are the conditions crashwatch decides on this write: the one it shares with the operator
    (`Available` on a DCD, `Ready` on a DGD) when it reports or clears a failure there, and the kstatus
    condition `Stalled`, which it owns outright. `conditions` is the observed list with them merged in;
    `state` is set for a DGD only.
    """

    time: str
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    resource_version: str  # of the observation this was decided on: the write's precondition
    decided: tuple[Condition, ...]
    conditions: tuple[Condition, ...]
    state: str | None

    @property
    def condition(self) -> Condition:
        """The first decided condition: the shared one when this write reports or clears a failure."""
        return self.decided[0]

    def owned(self) -> tuple[object, ...]:
        """What of this status crashwatch decides: two wants with the same are the same write."""
        return (self.state, *((c.type, c.status, c.reason, c.message) for c in self.decided))

    def patch(self) -> dict[str, object]:
        """The JSON merge patch body: conditions is a list, so it is sent whole."""
        status: dict[str, object] = {}
        if self.state is not None:
            status["state"] = self.state
        status["conditions"] = [condition_dict(c) for c in self.conditions]
        return {"status": status}

    def onto(self, view: StatusView, now: str) -> StatusWanted | None:
        """This decision (its decided conditions and state) rebased onto the object as `view` reads it now:
        the write that makes it say them, or None when it already does. Decides nothing anew: what a
        writer that lost a race (409) sends once it has read the object again."""
        return status_write(view, self.decided, self.state, now)


def status_write(view: StatusView, decided: tuple[Condition, ...], state: str | None, now: str) -> StatusWanted | None:
    """The write that makes `view` say the `decided` conditions (and `state`, when set), every other
    condition kept as it reads, or None when it says them already. Each decided condition keeps its
    transition time when its status does not change, else takes `now`'s (whole seconds, as metav1.Time)."""
    if not decided:
        return None
    if all(_same(view.condition(c.type), c) for c in decided) and (state is None or view.state == state):
        return None
    # metav1.Time has whole seconds; live events are stamped to the millisecond
    stamp = now.partition(".")[0] + "Z" if "." in now else now
    merged = list(view.conditions)
    stamped = []
    for wanted in decided:
        old = view.condition(wanted.type)
        since = old.last_transition_time if old is not None and old.status == wanted.status else stamp
        wanted = msgspec.structs.replace(wanted, last_transition_time=since or stamp)
        stamped.append(wanted)
        if old is None:
            merged.append(wanted)
        else:
            merged = [wanted if c.type == wanted.type else c for c in merged]
    return StatusWanted(
        time=now,
        api_version=view.api_version,
        kind=view.kind,
        namespace=view.namespace,
        name=view.name,
        uid=view.uid,
        resource_version=view.resource_version,
        decided=tuple(stamped),
        conditions=tuple(merged),
        state=state,
    )


def _same(a: Condition | None, b: Condition) -> bool:
    return (
        a is not None
        and a.status == b.status
        and a.reason == b.reason
        and a.message == b.message
        and a.observed_generation == b.observed_generation
    )


def condition_dict(condition: Condition) -> dict[str, object]:
    """A metav1.Condition with every required field present."""
    out: dict[str, object] = {
        "type": condition.type,
        "status": condition.status,
        "reason": condition.reason,
        "message": condition.message,
        "lastTransitionTime": condition.last_transition_time,
    }
    if condition.observed_generation:
        out["observedGeneration"] = condition.observed_generation
    return out


Verdict = Literal["ready", "failed", "waiting"]


class CrashLooping(msgspec.Struct, frozen=True, gc=False):
    component: str
    finding: Finding


class GraphReadiness(msgspec.Struct, frozen=True, gc=False):
    """One graph as a waiter sees it; emitted whenever any of it changes."""

    time: str | None
    namespace: str
    graph: str
    found: bool  # a DGD of that name exists
    state: str  # as the DGD says (empty before the operator wrote one)
    generation: int
    current: bool  # its status is for its current generation
    verdict: Verdict
    reason: str
    message: str
    components_ready: int  # DCDs available at their generation
    components: int
    not_ready: tuple[str, ...]  # "DCD: why", sorted by name
    crash_looping: tuple[CrashLooping, ...]  # crashwatch's own diagnosis, sorted by component


class Listed(msgspec.Struct, frozen=True, gc=False):
    """Every resource has been listed once: a graph not seen by now does not exist."""

    time: str | None


class ExplainWanted(msgspec.Struct, frozen=True, gc=False):
    """A crash whose cause is to be read from the crashed run's output: the container of the Pod (of that
    uid) whose run ended at `finished_at`. A live reader answers with a `stream.model.events.CrashOutput`
    fed back into the pipeline; a replay has the answer in its record already."""

    time: str | None
    namespace: str
    pod: str
    uid: str
    container: str
    finished_at: str
    restarts: int = 0  # how the run ended: the container's restart count then, its exit code and reason
    exit_code: int = 0
    reason: str = ""


Output = ComponentChange | GraphChange | StatusWanted | GraphReadiness | Listed | ExplainWanted
