"""Whether a graph is ready, failed or still coming up: what `crashwatch wait` and `get` report.

A waiter must never take a crash loop for a slow start, nor a stale status for a current one. So a graph
is *failed* when crashwatch's own diagnosis of its Pods finds a crash loop (whatever its status says yet),
or when its status, written for the current generation, says so (`Stalled=True`, or `state: failed` for
any reason); *ready* when it is `successful` for its current generation and no component crash-loops;
and *waiting* otherwise, with what it waits for. A status is for the current generation when
`status.observedGeneration` (else the `Ready` condition's) is not behind `metadata.generation`; with
neither, nothing says it is stale, as kstatus reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import msgspec

from pipeline.backends.base import Backend
from pipeline.graph import GraphVerdict
from pipeline.index import Index
from pipeline.outputs import CrashLooping, GraphReadiness, Output, Verdict
from pipeline.status import DGD_CONDITION, STALLED, components_readiness
from pipeline.views import GraphKey, ObjectKey, StatusView, ViewStore


def observed_generation(dgd: StatusView) -> int:
    """The generation the status speaks for: status.observedGeneration, else the Ready condition's; 0: unsaid."""
    if dgd.observed_generation:
        return dgd.observed_generation
    ready = dgd.condition(DGD_CONDITION)
    return ready.observed_generation if ready is not None else 0


def _is_current(generation: int, observed: int) -> bool:
    return observed == 0 or observed >= generation


def graph_readiness(
    namespace: str,
    graph: str,
    dgd: StatusView | None,
    verdict: GraphVerdict,
    dcds: Iterable[StatusView],
    time: str | None,
    reporters: Sequence[Backend] = (),
) -> GraphReadiness:
    """Where the graph stands for a waiter; `reporters`: the backends that report components with no DCD
    on the DGD (pipeline.status.components_readiness)."""
    pairs = zip(verdict.components, verdict.findings, strict=True)
    crash_looping = tuple(CrashLooping(component, finding) for component, finding in pairs)
    count, missing = components_readiness(dgd, dcds, reporters) if dgd is not None else (0, [])
    not_ready = [f"{item.name}: {item.why}" for item in missing]
    ready_count = count - len(not_ready)
    if dgd is None:
        state, generation, current = "", 0, False
        decided: tuple[Verdict, str, str] = ("waiting", "NotFound", f"no DynamoGraphDeployment {namespace}/{graph}")
    else:
        state, generation = dgd.state, dgd.generation
        current = _is_current(generation, observed_generation(dgd))
        decided = _decide(dgd, current, not_ready)
    if verdict.failed:  # the Pods say so, whatever the status says yet
        decided = ("failed", verdict.reason or "", verdict.message)
    return GraphReadiness(
        time=time,
        namespace=namespace,
        graph=graph,
        found=dgd is not None,
        state=state,
        generation=generation,
        current=current,
        verdict=decided[0],
        reason=decided[1],
        message=decided[2],
        components_ready=ready_count,
        components=count,
        not_ready=tuple(not_ready),
        crash_looping=crash_looping,
    )


def _decide(dgd: StatusView, current: bool, not_ready: list[str]) -> tuple[Verdict, str, str]:
    """From the status alone (crashwatch's own diagnosis overrides it)."""
    ready = dgd.condition(DGD_CONDITION)
    stalled = dgd.condition(STALLED)
    if stalled is not None and stalled.status == "True" and _is_current(dgd.generation, stalled.observed_generation):
        return "failed", stalled.reason, stalled.message
    if not current:
        observed = observed_generation(dgd)
        return "waiting", "StaleStatus", f"the status is for generation {observed}, the spec is at {dgd.generation}"
    if dgd.state == "failed":
        return "failed", ready.reason if ready is not None else "failed", ready.message if ready is not None else ""
    if dgd.state == "successful":
        return "ready", ready.reason if ready is not None else "successful", ""
    if ready is not None and ready.message:
        return "waiting", ready.reason, ready.message
    if not_ready:
        return "waiting", "ComponentsNotReady", "Resources not ready: " + "; ".join(not_ready)
    return "waiting", dgd.state or "NoStatus", f"state is {dgd.state!r}" if dgd.state else "no status yet"


class ReadinessJudge:
    """What a waiter (`wait`, `get`) was last told of each graph: a graph is judged again when its verdict,
    its DGD or its DCDs change, and said again only when what it sees changed."""

    __slots__ = ("dcds", "dcds_of_graph", "dgds", "reporters", "sent")

    def __init__(
        self, store: ViewStore, dcds_of_graph: Index[GraphKey, ObjectKey], reporters: Sequence[Backend]
    ) -> None:
        """`dcds_of_graph`: the DCDs of each graph (the status planner's index); `reporters`: the backends
        that report components with no DCD on the DGD."""
        self.dgds, self.dcds, self.dcds_of_graph = store.dgds, store.dcds, dcds_of_graph
        self.reporters = reporters
        self.sent: dict[GraphKey, GraphReadiness] = {}

    def judge(
        self, graphs: Iterable[GraphKey], verdict: Callable[[GraphKey], GraphVerdict], time: str | None
    ) -> list[Output]:
        """The graphs as a waiter sees them now, where that changed since they were last said."""
        outputs: list[Output] = []
        sent = self.sent
        for graph in graphs:
            dcds = (self.dcds[key] for key in self.dcds_of_graph.get(graph))
            dgd = self.dgds.get(graph)
            judged = graph_readiness(graph[0], graph[1], dgd, verdict(graph), dcds, None, self.reporters)
            if sent.get(graph) == judged:
                continue
            if judged.found:
                sent[graph] = judged
            else:
                sent.pop(graph, None)
            outputs.append(msgspec.structs.replace(judged, time=time))
        return outputs
