"""A Pod's labels: kept as the text they came in, read again only when that text changes, and a Pod whose
labels are not a map of strings skipped and said, with what was held for it kept."""

from __future__ import annotations

import json
from typing import Any

import pytest
from builders import COMPONENT, GRAPH, container, crashing, event, labels, pod, typed_pod

from pipeline.backends.registry import claimers
from pipeline.filter import EventFilter, ObjectUpdate, Rejected
from pipeline.outputs import ComponentChange
from pipeline.pipeline import Pipeline
from pipeline.views import PodView, pod_view
from stream.model.decode import decode_json, read_event
from stream.model.events import WatchEvent
from stream.model.objects import LabelsProblem, Pod, read_labels

LWS = {
    "leaderworkerset.sigs.k8s.io/name": "w",
    "leaderworkerset.sigs.k8s.io/group-index": "3",
    "leaderworkerset.sigs.k8s.io/worker-index": "1",
}


@pytest.mark.parametrize(
    ("text", "read"),
    [
        (b"{}", {}),
        (b"null", {}),
        (b'{"a":"1","b":null}', {"a": "1"}),  # a null value is an absent label, as the API server reads it
        (b'{"a":"1","b":"2"}', {"a": "1", "b": "2"}),
    ],
)
def test_label_text_reads_as_the_api_server_reads_it(text: bytes, read: dict[str, str]) -> None:
    assert read_labels(text) == read


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b'{"a":"1","b":1}', 'metadata.labels["b"] is a number, not a string'),
        (b'{"a":{"b":"c"}}', 'metadata.labels["a"] is an object, not a string'),
        (b'{"a\\n":["b"]}', 'metadata.labels["a\\n"] is an array, not a string'),
        (b'{"a":true}', 'metadata.labels["a"] is a boolean, not a string'),
        (b'["a"]', "metadata.labels is an array, not a map of strings"),
        (b'"a"', "metadata.labels is a string, not a map of strings"),
        (b"7", "metadata.labels is a number, not a map of strings"),
    ],
)
def test_anything_but_a_map_of_strings_is_a_problem_that_says_where(text: bytes, problem: str) -> None:
    with pytest.raises(LabelsProblem) as raised:
        read_labels(text)
    assert str(raised.value) == problem


def decoded(obj: dict[str, Any]) -> Any:
    """The Pod as a log or a watch hands it on: decoded from JSON text by the fast path."""
    return read_event(json.dumps({"type": "MODIFIED", "object": obj}).encode()).object


def test_unchanged_label_text_is_not_read_again() -> None:
    first = pod_view(decoded(pod("p", pod_labels={**labels(), **LWS})), None, claimers())
    assert first.component == ("ns", "g", "worker") and first.claim is not None
    assert (first.claim.backend, first.claim.place, first.claim.lead) == ("lws", ("w", "3"), False)
    again = pod_view(decoded(pod("p", pod_labels={**labels(), **LWS}, ready=True)), first, claimers())
    assert again.labels is first.labels and again.component is first.component
    assert again.claim is not None and again.claim.place == ("w", "3") and not again.claim.lead


def test_changed_label_text_is_read_afresh() -> None:
    first = pod_view(decoded(pod("p", pod_labels={**labels(), **LWS})), None, claimers())
    moved = pod_view(decoded(pod("p", pod_labels=labels("g", "frontend"))), first, claimers())
    assert first.claim is not None and moved.component == ("ns", "g", "frontend") and moved.claim is None
    # a previous view that named no component (a Pod being deleted) never lends its reading
    deleting = pod_view(typed_pod(pod("p", pod_labels=labels(), deleting=True)))
    assert deleting.component is None
    assert pod_view(typed_pod(pod("p", pod_labels=labels())), deleting).component == ("ns", "g", "worker")


def test_a_pod_whose_labels_are_not_strings_is_skipped_and_what_was_held_stays() -> None:
    f = EventFilter()
    held = f.observe(event("ADDED", crashing("p", pod_labels=labels())))
    assert isinstance(held, ObjectUpdate) and isinstance(held.view, PodView)
    bad = pod("p", pod_labels={GRAPH: "g", COMPONENT: "worker"}, containers=[container(restarts=3)])
    bad["metadata"]["labels"]["tier"] = 7
    rejected = f.observe(read_event(json.dumps({"type": "MODIFIED", "object": bad, "time": "T"}).encode()))
    assert isinstance(rejected, Rejected) and rejected.time == "T"
    assert str(rejected) == 'Pod ns/p: metadata.labels["tier"] is a number, not a string'
    assert f.store.pods[("ns", "p")] is held.view
    # the Pod's next good event is an update of what was held
    recovered = f.observe(event("MODIFIED", pod("p", pod_labels=labels(), ready=True)))
    assert isinstance(recovered, ObjectUpdate) and recovered.previous is held.view


def test_the_pipeline_reports_what_it_skipped_and_strict_looks_at_nothing_after() -> None:
    bad = crashing("q", pod_labels=labels())
    bad["metadata"]["labels"] = ["not", "a", "map"]
    batch = [
        read_event(json.dumps({"type": "ADDED", "object": crashing("p", pod_labels=labels())}).encode()),
        read_event(json.dumps({"type": "ADDED", "object": bad}).encode()),
        read_event(json.dumps({"type": "ADDED", "object": crashing("r", pod_labels=labels("g", "frontend"))}).encode()),
    ]
    lenient = Pipeline()
    changes = [o for o in lenient.feed(batch) if isinstance(o, ComponentChange)]
    assert [c.component for c in changes] == ["worker", "frontend"]
    assert [(r.name, r.kind) for r in lenient.rejected] == [("q", "Pod")]
    strict = Pipeline(strict=True)
    changes = [o for o in strict.feed(batch) if isinstance(o, ComponentChange)]
    assert [c.component for c in changes] == ["worker"] and len(strict.rejected) == 1
    assert strict.feed(batch[2:]) == []


def test_a_lists_pods_hold_no_view_of_the_list() -> None:
    """Label text is decoded as a view into the input: the Pods of a List (which may hold thousands, all
    handed on at once) get a copy each, so holding one never holds the List."""
    items = [crashing(f"p-{i}", pod_labels=labels()) for i in range(3)]
    buffer = bytearray(json.dumps({"kind": "PodList", "items": items}).encode())
    events = decode_json(memoryview(buffer))[0]  # type: ignore[arg-type]  # a buffer, as the log reader's
    buffer.extend(b" ")  # a BufferError while anything still views the buffer
    pods = [e.object for e in events if isinstance(e, WatchEvent)]
    assert [read_labels(p.metadata.labels) for p in pods if isinstance(p, Pod)] == [labels()] * 3
