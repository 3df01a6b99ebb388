"""A spec change that replaces a component (pipeline.rollouts): its Pods of the old spec stop counting, so
a fix never reads failed at its new generation because of Pods on their way out; clause by clause."""

from __future__ import annotations

import copy
from typing import Any

from builders import container, dcd, dgd, event, labels, lws, lws_pod, pod
from lwsgroups import at as group_at
from lwsgroups import components, feed, incarnation

from pipeline.aggregate import NONE_MESSAGE, REPLACED_MESSAGE
from pipeline.outputs import ComponentChange, GraphChange, Output, StatusWanted, condition_dict
from pipeline.pipeline import Pipeline
from pipeline.rollouts import REPLACEMENT_GRACE, replaced
from pipeline.views import StatusView, status_view
from sinks.events import occurrences
from stream.model.objects import (
    ComponentTemplate,
    DynamoComponentDeployment,
    DynamoGraphDeployment,
    GraphTemplates,
    graph_templates,
)

WINDOW = 90.0


def at(second: float) -> str:
    minutes, seconds = divmod(second, 60)
    return f"2026-11-20T10:{int(minutes):02d}:{seconds:06.3f}Z"


def component(name: str, kind: str, command: str = "serve", replicas: int = 1) -> dict[str, Any]:
    return {
        "name": name,
        "type": kind,
        "replicas": replicas,
        "podTemplate": {"spec": {"containers": [{"name": "main", "command": [command]}]}},
    }


def graph(*components: dict[str, Any], generation: int = 1, env: str = "a") -> dict[str, Any]:
    spec = {"backendFramework": "vllm", "envs": [{"name": "X", "value": env}], "components": list(components)}
    return dgd(generation=generation, spec=spec)


def templates(obj: dict[str, Any]) -> GraphTemplates:
    from stream.model.objects import DynamoGraphDeployment

    decoded = event("ADDED", obj).object
    assert isinstance(decoded, DynamoGraphDeployment)
    return graph_templates(decoded)


FRONTEND, WORKER, PREFILL = (
    component("Frontend", "frontend"),
    component("Decode", "decode"),
    component("Prefill", "prefill"),
)


# --- which components a change replaces --------------------------------------------------------------


def test_a_change_of_scaling_fields_alone_replaces_nothing() -> None:
    before = templates(graph(FRONTEND, WORKER))
    after = templates(graph(component("Frontend", "frontend", replicas=3), component("Decode", "decode", replicas=2)))
    assert replaced(before, after) == []


def test_a_non_worker_components_change_replaces_that_component_alone() -> None:
    before = templates(graph(FRONTEND, WORKER, PREFILL))
    after = templates(graph(component("Frontend", "frontend", "fixed"), WORKER, PREFILL))
    assert replaced(before, after) == ["Frontend"]


def test_a_worker_change_replaces_every_worker_type_component() -> None:
    before = templates(graph(FRONTEND, WORKER, PREFILL))
    after = templates(graph(FRONTEND, component("Decode", "decode", "fixed"), PREFILL))
    assert replaced(before, after) == ["Decode", "Prefill"]
    added = templates(graph(FRONTEND, WORKER, PREFILL, component("Extra", "worker")))
    assert replaced(before, added) == ["Decode", "Extra", "Prefill"]


def test_a_change_of_the_graph_wide_spec_replaces_every_component() -> None:
    before = templates(graph(FRONTEND, WORKER))
    assert replaced(before, templates(graph(FRONTEND, WORKER, env="b"))) == ["Decode", "Frontend"]


def test_a_spec_that_cannot_be_read_tells_nothing() -> None:
    readable = templates(graph(FRONTEND, WORKER))
    unreadable = templates(dgd(spec={"components": "not a list"}))
    assert unreadable == GraphTemplates()
    assert replaced(readable, unreadable) == [] and replaced(unreadable, readable) == []
    assert templates(dgd()) == GraphTemplates()  # no spec at all


