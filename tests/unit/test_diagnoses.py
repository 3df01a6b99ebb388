"""The diagnoses beside the crash loop (pipeline.diagnoses), clause by clause, each with its negation; then
their graces, which pass as events' times do, through the one Pipeline."""

from __future__ import annotations

from typing import Any

import pytest
from builders import container, event, pod, typed_pod

from pipeline.diagnoses import Settings, diagnose
from pipeline.findings import CONFIG_ERROR, IMAGE_PULL, OOM_KILLED, RESTART_LOOP, UNSCHEDULABLE, Finding
from pipeline.outputs import ComponentChange, GraphChange, Output
from pipeline.pipeline import Pipeline

STARTED = "2026-11-20T10:00:00Z"


def check(raw: dict[str, Any]) -> Finding | None:
    return diagnose(typed_pod(raw))


def waiting(reason: str, message: str = "", restarts: int = 0, **kw: Any) -> dict[str, Any]:
    """A Pod whose main container waits with `reason`, bound to its node at STARTED."""
    obj = pod(
        containers=[container(state="waiting", restarts=restarts, exit_code=None, waiting=reason, backoff=message)],
        phase="Pending",
        **kw,
    )
    obj["status"]["conditions"].append({"type": "PodScheduled", "status": "True", "lastTransitionTime": STARTED})
    return obj


def unschedulable(
    message: str | None = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.", **cond: Any
) -> dict[str, Any]:
    obj = pod(containers=[], phase="Pending")
    obj["status"]["containerStatuses"] = []
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": STARTED,
    } | cond
    obj["status"]["conditions"] = [condition]
    return obj


def exited(
    exit_code: int, reason: str, restarts: int = 2, restart_policy: str | None = None, **kw: Any
) -> dict[str, Any]:
    obj = pod(containers=[container(restarts=restarts, exit_code=exit_code, reason=reason)], **kw)
    obj["spec"] = {"containers": [{"name": "main", "resources": {"limits": {"memory": "4Gi", "cpu": "2"}}}]}
    if restart_policy is not None:
        obj["spec"]["restartPolicy"] = restart_policy
    return obj


# --- image pulls ------------------------------------------------------------------------------------


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"])
def test_a_container_waiting_on_its_image_is_an_image_pull_finding(reason: str) -> None:
    found = check(waiting(reason, 'Back-off pulling image "nvcr.io/x:bad"'))
    assert found is not None
    assert (found.diagnosis, found.container, found.reason, found.since) == (IMAGE_PULL, "main", reason, STARTED)
    assert found.describe() == (
        f'container main of Pod p-0 cannot pull its image ({reason}): Back-off pulling image "nvcr.io/x:bad"'
    )


@pytest.mark.parametrize("reason", ["ContainerCreating", "PodInitializing", "CrashLoopBackOff"])
def test_other_waiting_reasons_are_no_image_or_config_finding(reason: str) -> None:
    assert check(waiting(reason)) is None


def test_a_pull_failure_of_a_container_that_ran_before_counts_from_its_last_stop() -> None:
    obj = waiting("ImagePullBackOff", restarts=1)
    obj["status"]["containerStatuses"][0]["lastState"] = {
        "terminated": {"exitCode": 1, "reason": "Error", "finishedAt": "2026-11-20T11:00:00Z"}
    }
    found = check(obj)
    assert found is not None and found.since == "2026-11-20T11:00:00Z"


def test_a_ready_pod_or_one_being_deleted_has_no_pull_finding() -> None:
    assert check(waiting("ImagePullBackOff", ready=True)) is None
    assert check(waiting("ImagePullBackOff", deleting=True)) is None


def test_a_crash_loop_in_another_container_comes_first() -> None:
    obj = pod(
        containers=[
            container("sidecar", state="waiting", exit_code=None, waiting="ImagePullBackOff"),
            container("main", restarts=3, exit_code=1),
        ]
    )
    found = check(obj)
    assert found is not None and (found.diagnosis, found.container) == ("", "main")


def test_a_kubelet_message_is_kept_on_one_bounded_line() -> None:
    found = check(waiting("ErrImagePull", "rpc error:\n" + "x" * 1000))
    assert found is not None
    assert "\n" not in found.detail and len(found.detail) == 300 and found.detail.endswith("...")


# --- config errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("reason", ["CreateContainerConfigError", "CreateContainerError"])
def test_a_container_that_cannot_be_created_is_a_config_error(reason: str) -> None:
    found = check(waiting(reason, 'secret "hf-token" not found'))
    assert found is not None and (found.diagnosis, found.reason) == (CONFIG_ERROR, reason)
    assert found.describe() == f'container main of Pod p-0 cannot be created ({reason}): secret "hf-token" not found'


