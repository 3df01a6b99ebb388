"""The verdict that holds between restarts (pipeline.holds), clause by clause, on the statuses a real
kubelet writes: the container runs again between two crashes, Ready when it has no readiness probe, and
CrashLoopBackOff is written only just before a restart."""

from __future__ import annotations

from typing import Any

from builders import container, event, pod

from pipeline.filter import ObjectUpdate
from pipeline.outputs import ComponentChange, GraphChange, Output
from pipeline.pipeline import Pipeline
from stream.model.events import WatchEvent

WINDOW = 90.0


def at(second: float) -> str:
    minutes, seconds = divmod(second, 60)
    return f"2026-11-20T10:{int(minutes):02d}:{seconds:06.3f}Z".replace(".000Z", "Z")


def terminated(restarts: int, exit_code: int = 1, **kw: Any) -> dict[str, Any]:
    """Down after an exit, as during a backoff (the kubelet keeps `state.terminated`)."""
    return pod(containers=[container(state="terminated", restarts=restarts, exit_code=exit_code)], **kw)


def running(restarts: int, ready: bool, **kw: Any) -> dict[str, Any]:
    """Running again after `restarts` restarts, the last one after exit 1."""
    return pod(containers=[container(state="running", restarts=restarts, last_exit=1)], ready=ready, **kw)


def backoff(restarts: int, **kw: Any) -> dict[str, Any]:
    return pod(containers=[container(state="waiting", restarts=restarts, exit_code=1)], **kw)


def lines(outputs: list[Output]) -> list[tuple[str | None, str, Any]]:
    """(time, component or graph, restarts or failed) of each verdict change."""
    said: list[tuple[str | None, str, Any]] = []
    for o in outputs:
        if isinstance(o, ComponentChange):
            said.append((o.time, "component", o.finding.restarts if o.finding else None))
        elif isinstance(o, GraphChange):
            said.append((o.time, "graph", o.failed))
    return said


def feed(pipeline: Pipeline, *steps: tuple[float, str, dict[str, Any]]) -> list[tuple[str | None, str, Any]]:
    said: list[tuple[str | None, str, Any]] = []
    for second, kind, obj in steps:
        said += lines(pipeline.feed([event(kind, obj, at(second))]))
    return said


def test_a_loop_without_a_readiness_probe_never_recovers_between_crashes() -> None:
    """The real kubelet's timeline of `sleep 1; exit 1`: Ready for the second it runs, each time."""
    pipeline = Pipeline(recovery_window=WINDOW)
    said = feed(
        pipeline,
        (0.6, "ADDED", running(0, ready=True)),
        (2.3, "MODIFIED", terminated(0)),
        (2.4, "MODIFIED", running(1, ready=True)),
        (4.3, "MODIFIED", terminated(1)),
        (16.1, "MODIFIED", backoff(1)),
        (16.2, "MODIFIED", running(2, ready=True)),
        (17.3, "MODIFIED", terminated(2)),  # the rule fires: restarted twice, down after exit 1
    )
    assert said == [(at(17.3), "component", 2), (at(17.3), "graph", True)]
    said = feed(
        pipeline,
        (40.1, "MODIFIED", backoff(2)),
        (40.2, "MODIFIED", running(3, ready=True)),  # runs again, Ready: still crash-looping
        (41.3, "MODIFIED", terminated(3)),  # the loop goes on, in new words, and never said RECOVERED
        (88.1, "MODIFIED", backoff(3)),
        (88.2, "MODIFIED", running(4, ready=True)),
        (89.3, "MODIFIED", terminated(4)),
    )
    assert said == [
        (at(41.3), "component", 3),
        (at(41.3), "graph", True),  # the graph's message names the restarts too
        (at(89.3), "component", 4),
        (at(89.3), "graph", True),
    ]
    assert lines(pipeline.tick(at(600))) == []


def test_a_container_that_is_never_ready_stays_crash_looping_while_it_runs() -> None:
    pipeline = Pipeline(recovery_window=WINDOW)
    assert feed(pipeline, (10, "ADDED", terminated(2))) == [(at(10), "component", 2), (at(10), "graph", True)]
    assert feed(pipeline, (30, "MODIFIED", running(3, ready=False))) == []
    assert lines(pipeline.tick(at(3000))) == []  # however long it runs without being Ready
    assert pipeline.aggregator.verdicts()


def test_ready_for_the_window_without_a_restart_recovers_once_at_the_windows_end() -> None:
    pipeline = Pipeline(recovery_window=WINDOW)
    feed(pipeline, (10, "ADDED", terminated(2)))
    assert feed(pipeline, (30, "MODIFIED", running(3, ready=False)), (50, "MODIFIED", running(3, ready=True))) == []
    assert lines(pipeline.tick(at(139.9))) == []
    assert lines(pipeline.tick(at(141))) == [(at(140), "component", None), (at(140), "graph", False)]
    assert lines(pipeline.tick(at(500))) == []  # once
    assert pipeline.aggregator.verdicts() == {}


