"""The graph policy: crash-looping components in, the DGD's verdict out.

A graph fails while any of its components crash-loops; the message lists those components sorted by name,
each with its finding, so it follows the restart counts as they climb.
"""

from __future__ import annotations

import msgspec

from pipeline.crashloop import Finding

REASON_CRASH_LOOPING = "component_crash_looping"
GRAPH_MESSAGE_PREFIX = "Components crash-looping: "


class GraphVerdict(msgspec.Struct, frozen=True, gc=False):
    failed: bool
    reason: str | None
    components: tuple[str, ...]
    message: str
    findings: tuple[Finding, ...] = ()  # one per component, in the same order


HEALTHY = GraphVerdict(False, None, (), "no component is crash-looping")


def graph_verdict(crash_looping: dict[str, Finding]) -> GraphVerdict:
    if not crash_looping:
        return HEALTHY
    names = tuple(sorted(crash_looping))
    details = "; ".join(f"{name}: {crash_looping[name].describe()}" for name in names)
    findings = tuple(crash_looping[name] for name in names)
    return GraphVerdict(True, REASON_CRASH_LOOPING, names, f"{GRAPH_MESSAGE_PREFIX}{details}", findings)
