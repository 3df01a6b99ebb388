"""LeaderWorkerSet groups that crash-loop by being recreated: the group-recreation rule through the pipeline."""

from __future__ import annotations

from typing import Any

from builders import dcd, dgd, event, lws_pod
from lwsgroups import at, components, feed, incarnation

from pipeline.backends.lws import LwsGroups
from pipeline.backends.lws_groups import is_group_text
from pipeline.outputs import ComponentChange, GraphChange, GraphReadiness, Output, StatusWanted
from pipeline.pipeline import Pipeline

WINDOW = 600.0


def test_one_recreation_is_not_a_loop_two_within_the_window_are() -> None:
    pipeline = Pipeline(tunables={"group_window": WINDOW})
    out = feed(pipeline, incarnation(1, 0), incarnation(2, 10))
    assert components(out) == []  # recreated once: LWS doing its job
    out = feed(pipeline, [event("ADDED", lws_pod(incarnation=3), time=at(20))])
    (change,) = components(out)
    assert change.finding is not None
    assert change.message == (
        "LeaderWorkerSet g-worker-0 group 0 is recreation-looping: recreated 2 times, each after a failure "
        "(last: container main of Pod g-worker-0-0-1 exited with code 1)"
    )
    assert (change.finding.pod, change.finding.container, change.finding.exit_code) == ("g-worker-0-0-1", "main", 1)
    graph = [o for o in out if isinstance(o, GraphChange)]
    assert graph[0].failed and graph[0].reason == "component_crash_looping"
    # the count follows, as restart counts do
    out = feed(pipeline, incarnation(3, 20)[1:], [event("ADDED", lws_pod(incarnation=4), time=at(30))])
    assert [c.message.split(": ")[1].split(",")[0] for c in components(out)] == ["recreated 3 times"]


def test_recreations_further_apart_than_the_window_are_not_a_loop() -> None:
    pipeline = Pipeline(tunables={"group_window": 60.0})
    out = feed(pipeline, incarnation(1, 0), incarnation(2, 100), incarnation(3, 200), incarnation(4, 300))
    assert components(out) == []


def test_recreations_after_exit_0_are_not_a_loop() -> None:
    pipeline = Pipeline(tunables={"group_window": WINDOW})
    out = feed(pipeline, *(incarnation(n, n * 10, fail=False) for n in range(1, 5)))
    assert components(out) == []
    # and a failure-free recreation ends a streak
    out = feed(pipeline, incarnation(5, 50), incarnation(6, 60, fail=False), incarnation(7, 70), incarnation(8, 80))
    assert components(out) == []


def test_a_loop_recovers_when_the_group_is_ready_and_writes_follow() -> None:
    pipeline = Pipeline(tunables={"group_window": WINDOW})
    feed(pipeline, [event("ADDED", dcd("g-worker")), event("ADDED", dgd())])
    out = feed(pipeline, incarnation(1, 0), incarnation(2, 10), [event("ADDED", lws_pod(incarnation=3), time=at(20))])
    wants = [o for o in out if isinstance(o, StatusWanted)]
    assert [(w.kind, w.state, [(c.type, c.status, c.reason) for c in w.decided]) for w in wants] == [
        (
            "DynamoComponentDeployment",
            None,
            [("Available", "False", "ContainerCrashLooping"), ("Stalled", "True", "ContainerCrashLooping")],
        ),
        (
            "DynamoGraphDeployment",
            "failed",
            [("Ready", "False", "component_crash_looping"), ("Stalled", "True", "ComponentCrashLooping")],
        ),
    ]
    assert is_group_text(wants[0].condition.message)
    # the group comes up: leader and worker Ready
    out = feed(
        pipeline,
        [
            event("ADDED", lws_pod(worker=1, incarnation=3), time=at(21)),
            event("MODIFIED", lws_pod(incarnation=3, ready=True), time=at(30)),
        ],
    )
    assert components(out) == []  # the worker is not Ready yet
    out = feed(pipeline, [event("MODIFIED", lws_pod(worker=1, incarnation=3, ready=True), time=at(31))])
    (change,) = components(out)
    assert change.finding is None
    # cleared in the operator's words for a LeaderWorkerSet, and the graph from its DCD
    assert [(w.condition.reason, w.condition.message) for w in out if isinstance(w, StatusWanted)] == [
        ("LeaderWorkerSetReady", "LeaderWorkerSet is ready"),
        ("all_resources_are_ready", "All resources are ready"),
    ]


