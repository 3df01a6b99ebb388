"""The metrics sink and the counters read at scrape time, with plain objects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
import pytest
from builders import container, pod, typed_pod

from pipeline.causes import classify
from pipeline.diagnoses import diagnose
from pipeline.findings import Finding
from pipeline.outputs import ComponentChange, GraphChange
from sinks.metrics import Metrics
from sinks.status import PatchStats
from stream.sources.resources import PODS

CRASH = Finding("g-worker-0", "main", 3, 1)


def component(graph: str, name: str, crashing: bool) -> ComponentChange:
    return ComponentChange(None, "ns", graph, name, f"{graph}-{name}", CRASH if crashing else None, "")


def graph(name: str, failed: bool) -> GraphChange:
    return GraphChange(None, "ns", name, failed, "component_crash_looping" if failed else None, (), "")


def crash_looping(metrics: Metrics, graph: str) -> float | None:
    return metrics.registry.get_sample_value("crashwatch_crash_looping_components", {"namespace": "ns", "graph": graph})


def test_crash_looping_components_are_counted_per_graph_and_a_recovered_graph_leaves_no_series() -> None:
    metrics = Metrics()
    metrics.observe([component("a", "worker", True), component("a", "frontend", True), graph("a", True)])
    metrics.observe([component("b", "worker", True), graph("b", True)])
    assert crash_looping(metrics, "a") == 2 and crash_looping(metrics, "b") == 1
    assert metrics.registry.get_sample_value("crashwatch_failed_graphs") == 2
    metrics.observe([component("a", "worker", True)])  # its finding changed: still one component
    metrics.observe([component("a", "frontend", False)])
    assert crash_looping(metrics, "a") == 1
    metrics.observe([component("a", "worker", False), graph("a", False)])
    assert crash_looping(metrics, "a") is None
    assert b'graph="a"' not in metrics.exposition()
    assert metrics.registry.get_sample_value("crashwatch_failed_graphs") == 1


def test_a_component_that_was_never_seen_failing_recovering_changes_nothing() -> None:
    metrics = Metrics()
    metrics.observe([component("a", "worker", False)])
    assert crash_looping(metrics, "a") is None


def diagnosed(metrics: Metrics) -> dict[str, dict[str, str]]:
    """crashwatch_component_diagnosed's series as {component: labels}, each asserted to be 1."""
    found = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name == "crashwatch_component_diagnosed":
                assert sample.value == 1
                assert sample.labels["component"] not in found, "two series for one component"
                found[sample.labels["component"]] = sample.labels
    return found


def exited(exit_code: int, reason: str) -> dict[str, Any]:
    obj = pod("w-0", containers=[container(restarts=3, exit_code=exit_code, reason=reason)])
    obj["spec"] = {"containers": [{"name": "main", "resources": {"limits": {"memory": "1Gi"}}}]}
    return obj


def waiting(reason: str) -> dict[str, Any]:
    return pod("w-0", containers=[container(exit_code=None, waiting=reason)], phase="Pending")


def unschedulable() -> dict[str, Any]:
    obj = pod("w-0", containers=[], phase="Pending")
    obj["status"]["containerStatuses"] = []
    obj["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1 nodes"}
    ]
    return obj


# each diagnosis, found by the real rules on a Pod, and the labels its series must carry
DIAGNOSED = [
    (exited(1, "Error"), {"reason": "ContainerCrashLooping", "container": "main", "exit_code": "1"}),
    (exited(137, "OOMKilled"), {"reason": "ContainerCrashLooping", "container": "main", "exit_code": "137"}),
    (exited(0, "OOMKilled"), {"reason": "ContainerOOMKilled", "container": "main", "exit_code": "0"}),
    (exited(0, "Completed"), {"reason": "ContainerRestartLooping", "container": "main", "exit_code": "0"}),
    (waiting("ImagePullBackOff"), {"reason": "ImagePullFailing", "container": "main", "exit_code": ""}),
    (waiting("ErrImageNeverPull"), {"reason": "ImagePullFailing", "container": "main", "exit_code": ""}),
    (waiting("CreateContainerConfigError"), {"reason": "ContainerConfigError", "container": "main", "exit_code": ""}),
    (unschedulable(), {"reason": "PodUnschedulable", "container": "", "exit_code": ""}),
]


@pytest.mark.parametrize(("obj", "labels"), DIAGNOSED, ids=[labels["reason"] for _, labels in DIAGNOSED])
def test_a_diagnosed_component_has_one_series_naming_its_finding_until_it_clears(
    obj: dict[str, Any], labels: dict[str, str]
) -> None:
    finding = diagnose(typed_pod(obj))
    assert finding is not None
    metrics = Metrics()
    change = ComponentChange(None, "ns", "g", "worker", "g-worker", finding, "")
    metrics.observe([change])
    where = {"namespace": "ns", "graph": "g", "component": "worker", "pod": "w-0", "cause": ""}
    assert diagnosed(metrics) == {"worker": where | labels}
    metrics.observe([change])  # the same verdict again: the same one series
    assert diagnosed(metrics) == {"worker": where | labels}
    metrics.observe([ComponentChange(None, "ns", "g", "worker", "g-worker", None, "")])
    assert diagnosed(metrics) == {}
    assert b"crashwatch_component_diagnosed{" not in metrics.exposition()


