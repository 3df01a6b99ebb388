"""Which DCD/DGD statuses crashwatch wants, per DYNAMO.md's rules for sharing status with the operator."""

from __future__ import annotations

from builders import crashing, dcd, deployment, dgd, event, healthy

from pipeline.aggregate import Aggregator
from pipeline.changes import StatusWanted
from pipeline.filter import EventFilter
from stream.events import WatchEvent


def run(*events: WatchEvent | None) -> list[StatusWanted]:
    """Feed events; a None stands where the initial list ends (the watcher is synced from there)."""
    synced = None not in events
    f, a = EventFilter(), Aggregator(synced=synced)
    out: list[StatusWanted] = []
    for ev in events:
        if ev is None:
            out += [o for o in a.sync() if isinstance(o, StatusWanted)]
            continue
        change = f.observe(ev)
        if change is not None:
            out += [o for o in a.apply(change) if isinstance(o, StatusWanted)]
    return out


SYNCED = None


def conditions(w: StatusWanted) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in w.conditions}


OTHER = {
    "type": "DynamoComponentReady",
    "status": "True",
    "reason": "Reconciled",
    "message": "ok",
    "observedGeneration": 1,
    "lastTransitionTime": "2026-11-20T08:00:00Z",
}


def test_crash_loop_marks_the_dcd_and_keeps_other_conditions_in_place() -> None:
    out = run(
        event("ADDED", dcd("g-worker", extra_conditions=[OTHER])),
        event("ADDED", crashing(restarts=2), time="2026-11-20T10:00:00Z"),
    )
    assert [w.kind for w in out] == ["DynamoComponentDeployment"]
    w = out[0]
    assert [c.type for c in w.conditions] == ["Available", "DynamoComponentReady"]
    assert w.conditions[1] == w.conditions[1].__class__(
        **{  # untouched, field for field
            "type": "DynamoComponentReady",
            "status": "True",
            "reason": "Reconciled",
            "message": "ok",
            "observed_generation": 1,
            "last_transition_time": "2026-11-20T08:00:00Z",
        }
    )
    available = w.condition
    assert (available.status, available.reason, available.observed_generation) == ("False", "ContainerCrashLooping", 1)
    assert "restarted 2 times" in available.message and "exit code 1" in available.message
    # status stays False, so the transition time stays (metav1.Condition semantics)
    assert available.last_transition_time == "2026-11-20T09:00:00Z"
    assert w.patch()["status"] == {
        "conditions": [
            {
                "type": "Available",
                "status": "False",
                "reason": "ContainerCrashLooping",
                "message": available.message,
                "lastTransitionTime": "2026-11-20T09:00:00Z",
                "observedGeneration": 1,
            },
            {
                "type": "DynamoComponentReady",
                "status": "True",
                "reason": "Reconciled",
                "message": "ok",
                "lastTransitionTime": "2026-11-20T08:00:00Z",
                "observedGeneration": 1,
            },
        ]
    }


def test_no_patch_when_the_status_already_says_so() -> None:
    first = run(event("ADDED", dcd("g-worker")), event("ADDED", crashing(restarts=2)))
    message = first[0].condition.message
    out = run(
        event("ADDED", dcd("g-worker", reason="ContainerCrashLooping", message=message)),
        event("ADDED", crashing(restarts=2)),
        SYNCED,
    )
    assert out == []


def test_recovery_clears_with_the_deployments_availability() -> None:
    message = "container main of Pod p-0 restarted 2 times and is down after exit code 1"
    failed = dcd("g-worker", reason="ContainerCrashLooping", message=message)
    for available, expected in ((True, ("True", "DeploymentReady")), (False, ("False", "DeploymentNotReady"))):
        out = run(
            event("ADDED", deployment("g-worker", match_labels={"x": "y"}, owner_dcd="g-worker", available=available)),
            event("ADDED", failed),
            event("ADDED", crashing(restarts=2)),
            SYNCED,
            event("MODIFIED", healthy()),
        )
        assert [conditions(w)["Available"] for w in out] == [expected]


def test_a_failure_that_is_not_ours_is_left_alone() -> None:
    assert run(event("ADDED", dcd("g-worker")), event("ADDED", healthy())) == []
    assert run(event("ADDED", dgd(state="failed", reason="reconcile_failed")), event("ADDED", healthy())) == []


def test_dgd_fails_then_recovers_to_successful_or_pending() -> None:
    message = "container main of Pod p-0 restarted 2 times and is down after exit code 1"
    out = run(
        event("ADDED", dgd()),
        event("ADDED", dcd("g-worker", reason="ContainerCrashLooping", message=message)),
        event("ADDED", dcd("g-front", component="front", available="True", reason="DeploymentReady")),
        event("ADDED", deployment("g-worker", match_labels={"x": "y"}, owner_dcd="g-worker", available=True)),
        event("ADDED", crashing(restarts=2)),
        SYNCED,
        event("MODIFIED", healthy()),
    )
    kinds = [(w.kind, w.state, w.condition.reason) for w in out]
    assert kinds == [
        ("DynamoGraphDeployment", "failed", "component_crash_looping"),
        ("DynamoComponentDeployment", None, "DeploymentReady"),
        ("DynamoGraphDeployment", "successful", "all_resources_are_ready"),
    ]
    out = run(
        event("ADDED", dgd(state="failed", reason="component_crash_looping", message="old")),
        event("ADDED", dcd("g-worker", message="Deployment is not ready")),
        event("ADDED", healthy()),
        SYNCED,
    )
    assert [(w.state, w.condition.reason, w.condition.message) for w in out] == [
        ("pending", "some_resources_are_not_ready", "Resources not ready: g-worker: Deployment is not ready")
    ]


def test_an_overwritten_failure_is_asserted_again() -> None:
    out = run(
        event("ADDED", dcd("g-worker")),
        event("ADDED", crashing(restarts=2)),
        # another writer puts its own verdict back while the crash loop holds
        event("MODIFIED", dcd("g-worker", message="Deployment is not ready (operator)")),
    )
    assert [w.condition.reason for w in out] == ["ContainerCrashLooping", "ContainerCrashLooping"]


def test_before_sync_a_reported_failure_is_not_cleared() -> None:
    """A restarted watcher that has seen the DCD but not yet its Pods must not clear the failure."""
    message = "container main of Pod p-0 restarted 2 times and is down after exit code 1"
    out = run(event("ADDED", dcd("g-worker", reason="ContainerCrashLooping", message=message)), SYNCED)
    assert [w.condition.reason for w in out] == ["Reconciling"]  # after sync with no Pod: cleared
    out = run(
        event("ADDED", dcd("g-worker", reason="ContainerCrashLooping", message=message)),
        event("ADDED", crashing(restarts=2)),
        SYNCED,
    )
    assert out == []


def test_transition_time_is_the_event_time_when_the_status_flips() -> None:
    out = run(
        event("ADDED", dcd("g-worker", available="True", reason="DeploymentReady")),
        event("ADDED", crashing(restarts=2), time="2026-11-20T10:00:00Z"),
    )
    assert out[0].condition.last_transition_time == "2026-11-20T10:00:00Z"
