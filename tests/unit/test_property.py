"""For random event sequences, the incremental aggregator agrees with a from-scratch computation.

The Pods' containers exit 1 or 0, so crash loops and exit-0 restart loops (pipeline.diagnoses) mix; a
component reports a crash loop first. The verdict a Pod holds depends on its history (a crash-looping
Pod stays so while it runs again, until it is Ready, here with no recovery window, or replaced, deleted
or finished): the reference follows each Pod's events in the plainest way and computes every verdict
from what it holds at the end."""

from __future__ import annotations

from typing import Any

import msgspec
from builders import COMPONENT, GRAPH, container, event, labels, pod, typed_pod
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.crashloop import pod_ready
from pipeline.diagnoses import diagnose, rank
from pipeline.findings import Finding
from pipeline.graph import graph_verdict
from pipeline.outputs import ComponentChange, GraphChange
from pipeline.pipeline import Pipeline

NAMES = ["a", "b", "c", "d"]
# weighted towards one component, so that it often holds several crash-looping Pods at once
LABELS = [labels("g1", "x")] * 4 + [labels("g1", "y"), labels("g2", "x"), labels(None, "x"), {}]


@st.composite
def pod_objects(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(st.sampled_from(NAMES))
    state = draw(st.sampled_from(["running", "waiting", "waiting", "waiting", "terminated"]))
    return pod(
        name,
        namespace=draw(st.sampled_from(["n1", "n1", "n1", "n2"])),
        uid=f"{name}-{draw(st.integers(0, 1))}",
        pod_labels=draw(st.sampled_from(LABELS)),
        containers=[
            container(
                restarts=draw(st.sampled_from([0, 1, 2, 2, 3])), state=state, exit_code=draw(st.sampled_from([0, 1, 1]))
            )
        ],
        phase=draw(st.sampled_from(["Running", "Running", "Running", "Pending", "Succeeded"])),
        ready=draw(st.integers(0, 3)) == 0,
        deleting=draw(st.integers(0, 9)) == 0,
        resource_version=str(draw(st.integers(0, 9))),
    )


operations = st.lists(st.tuples(st.sampled_from(["ADDED", "MODIFIED", "DELETED", "AGAIN"]), pod_objects()), max_size=40)


Held = dict[tuple[str, str], tuple[str, Finding]]  # Pod -> (uid, the finding its verdict holds)


def hold(held: Held, key: tuple[str, str], raw: dict[str, Any]) -> None:
    """What the Pod's verdict holds after this observation of it (window 0: Ready is recovered)."""
    meta = raw["metadata"]
    lab = meta.get("labels", {})
    typed = typed_pod(raw)
    finding = diagnose(typed)  # a crash loop, or an exit-0 restart loop: held alike
    tracked = lab.get(GRAPH) and lab.get(COMPONENT) and "deletionTimestamp" not in meta
    if not tracked or typed.status.phase in ("Succeeded", "Failed"):
        held.pop(key, None)
    elif finding is not None:
        held[key] = (meta["uid"], finding)
    elif key in held and (held[key][0] != meta["uid"] or pod_ready(typed)):
        del held[key]


def from_scratch(final: dict[tuple[str, str], dict[str, Any]], held: Held) -> tuple[dict[Any, Finding], dict[Any, Any]]:
    components: dict[tuple[str, str, str], Finding] = {}
    for raw in final.values():
        meta = raw["metadata"]
        lab = meta.get("labels", {})
        graph, comp = lab.get(GRAPH), lab.get(COMPONENT)
        if not graph or not comp or "deletionTimestamp" in meta:
            continue
        finding = held[(meta["namespace"], meta["name"])][1] if (meta["namespace"], meta["name"]) in held else None
        key = (meta["namespace"], graph, comp)
        if finding is not None and (
            key not in components or (rank(finding), finding.pod) < (rank(components[key]), components[key].pod)
        ):
            components[key] = finding
    graphs: dict[tuple[str, str], dict[str, Finding]] = {}
    for (ns, graph, comp), finding in components.items():
        graphs.setdefault((ns, graph), {})[comp] = finding
    return components, {key: graph_verdict(members) for key, members in graphs.items()}


@settings(max_examples=300, deadline=None)
@given(operations)
def test_incremental_verdicts_equal_a_from_scratch_computation(ops: list[tuple[str, dict[str, Any]]]) -> None:
    pipeline = Pipeline(recovery_window=0)
    final: dict[tuple[str, str], dict[str, Any]] = {}
    held: Held = {}
    last_line: dict[Any, Any] = {}
    previous: tuple[str, dict[str, Any]] | None = None
    for op, obj in ops:
        if op == "AGAIN":
            if previous is None:
                continue
            op, obj = previous
        previous = (op, obj)
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if op == "DELETED":
            if key in final and final[key]["metadata"]["uid"] == obj["metadata"]["uid"]:
                del final[key]
                held.pop(key, None)
        else:
            final[key] = obj
            hold(held, key, obj)
        for out in pipeline.feed([event(op, obj)]):
            line: ComponentChange | GraphChange
            if isinstance(out, ComponentChange):
                ident: Any = ("c", out.namespace, out.graph, out.component)
                line = msgspec.structs.replace(out, time=None)
            elif isinstance(out, GraphChange):
                ident = ("g", out.namespace, out.graph)
                line = msgspec.structs.replace(out, time=None)
            else:
                continue
            assert last_line.get(ident) != line, f"repeated line {line}"
            last_line[ident] = line
    components, graphs = from_scratch(final, held)
    assert pipeline.aggregator.verdicts() == components
    assert pipeline.aggregator.graph_verdicts() == {k: v for k, v in graphs.items() if v.failed}
    # the last line printed for each component says what the final verdict is
    for ident, line in last_line.items():
        if isinstance(line, ComponentChange):
            assert line.finding == components.get(ident[1:])
