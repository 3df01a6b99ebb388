"""The graph policy: failing components in, the DGD's verdict out.

A graph fails while any of its components crash-loops or shows another diagnosis (pipeline.diagnoses);
the message lists those components sorted by name, each with its finding, so it follows the restart
counts as they climb. The reason names the diagnosis when all components share one (crash loops:
`component_crash_looping`, as upstream), else `components_failing`. Whether the DGD's `state` says
`failed` for it is the status planner's business (pipeline.status): for crash loops only, by default.
"""

from __future__ import annotations

import msgspec

from pipeline.findings import CONFIG_ERROR, CRASH_LOOP, IMAGE_PULL, OOM_KILLED, RESTART_LOOP, UNSCHEDULABLE, Finding

REASON_CRASH_LOOPING = "component_crash_looping"
GRAPH_MESSAGE_PREFIX = "Components crash-looping: "
FAILING_PREFIX = "Components failing: "
REASON_MIXED = "components_failing"
# the graph's reason (a DGD `Ready` reason with --failed-state all) when its components share a diagnosis
REASONS = {
    CRASH_LOOP: REASON_CRASH_LOOPING,
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


def crash_loops(verdict: GraphVerdict) -> GraphVerdict:
    """The verdict of the crash-looping components alone: what upstream fails a DGD for."""
    if verdict.reason == REASON_CRASH_LOOPING or not verdict.failed:
        return verdict
    pairs = zip(verdict.components, verdict.findings, strict=True)
    return graph_verdict({name: finding for name, finding in pairs if finding.diagnosis == CRASH_LOOP})