def test_v1alpha1_services_are_read_by_name() -> None:
    spec = {"services": {"VllmWorker": {"componentType": "worker", "replicas": 1, "envs": []}}}
    read = templates(dgd(spec=spec))
    assert [(c.name, c.type) for c in read.components] == [("VllmWorker", "worker")]
    assert isinstance(read.components[0], ComponentTemplate)


# --- the verdicts --------------------------------------------------------------------------------------


def crashed(name: str, restarts: int, uid: str | None = None, component: str = "Decode") -> dict[str, Any]:
    """Down after exit 1, restarted `restarts` times: crash-looping from two on."""
    status = [container(state="terminated", restarts=restarts, exit_code=1)]
    return pod(name, uid=uid, pod_labels=labels("g", component), containers=status)


def changes(outputs: list[Output]) -> list[tuple[str, Any, str | None]]:
    said: list[tuple[str, Any, str | None]] = []
    for o in outputs:
        if isinstance(o, ComponentChange):
            said.append(("component", o.finding.pod if o.finding else None, o.message))
        elif isinstance(o, GraphChange):
            said.append(("graph", o.failed, o.reason))
    return said


def looping(pipeline: Pipeline) -> Pipeline:
    """A graph whose Decode worker crash-loops, at generation 1."""
    pipeline.feed([event("ADDED", graph(FRONTEND, WORKER), at(0))])
    out = pipeline.feed([event("ADDED", crashed("decode-old", 2), at(5))])
    assert ("graph", True, "component_crash_looping") in changes(out)
    return pipeline


def test_the_fixs_spec_change_clears_the_old_pods_crash_loop_at_once() -> None:
    pipeline = looping(Pipeline(recovery_window=WINDOW))
    fix = graph(FRONTEND, component("Decode", "decode", "fixed"), generation=2)
    said = changes(pipeline.feed([event("MODIFIED", fix, at(10))]))
    assert said == [("component", None, REPLACED_MESSAGE), ("graph", False, None)]
    # the old Pod crashes on while it lingers: it does not count
    assert changes(pipeline.feed([event("MODIFIED", crashed("decode-old", 3), at(20))])) == []
    # a Pod of the new spec that starts does not bring it back either; the old one goes
    new = pod("decode-new", pod_labels=labels("g", "Decode"), containers=[container(state="running")], ready=True)
    assert changes(pipeline.feed([event("ADDED", new, at(21))])) == []
    assert changes(pipeline.feed([event("DELETED", crashed("decode-old", 3), at(22))])) == []
    assert not pipeline.aggregator.replacements.superseded  # nothing kept of a Pod that went
    assert changes(pipeline.tick(at(10 + REPLACEMENT_GRACE + 1))) == []


def test_a_pod_of_the_new_spec_that_crash_loops_fails_the_graph_again() -> None:
    pipeline = looping(Pipeline(recovery_window=WINDOW))
    pipeline.feed(
        [event("MODIFIED", graph(FRONTEND, component("Decode", "decode", "still broken"), generation=2), at(10))]
    )
    said = changes(pipeline.feed([event("ADDED", crashed("decode-new", 2), at(30))]))
    assert said == [("component", "decode-new", said[0][2]), ("graph", True, "component_crash_looping")]
    # and the old Pod, replaced under its name (a new uid, as an LWS group's leader comes back), counts again
    pipeline.feed([event("DELETED", crashed("decode-new", 2), at(31))])
    said = changes(pipeline.feed([event("ADDED", crashed("decode-old", 2, uid="uid-new-incarnation"), at(32))]))
    assert said[0][:2] == ("component", "decode-old") and pipeline.aggregator.graph_verdicts()


def test_a_scaling_change_or_another_components_change_keeps_the_crash_loop() -> None:
    pipeline = looping(Pipeline(recovery_window=WINDOW))
    scaled = graph(FRONTEND, component("Decode", "decode", replicas=4), generation=2)
    assert changes(pipeline.feed([event("MODIFIED", scaled, at(10))])) == []
    frontend = graph(component("Frontend", "frontend", "new"), component("Decode", "decode", replicas=4), generation=3)
    assert changes(pipeline.feed([event("MODIFIED", frontend, at(11))])) == []
    assert pipeline.aggregator.graph_verdicts()