def _restarted(dcd_message: str, pods: list[dict[str, Any]]) -> tuple[Pipeline, list[Output]]:
    """A watcher that starts when the DCD and DGD already report a group loop (its history is gone)."""
    graph_message = f"Components crash-looping: worker: {dcd_message}"
    pipeline = Pipeline(synced=False, tunables={"group_window": WINDOW})
    events = [
        event(
            "ADDED",
            dcd(
                "g-worker",
                reason="ContainerCrashLooping",
                message=dcd_message,
                extra_conditions=[
                    {
                        "type": "Stalled",
                        "status": "True",
                        "reason": "ContainerCrashLooping",
                        "message": dcd_message,
                        "observedGeneration": 1,
                        "lastTransitionTime": "2026-11-20T09:00:00Z",
                    }
                ],
            ),
        ),
        event(
            "ADDED",
            dgd(
                state="failed",
                reason="component_crash_looping",
                message=graph_message,
                extra_conditions=[
                    {
                        "type": "Stalled",
                        "status": "True",
                        "reason": "ComponentCrashLooping",
                        "message": graph_message,
                        "observedGeneration": 1,
                        "lastTransitionTime": "2026-11-20T09:00:00Z",
                    }
                ],
            ),
        ),
    ] + [event("ADDED", p) for p in pods]
    out = pipeline.feed(events) + pipeline.sync()
    return pipeline, out


def test_a_watcher_restart_neither_clears_nor_rewrites_a_reported_group_loop() -> None:
    message = (
        "LeaderWorkerSet g-worker-0 group 0 is recreation-looping: recreated 7 times, each after a failure "
        "(last: container main of Pod g-worker-0-0-1 exited with code 1)"
    )
    pipeline, out = _restarted(message, [lws_pod(incarnation=9), lws_pod(worker=1, incarnation=9)])
    assert [o for o in out if isinstance(o, StatusWanted)] == []  # no write on restart
    (change,) = components(out)
    assert change.message == message  # held, in the same words, and what they say of the group read back
    assert change.finding is not None
    held = change.finding
    part = dict(held.part)
    assert (part["lws"], part["group"], part["recreations"], held.pod, held.container, held.exit_code) == (
        "g-worker-0",
        "0",
        7,
        "g-worker-0-0-1",
        "main",
        1,
    )
    # one recreation more is not yet a loop for the new history, and must not flap the verdict
    out = feed(pipeline, incarnation(9, 100)[2:], incarnation(10, 110))
    assert [o for o in out if isinstance(o, StatusWanted | ComponentChange)] == []
    # the group becomes Ready: now it clears
    out = feed(
        pipeline,
        [
            event("ADDED", lws_pod(incarnation=11, ready=True), time=at(120)),
            event("ADDED", lws_pod(worker=1, incarnation=11, ready=True), time=at(120)),
        ],
    )
    assert [c.finding for c in components(out)] == [None]
    assert {w.kind for w in out if isinstance(w, StatusWanted)} == {
        "DynamoComponentDeployment",
        "DynamoGraphDeployment",
    }


def test_a_restart_with_the_group_already_ready_clears_it() -> None:
    message = "LeaderWorkerSet g-worker-0 group 0 is recreation-looping: recreated 2 times, each after a failure (x)"
    _, out = _restarted(message, [lws_pod(incarnation=9, ready=True), lws_pod(worker=1, incarnation=9, ready=True)])
    assert {w.kind for w in out if isinstance(w, StatusWanted)} == {
        "DynamoComponentDeployment",
        "DynamoGraphDeployment",
    }


def test_memory_per_group_is_bounded_whatever_the_number_of_recreations() -> None:
    pipeline = Pipeline(tunables={"group_window": WINDOW})
    feed(pipeline, *(incarnation(n, n) for n in range(1, 200)))
    aggregator = pipeline.aggregator
    assert len(aggregator.backend(LwsGroups).groups) == 1
    (history,) = aggregator.backend(LwsGroups).groups.values()
    assert history.streak == 198 and len(history.pods) == 0
    assert len(aggregator.pods) == 0


