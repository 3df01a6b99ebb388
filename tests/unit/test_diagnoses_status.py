"""The status contract of the diagnoses beside the crash loop (docs/status.md): `Stalled=True` with a reason
naming each, on the DCD and the DGD; `state: failed` for crash loops alone unless --failed-state all; the
clearing, the Events, what `wait` and `get` read, and the lines `tail` prints."""

from __future__ import annotations

import json
from typing import Any

from builders import container, crashing, dcd, dgd, event, healthy, pod

from pipeline.diagnoses import Settings
from pipeline.outputs import ComponentChange, GraphChange, GraphReadiness, Output, StatusWanted
from pipeline.pipeline import Pipeline
from sinks.events import REASON_CRASH_LOOPING, occurrences
from sinks.lines import json_line, text_line
from sinks.table import render_table
from sinks.wait import describe

T0 = "2026-11-20T10:00:00Z"


def pulling(name: str = "p-0", reason: str = "ImagePullBackOff", **kw: Any) -> dict[str, Any]:
    obj = pod(
        name,
        containers=[
            container(state="waiting", exit_code=None, waiting=reason, backoff='Back-off pulling image "x:bad"')
        ],
        phase="Pending",
        **kw,
    )
    # bound to its node an hour ago: every grace has passed
    obj["status"]["conditions"].append(
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-20T09:00:00Z"}
    )
    return obj


def feed(pipeline: Pipeline, *objects: dict[str, Any]) -> list[Output]:
    return pipeline.feed([event("MODIFIED", obj, T0) for obj in objects])


def wanted(outputs: list[Output], kind: str) -> dict[str, Any]:
    """The decided conditions (type -> (status, reason, message)) and state of the last want for `kind`."""
    wants = [o for o in outputs if isinstance(o, StatusWanted) and o.kind == kind]
    assert wants, f"no status wanted for {kind}"
    last = wants[-1]
    return {"state": last.state} | {c.type: (c.status, c.reason, c.message) for c in last.decided}


def setup(failed_state: str = "crash-loop") -> Pipeline:
    pipeline = Pipeline(synced=False, recovery_window=0, readiness=True, diagnoses=Settings(failed_state=failed_state))
    feed(pipeline, dgd(), dcd("g-worker"))
    pipeline.sync(T0)
    return pipeline


def test_an_image_pull_stalls_the_dcd_and_dgd_but_fails_neither_by_default() -> None:
    pipeline = setup()
    out = feed(pipeline, pulling())
    on_dcd, on_dgd = wanted(out, "DynamoComponentDeployment"), wanted(out, "DynamoGraphDeployment")
    finding = 'container main of Pod p-0 cannot pull its image (ImagePullBackOff): Back-off pulling image "x:bad"'
    # Available and the DGD's state and Ready stay the operator's: upstream fails a graph for crash loops alone
    assert on_dcd == {"state": None, "Stalled": ("True", "ImagePullFailing", finding)}
    assert on_dgd == {
        "state": None,
        "Stalled": ("True", "ComponentImagePullFailing", f"Components failing: worker: {finding}"),
    }
    graph = [o for o in out if isinstance(o, GraphReadiness)][-1]
    assert (graph.verdict, graph.reason) == ("failed", "component_image_pull_failing")  # `wait` exits 1 on it
    # it clears: Stalled=False in words that fit, and nothing else written
    out = feed(pipeline, healthy())
    assert wanted(out, "DynamoComponentDeployment") == {
        "state": None,
        "Stalled": ("False", "Recovered", "no container is failing"),
    }
    assert wanted(out, "DynamoGraphDeployment") == {
        "state": None,
        "Stalled": ("False", "Recovered", "no component is failing"),
    }


def test_with_failed_state_all_every_diagnosis_fails_the_graph_in_its_own_words() -> None:
    pipeline = setup("all")
    out = feed(pipeline, pulling())
    on_dcd, on_dgd = wanted(out, "DynamoComponentDeployment"), wanted(out, "DynamoGraphDeployment")
    assert on_dcd["Available"][:2] == ("False", "ImagePullFailing")
    assert on_dgd["state"] == "failed"
    assert on_dgd["Ready"][:2] == ("False", "component_image_pull_failing")
    # its end clears what it wrote, in the operator's vocabulary (no Deployment seen here: Reconciling)
    out = feed(pipeline, healthy())
    assert wanted(out, "DynamoComponentDeployment")["Available"][:2] == ("Unknown", "Reconciling")
    assert wanted(out, "DynamoGraphDeployment")["state"] == "pending"


def test_a_crash_loop_beside_another_diagnosis_fails_the_graph_for_the_crash_loop_alone() -> None:
    pipeline = setup()
    other = pulling(
        "q-0", pod_labels={"nvidia.com/dynamo-graph-deployment-name": "g", "nvidia.com/dynamo-component": "y"}
    )
    feed(pipeline, other)
    out = feed(pipeline, crashing(restarts=2))
    on_dgd = wanted(out, "DynamoGraphDeployment")
    loop = "worker: container main of Pod p-0 restarted 2 times and is down after exit code 1"
    assert on_dgd["state"] == "failed"
    assert on_dgd["Ready"] == ("False", "component_crash_looping", f"Components crash-looping: {loop}")
    assert on_dgd["Stalled"][:2] == ("True", "ComponentsFailing")
    assert on_dgd["Stalled"][2].startswith(f"Components failing: {loop}; y: container main of Pod q-0 cannot pull")


