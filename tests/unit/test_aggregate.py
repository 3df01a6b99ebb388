"""Filter, aggregator and graph policy on plain objects: no I/O, no event loop."""

from __future__ import annotations

from typing import Any

import msgspec
from builders import container, crashing, dcd, deployment, event, healthy, labels, pod, relabel

from pipeline.backends.deployments import Deployments
from pipeline.filter import ObjectUpdate
from pipeline.outputs import ComponentChange, GraphChange, Output
from pipeline.pipeline import Pipeline
from pipeline.views import encode_view, parse_selector, selector_matches
from stream.model.events import ReducedPod, WatchEvent, pod_key
from stream.model.objects import LabelSelector, Pod, SelectorRequirement, read_labels


class Harness:
    def __init__(self, recovery_window: float = 0.0) -> None:
        """`recovery_window` 0: a Pod Ready in place is recovered at once, as the rule alone reads it; the
        window that holds a verdict between restarts has its own tests (test_holds.py) and the one below."""
        pipeline = Pipeline(recovery_window=recovery_window)
        self.filter, self.aggregator = pipeline.filter, pipeline.aggregator  # fed apart: passed counts the filter
        self.passed = 0

    def feed(self, *events: WatchEvent | ReducedPod) -> list[Output]:
        out: list[Output] = []
        for ev in events:
            change = self.filter.observe(ev)
            if change is not None:
                assert isinstance(change, ObjectUpdate), change
                self.passed += 1
                out += self.aggregator.apply(change)
        return out

    def changes(self, *events: WatchEvent | ReducedPod) -> list[ComponentChange | GraphChange]:
        return [o for o in self.feed(*events) if isinstance(o, ComponentChange | GraphChange)]