def test_a_change_that_replaces_no_pod_after_all_counts_them_again_after_the_grace() -> None:
    pipeline = looping(Pipeline(recovery_window=WINDOW))
    pipeline.feed([event("MODIFIED", graph(FRONTEND, component("Decode", "decode", "x"), generation=2), at(10))])
    assert changes(pipeline.tick(at(10 + REPLACEMENT_GRACE - 1))) == []
    said = changes(pipeline.tick(at(10 + REPLACEMENT_GRACE + 1)))
    assert said[0][:2] == ("component", "decode-old") and said[1] == ("graph", True, "component_crash_looping")
    assert not pipeline.aggregator.replacements.superseded


def test_without_times_a_change_replaces_nothing() -> None:
    """A log without times cannot measure the replacement grace: the old Pods go on counting."""
    pipeline = Pipeline(recovery_window=WINDOW)
    pipeline.feed([event("ADDED", graph(FRONTEND, WORKER)), event("ADDED", crashed("decode-old", 2))])
    fix = graph(FRONTEND, component("Decode", "decode", "fixed"), generation=2)
    assert changes(pipeline.feed([event("MODIFIED", fix)])) == []
    assert pipeline.aggregator.graph_verdicts()


def test_a_component_that_recovers_on_its_own_says_so_in_its_usual_words() -> None:
    pipeline = looping(Pipeline(recovery_window=0))
    ready = pod(
        "decode-old", pod_labels=labels("g", "Decode"), containers=[container(state="running", restarts=2)], ready=True
    )
    said = changes(pipeline.feed([event("MODIFIED", ready, at(9))]))
    assert said[0] == ("component", None, NONE_MESSAGE)


def stalled_said(outputs: list[Output]) -> dict[str, tuple[str, str]]:
    """The `Stalled` condition each wanted status says, by kind: (status, reason)."""
    said: dict[str, tuple[str, str]] = {}
    for o in outputs:
        if isinstance(o, StatusWanted):
            condition = next(c for c in o.decided if c.type == "Stalled")
            said[o.kind] = (condition.status, condition.reason)
    return said


def test_a_failure_withdrawn_by_a_spec_change_says_so_not_that_it_recovered() -> None:
    """The old spec's crash loop has not recovered when a change replaces its Pods: `Stalled` goes False
    with the reason SpecReplaced (its Event says so too), not NoCrashLoop."""
    pipeline = Pipeline(recovery_window=WINDOW)
    pipeline.feed([event("ADDED", dcd("g-decode", component="Decode"), at(0))])
    looping(pipeline)
    fix = graph(FRONTEND, component("Decode", "decode", "fixed"), generation=2)
    # the graph as our write left it: Stalled=True, which the operator keeps
    fix["status"]["conditions"].append(
        {
            "type": "Stalled",
            "status": "True",
            "reason": "ComponentCrashLooping",
            "message": "m",
            "observedGeneration": 1,
        }
    )
    out = pipeline.feed([event("MODIFIED", fix, at(10))])
    assert stalled_said(out) == {
        "DynamoComponentDeployment": ("False", "SpecReplaced"),
        "DynamoGraphDeployment": ("False", "SpecReplaced"),
    }
    assert {(o.regarding.kind, o.type, o.reason, o.note) for o in occurrences(out)} == {
        (kind, "Normal", "SpecReplaced", "the crash-looping Pods are of the spec before a change that replaces them")
        for kind in ("DynamoComponentDeployment", "DynamoGraphDeployment")
    }


def test_a_failure_that_ends_on_its_own_is_no_spec_replacement() -> None:
    pipeline = Pipeline(recovery_window=0)
    pipeline.feed([event("ADDED", dcd("g-decode", component="Decode"), at(0))])
    looping(pipeline)
    ready = pod(
        "decode-old", pod_labels=labels("g", "Decode"), containers=[container(state="running", restarts=2)], ready=True
    )
    said = stalled_said(pipeline.feed([event("MODIFIED", ready, at(9))]))
    assert said == {
        "DynamoComponentDeployment": ("False", "NoCrashLoop"),
        "DynamoGraphDeployment": ("False", "NoCrashLoop"),
    }