def test_an_init_container_config_error_is_found() -> None:
    obj = pod(
        containers=[container(state="waiting", exit_code=None, waiting="PodInitializing")],
        init=[container("init", state="waiting", exit_code=None, waiting="CreateContainerConfigError")],
        phase="Pending",
    )
    found = check(obj)
    assert found is not None and (found.diagnosis, found.container) == (CONFIG_ERROR, "init")


# --- unschedulable ---------------------------------------------------------------------------------


def test_an_unschedulable_pod_keeps_the_schedulers_message_and_its_transition_time() -> None:
    found = check(unschedulable())
    assert found is not None
    assert (found.diagnosis, found.pod, found.container, found.since) == (UNSCHEDULABLE, "p-0", "", STARTED)
    assert found.describe() == "Pod p-0 cannot be scheduled: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu."


def test_a_null_last_transition_time_decodes_and_counts_from_first_sight() -> None:
    found = check(unschedulable(lastTransitionTime=None, message=None))
    assert found is not None and (found.since, found.detail) == ("", "")


@pytest.mark.parametrize(
    "change", [{"status": "True", "reason": None}, {"reason": "SchedulingGated"}, {"type": "Initialized"}]
)
def test_a_scheduled_or_gated_pod_is_not_unschedulable(change: dict[str, Any]) -> None:
    assert check(unschedulable(**change)) is None


def test_a_pod_with_container_statuses_is_past_scheduling() -> None:
    obj = unschedulable()
    obj["status"]["containerStatuses"] = [container(state="waiting", exit_code=None, waiting="ContainerCreating")]
    assert check(obj) is None


# --- restart loops with exit 0, and OOM kills --------------------------------------------------------


def test_exit_0_restarted_twice_under_always_is_a_restart_loop() -> None:
    found = check(exited(0, "Completed"))
    assert found is not None and (found.diagnosis, found.restarts, found.exit_code) == (RESTART_LOOP, 2, 0)
    assert found.describe() == (
        "container main of Pod p-0 restarted 2 times and is down after exit code 0 "
        "(restartPolicy Always restarts it forever)"
    )


def test_restart_policy_defaults_to_always() -> None:
    obj = exited(0, "Completed")
    del obj["spec"]
    found = check(obj)
    assert found is not None and found.diagnosis == RESTART_LOOP


@pytest.mark.parametrize(
    ("obj", "why"),
    [
        (exited(0, "Completed", restart_policy="OnFailure"), "restartPolicy OnFailure does not restart exit 0"),
        (exited(0, "Completed", restarts=1), "one restart is not yet a loop"),
        (exited(0, "Completed", ready=True), "a Ready Pod"),
        (exited(0, "Completed", phase="Succeeded"), "a finished Pod"),
    ],
)
def test_no_restart_loop(obj: dict[str, Any], why: str) -> None:
    assert check(obj) is None, why


def test_an_init_container_exiting_0_is_no_restart_loop() -> None:
    obj = pod(
        containers=[container(state="waiting", exit_code=None, waiting="PodInitializing")],
        init=[container("init", restarts=2, exit_code=0, reason="Completed")],
        phase="Pending",
    )
    assert check(obj) is None


def test_an_oom_kill_with_exit_0_is_named_with_the_memory_limit() -> None:
    found = check(exited(0, "OOMKilled", restarts=3))
    assert found is not None
    assert (found.diagnosis, found.reason, found.memory_limit) == (OOM_KILLED, "OOMKilled", "4Gi")
    assert found.describe() == (
        "container main of Pod p-0 restarted 3 times and is down after being OOM-killed (memory limit 4Gi, exit code 0)"
    )


def test_an_oom_kill_without_a_limit_says_so_even_under_on_failure() -> None:
    obj = exited(0, "OOMKilled", restart_policy="OnFailure")
    obj["spec"]["containers"][0]["resources"] = {}
    found = check(obj)
    assert found is not None and found.diagnosis == OOM_KILLED and "no memory limit" in found.describe()


def test_an_oom_kill_with_a_non_zero_exit_stays_the_crash_loop_rules_with_the_memory_limit_added() -> None:
    found = check(exited(137, "OOMKilled"))
    assert found is not None and (found.diagnosis, found.exit_code, found.memory_limit) == ("", 137, "4Gi")
    assert found.describe().endswith("after exit code 137 (OOMKilled, memory limit 4Gi)")


def test_an_init_containers_oom_kill_names_the_init_containers_limit() -> None:
    obj = pod(
        containers=[container(state="waiting", exit_code=None, waiting="PodInitializing")],
        init=[container("init", restarts=2, exit_code=137, reason="OOMKilled")],
        phase="Pending",
    )
    obj["spec"] = {
        "initContainers": [{"name": "init", "resources": {"limits": {"memory": "512Mi"}}}],
        "containers": [{"name": "main", "resources": {"limits": {"memory": "4Gi"}}}],
    }
    found = check(obj)
    assert found is not None and (found.container, found.memory_limit) == ("init", "512Mi")
    assert found.describe().endswith("after exit code 137 (OOMKilled, memory limit 512Mi)")


