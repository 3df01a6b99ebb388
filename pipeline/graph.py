"""The graph policy: failing components in, the DGD's verdict out.

A graph fails while any of its components crash-loops or shows another diagnosis (pipeline.diagnoses);
the message lists those components sorted by name, each with its finding, so it follows the restart
counts as they climb. The reason names the diagnosis when all components share one (crash loops:
`component_crash_looping`, as upstream), else `components_failing`. Whether the DGD's `state` says
`failed` for it is the status planner's business (pipeline.status): for crash loops only, by default.
"""

from __future__ import annotations

import msgspec

from pipeline.findings import (
    CERTAIN_CRASH,
    CONFIG_ERROR,
    CRASH_LOOP,
    IMAGE_PULL,
    OOM_KILLED,
    RESTART_LOOP,
    UNSCHEDULABLE,
    Finding,
)
from pipeline.outputs import GraphChange

REASON_CRASH_LOOPING = "component_crash_looping"
GRAPH_MESSAGE_PREFIX = "Components crash-looping: "
FAILING_PREFIX = "Components failing: "
REASON_MIXED = "components_failing"
# the graph's reason (a DGD `Ready` reason with --failed-state all) when its components share a diagnosis
REASONS = {
    CRASH_LOOP: REASON_CRASH_LOOPING,
    CERTAIN_CRASH: "component_crashed_with_certain_cause",
    OOM_KILLED: "component_oom_killed",
    RESTART_LOOP: "component_restart_looping",
    IMAGE_PULL: "component_image_pull_failing",
    CONFIG_ERROR: "component_config_error",
    UNSCHEDULABLE: "component_unschedulable",
}


class GraphVerdict(msgspec.Struct, frozen=True, gc=False):
    failed: bool
    reason: str | None
    components: tuple[str, ...]
    message: str
    findings: tuple[Finding, ...] = ()  # one per component, in the same order


HEALTHY = GraphVerdict(False, None, (), "no component is crash-looping")


def graph_verdict(failing: dict[str, Finding]) -> GraphVerdict:
    if not failing:
        return HEALTHY
    names = tuple(sorted(failing))
    details = "; ".join(f"{name}: {failing[name].describe()}" for name in names)
    findings = tuple(failing[name] for name in names)
    kinds = {finding.diagnosis for finding in findings}
    if kinds == {CRASH_LOOP}:
        return GraphVerdict(True, REASON_CRASH_LOOPING, names, f"{GRAPH_MESSAGE_PREFIX}{details}", findings)
    reason = REASONS.get(kinds.pop(), REASON_MIXED) if len(kinds) == 1 else REASON_MIXED
    return GraphVerdict(True, reason, names, f"{FAILING_PREFIX}{details}", findings)


# what fails a DGD (`state: failed`) by default: a crash loop, as upstream, and a crash whose cause is certain
FAILING = frozenset((CRASH_LOOP, CERTAIN_CRASH))


def crash_loops(verdict: GraphVerdict) -> GraphVerdict:
    """The verdict of the crash-looping components alone (and of those whose crash has a certain cause):
    what a DGD fails for by default."""
    if verdict.reason == REASON_CRASH_LOOPING or not verdict.failed:
        return verdict
    pairs = zip(verdict.components, verdict.findings, strict=True)
    return graph_verdict({name: finding for name, finding in pairs if finding.diagnosis in FAILING})


class _Graph:
    __slots__ = ("failing", "verdict")

    def __init__(self) -> None:
        self.failing: dict[str, Finding] = {}
        self.verdict: GraphVerdict = HEALTHY


class Graphs:
    """Each graph's failing components and its verdict: components are set as their verdicts change, and
    a graph is recomputed once after all the components an update touched, so a Pod moving between two
    components of one graph never shows the graph recovering for a moment. A graph with no failing
    component is forgotten."""

    __slots__ = ("_graphs",)

    def __init__(self) -> None:
        self._graphs: dict[tuple[str, str], _Graph] = {}

    def set(self, namespace: str, graph: str, component: str, finding: Finding | None) -> None:
        state = self._graphs.get((namespace, graph))
        if state is None:
            state = self._graphs[(namespace, graph)] = _Graph()
        if finding is None:
            state.failing.pop(component, None)
        else:
            state.failing[component] = finding

    def recompute(self, key: tuple[str, str], time: str | None) -> GraphChange | None:
        """The graph's change of verdict, if any, since it was last recomputed."""
        state = self._graphs[key]
        verdict = graph_verdict(state.failing)
        if not state.failing:
            del self._graphs[key]
        if verdict == state.verdict:
            return None
        state.verdict = verdict
        return GraphChange(
            time=time,
            namespace=key[0],
            graph=key[1],
            failed=verdict.failed,
            reason=verdict.reason,
            components=verdict.components,
            message=verdict.message,
            findings=verdict.findings,
        )

    def verdict(self, key: tuple[str, str]) -> GraphVerdict:
        state = self._graphs.get(key)
        return state.verdict if state is not None else HEALTHY

    def failed(self) -> dict[tuple[str, str], GraphVerdict]:
        return {key: state.verdict for key, state in self._graphs.items() if state.verdict.failed}

    def __len__(self) -> int:
        return len(self._graphs)