# --- a LeaderWorkerSet-backed component: its group loop is of the spec it came from ---------------------


def test_a_spec_change_ends_an_lws_group_loop_and_a_loop_of_the_new_spec_must_build_up_afresh() -> None:
    """LWS recreates a failing group on every first restart, and a rollout's recreation follows the
    failure too, so the old spec's streak would hold the verdict (and the DGD's `Stalled`) until the new
    group is Ready: a fix's `helm upgrade --wait` would read Failed at its new generation."""
    worker = component("worker", "worker")
    pipeline = Pipeline(recovery_window=WINDOW)
    stale = "LeaderWorkerSet g-worker-0 group 0 is recreation-looping: recreated 2 times, each after a failure (x)"
    feed(
        pipeline,
        [event("ADDED", graph(FRONTEND, worker), group_at(0)), event("ADDED", lws(replicas=1), group_at(0))],
        # its DCD still says the old loop, as crashwatch wrote it before the change
        [event("ADDED", dcd("g-worker", available="False", reason="ContainerCrashLooping", message=stale))],
    )
    out = feed(pipeline, incarnation(1, 0), incarnation(2, 10), [event("ADDED", lws_pod(incarnation=3), group_at(20))])
    assert [c.finding is not None and dict(c.finding.part).get("lws") for c in components(out)][-1] == "g-worker-0"
    fix = graph(FRONTEND, component("worker", "worker", "fixed"), generation=2)
    said = changes(pipeline.feed([event("MODIFIED", fix, group_at(25))]))
    assert said == [("component", None, REPLACED_MESSAGE), ("graph", False, None)]
    # the held words on the DCD do not bring the old loop back while the group is not Ready
    flip = lws_pod(worker=1, incarnation=3, ready=True)
    assert changes(pipeline.feed([event("ADDED", flip, group_at(26))])) == []
    # the new spec fails too: one recreation after a failure is no loop yet, the second is
    failed = lws_pod(worker=1, incarnation=3, restarts=1)
    pipeline.feed([event("MODIFIED", failed, group_at(30))])
    assert changes(feed(pipeline, [event("DELETED", lws_pod(incarnation=3), group_at(31))], incarnation(4, 32))) == []
    said = changes(pipeline.feed([event("ADDED", lws_pod(incarnation=5), group_at(50))]))
    assert said[0][0] == "component" and said[0][1] is not None
    assert said[-1] == ("graph", True, "component_crash_looping")


# --- another writer's status, as crashwatch answers it before it lands (sinks.admission) -----------------


def status_of(obj: dict[str, Any]) -> StatusView:
    decoded = event("MODIFIED", obj).object
    assert isinstance(decoded, DynamoGraphDeployment | DynamoComponentDeployment)
    return status_view(decoded)


def with_stalled(obj: dict[str, Any], status: str, reason: str, generation: int = 1) -> dict[str, Any]:
    """`obj` carrying crashwatch's `Stalled` as the operator keeps it."""
    stalled = {"type": "Stalled", "status": status, "reason": reason, "message": "m", "observedGeneration": generation}
    obj["status"]["conditions"].append(stalled | {"lastTransitionTime": "2026-11-20T10:00:05Z"})
    return obj


def said_stalled(wanted: StatusWanted | None) -> tuple[str, str] | None:
    if wanted is None:
        return None
    condition = next(c for c in wanted.decided if c.type == "Stalled")
    return condition.status, condition.reason


