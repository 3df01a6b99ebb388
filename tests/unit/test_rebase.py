"""A wanted status rebased onto the object as it reads after a conflict (`StatusWanted.onto`): the write
the status patcher sends then. It must be what the patcher made of it before the rebase was the
output's own, the decision made again on the object read anew (`wanted_status`), body for body: each
case says the body, and checks that the two still agree (they share one implementation since)."""

from __future__ import annotations

from typing import Any

import msgspec
from builders import SINCE, dcd, dgd

from pipeline.outputs import StatusWanted
from pipeline.status import wanted_status
from pipeline.views import StatusView, status_view
from stream.model.objects import Condition, DynamoComponentDeployment, DynamoGraphDeployment

DECIDED_AT = "2026-12-04T09:00:00.500Z"
NOW = "2026-12-04T10:00:00.250Z"
NOW_SECONDS = "2026-12-04T10:00:00Z"  # metav1.Time: whole seconds
CRASH = Condition("Available", "False", "ContainerCrashLooping", "restarted 3 times", observed_generation=1)
STALLED = Condition("Stalled", "True", "ContainerCrashLooping", "restarted 3 times", observed_generation=1)
GRAPH_FAILED = Condition("Ready", "False", "component_crash_looping", "worker is crash-looping", observed_generation=1)
CUSTOM = {
    "type": "Custom",
    "status": "True",
    "reason": "Mine",
    "message": "another writer's",
    "lastTransitionTime": "2026-12-04T09:30:00Z",
}


def view(obj: dict[str, Any]) -> StatusView:
    if obj["kind"] == "DynamoGraphDeployment":
        return status_view(msgspec.convert(obj, DynamoGraphDeployment))
    return status_view(msgspec.convert(obj, DynamoComponentDeployment))


def decided(obj: dict[str, Any], *conditions: Condition, state: str | None = None) -> StatusWanted:
    """The pipeline's decision on the object as it read then."""
    wanted = wanted_status(view(obj), conditions, state, DECIDED_AT)
    assert wanted is not None
    return wanted


def rebased(wanted: StatusWanted, obj: dict[str, Any]) -> StatusWanted | None:
    """The rebase onto the object as it reads now, checked against the patcher's former path."""
    now = view(obj)
    out = wanted.onto(now, NOW)
    assert out == wanted_status(now, wanted.decided, wanted.state, NOW)
    return out


def at(obj: dict[str, Any], version: str) -> dict[str, Any]:
    obj["metadata"]["resourceVersion"] = version
    return obj


def condition(c: Condition, since: str) -> dict[str, Any]:
    return {
        "type": c.type,
        "status": c.status,
        "reason": c.reason,
        "message": c.message,
        "lastTransitionTime": since,
        "observedGeneration": c.observed_generation,
    }


def test_a_condition_absent_now_is_added_at_the_end_stamped_now() -> None:
    wanted = decided(at(dcd("w"), "5"), CRASH, STALLED)
    out = rebased(wanted, at(dcd("w"), "6"))
    assert out is not None
    assert out.resource_version == "6" and out.time == NOW  # the precondition is the object as read now
    assert out.patch() == {
        "status": {"conditions": [condition(CRASH, SINCE), condition(STALLED, NOW_SECONDS)]}  # False before: kept
    }


def test_an_object_that_already_says_it_needs_no_write() -> None:
    wanted = decided(at(dcd("w"), "5"), CRASH, STALLED)
    written = at(dcd("w", reason=CRASH.reason, message=CRASH.message, extra_conditions=[CUSTOM]), "6")
    assert rebased(wanted, written) is not None  # Stalled is still missing
    written["status"]["conditions"].append(condition(STALLED, "2026-12-04T09:59:00Z"))
    assert rebased(wanted, written) is None


def test_a_condition_present_with_another_status_is_replaced_in_place_stamped_now() -> None:
    wanted = decided(at(dcd("w"), "5"), CRASH)
    ready = at(dcd("w", available="True", reason="DeploymentReady", message="ready", extra_conditions=[CUSTOM]), "6")
    out = rebased(wanted, ready)
    assert out is not None
    assert out.patch() == {"status": {"conditions": [condition(CRASH, NOW_SECONDS), CUSTOM]}}


def test_a_condition_present_with_the_same_status_in_other_words_keeps_its_transition_time() -> None:
    wanted = decided(at(dcd("w"), "5"), CRASH)
    other_words = at(dcd("w", reason="DeploymentNotReady", message="not ready yet"), "6")
    out = rebased(wanted, other_words)
    assert out is not None and out.patch() == {"status": {"conditions": [condition(CRASH, SINCE)]}}


def test_a_graph_whose_state_was_reset_gets_the_state_again_with_its_condition_unchanged() -> None:
    wanted = decided(at(dgd(), "5"), GRAPH_FAILED, state="failed")
    written = at(dgd(state="failed", reason=GRAPH_FAILED.reason, message=GRAPH_FAILED.message), "6")
    assert rebased(wanted, written) is None  # it says it all
    reset = at(dgd(state="pending", reason=GRAPH_FAILED.reason, message=GRAPH_FAILED.message), "7")
    out = rebased(wanted, reset)
    assert out is not None and out.resource_version == "7"
    assert out.patch() == {"status": {"state": "failed", "conditions": [condition(GRAPH_FAILED, SINCE)]}}


def test_another_writers_conditions_are_kept_where_they_are() -> None:
    wanted = decided(at(dcd("w"), "5"), CRASH, STALLED)
    moved_on = at(dcd("w", extra_conditions=[CUSTOM]), "6")
    out = rebased(wanted, moved_on)
    assert out is not None
    assert out.patch() == {"status": {"conditions": [condition(CRASH, SINCE), CUSTOM, condition(STALLED, NOW_SECONDS)]}}
    assert wanted.conditions != out.conditions  # the write decided on the old object would have lost it