def test_an_oom_kill_with_a_non_zero_exit_and_no_limit_keeps_the_rules_words() -> None:
    obj = exited(137, "OOMKilled")
    obj["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "2"}}
    found = check(obj)
    assert found is not None and found.memory_limit == ""
    assert found.describe().endswith("after exit code 137 (OOMKilled)")


def test_a_crash_loop_that_is_no_oom_kill_carries_no_memory_limit() -> None:
    found = check(exited(1, "Error"))
    assert found is not None and found.memory_limit == ""
    assert found.describe().endswith("after exit code 1")


# --- graces, through the pipeline --------------------------------------------------------------------


def at(second: float) -> str:
    minutes, seconds = divmod(int(second), 60)
    return f"2026-11-20T10:{minutes:02d}:{seconds:02d}Z"


def said(outputs: list[Output]) -> list[tuple[str | None, str, str | None]]:
    out: list[tuple[str | None, str, str | None]] = []
    for o in outputs:
        if isinstance(o, ComponentChange):
            out.append((o.time, "component", o.finding.diagnosis if o.finding else None))
        elif isinstance(o, GraphChange):
            out.append((o.time, "graph", o.reason))
    return out


def test_a_retried_pull_fails_only_after_its_grace_counted_from_the_pods_binding() -> None:
    pipeline = Pipeline(diagnoses=Settings(image_pull_grace=60))
    assert said(pipeline.feed([event("ADDED", waiting("ErrImagePull"), at(10))])) == []
    assert said(pipeline.feed([event("MODIFIED", waiting("ImagePullBackOff"), at(30))])) == []
    assert said(pipeline.tick(at(59))) == []
    assert said(pipeline.tick(at(61))) == [
        (at(60), "component", IMAGE_PULL),
        (at(60), "graph", "component_image_pull_failing"),
    ]
    # the image is there: the container is created and runs
    fixed = pod(containers=[container(state="running")], ready=False)
    assert said(pipeline.feed([event("MODIFIED", fixed, at(90))])) == [
        (at(90), "component", None),
        (at(90), "graph", None),
    ]


def test_a_pull_that_succeeds_within_its_grace_says_nothing() -> None:
    pipeline = Pipeline(diagnoses=Settings(image_pull_grace=60))
    assert said(pipeline.feed([event("ADDED", waiting("ErrImagePull"), at(10))])) == []
    running = pod(containers=[container(state="running")], ready=True)
    assert said(pipeline.feed([event("MODIFIED", running, at(40))])) == []
    assert said(pipeline.tick(at(200))) == []


def test_a_permanent_pull_failure_is_at_once() -> None:
    pipeline = Pipeline(diagnoses=Settings(image_pull_grace=600))
    assert said(pipeline.feed([event("ADDED", waiting("ErrImageNeverPull"), at(1))])) == [
        (at(1), "component", IMAGE_PULL),
        (at(1), "graph", "component_image_pull_failing"),
    ]


def test_a_watcher_that_starts_late_counts_from_the_objects_time() -> None:
    """Restarted long after the Pod started, the grace has passed already: no second wait, no flap."""
    pipeline = Pipeline(diagnoses=Settings(config_error_grace=120))
    out = said(pipeline.feed([event("ADDED", waiting("CreateContainerConfigError"), at(600))]))
    assert out == [(at(600), "component", CONFIG_ERROR), (at(600), "graph", "component_config_error")]


def test_unschedulable_waits_for_its_grace_from_the_conditions_transition() -> None:
    pipeline = Pipeline(diagnoses=Settings(unschedulable_grace=300))
    assert said(pipeline.feed([event("ADDED", unschedulable(), at(5))])) == []
    # the scheduler says it again, in new words: the same episode, its grace still counts from STARTED
    again = unschedulable("0/5 nodes are available: 5 Insufficient nvidia.com/gpu.")
    assert said(pipeline.feed([event("MODIFIED", again, at(120))])) == []
    assert said(pipeline.tick(at(301))) == [
        (at(300), "component", UNSCHEDULABLE),
        (at(300), "graph", "component_unschedulable"),
    ]
    verdict = pipeline.aggregator.verdicts()[("ns", "g", "worker")]
    assert verdict.detail == "0/5 nodes are available: 5 Insufficient nvidia.com/gpu."


def test_without_a_transition_time_the_grace_counts_from_first_sight() -> None:
    pipeline = Pipeline(diagnoses=Settings(unschedulable_grace=60))
    obj = unschedulable(lastTransitionTime=None)
    assert said(pipeline.feed([event("ADDED", obj, at(100))])) == []
    assert said(pipeline.feed([event("MODIFIED", unschedulable("again", lastTransitionTime=None), at(150))])) == []
    assert [t for t, kind, _ in said(pipeline.tick(at(170))) if kind == "component"] == [at(160)]


def test_without_times_a_graced_finding_never_comes_into_force() -> None:
    pipeline = Pipeline(diagnoses=Settings(unschedulable_grace=60))
    assert said(pipeline.feed([event("ADDED", unschedulable(lastTransitionTime=None))])) == []
    assert pipeline.aggregator.verdicts() == {}


def test_a_graced_finding_ends_with_its_pod() -> None:
    pipeline = Pipeline(diagnoses=Settings(unschedulable_grace=0))
    assert len(said(pipeline.feed([event("ADDED", unschedulable(), at(1))]))) == 2
    assert said(pipeline.feed([event("DELETED", unschedulable(), at(2))])) == [
        (at(2), "component", None),
        (at(2), "graph", None),
    ]
    assert pipeline.aggregator.findings.graces.tracked == {}
    assert not pipeline.aggregator.pending()


def test_a_restart_loop_with_exit_0_holds_between_restarts() -> None:
    """Like a crash loop, it stays found while the container runs again (Ready for a moment)."""
    pipeline = Pipeline(recovery_window=90)
    assert said(pipeline.feed([event("ADDED", exited(0, "Completed"), at(1))])) == [
        (at(1), "component", RESTART_LOOP),
        (at(1), "graph", "component_restart_looping"),
    ]
    again = pod(containers=[container(state="running", restarts=2, last_exit=0, reason="Completed")], ready=True)
    assert said(pipeline.feed([event("MODIFIED", again, at(2))])) == []
    # its next exit: the same loop in new words (the restart count), never a recovery between
    assert said(pipeline.feed([event("MODIFIED", exited(0, "Completed", restarts=3), at(20))])) == [
        (at(20), "component", RESTART_LOOP),
        (at(20), "graph", "component_restart_looping"),
    ]
    assert said(pipeline.feed([event("MODIFIED", again | {}, at(21))])) == []


def test_a_component_reports_a_crash_loop_before_another_diagnosis() -> None:
    pipeline = Pipeline(diagnoses=Settings(image_pull_grace=0))
    pipeline.feed([event("ADDED", waiting("ImagePullBackOff", name="a-0"), at(1))])
    crashing = pod("b-0", containers=[container(restarts=2, exit_code=1)])
    out = pipeline.feed([event("ADDED", crashing, at(2))])
    assert said(out) == [(at(2), "component", ""), (at(2), "graph", "component_crash_looping")]


def test_two_components_with_different_diagnoses_fail_the_graph_as_mixed() -> None:
    pipeline = Pipeline(diagnoses=Settings(image_pull_grace=0))
    pipeline.feed([event("ADDED", waiting("ImagePullBackOff", name="a-0"), at(1))])
    other = pod("b-0", pod_labels={"nvidia.com/dynamo-graph-deployment-name": "g", "nvidia.com/dynamo-component": "y"})
    other["status"]["containerStatuses"] = [container(restarts=2, exit_code=1)]
    out = pipeline.feed([event("ADDED", other, at(2))])
    graph = [o for o in out if isinstance(o, GraphChange)]
    assert [(g.reason, g.components) for g in graph] == [("components_failing", ("worker", "y"))]
    assert graph[0].message.startswith("Components failing: worker: container main of Pod a-0 cannot pull")


def test_a_pod_without_a_binding_time_counts_its_pull_grace_from_first_sight() -> None:
    obj = waiting("ErrImagePull")
    obj["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": None}]
    found = check(obj)
    assert found is not None and found.since == ""


def test_a_spec_that_cannot_be_read_is_taken_for_the_defaults() -> None:
    obj = exited(0, "OOMKilled")
    obj["spec"] = {"containers": "not a list", "restartPolicy": 7}
    found = check(obj)
    assert found is not None and (found.diagnosis, found.memory_limit) == (OOM_KILLED, "")


def test_a_relisted_pod_keeps_its_spec_only_where_a_diagnosis_reads_it() -> None:
    """A relist holds its Pods until its end: their specs (half a Pod's bytes) are dropped unless a
    container restarted twice, where the restart-loop and OOM rules read the spec."""
    from stream.model.objects import NO_SPEC, own_labels

    looping = typed_pod(exited(0, "OOMKilled"))
    own_labels(looping)
    assert looping.spec is not NO_SPEC and diagnose(looping) is not None
    assert diagnose(looping).memory_limit == "4Gi"  # type: ignore[union-attr]
    fresh = typed_pod(exited(0, "Completed", restarts=1))
    own_labels(fresh)
    assert fresh.spec is NO_SPEC