def test_a_held_loop_found_again_in_the_same_words_is_no_new_line() -> None:
    """After a restart the history rebuilds; when it reaches the words the status already says, the
    verdict is the same: no component line, no graph line, no write."""
    message = (
        "LeaderWorkerSet g-worker-0 group 0 is recreation-looping: recreated 2 times, each after a failure "
        "(last: container main of Pod g-worker-0-0-1 exited with code 1)"
    )
    pipeline, _ = _restarted(message, [lws_pod(incarnation=9), lws_pod(worker=1, incarnation=9)])
    out = feed(pipeline, incarnation(9, 100)[2:], incarnation(10, 110), incarnation(11, 120)[:1])
    assert [o for o in out if not isinstance(o, GraphReadiness)] == []


def test_a_looping_group_deleted_and_never_recreated_is_gone_after_its_grace() -> None:
    """Scaled down while looping, in a log without the LeaderWorkerSet object: LWS would have recreated
    the group within seconds, and a recreation further than the group window from the last one is no
    loop: a group with no Pod for the window from its last Pod's deletion (by the events' time) is gone."""
    pipeline = Pipeline(tunables={"group_window": WINDOW})
    out = feed(pipeline, incarnation(1, 0), incarnation(2, 10), incarnation(3, 20))  # its Pods deleted at 26
    assert [c.finding is not None for c in components(out)] == [True]
    grace = int(WINDOW)
    assert components(pipeline.tick(at(26 + grace - 1))) == []  # within the grace: a recreation may still come
    out = pipeline.tick(at(26 + grace + 1))
    assert [(c.time, c.finding) for c in components(out)] == [(at(26 + grace), None)]
    graphs = [o for o in out if isinstance(o, GraphChange)]
    assert [(g.time, g.failed) for g in graphs] == [(at(26 + grace), False)]
    assert components(pipeline.tick(at(3000))) == []


def test_a_group_recreated_within_its_grace_stays_looping() -> None:
    pipeline = Pipeline(tunables={"group_window": WINDOW})
    feed(pipeline, incarnation(1, 0), incarnation(2, 10), incarnation(3, 20))  # deleted at 26
    out = feed(pipeline, [event("ADDED", lws_pod(incarnation=4), time=at(26 + 20))])  # back within the grace
    assert [c.finding is not None for c in components(out)] == [True]  # the count goes on: recreated 3 times
    assert components(pipeline.tick(at(26 + int(WINDOW) + 1))) == []
    assert components(pipeline.tick(at(600))) == []


def restarted_and_ready(obj: dict[str, Any], deleting: bool = False) -> dict[str, Any]:
    """A group's worker as the real kubelet shows it after its crash: running again (restart 1, the crash
    in lastState) and Ready, before LWS recreates the group; `deleting`: then marked for deletion."""
    obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    obj["status"]["containerStatuses"][0]["ready"] = True
    if deleting:
        obj["metadata"]["deletionTimestamp"] = at(26)
    return obj


def test_a_looping_group_whose_leader_is_deleted_first_is_not_ready_by_its_worker_alone() -> None:
    """LWS deletes a group's leader first (at a restart, or to roll a new template out), its worker a moment
    later (tests/replay/recordings/realnode-lws-recreation-loop: 70 ms, 1.3 s). Meanwhile the worker, up
    again after its crash and Ready (the real kubelet's order), is the group's only Pod: a group without its
    leader is no Ready group, and the loop is held through the recreation, not cleared and raised again."""
    pipeline = Pipeline(tunables={"group_window": WINDOW})
    feed(pipeline, [event("ADDED", dcd("g-worker")), event("ADDED", dgd())])
    out = feed(pipeline, incarnation(1, 0), incarnation(2, 10), [event("ADDED", lws_pod(incarnation=3), time=at(20))])
    assert [c.finding is not None for c in components(out)] == [True]
    worker = lws_pod(worker=1, incarnation=3, restarts=1, exit_code=1)
    leader = lws_pod(incarnation=3, deleting=True)
    out = feed(
        pipeline,
        [event("ADDED", lws_pod(worker=1, incarnation=3), time=at(20))],
        [event("MODIFIED", restarted_and_ready(worker), time=at(25))],
        [event("MODIFIED", leader, time=at(26))],  # LWS deletes the leader (Foreground)
        [event("MODIFIED", restarted_and_ready(worker, deleting=True), time=at(26))],  # the worker follows
        [event("DELETED", leader, time=at(27)), event("DELETED", worker, time=at(27))],
        [event("ADDED", lws_pod(incarnation=4), time=at(28))],
    )
    assert [(c.time, c.finding is not None) for c in components(out) if c.finding is None] == []