def test_the_operators_first_status_of_the_fixs_generation_is_answered_with_the_withdrawal() -> None:
    """The operator's write moves observedGeneration to the fix while keeping our Stalled=True: the answer
    waits for the spec change, then gives the write Stalled=False (SpecReplaced), its other conditions kept."""
    pipeline = Pipeline(recovery_window=WINDOW)
    pipeline.feed([event("ADDED", dcd("g-decode", component="Decode"), at(0))])
    looping(pipeline)
    fix = graph(FRONTEND, component("Decode", "decode", "fixed"), generation=2)
    operators = with_stalled(copy.deepcopy(fix), "True", "ComponentCrashLooping")
    operators["status"]["observedGeneration"] = 2
    # not yet: the watch has not brought the spec change
    assert pipeline.admit(status_of(operators), at(10)) == (False, None)
    pipeline.feed([event("MODIFIED", with_stalled(copy.deepcopy(fix), "True", "ComponentCrashLooping"), at(10))])
    known, wanted = pipeline.admit(status_of(operators), at(10.1))
    assert known and said_stalled(wanted) == ("False", "SpecReplaced")
    assert wanted is not None
    assert [c.type for c in wanted.conditions] == ["Ready", "Stalled"]  # the operator's Ready kept, in place
    # a write that already says it is let through as it is
    withdrawn = with_stalled(copy.deepcopy(fix), "False", "SpecReplaced")
    assert pipeline.admit(status_of(withdrawn), at(11)) == (True, None)


def test_while_the_crash_loop_holds_a_write_that_says_it_passes_and_one_that_does_not_is_given_it() -> None:
    pipeline = Pipeline(recovery_window=WINDOW)
    pipeline.feed([event("ADDED", dcd("g-decode", component="Decode"), at(0))])
    looping(pipeline)
    known, wanted = pipeline.admit(status_of(graph(FRONTEND, WORKER)), at(6))
    assert known and said_stalled(wanted) == ("True", "ComponentCrashLooping")
    assert wanted is not None
    assert wanted.state == "failed"
    kept = graph(FRONTEND, WORKER)
    kept["status"]["conditions"] = [condition_dict(c) for c in wanted.conditions]
    kept["status"]["state"] = "failed"
    assert pipeline.admit(status_of(kept), at(7)) == (True, None)
    # the operator's `successful` on a Ready flip of the crash-looping worker: answered with the failure
    flipped = copy.deepcopy(kept)
    flipped["status"]["state"] = "successful"
    ready = next(c for c in flipped["status"]["conditions"] if c["type"] == "Ready")
    ready.update(status="True", reason="all_resources_are_ready", message="All resources are ready")
    known, answered = pipeline.admit(status_of(flipped), at(7))
    assert known and answered is not None and answered.state == "failed"
    assert {c.type: (c.status, c.reason) for c in answered.decided} == {
        "Ready": ("False", "component_crash_looping"),
        "Stalled": ("True", "ComponentCrashLooping"),
    }
    kept["status"]["conditions"][-1]["message"] = "words of an older finding"
    assert said_stalled(pipeline.admit(status_of(kept), at(7))[1]) == ("True", "ComponentCrashLooping")
    component_write = with_stalled(dcd("g-decode", component="Decode"), "False", "NoCrashLoop")
    known, wanted = pipeline.admit(status_of(component_write), at(6))
    assert known and said_stalled(wanted) == ("True", "ContainerCrashLooping")
    assert wanted is not None and wanted.condition.type == "Available" and wanted.condition.status == "False"


def test_a_status_write_of_an_object_the_pipeline_does_not_hold_is_let_through_at_once() -> None:
    pipeline = looping(Pipeline(recovery_window=WINDOW))
    stranger = with_stalled(dgd(name="other"), "True", "ComponentCrashLooping")
    assert pipeline.admit(status_of(stranger), at(6)) == (True, None)
    recreated = graph(FRONTEND, WORKER)
    recreated["metadata"]["uid"] = "a-new-uid"
    assert pipeline.admit(status_of(recreated), at(6)) == (True, None)
    # and nothing is said before the first list is complete
    unsynced = Pipeline(recovery_window=WINDOW, synced=False)
    unsynced.feed([event("ADDED", graph(FRONTEND, WORKER), at(0))])
    assert unsynced.admit(status_of(graph(FRONTEND, WORKER)), at(1)) == (False, None)