def test_a_changed_finding_replaces_the_components_series_and_components_are_apart() -> None:
    metrics = Metrics()
    metrics.observe([component("a", "worker", True), component("a", "frontend", True)])
    assert set(diagnosed(metrics)) == {"worker", "frontend"}
    replaced = Finding("g-worker-1", "main", 7, 137, "OOMKilled")  # the Pod replaced, crashing otherwise
    metrics.observe([ComponentChange(None, "ns", "a", "worker", "a-worker", replaced, "")])
    series = diagnosed(metrics)
    assert (series["worker"]["pod"], series["worker"]["exit_code"]) == ("g-worker-1", "137")
    assert series["frontend"]["pod"] == "g-worker-0"
    # more restarts of the same crash: no new series (the restart count is no label)
    metrics.observe([ComponentChange(None, "ns", "a", "worker", "a-worker", Finding("g-worker-1", "main", 9, 137), "")])
    assert diagnosed(metrics)["worker"] == series["worker"]
    assert metrics.exposition().count(b"crashwatch_component_diagnosed{") == 2
    metrics.observe([component("a", "frontend", False)])
    assert set(diagnosed(metrics)) == {"worker"}


@dataclass
class Counts:
    """What a reflector counts, as the metrics read it."""

    resource: object
    namespace: str | None
    events: int = 0
    lists: int = 0
    watches: int = 0
    errors: int = 0


def test_counters_are_read_when_scraped() -> None:
    metrics = Metrics()
    pods, everywhere = Counts(PODS, "ns"), Counts(PODS, None)
    stats = PatchStats()
    metrics.count([pods, everywhere], stats)  # type: ignore[list-item]
    pods.events, pods.lists, pods.errors, everywhere.watches = 7, 2, 1, 3
    stats.writes, stats.unchanged, stats.conflicts = 4, 1, 2
    sample = metrics.registry.get_sample_value
    assert sample("crashwatch_watch_events_total", {"resource": "pods", "namespace": "ns"}) == 7
    assert sample("crashwatch_lists_total", {"resource": "pods", "namespace": "ns"}) == 2
    assert sample("crashwatch_watch_errors_total", {"resource": "pods", "namespace": "ns"}) == 1
    assert sample("crashwatch_watches_total", {"resource": "pods", "namespace": ""}) == 3
    assert sample("crashwatch_status_writes_total", {"result": "written"}) == 4
    assert sample("crashwatch_status_writes_total", {"result": "unchanged"}) == 1
    assert sample("crashwatch_status_write_conflicts_total") == 2
    pods.events = 9  # read again at the next scrape, not copied once
    assert sample("crashwatch_watch_events_total", {"resource": "pods", "namespace": "ns"}) == 9


def test_tail_has_no_status_write_counters() -> None:
    metrics = Metrics()
    metrics.count([], None)
    assert b"crashwatch_status_writes" not in metrics.exposition()
    assert metrics.registry.get_sample_value("crashwatch_synced") == 0


def test_write_delays_are_a_histogram_whose_bounds_include_their_value() -> None:
    metrics = Metrics()
    stats = PatchStats()
    metrics.count([], stats)
    for seconds in (0.03, 0.05, 0.2, 100.0):  # 0.05 is in the 0.05 bucket; 100 s is past the last one
        stats.observe_delay(seconds)
    sample = metrics.registry.get_sample_value
    assert sample("crashwatch_status_write_delay_seconds_bucket", {"le": "0.05"}) == 2
    assert sample("crashwatch_status_write_delay_seconds_bucket", {"le": "0.1"}) == 2
    assert sample("crashwatch_status_write_delay_seconds_bucket", {"le": "0.25"}) == 3
    assert sample("crashwatch_status_write_delay_seconds_bucket", {"le": "60.0"}) == 3
    assert sample("crashwatch_status_write_delay_seconds_bucket", {"le": "+Inf"}) == 4
    assert sample("crashwatch_status_write_delay_seconds_count") == 4
    assert sample("crashwatch_status_write_delay_seconds_sum") == 100.28


def test_the_ports_refusals_and_the_webhooks_answers_are_read_when_scraped() -> None:
    metrics = Metrics()
    refused: dict[str, int] = {}
    metrics.count_refusals("admission", refused)
    sample = metrics.registry.get_sample_value
    labels = {"port": "admission", "reason": "TLS handshake failed"}
    assert sample("crashwatch_http_refused_total", labels) is None
    refused["TLS handshake failed"] = 3  # counted where they happen, read at the scrape
    assert sample("crashwatch_http_refused_total", labels) == 3

    @dataclass
    class Answers:
        counts: dict[str, int]
        last: float | None = None

    answers = Answers({"patched": 2, "let through": 5})
    metrics.count_answers(answers)
    assert sample("crashwatch_admission_reviews_total", {"answer": "let through"}) == 5
    assert sample("crashwatch_admission_last_review_timestamp_seconds") is None  # no call yet
    answers.last = 1_800_000_000.0
    assert sample("crashwatch_admission_last_review_timestamp_seconds") == 1_800_000_000.0
    assert b"crashwatch_admission_reviews_total{answer=\"patched\"} 2.0" in metrics.exposition()


def test_the_cause_its_crashed_output_names_is_a_label_of_its_series() -> None:
    finding = diagnose(typed_pod(exited(1, "Error")))
    assert finding is not None
    cause = classify(["huggingface_hub.errors.GatedRepoError: 401 Client Error. Cannot access gated repo for url x"])
    assert cause.kind == "model_access_denied"
    metrics = Metrics()
    explained = msgspec.structs.replace(finding, cause=cause)
    metrics.observe([ComponentChange(None, "ns", "g", "worker", "g-worker", explained, "")])
    assert diagnosed(metrics)["worker"]["cause"] == "model_access_denied"
