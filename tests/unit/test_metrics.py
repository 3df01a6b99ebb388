"""The metrics sink and the counters read at scrape time, with plain objects."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.crashloop import Finding
from pipeline.outputs import ComponentChange, GraphChange
from sinks.metrics import Metrics
from sinks.status import PatchStats
from stream.resources import PODS

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
