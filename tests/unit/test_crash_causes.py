"""Why a component crashes (pipeline.crash_causes): the output of each new crash asked for once, its cause
closing the finding's words, and a cause that is certain failing the graph at the first crash."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from builders import container, dcd, dgd, event, labels, pod

from pipeline.diagnoses import Settings
from pipeline.outputs import ComponentChange, ExplainWanted, GraphChange, Output, StatusWanted
from pipeline.pipeline import Pipeline
from sinks.wait import GraphWaiter
from stream.model.events import CrashOutput

T = "2026-11-20T10:{:02d}:{:02d}Z"
CORPUS = Path(__file__).resolve().parents[1] / "data" / "crashlogs"
# real output: a gated model (certain), etcd not reachable (may pass on retry)
GATED = (CORPUS / "vllm-model_access_denied-1.log").read_text()
ETCD = (CORPUS / "dynamo-dependency_unreachable-1.log").read_text()
# a token printed on a line of the output: it must never reach a status
SECRET = "hf_AbCdEfGhIjKlMnOpQrStUvWx0123"


def at(minute: int, second: int = 0) -> str:
    return T.format(minute, second)


def worker(name: str = "w-0", *, state: str, restarts: int, ended: str = "", uid: str | None = None) -> dict[str, Any]:
    """A worker Pod whose container is down after a crash that ended at `ended` (terminated, or waiting
    in backoff), or running again."""
    ran = (at(0), ended) if ended else None
    if state == "running":
        run = container(state="running", restarts=restarts, last_exit=1, ran=ran, ready=False)
        return pod(name, uid=uid, containers=[run])
    return pod(name, uid=uid, containers=[container(state=state, restarts=restarts, exit_code=1, ran=ran)])


def crash_output(text: str, ended: str, name: str = "w-0", uid: str | None = None) -> CrashOutput:
    """The output of the run of `name`'s container that ended at `ended`, as a reader answers."""
    return CrashOutput("ns", name, uid or f"uid-ns-{name}", "main", ended, text, at(1, 2), 0, 1, "Error")


def started(settings: Settings | None = None) -> Pipeline:
    pipeline = Pipeline(explains=True, diagnoses=settings, recovery_window=60)
    pipeline.feed([event("ADDED", dgd(), at(0)), event("ADDED", dcd("g-worker"), at(0))])
    return pipeline


def of(kind: type, outputs: list[Output]) -> list[Any]:
    return [o for o in outputs if isinstance(o, kind)]


def test_each_new_crash_is_asked_for_once_and_only_of_the_pod_that_speaks_for_its_component() -> None:
    pipeline = started()
    first = pipeline.feed([event("MODIFIED", worker(state="terminated", restarts=0, ended=at(1)), at(1))])
    assert of(ExplainWanted, first) == [ExplainWanted(at(1), "ns", "w-0", "uid-ns-w-0", "main", at(1), 0, 1, "Error")]
    # the same crash, the container now waiting in backoff: not asked again
    assert (
        of(
            ExplainWanted,
            pipeline.feed([event("MODIFIED", worker(state="waiting", restarts=1, ended=at(1)), at(1, 5))]),
        )
        == []
    )
    # a second Pod of the component crashes: the first by name speaks for the component
    assert (
        of(
            ExplainWanted,
            pipeline.feed([event("ADDED", worker("w-1", state="terminated", restarts=0, ended=at(1, 6)), at(1, 6))]),
        )
        == []
    )
    # the next crash of w-0 is a new run: asked for
    again = pipeline.feed([event("MODIFIED", worker(state="terminated", restarts=1, ended=at(1, 30)), at(1, 30))])
    assert [w.finished_at for w in of(ExplainWanted, again)] == [at(1, 30)]
    # and a replay, or a watcher with no reader, asks for nothing
    quiet = Pipeline()
    assert (
        of(ExplainWanted, quiet.feed([event("ADDED", worker(state="terminated", restarts=0, ended=at(1)), at(1))]))
        == []
    )


def test_a_certain_cause_fails_the_graph_at_the_first_crash_in_words_built_from_the_cause_alone() -> None:
    pipeline = started()
    pipeline.feed([event("MODIFIED", worker(state="terminated", restarts=0, ended=at(1)), at(1))])
    out = pipeline.feed([crash_output(f"loading with token {SECRET}\n" + GATED, at(1))])
    (change,) = of(ComponentChange, out)
    assert change.finding is not None and change.finding.diagnosis == "certain_crash"
    assert change.finding.cause is not None and change.finding.cause.kind == "model_access_denied"
    (graph,) = of(GraphChange, out)
    assert graph.failed and graph.reason == "component_crashed_with_certain_cause"
    by_kind = {w.kind: w for w in of(StatusWanted, out)}
    dgd_wanted, dcd_wanted = by_kind["DynamoGraphDeployment"], by_kind["DynamoComponentDeployment"]
    assert dgd_wanted.state == "failed"
    stalled = next(c for c in dgd_wanted.conditions if c.type == "Stalled")
    assert (stalled.status, stalled.reason) == ("True", "ComponentCrashedCertainCause")
    assert "meta-llama/Llama-3.1-8B-Instruct" in stalled.message and "gated" in stalled.message
    available = next(c for c in dcd_wanted.conditions if c.type == "Available")
    assert (available.status, available.reason) == ("False", "ContainerCrashedCertainCause")
    for wanted in (dgd_wanted, dcd_wanted):  # never a raw line of the output, nor what it printed
        for condition in wanted.conditions:
            assert SECRET not in condition.message and "Client Error" not in condition.message


