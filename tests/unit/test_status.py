"""Which DCD/DGD statuses crashwatch wants, per the rules for sharing status with the operator (docs/status.md)."""

from __future__ import annotations

from builders import crashing, dcd, deployment, dgd, event, healthy, stalled

from pipeline.outputs import StatusWanted
from pipeline.pipeline import Pipeline
from stream.model.events import WatchEvent
from stream.model.objects import Condition


def run(*events: WatchEvent | None) -> list[StatusWanted]:
    """Feed events; a None stands where the initial list ends (the watcher is synced from there). A Pod
    Ready in place is recovered at once here (no recovery window: that has its own tests)."""
    pipeline = Pipeline(synced=None not in events, recovery_window=0)
    out: list[StatusWanted] = []
    for ev in events:
        outputs = pipeline.sync() if ev is None else pipeline.feed([ev])
        out += [o for o in outputs if isinstance(o, StatusWanted)]
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
    assert [c.type for c in w.conditions] == ["Available", "DynamoComponentReady", "Stalled"]
    assert w.conditions[1] == Condition(  # untouched, field for field
        type="DynamoComponentReady",
        status="True",
        reason="Reconciled",
        message="ok",
        observed_generation=1,
        last_transition_time="2026-11-20T08:00:00Z",
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
            {  # kstatus reads Stalled=True as Failed: Helm 4 and Flux stop waiting
                "type": "Stalled",
                "status": "True",
                "reason": "ContainerCrashLooping",
                "message": available.message,
                "lastTransitionTime": "2026-11-20T10:00:00Z",
                "observedGeneration": 1,
            },
        ]
    }


def test_no_patch_when_the_status_already_says_so() -> None:
    first = run(event("ADDED", dcd("g-worker")), event("ADDED", crashing(restarts=2)))
    message = first[0].condition.message
    out = run(
        event(
            "ADDED",
            dcd(
                "g-worker",
                reason="ContainerCrashLooping",
                message=message,
                extra_conditions=[stalled("True", "ContainerCrashLooping", message)],
            ),
        ),
        event("ADDED", crashing(restarts=2)),
        SYNCED,
    )
    assert out == []
    # an earlier crashwatch wrote Available but not Stalled: Stalled alone is what is missing
    out = run(
        event("ADDED", dcd("g-worker", reason="ContainerCrashLooping", message=message)),
        event("ADDED", crashing(restarts=2)),
        SYNCED,
    )
    assert [conditions(w) for w in out] == [
        {"Available": ("False", "ContainerCrashLooping"), "Stalled": ("True", "ContainerCrashLooping")}
    ]


def test_recovery_clears_with_the_deployments_availability() -> None:
    message = "container main of Pod p-0 restarted 2 times and is down after exit code 1"
    said = [stalled("True", "ContainerCrashLooping", message)]
    failed = dcd("g-worker", reason="ContainerCrashLooping", message=message, extra_conditions=said)
    for available, expected in ((True, ("True", "DeploymentReady")), (False, ("False", "DeploymentNotReady"))):
        out = run(
            event("ADDED", deployment("g-worker", match_labels={"x": "y"}, owner_dcd="g-worker", available=available)),
            event("ADDED", failed),
            event("ADDED", crashing(restarts=2)),
            SYNCED,
            event("MODIFIED", healthy()),
        )
        assert [(conditions(w)["Available"], conditions(w)["Stalled"]) for w in out] == [
            (expected, ("False", "NoCrashLoop"))
        ]


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
    kinds = [(w.kind, w.state, [(c.type, c.status, c.reason) for c in w.decided]) for w in out]
    assert kinds == [
        # the DCD said the failure already, but not Stalled
        ("DynamoComponentDeployment", None, [("Available", "False", "ContainerCrashLooping"), STALLED_DCD]),
        ("DynamoGraphDeployment", "failed", [("Ready", "False", "component_crash_looping"), STALLED_DGD]),
        ("DynamoComponentDeployment", None, [("Available", "True", "DeploymentReady"), CLEARED]),
        ("DynamoGraphDeployment", "successful", [("Ready", "True", "all_resources_are_ready"), CLEARED]),
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


STALLED_DCD = ("Stalled", "True", "ContainerCrashLooping")
STALLED_DGD = ("Stalled", "True", "ComponentCrashLooping")
CLEARED = ("Stalled", "False", "NoCrashLoop")


def test_stalled_follows_the_crash_loop_on_the_dgd_with_the_graph_message() -> None:
    out = run(event("ADDED", dgd()), event("ADDED", crashing(restarts=2), time="2026-11-20T10:00:00Z"))
    (w,) = out
    ready, stall = w.decided
    assert (stall.type, stall.status, stall.reason) == STALLED_DGD
    assert stall.message == ready.message and stall.message.startswith("Components crash-looping: worker: ")
    assert (stall.observed_generation, stall.last_transition_time) == (1, "2026-11-20T10:00:00Z")


def test_stalled_holds_while_an_older_operator_rewrites_state_and_ready_to_pending() -> None:
    """The operator without the upstream change puts `pending` back on every reconcile; it never writes
    Stalled, so the reassert only puts back what it overwrote, and Stalled's transition time stays."""
    first = run(event("ADDED", dgd()), event("ADDED", crashing(restarts=2), time="2026-11-20T10:00:00Z"))
    written = first[0]
    operator_rewrite = dgd(extra_conditions=[stalled("True", "ComponentCrashLooping", written.condition.message)])
    operator_rewrite["status"]["conditions"][1]["lastTransitionTime"] = "2026-11-20T10:00:00Z"
    out = run(
        event("ADDED", dgd()),
        event("ADDED", crashing(restarts=2), time="2026-11-20T10:00:00Z"),
        event("MODIFIED", operator_rewrite, time="2026-11-20T10:00:05Z"),
    )
    assert len(out) == 2
    again = out[1]
    assert again.owned() == written.owned()  # the same write: the patcher spaces it with backoff
    stall = next(c for c in again.conditions if c.type == "Stalled")
    assert (stall.status, stall.last_transition_time) == ("True", "2026-11-20T10:00:00Z")


def test_stalled_left_true_with_no_crash_loop_is_cleared_alone() -> None:
    """Stalled is crashwatch's outright: once synced with no crash loop it goes False, while an Available
    or Ready that is not crashwatch's failure stays as the operator wrote it."""
    left = [stalled("True", "ContainerCrashLooping", "container main of Pod p-0 restarted 2 times")]
    out = run(event("ADDED", dcd("g-worker", extra_conditions=left)), event("ADDED", healthy()), SYNCED)
    assert [[(c.type, c.status, c.reason) for c in w.decided] for w in out] == [[CLEARED]]
    assert conditions(out[0])["Available"] == ("False", "DeploymentNotReady")
    out = run(
        event("ADDED", dgd(extra_conditions=[stalled("True", "ComponentCrashLooping", "Components crash-looping")])),
        SYNCED,
    )
    assert [(w.state, [(c.type, c.status, c.reason) for c in w.decided]) for w in out] == [(None, [CLEARED])]
    patch = out[0].patch()["status"]
    assert isinstance(patch, dict) and "state" not in patch  # the state is the operator's here: left alone
    assert [(c["type"], c["status"], c["reason"]) for c in patch["conditions"]] == [
        ("Ready", "False", "some_resources_are_not_ready"),
        CLEARED,
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
    said = [stalled("True", "ContainerCrashLooping", message)]
    out = run(
        event("ADDED", dcd("g-worker", reason="ContainerCrashLooping", message=message, extra_conditions=said)),
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