def test_a_readiness_lost_or_a_restart_starts_the_window_over() -> None:
    pipeline = Pipeline(recovery_window=WINDOW)
    feed(pipeline, (10, "ADDED", terminated(2)))
    feed(pipeline, (20, "MODIFIED", running(3, ready=True)))
    feed(pipeline, (60, "MODIFIED", running(3, ready=False)))  # a readiness probe failed for a while
    feed(pipeline, (70, "MODIFIED", running(3, ready=True)))
    assert lines(pipeline.tick(at(150))) == []  # 20 s + 90 s passed, but not Ready all along
    feed(pipeline, (155, "MODIFIED", running(4, ready=True)))  # a restart seen while Ready (a missed crash)
    assert lines(pipeline.tick(at(200))) == []  # 70 s + 90 s passed, but it restarted since
    assert lines(pipeline.tick(at(246))) == [(at(245), "component", None), (at(245), "graph", False)]


def test_a_window_that_ended_before_an_event_ends_before_that_event_is_applied() -> None:
    """In a replay the events' times are the clock: the recovery is said at the window's end, before
    what came later (here the same Pod crashing again two minutes on)."""
    pipeline = Pipeline(recovery_window=WINDOW)
    feed(pipeline, (10, "ADDED", terminated(2)), (20, "MODIFIED", running(3, ready=True)))
    said = feed(pipeline, (230, "MODIFIED", terminated(3)))
    assert said == [
        (at(110), "component", None),
        (at(110), "graph", False),
        (at(230), "component", 3),
        (at(230), "graph", True),
    ]


def test_a_later_event_that_the_filter_drops_still_passes_time() -> None:
    pipeline = Pipeline(recovery_window=WINDOW)
    other = running(0, ready=True, name="p-1")
    feed(pipeline, (5, "ADDED", other), (10, "ADDED", terminated(2)), (20, "MODIFIED", running(3, ready=True)))
    noise: list[WatchEvent] = [event("MODIFIED", other, at(200))]  # changes nothing a diagnosis reads
    assert lines(pipeline.feed(noise)) == [(at(110), "component", None), (at(110), "graph", False)]


def test_a_replaced_deleted_terminating_or_finished_pod_clears_at_once() -> None:
    for last in (
        ("MODIFIED", running(3, ready=False, uid="p-0-new")),  # the same name, a new Pod
        ("DELETED", running(3, ready=False)),
        ("MODIFIED", running(3, ready=False, deleting=True)),  # a rollout's old Pod on its way out
        ("MODIFIED", pod(containers=[container(state="terminated", restarts=3, exit_code=1)], phase="Failed")),
    ):
        pipeline = Pipeline(recovery_window=WINDOW)
        feed(pipeline, (10, "ADDED", terminated(2)), (20, "MODIFIED", running(3, ready=False)))
        said = feed(pipeline, (21, *last))
        assert said == [(at(21), "component", None), (at(21), "graph", False)], last[0]


def test_without_times_the_window_never_passes() -> None:
    pipeline = Pipeline(recovery_window=WINDOW)
    pipeline.feed([event("ADDED", terminated(2)), event("MODIFIED", running(3, ready=True))])
    assert pipeline.aggregator.verdicts()


def test_no_window_recovers_at_ready() -> None:
    pipeline = Pipeline(recovery_window=0)
    feed(pipeline, (10, "ADDED", terminated(2)))
    assert feed(pipeline, (20, "MODIFIED", running(3, ready=False))) == []  # running is not recovered
    assert feed(pipeline, (21, "MODIFIED", running(3, ready=True))) == [
        (at(21), "component", None),
        (at(21), "graph", False),
    ]


def test_readiness_reaches_the_aggregator_only_for_held_pods() -> None:
    pipeline = Pipeline(recovery_window=WINDOW)
    seen: list[Any] = []
    apply = pipeline.aggregator.apply

    def counted(update: ObjectUpdate) -> list[Output]:
        seen.append(update.key)
        return apply(update)

    pipeline.aggregator.apply = counted  # type: ignore[method-assign,assignment]
    pipeline.feed([event("ADDED", running(1, ready=True, name="calm"), at(1))])
    pipeline.feed([event("MODIFIED", running(1, ready=False, name="calm"), at(2))])
    pipeline.feed([event("MODIFIED", running(1, ready=True, name="calm"), at(3))])
    assert seen == [("ns", "calm")]  # its readiness flips stop at the filter
    pipeline.feed([event("ADDED", terminated(2, name="looping"), at(4))])
    pipeline.feed([event("MODIFIED", running(3, ready=True, name="looping"), at(5))])
    pipeline.feed([event("MODIFIED", running(3, ready=False, name="looping"), at(6))])
    assert seen[1:] == [("ns", "looping")] * 3
    assert pipeline.store.pods[("ns", "looping")].ready is False  # a held Pod's newest view is kept