def test_the_first_crash_verdict_holds_between_restarts_and_clears_as_a_crash_loop_does() -> None:
    pipeline = started()
    pipeline.feed([event("MODIFIED", worker(state="terminated", restarts=0, ended=at(1)), at(1))])
    pipeline.feed([crash_output(GATED, at(1))])
    running = worker(state="running", restarts=1, ended=at(1))
    running["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    # running again, even Ready for a moment: still failing (the recovery window has not passed)
    assert of(ComponentChange, pipeline.feed([event("MODIFIED", running, at(1, 20))])) == []
    assert pipeline.aggregator.graph_verdicts()
    # its third run is down again: the crash-loop rule takes over, and the cause still names it
    down = pipeline.feed([event("MODIFIED", worker(state="waiting", restarts=2, ended=at(1, 40)), at(1, 40))])
    (change,) = of(ComponentChange, down)
    assert change.finding is not None and change.finding.diagnosis == "" and change.finding.cause is not None
    assert "restarted 2 times" in change.message and "gated" in change.message
    # replaced by a Pod of a fixed spec: cleared at once
    fixed = pod("w-0", uid="new", containers=[container(state="running")], ready=True)
    cleared = pipeline.feed([event("MODIFIED", fixed, at(2))])
    assert [c.finding for c in of(ComponentChange, cleared)] == [None]
    assert not pipeline.aggregator.graph_verdicts()


def test_a_cause_that_may_pass_on_retry_is_named_at_the_crash_loop_never_hurried() -> None:
    pipeline = started()
    pipeline.feed([event("MODIFIED", worker(state="terminated", restarts=0, ended=at(1)), at(1))])
    assert of(ComponentChange, pipeline.feed([crash_output(ETCD, at(1))])) == []
    looping = pipeline.feed([event("MODIFIED", worker(state="waiting", restarts=2, ended=at(1)), at(1, 40))])
    (change,) = of(ComponentChange, looping)
    assert change.finding is not None and change.finding.cause is not None
    assert change.finding.cause.kind == "dependency_unreachable" and not change.finding.cause.certain
    (graph,) = of(GraphChange, looping)
    assert graph.reason == "component_crash_looping"


def test_with_fail_fast_off_a_certain_cause_waits_for_the_crash_loop_and_is_named_there() -> None:
    pipeline = started(Settings(fail_fast=False))
    pipeline.feed([event("MODIFIED", worker(state="terminated", restarts=0, ended=at(1)), at(1))])
    assert of(ComponentChange, pipeline.feed([crash_output(GATED, at(1))])) == []
    looping = pipeline.feed([event("MODIFIED", worker(state="waiting", restarts=2, ended=at(1)), at(1, 40))])
    (change,) = of(ComponentChange, looping)
    assert change.finding is not None and change.finding.cause is not None and change.finding.diagnosis == ""


def test_an_output_of_a_pod_replaced_since_or_ready_again_fails_nothing() -> None:
    pipeline = started()
    pipeline.feed([event("MODIFIED", worker(state="terminated", restarts=0, ended=at(1)), at(1))])
    assert pipeline.feed([crash_output(GATED, at(1), uid="another")]) == []
    # Ready again by the time the output comes: named, but not failed (nothing would release it)
    ready = pod("w-0", containers=[container(state="running", restarts=1, last_exit=1)], ready=True)
    pipeline.feed([event("MODIFIED", ready, at(1, 1))])
    assert of(ComponentChange, pipeline.feed([crash_output(GATED, at(1))])) == []


def test_a_pod_ready_again_when_its_certain_cause_came_fails_when_it_goes_down() -> None:
    """No readiness probe: Ready from each start to its crash, and restarted at once after the first, so
    its output is often read while it is Ready again; failed when it is down next, with no new output to
    wait for (its next crash may end in the same second as the first, the same run to a reader); a Pod
    replaced meanwhile is not. (A replay, which reads no crash of a view, keeps the view the output
    found down and fails it there: the same verdict, a moment sooner.)"""
    explains = True
    pipeline = Pipeline(explains=explains, recovery_window=60)
    pipeline.feed([event("ADDED", dgd(), at(0)), event("ADDED", dcd("g-worker"), at(0))])
    pipeline.feed([event("MODIFIED", worker(state="terminated", restarts=0, ended=at(1)), at(1))])
    ready = pod("w-0", containers=[container(state="running", restarts=1, last_exit=1, ran=(at(0), at(1)))], ready=True)
    pipeline.feed([event("MODIFIED", ready, at(1, 1))])
    assert of(ComponentChange, pipeline.feed([crash_output(GATED, at(1))])) == []  # Ready: not failed
    down = pipeline.feed([event("MODIFIED", worker(state="terminated", restarts=1, ended=at(1)), at(1, 3))])
    (change,) = of(ComponentChange, down)
    assert change.finding is not None and change.finding.diagnosis == "certain_crash"
    assert change.time == at(1, 3) and change.finding.cause is not None
    assert change.finding.cause.kind == "model_access_denied"
    (graph,) = of(GraphChange, down)
    assert graph.failed and graph.reason == "component_crashed_with_certain_cause"
    # replaced under its name while Ready: the new Pod going down is no longer that cause's
    pipeline = Pipeline(explains=explains, recovery_window=60)
    pipeline.feed([event("ADDED", dgd(), at(0)), event("ADDED", dcd("g-worker"), at(0))])
    pipeline.feed([event("MODIFIED", worker(state="terminated", restarts=0, ended=at(1)), at(1))])
    pipeline.feed([event("MODIFIED", ready, at(1, 1)), crash_output(GATED, at(1))])
    pipeline.feed([event("DELETED", ready, at(1, 2))])
    fresh = worker(state="waiting", restarts=0, uid="uid-new")
    assert of(ComponentChange, pipeline.feed([event("ADDED", fresh, at(1, 3))])) == []


def test_a_backends_pod_is_left_to_its_rule() -> None:
    """A LeaderWorkerSet group is recreated at its first crash: failing its Pod at once would flap."""
    pipeline = started()
    lws_labels = labels(
        **{"leaderworkerset.sigs.k8s.io/name": "g-worker-0", "leaderworkerset.sigs.k8s.io/group-index": "0"}
    )
    leader = pod(
        "g-worker-0-0",
        pod_labels=lws_labels,
        containers=[container(state="terminated", exit_code=1, ran=(at(0), at(1)))],
    )
    pipeline.feed([event("ADDED", leader, at(1))])
    assert of(ComponentChange, pipeline.feed([crash_output(GATED, at(1), name="g-worker-0-0")])) == []


def test_a_replay_asks_for_nothing_yet_an_output_its_record_holds_fails_the_first_crash_as_live() -> None:
    """A replay's pipeline asks for no output (its record holds the outputs the live run read): a crash alone
    changes nothing it reports, and the output it holds fails the first crash as it did live."""
    pipeline = Pipeline(recovery_window=60)
    pipeline.feed([event("ADDED", dgd(), at(0)), event("ADDED", dcd("g-worker"), at(0))])
    crashed = pipeline.feed([event("MODIFIED", worker(state="terminated", restarts=0, ended=at(1)), at(1))])
    assert of(ExplainWanted, crashed) == [] and of(ComponentChange, crashed) == []
    (change,) = of(ComponentChange, pipeline.feed([crash_output(GATED, at(1))]))
    assert change.finding is not None and change.finding.diagnosis == "certain_crash"
    assert (change.finding.restarts, change.finding.exit_code) == (0, 1)


@pytest.mark.anyio
async def test_wait_says_why_first_on_failure_and_its_json_carries_the_cause() -> None:
    pipeline = Pipeline(synced=False, readiness=True, recovery_window=60)
    pipeline.feed(
        [event("ADDED", dgd(), at(0)), event("ADDED", worker(state="terminated", restarts=0, ended=at(1)), at(1))]
    )
    outputs = pipeline.sync(at(1)) + pipeline.feed([crash_output(GATED, at(1))])
    for fmt in ("text", "json"):
        out = io.BytesIO()
        waiter = GraphWaiter([("ns", "g")], fmt, out, lambda _: None, lambda: None)
        send, receive = anyio.create_memory_object_stream[list[Output]](4)
        async with send:
            await send.send(outputs)
        await waiter.run(receive)
        assert waiter.result == "failed"
        text = out.getvalue().decode()
        if fmt == "text":
            lines = text.splitlines()
            assert lines[0].startswith("ns/g  FAILED  component_crashed_with_certain_cause")
            assert lines[1] == (
                "  why: worker: the model meta-llama/Llama-3.1-8B-Instruct is gated or private: the Hugging Face "
                "token is missing or has no access (model_access_denied)"
            )
            assert lines[2].startswith("  fix: ")
        else:
            (entry,) = json.loads(text)["graphs"][0]["crash_looping"]
            assert entry["cause"]["class"] == "model_access_denied" and entry["cause"]["certain"]
            assert entry["cause"]["fields"] == {"model": "meta-llama/Llama-3.1-8B-Instruct"}