def summary(changes: list[Any]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for c in changes:
        if isinstance(c, ComponentChange):
            f = c.finding
            out.append(("component", c.component, f and (f.pod, f.restarts, f.exit_code)))
        elif isinstance(c, GraphChange):
            out.append(("graph", c.graph, c.failed, c.components))
    return out


def test_crash_loop_then_recovery_emits_component_and_graph_changes_once() -> None:
    pipeline = Pipeline(recovery_window=90.0)

    def changes(*evs: WatchEvent) -> list[ComponentChange | GraphChange]:
        return [o for o in pipeline.feed(evs) if isinstance(o, ComponentChange | GraphChange)]

    assert changes(event("ADDED", crashing(restarts=1), "2026-11-20T10:00:00Z")) == []
    got = changes(event("MODIFIED", crashing(restarts=2), "2026-11-20T10:00:10Z"))
    assert summary(got) == [("component", "worker", ("p-0", 2, 1)), ("graph", "g", True, ("worker",))]
    assert got[1].reason == "component_crash_looping"  # type: ignore[union-attr]
    # Ready in place: the verdict holds for the recovery window, then clears once, at the window's end
    assert changes(event("MODIFIED", healthy(restarts=3), "2026-11-20T10:00:20Z")) == []
    assert pipeline.tick("2026-11-20T10:01:49Z") == []
    got = [o for o in pipeline.tick("2026-11-20T10:01:51Z") if isinstance(o, ComponentChange | GraphChange)]
    assert summary(got) == [("component", "worker", None), ("graph", "g", False, ())]
    assert {o.time for o in got} == {"2026-11-20T10:01:50Z"}


def test_filter_drops_resource_version_annotation_and_unrelated_status_changes() -> None:
    h = Harness()
    base = crashing(restarts=2)
    h.feed(event("ADDED", base))
    noisy = crashing(restarts=2, resource_version="99")
    noisy["metadata"]["annotations"] = {"a": "b"}
    noisy["status"]["podIP"] = "10.0.0.1"
    noisy["status"]["conditions"].append({"type": "PodScheduled", "status": "True"})
    before = h.passed
    assert h.feed(event("MODIFIED", noisy), event("MODIFIED", noisy)) == []
    assert h.passed == before


def reduced(ev: WatchEvent) -> ReducedPod:
    """The event as a parallel replay's worker sends it."""
    pod = ev.object
    assert isinstance(pod, Pod)
    key = pod_key(pod.metadata.namespace, pod.metadata.name)
    return ReducedPod(0, key, ev.type, msgspec.Raw(encode_view(pod)), ev.time)


def test_reduced_pods_are_decided_as_decoded_ones_and_repeats_dropped_before_decoding() -> None:
    h = Harness()
    noisy = crashing(restarts=2, resource_version="99")
    noisy["status"]["podIP"] = "10.0.0.1"
    got = h.feed(reduced(event("ADDED", crashing(restarts=2), time="2026-01-01T00:00:00Z")))
    assert summary(got) == [("component", "worker", ("p-0", 2, 1)), ("graph", "g", True, ("worker",))]
    assert got[0].time == "2026-01-01T00:00:00Z"
    passed = h.passed
    assert h.feed(reduced(event("MODIFIED", noisy)), reduced(event("BOOKMARK", noisy))) == []
    assert h.passed == passed  # the same view's bytes: dropped by the filter without a decode
    # a Pod that arrives decoded forgets the remembered bytes: the next reduced one is decided afresh
    recovered = h.changes(event("MODIFIED", healthy()))
    assert summary(recovered) == [("component", "worker", None), ("graph", "g", False, ())]
    again = h.changes(reduced(event("MODIFIED", crashing(restarts=2))))
    assert summary(again) == [("component", "worker", ("p-0", 2, 1)), ("graph", "g", True, ("worker",))]
    assert summary(h.changes(reduced(event("DELETED", crashing(restarts=2))))) == [
        ("component", "worker", None),
        ("graph", "g", False, ()),
    ]


def test_duplicates_and_replayed_adds_change_nothing() -> None:
    h = Harness()
    first = h.changes(event("ADDED", crashing(restarts=2)))
    assert len(first) == 2
    assert h.changes(event("ADDED", crashing(restarts=2)), event("MODIFIED", crashing(restarts=2))) == []


def test_message_follows_the_restart_count() -> None:
    h = Harness()
    h.feed(event("ADDED", crashing(restarts=2)))
    got = h.changes(event("MODIFIED", crashing(restarts=3)))
    assert summary(got) == [("component", "worker", ("p-0", 3, 1)), ("graph", "g", True, ("worker",))]
    assert "restarted 3 times" in got[0].message
    assert "restarted 3 times" in got[1].message


def test_smallest_name_is_reported_among_several_crash_looping_pods() -> None:
    h = Harness()
    h.feed(event("ADDED", crashing("p-b", restarts=5)))
    got = h.changes(event("ADDED", crashing("p-a", restarts=2)))
    assert summary(got)[0] == ("component", "worker", ("p-a", 2, 1))
    # a third, larger name changes nothing
    assert h.changes(event("ADDED", crashing("p-c", restarts=9))) == []
    # when the reported one recovers, the next smallest takes over
    got = h.changes(event("MODIFIED", healthy("p-a")))
    assert summary(got)[0] == ("component", "worker", ("p-b", 5, 1))


def test_two_components_are_listed_sorted_by_name() -> None:
    h = Harness()
    h.feed(event("ADDED", crashing("z", pod_labels=labels(component="zeta"))))
    got = h.changes(event("ADDED", crashing("a", pod_labels=labels(component="alpha"))))
    graph = got[-1]
    assert isinstance(graph, GraphChange)
    assert graph.components == ("alpha", "zeta")
    assert graph.message.index("alpha:") < graph.message.index("zeta:")


def test_relabel_moves_a_pod_between_components() -> None:
    h = Harness()
    p = crashing("p", restarts=2)
    h.feed(event("ADDED", p))
    got = h.changes(event("MODIFIED", relabel(p, labels(component="other"))))
    assert summary(got) == [
        ("component", "worker", None),
        ("component", "other", ("p", 2, 1)),
        ("graph", "g", True, ("other",)),
    ]
    assert h.aggregator.pods_of_component(("ns", "g", "worker")) == set()


def test_losing_the_labels_takes_a_pod_out_and_unlabelled_pods_are_not_held() -> None:
    h = Harness()
    p = crashing("p", restarts=2)
    h.feed(event("ADDED", p))
    got = h.changes(event("MODIFIED", relabel(p, {"app": "x"})))
    assert summary(got) == [("component", "worker", None), ("graph", "g", False, ())]
    assert h.aggregator.pods == {}
    assert len(h.filter) == 0
    assert h.changes(event("ADDED", crashing("q", pod_labels={"app": "x"}))) == []
    assert len(h.filter) == 0


def test_delete_and_terminating_pods_leave() -> None:
    h = Harness()
    h.feed(event("ADDED", crashing("a")), event("ADDED", crashing("b")))
    got = h.changes(event("MODIFIED", crashing("a", deleting=True)))
    assert summary(got)[0] == ("component", "worker", ("b", 2, 1))
    got = h.changes(event("DELETED", crashing("b")))
    assert summary(got) == [("component", "worker", None), ("graph", "g", False, ())]


def test_a_late_delete_of_a_replaced_object_is_ignored() -> None:
    h = Harness()
    h.feed(event("ADDED", crashing("p", uid="old")))
    # delete and recreate seen as one update: same name, new uid
    assert h.changes(event("MODIFIED", crashing("p", uid="new", restarts=3)))[0].finding.restarts == 3  # type: ignore[union-attr]
    assert h.changes(event("DELETED", crashing("p", uid="old"))) == []
    assert ("ns", "p") in h.aggregator.pods


def test_rollout_pods_of_the_older_template_still_count() -> None:
    h = Harness()
    old = crashing("w-old", pod_labels=labels(**{"pod-template-hash": "aaa"}))
    new = pod("w-new", pod_labels=labels(**{"pod-template-hash": "bbb"}), containers=[container(state="running")])
    h.feed(event("ADDED", old))
    assert h.changes(event("ADDED", new)) == []
    assert h.aggregator.verdicts()[("ns", "g", "worker")].pod == "w-old"


def test_index_keys_are_dropped_when_sets_empty() -> None:
    h = Harness()
    for i in range(5):
        h.feed(event("ADDED", crashing(f"p{i}", pod_labels=labels(**{"x": str(i)}))))
    for i in range(5):
        h.feed(event("DELETED", crashing(f"p{i}", pod_labels=labels(**{"x": str(i)}))))
    a = h.aggregator
    assert (a.pods, a._pods_of.sets, a._reported, len(a.graphs), a.findings.looping.sets) == ({}, {}, {}, 0, {})
    assert (len(h.filter._labels), len(h.filter._components)) == (0, 0)


def _select(h: Harness, match: dict[str, str] | None = None, exprs: list[dict[str, Any]] | None = None) -> list[str]:
    """The held Pods a label selector selects, as Kubernetes would (the semantics Deployments are matched by)."""
    selector = parse_selector(
        LabelSelector(
            match_labels=match or {},
            match_expressions=tuple(SelectorRequirement(**e) for e in (exprs or [])),
        )
    )
    assert selector is not None
    pods = h.aggregator.pods.items()
    return sorted(name for (_, name), view in pods if selector_matches(selector, read_labels(view.labels)))


def test_selectors_match_as_kubernetes_does() -> None:
    h = Harness()
    h.feed(
        event("ADDED", crashing("a", pod_labels=labels(tier="gpu", sel="w"))),
        event("ADDED", crashing("b", pod_labels=labels(tier="cpu", sel="w"))),
        event("ADDED", crashing("c", pod_labels=labels(sel="w"))),
        event("ADDED", crashing("d", pod_labels=labels(sel="x"), namespace="ns")),
    )
    assert _select(h, {"sel": "w"}) == ["a", "b", "c"]
    assert _select(h, {"sel": "w", "tier": "gpu"}) == ["a"]
    assert _select(h, exprs=[{"key": "tier", "operator": "In", "values": ["gpu", "cpu"]}]) == ["a", "b"]
    assert _select(h, exprs=[{"key": "tier", "operator": "Exists"}]) == ["a", "b"]
    assert _select(h, {"sel": "w"}, [{"key": "tier", "operator": "DoesNotExist"}]) == ["c"]
    assert _select(h, {"sel": "w"}, [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]) == ["b", "c"]
    assert _select(h, exprs=[{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]) == ["b", "c", "d"]
    assert _select(h, {"sel": "nope"}) == []
    assert _select(h, exprs=[{"key": "tier", "operator": "Bogus"}]) == []


def test_deployment_index_finds_pods_and_owner_dcd_names_the_component() -> None:
    h = Harness()
    h.feed(event("ADDED", deployment("dep", match_labels={"sel": "w"}, owner_dcd="g-worker")))
    got = h.changes(event("ADDED", crashing("a", pod_labels=labels(sel="w"))))
    assert got[0].dcd == "g-worker"  # type: ignore[union-attr]
    deployments = h.aggregator.backend(Deployments)
    assert [d.name for d in deployments.selecting(h.aggregator.pods[("ns", "a")])] == ["dep"]
    # a DCD labelled with the component is preferred
    h.feed(event("ADDED", dcd("g-worker-abc123")))
    got = h.changes(event("MODIFIED", crashing("a", restarts=3, pod_labels=labels(sel="w"))))
    assert got[0].dcd == "g-worker-abc123"  # type: ignore[union-attr]


def test_pods_of_other_namespaces_are_other_components() -> None:
    h = Harness()
    h.feed(event("ADDED", crashing("a", namespace="one")))
    got = h.changes(event("ADDED", crashing("a", namespace="two")))
    assert [(c.namespace, type(c).__name__) for c in got] == [("two", "ComponentChange"), ("two", "GraphChange")]


def test_replicas_share_one_label_set_and_selection_still_finds_each() -> None:
    h = Harness()
    for i in range(3):
        h.feed(event("ADDED", crashing(f"r{i}", pod_labels=labels(sel="w"))))
    views = [h.aggregator.pods[("ns", f"r{i}")] for i in range(3)]
    assert views[0].labels is views[1].labels is views[2].labels
    assert len(h.filter._labels) == 1
    assert _select(h, {"sel": "w"}) == ["r0", "r1", "r2"]
    h.feed(event("MODIFIED", crashing("r1", pod_labels=labels(sel="v"))))
    assert _select(h, {"sel": "w"}) == ["r0", "r2"]
    assert _select(h, {"sel": "v"}) == ["r1"]
