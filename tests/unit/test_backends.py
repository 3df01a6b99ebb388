"""Graphs on Grove and LeaderWorkerSet: clearing in the operator's words, LWS scale-downs and LWS's own verdict."""

from __future__ import annotations

from collections.abc import Sequence

from builders import crashing, dcd, event, grove_dgd, healthy, lws, lws_pod
from lwsgroups import at, components, feed, incarnation

from pipeline.backends.lws import LwsGroups
from pipeline.outputs import StatusWanted
from pipeline.pipeline import Pipeline


def dgd_wants(out: Sequence[object]) -> list[tuple[str | None, str, str]]:
    return [
        (w.state, w.condition.reason, w.condition.message)
        for w in out
        if isinstance(w, StatusWanted) and w.kind == "DynamoGraphDeployment"
    ]


def test_a_grove_graph_fails_with_no_dcd_and_clears_from_what_grove_reports() -> None:
    pipeline = Pipeline(recovery_window=0)  # Ready in place clears at once (the window: test_holds.py)
    grove = {"VllmWorker": ("PodClique", 2, 2, 1), "Frontend": ("PodClique", 1, 1, 1)}
    out = feed(pipeline, [event("ADDED", grove_dgd(grove)), event("ADDED", crashing("w-0", pod_labels=None))])
    assert [(s, r) for s, r, _ in dgd_wants(out)] == [("failed", "component_crash_looping")]
    # the crash loop ends while Grove still counts 1 of 2 ready: pending, in the operator's words, never
    # "no components observed"
    out = feed(pipeline, [event("MODIFIED", healthy("w-0"))])
    assert dgd_wants(out) == [("pending", "pods_not_ready", "Resources not ready: VllmWorker: scheduled but ready=1/2")]
    # had Grove counted every replica ready when the crash loop ended, the clearing would say successful
    pipeline = Pipeline(recovery_window=0)
    ready = {"VllmWorker": ("PodClique", 2, 2, 2), "Frontend": ("PodCliqueScalingGroup", 1, 1, 1)}
    feed(pipeline, [event("ADDED", grove_dgd(ready)), event("ADDED", crashing("w-0", pod_labels=None))])
    out = feed(pipeline, [event("MODIFIED", healthy("w-0"))])
    assert dgd_wants(out) == [("successful", "all_resources_are_ready", "All resources are ready")]


def test_a_grove_component_still_updating_and_a_dcd_not_ready_are_mixed_reasons() -> None:
    pipeline = Pipeline(recovery_window=0)
    out = feed(
        pipeline,
        [
            event("ADDED", grove_dgd({"VllmWorker": ("PodClique", 2, 1, 2)})),
            event("ADDED", dcd("g-worker", component="Frontend")),
            event("ADDED", crashing("w-0", pod_labels=None)),
        ],
    )
    out = feed(pipeline, [event("MODIFIED", healthy("w-0"))])
    assert dgd_wants(out) == [
        (
            "pending",
            "mixed_not_ready_reasons",
            "Resources not ready: VllmWorker: updated=1/2; g-worker: Deployment is not ready",
        )
    ]


def test_a_scaled_down_group_is_forgotten_with_its_history() -> None:
    pipeline = Pipeline()
    feed(pipeline, [event("ADDED", lws(replicas=1))])
    looping = feed(
        pipeline, incarnation(1, 0), incarnation(2, 10), [event("ADDED", lws_pod(incarnation=3), time=at(20))]
    )
    assert components(looping)[0].finding is not None
    out = feed(pipeline, [event("MODIFIED", lws(replicas=0), time=at(25))])
    assert [c.finding for c in components(out)] == [None]
    assert pipeline.aggregator.backend(LwsGroups).groups == {}


def test_lws_saying_its_restart_budget_ran_out_is_a_loop_until_the_group_is_ready() -> None:
    pipeline = Pipeline()
    feed(pipeline, [event("ADDED", lws_pod()), event("ADDED", lws_pod(worker=1))])
    out = feed(pipeline, [event("ADDED", lws(failed="group 0 restarted 5 times"))])
    (change,) = components(out)
    assert change.message == (
        "LeaderWorkerSet g-worker-0 group 0 is recreation-looping: its restart budget is exhausted "
        "(group 0 restarted 5 times)"
    )
    out = feed(pipeline, [event("MODIFIED", lws_pod(ready=True)), event("MODIFIED", lws_pod(worker=1, ready=True))])
    assert [c.finding for c in components(out)] == [None]


def test_readiness_flips_of_a_group_that_cannot_act_on_them_are_kept_but_not_passed_on() -> None:
    pipeline = Pipeline()
    feed(pipeline, [event("ADDED", lws()), event("ADDED", lws_pod(ready=True)), event("ADDED", lws_pod(worker=1))])
    worker = ("ns", "g-worker-0-0-1")
    for ready in (True, False):  # no streak, its LWS content: nothing a flip could change
        assert pipeline.filter.observe(event("MODIFIED", lws_pod(worker=1, ready=ready))) is None
        group = pipeline.store.pods[worker].claim
        assert group is not None and group.ready is ready  # kept, for whoever reads the group later
    # LWS's restart budget runs out: whether the group is all Ready is read from the kept views
    (change,) = components(feed(pipeline, [event("MODIFIED", lws(failed="group 0 restarted 5 times"))]))
    assert change.finding is not None
    # from now on the group's flips can clear it: they are passed on
    out = feed(pipeline, [event("MODIFIED", lws_pod(worker=1, ready=True))])
    assert [c.finding for c in components(out)] == [None]


def test_a_quiet_flip_to_ready_is_seen_when_the_budget_runs_out() -> None:
    pipeline = Pipeline()
    feed(pipeline, [event("ADDED", lws()), event("ADDED", lws_pod(ready=True)), event("ADDED", lws_pod(worker=1))])
    assert feed(pipeline, [event("MODIFIED", lws_pod(worker=1, ready=True))]) == []
    # the group is all Ready by the kept views: an exhausted budget is no loop
    assert components(feed(pipeline, [event("MODIFIED", lws(failed="group 0 restarted 5 times"))])) == []
