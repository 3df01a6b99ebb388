"""Where a graph stands for `wait` and `get`, decided from plain objects; and how `wait` weighs graphs."""

from __future__ import annotations

import argparse
import io
from typing import Any

import anyio
import pytest
from builders import crashing, dcd, dgd, event, healthy, stalled

from crashwatch.cli import _duration
from pipeline.outputs import GraphReadiness, Listed, Output
from pipeline.pipeline import Pipeline
from sinks.wait import GraphWaiter
from stream.model.events import WatchEvent


def judged(*events: WatchEvent, synced: bool = True) -> list[GraphReadiness]:
    """Feed events to a waiter's aggregator (synced after the first list, as `wait` is)."""
    pipeline = Pipeline(synced=False, readiness=True)
    out = pipeline.feed(events)
    if synced:
        out += pipeline.sync()
    return [o for o in out if isinstance(o, GraphReadiness)]


def successful(generation: int = 1, observed: int = 1, **kw: Any) -> dict[str, Any]:
    obj = dgd(state="successful", reason="all_resources_are_ready", message="All resources are ready", **kw)
    obj["metadata"]["generation"] = generation
    obj["status"]["conditions"][0]["observedGeneration"] = observed
    return obj


def test_successful_at_its_generation_is_ready() -> None:
    (graph,) = judged(event("ADDED", successful()), event("ADDED", dcd("g-worker", available="True")))
    assert (graph.verdict, graph.state, graph.current, graph.components_ready, graph.components) == (
        "ready",
        "successful",
        True,
        1,
        1,
    )


def test_a_status_behind_the_spec_is_waiting_not_ready() -> None:
    (graph,) = judged(event("ADDED", successful(generation=2, observed=1)))
    assert (graph.verdict, graph.reason, graph.current) == ("waiting", "StaleStatus", False)
    assert graph.message == "the status is for generation 1, the spec is at 2"
    # status.observedGeneration speaks first when the operator wrote it
    obj = successful(generation=2, observed=1)
    obj["status"]["observedGeneration"] = 2
    (graph,) = judged(event("ADDED", obj))
    assert graph.verdict == "ready"


def test_its_own_diagnosis_fails_a_graph_whatever_the_status_says() -> None:
    (graph,) = judged(event("ADDED", successful()), event("ADDED", crashing(restarts=3)))
    assert (graph.verdict, graph.reason) == ("failed", "component_crash_looping")
    assert [(c.component, c.finding.restarts) for c in graph.crash_looping] == [("worker", 3)]


def test_a_written_failure_fails_it_only_for_the_current_generation() -> None:
    message = "Components crash-looping: worker: container main of Pod p-0 restarted 2 times"
    said = [stalled("True", "ComponentCrashLooping", message)]
    (graph,) = judged(event("ADDED", dgd(extra_conditions=said)))
    assert (graph.verdict, graph.reason, graph.message) == ("failed", "ComponentCrashLooping", message)
    (graph,) = judged(event("ADDED", dgd(state="failed", reason="reconcile_failed", message="webhook denied")))
    assert (graph.verdict, graph.reason, graph.message) == ("failed", "reconcile_failed", "webhook denied")
    # the spec moved on since: the operator has not judged it yet
    (graph,) = judged(event("ADDED", dgd(generation=2, extra_conditions=said)))
    assert graph.verdict == "waiting"
    cleared = [stalled("False", "NoCrashLoop", "no component is crash-looping")]
    (graph,) = judged(event("ADDED", dgd(extra_conditions=cleared)))
    assert graph.verdict == "waiting"


def test_a_change_is_emitted_once_and_nothing_before_the_list_ends() -> None:
    pipeline = Pipeline(synced=False, readiness=True, recovery_window=0)  # Ready in place clears at once here
    out = pipeline.feed([event("ADDED", dgd()), event("ADDED", crashing(restarts=2))])
    assert out and not [o for o in out if isinstance(o, GraphReadiness | Listed)]
    out = pipeline.sync()
    assert [type(o).__name__ for o in out if isinstance(o, GraphReadiness | Listed)] == ["GraphReadiness", "Listed"]
    # the same restart count again changes nothing a waiter sees; recovery does
    for ev, expected in ((event("MODIFIED", crashing(restarts=3)), 1), (event("MODIFIED", crashing(restarts=3)), 0)):
        assert len([o for o in pipeline.feed([ev]) if isinstance(o, GraphReadiness)]) == expected
    seen = [o for o in pipeline.feed([event("MODIFIED", healthy())]) if isinstance(o, GraphReadiness)]
    assert seen[0].verdict == "waiting" and seen[0].crash_looping == ()


def test_a_deleted_graph_is_reported_not_found() -> None:
    pipeline = Pipeline(synced=True, readiness=True)
    for ev in (event("ADDED", dgd()), event("DELETED", dgd())):
        last = [o for o in pipeline.feed([ev]) if isinstance(o, GraphReadiness)]
    assert [(g.found, g.verdict) for g in last] == [(False, "waiting")]


async def _wait(targets: list[tuple[str, str]] | None, *batches: list[Output], once: bool = False) -> tuple[str, str]:
    out, logged, stops = io.BytesIO(), list[str](), list[int]()
    waiter = GraphWaiter(targets, "text", out, logged.append, lambda: stops.append(1), "namespace ns", once)
    send, receive = anyio.create_memory_object_stream[list[Output]](16)
    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter.run, receive)
        async with send:
            for batch in batches:
                await send.send(batch)
    assert waiter.result is not None
    assert len(stops) == 1  # decided once, and the watches are asked to stop once
    return waiter.result, out.getvalue().decode()


def readiness(name: str, verdict: str, found: bool = True) -> GraphReadiness:
    return GraphReadiness(
        None, "ns", name, found, "pending", 1, True, verdict, "r", f"{name} message", 0, 0, (), ()  # type: ignore[arg-type]
    )


@pytest.mark.anyio
async def test_the_waiter_waits_for_every_named_graph_and_fails_on_the_first_failure() -> None:
    both = [("ns", "a"), ("ns", "b")]
    result, _ = await _wait(both, [readiness("a", "ready"), readiness("b", "waiting"), Listed(None)])
    assert result == "timeout"  # b never came
    first: list[Output] = [readiness("a", "ready"), readiness("b", "waiting"), Listed(None)]
    result, out = await _wait(both, first, [readiness("b", "ready")])
    assert result == "ready" and out.count("READY") == 2
    result, out = await _wait(both, [readiness("a", "waiting"), readiness("b", "failed"), Listed(None)])
    assert result == "failed" and "ns/b  FAILED  r: b message" in out
    result, _ = await _wait(both, [readiness("a", "waiting"), Listed(None)])
    assert result == "not_found"
    result, _ = await _wait(None, [Listed(None)])
    assert result == "not_found"  # --all with no graph at all
    result, _ = await _wait(None, [readiness("a", "waiting"), Listed(None)], once=True)
    assert result == "timeout"


@pytest.mark.parametrize(
    "text,seconds",
    [("30s", 30), ("10m", 600), ("1h30m", 5400), ("500ms", 0.5), ("0", 0), ("90", 90), ("1.5h", 5400)],
)
def test_durations_read_as_kubectl_writes_them(text: str, seconds: float) -> None:
    assert _duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10x", "m", "-5s", "inf", "nan", "1h-2m"])
def test_what_is_not_a_duration_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        _duration(text)