def test_each_diagnosis_has_its_stalled_reason_and_its_event() -> None:
    unschedulable = pod(containers=[], phase="Pending")
    unschedulable["status"]["containerStatuses"] = []
    unschedulable["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "no GPU",
            "lastTransitionTime": None,
        }
    ]
    oom = pod(containers=[container(restarts=2, exit_code=0, reason="OOMKilled")])
    restart = pod(containers=[container(restarts=2, exit_code=0, reason="Completed")])
    config = pulling(reason="CreateContainerConfigError")
    cases = [
        (config, "ContainerConfigError", "ComponentConfigError"),
        (oom, "ContainerOOMKilled", "ComponentOOMKilled"),
        (restart, "ContainerRestartLooping", "ComponentRestartLooping"),
        (pulling(reason="ErrImageNeverPull"), "ImagePullFailing", "ComponentImagePullFailing"),
    ]
    for obj, dcd_reason, dgd_reason in cases:
        pipeline = setup()
        out = feed(pipeline, obj)
        assert wanted(out, "DynamoComponentDeployment")["Stalled"][1] == dcd_reason
        assert wanted(out, "DynamoGraphDeployment")["Stalled"][1] == dgd_reason
        assert {(o.type, o.reason) for o in occurrences(out)} == {("Warning", dgd_reason)}
        recovered = occurrences(feed(pipeline, healthy()))
        assert {(o.type, o.reason) for o in recovered} == {("Normal", "ComponentRecovered")}
    # the scheduler's condition, its transition time null: the grace counts from first sight
    pipeline = setup()
    pipeline.aggregator.findings.graces.settings = Settings(unschedulable_grace=60)
    assert [o for o in feed(pipeline, unschedulable) if isinstance(o, StatusWanted)] == []
    out = pipeline.tick("2026-11-20T10:01:00Z")
    assert wanted(out, "DynamoComponentDeployment")["Stalled"] == (
        "True",
        "PodUnschedulable",
        "Pod p-0 cannot be scheduled: no GPU",
    )
    assert wanted(out, "DynamoGraphDeployment")["Stalled"][:2] == ("True", "ComponentUnschedulable")


def test_a_crash_loop_still_speaks_as_before() -> None:
    pipeline = setup()
    out = feed(pipeline, crashing(restarts=2))
    assert {o.reason for o in occurrences(out)} == {REASON_CRASH_LOOPING}
    assert wanted(out, "DynamoComponentDeployment")["Available"][:2] == ("False", "ContainerCrashLooping")
    out = feed(pipeline, healthy())
    assert wanted(out, "DynamoComponentDeployment")["Stalled"] == (
        "False",
        "NoCrashLoop",
        "no container is crash-looping",
    )


def test_tail_lines_name_each_diagnosis() -> None:
    pipeline = Pipeline(diagnoses=Settings(image_pull_grace=0))
    out = pipeline.feed([event("ADDED", pulling(), T0)])
    component = next(o for o in out if isinstance(o, ComponentChange))
    graph = next(o for o in out if isinstance(o, GraphChange))
    assert text_line(component).decode() == (
        f"{T0}  ns/g/worker  IMAGE-PULL-FAILING  pod=p-0 container=main restarts=0 reason=ImagePullBackOff\n"
    )
    assert text_line(graph).decode() == f"{T0}  ns/g  FAILED  component_image_pull_failing: worker (ImagePullBackOff)\n"
    line = json.loads(json_line(component))
    assert (line["crash_looping"], line["diagnosis"], line["reason"], line["detail"]) == (
        False,
        "image_pull_failing",
        "ImagePullBackOff",
        'Back-off pulling image "x:bad"',
    )
    assert line["memory_limit"] is None
    oom = pod(containers=[container(restarts=3, exit_code=0, reason="OOMKilled")])
    oom["spec"] = {"containers": [{"name": "main", "resources": {"limits": {"memory": "8Gi"}}}]}
    component = next(o for o in pipeline.feed([event("MODIFIED", oom, T0)]) if isinstance(o, ComponentChange))
    assert (
        text_line(component)
        .decode()
        .endswith("OOM-KILLED  pod=p-0 container=main restarts=3 exit=0 reason=OOMKilled limit=8Gi\n")
    )
    assert json.loads(json_line(component))["memory_limit"] == "8Gi"
    # a crash loop's JSON line has the keys it always had
    component = next(
        o for o in pipeline.feed([event("MODIFIED", crashing(restarts=2), T0)]) if isinstance(o, ComponentChange)
    )
    assert "diagnosis" not in json.loads(json_line(component))


def test_wait_and_get_name_the_diagnosis() -> None:
    pipeline = setup()
    out = feed(pipeline, pulling())
    graph = [o for o in out if isinstance(o, GraphReadiness)][-1]
    assert describe(graph) == "image-pull-failing: worker (ImagePullBackOff)"
    table = render_table([graph], namespaces=False, wide=True).splitlines()
    assert table[1].split()[:5] == ["g", "pending", "image-pull-failing", "0/1", "worker"]
    assert "pod=p-0 container=main ImagePullBackOff" in table[1]


def test_a_diagnosis_overwritten_by_the_operator_is_asserted_again() -> None:
    """With --failed-state all, an operator without the upstream change rewrites the DGD to pending: the
    failure still holds, so it is wanted again (the patcher spaces such writes with backoff)."""
    pipeline = setup("all")
    out = feed(pipeline, pulling())
    assert wanted(out, "DynamoGraphDeployment")["state"] == "failed"
    rewritten = dgd()  # the operator's pending, and no Stalled: as before crashwatch wrote
    rewritten["metadata"]["resourceVersion"] = "7"
    again = feed(pipeline, rewritten)
    on_dgd = wanted(again, "DynamoGraphDeployment")
    assert on_dgd["state"] == "failed"
    assert on_dgd["Ready"][:2] == ("False", "component_image_pull_failing")
    assert on_dgd["Stalled"][:2] == ("True", "ComponentImagePullFailing")
