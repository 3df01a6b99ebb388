"""What the aggregator emits: verdict changes for people and scripts, wanted statuses for the patcher, and
what a waiter (`wait`, `get`) sees of each graph.

Sinks receive these and nothing else, so a sink never needs to re-derive a diagnosis.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from pipeline.crashloop import Finding
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


Output = ComponentChange | GraphChange | StatusWanted | GraphReadiness | Listed
