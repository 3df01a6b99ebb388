"""Kubernetes Events, the pure parts: what the pipeline's outputs say happened, how occurrences fold into
one Event series per key, the token bucket and the bounded queue; all on a fake clock."""

from __future__ import annotations

import io
import json
from typing import Any

from builders import crashing, dcd, dgd, event, healthy

from crashwatch.stderr_log import StderrLogger
from pipeline.outputs import Output
from pipeline.pipeline import Pipeline
from sinks.events import (
    NOTE_LIMIT,
    REASON_CRASH_LOOPING,
    REASON_RECOVERED,
    EventType,
    Folder,
    Occurrence,
    Regarding,
    event_name,
    note,
    occurrences,
)
from stream.model.messages import About
from stream.model.times import micro_time
from stream.sources.client import TokenBucket

DCD = "DynamoComponentDeployment"
DGD = "DynamoGraphDeployment"
WALL = 1_796_000_000.0  # 2026-11-30T00:53:20Z


def feed(pipeline: Pipeline, *objects: dict[str, Any]) -> list[Output]:
    return pipeline.feed([event("MODIFIED", obj) for obj in objects])


def summary(found: list[Occurrence]) -> list[tuple[str, str, str]]:
    return [(o.regarding.kind, o.type, o.reason) for o in found]


def test_a_crash_loop_its_restarts_and_its_recovery_are_occurrences_on_the_dcd_and_the_dgd() -> None:
    pipeline = Pipeline(synced=False, recovery_window=0)  # Ready in place clears at once here
    feed(pipeline, dgd(), dcd("g-worker"))
    assert occurrences(pipeline.sync()) == []  # nothing failing: no write, no Event
    first = occurrences(feed(pipeline, crashing(restarts=2)))
    assert summary(first) == [(DCD, "Warning", REASON_CRASH_LOOPING), (DGD, "Warning", REASON_CRASH_LOOPING)]
    on_dcd = first[0]
    assert on_dcd.note == "container main of Pod p-0 restarted 2 times and is down after exit code 1"
    assert on_dcd.regarding == Regarding("nvidia.com/v1beta1", DCD, "ns", "g-worker", "uid-dcd-g-worker", "")
    assert first[1].note == f"Components crash-looping: worker: {on_dcd.note}"
    again = occurrences(feed(pipeline, crashing(restarts=3)))  # the loop goes on, in new words
    assert summary(again) == summary(first)
    assert "restarted 3 times" in again[0].note
    recovered = occurrences(feed(pipeline, healthy()))
    assert summary(recovered) == [(DCD, "Normal", REASON_RECOVERED), (DGD, "Normal", REASON_RECOVERED)]
    assert [o.note for o in recovered] == ["no container is crash-looping", "no component is crash-looping"]


def test_a_watcher_that_starts_where_the_status_already_says_it_has_no_occurrence() -> None:
    pipeline = Pipeline(synced=False)
    # the status a previous watcher wrote: a restarted one repeats no Event
    said = "container main of Pod p-0 restarted 2 times and is down after exit code 1"
    looping = dcd("g-worker", reason="ContainerCrashLooping", message=said)
    looping["status"]["conditions"].append(
        {
            "type": "Stalled",
            "status": "True",
            "reason": "ContainerCrashLooping",
            "message": said,
            "observedGeneration": 1,
            "lastTransitionTime": "2026-11-20T09:00:00Z",
        }
    )
    feed(pipeline, looping, crashing(restarts=2))
    assert occurrences(pipeline.sync()) == []


def test_a_note_is_cut_to_the_apis_limit_in_bytes_without_splitting_a_character() -> None:
    assert note("short") == "short"
    cut = note("é" * 1000)  # 2000 bytes of UTF-8
    assert len(cut.encode()) <= NOTE_LIMIT and cut.endswith("...")
    assert cut[:-3] == "é" * (len(cut) - 3)


def occurrence(
    note: str = "restarted 2 times", reason: str = REASON_CRASH_LOOPING, name: str = "g-worker"
) -> Occurrence:
    kind: EventType = "Warning" if reason == REASON_CRASH_LOOPING else "Normal"
    regarding = Regarding("nvidia.com/v1beta1", DCD, "ns", name, f"uid-{name}", "41")
    return Occurrence(regarding, kind, reason, note)


def test_the_first_occurrence_creates_an_event_as_events_k8s_io_v1_wants_it() -> None:
    folder = Folder("pod-a")
    assert folder.observe(occurrence(), 0.0, WALL) == "queued"
    write = folder.take()
    assert write is not None and write.patch is None and folder.take() is None
    assert write.namespace == "ns" and write.name == event_name("g-worker", WALL)
    assert write.about == About(DCD, "ns", "g-worker")
    assert write.create == {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": write.name, "namespace": "ns"},
        "eventTime": "2026-11-30T00:53:20.000000Z",
        "reportingController": "crashwatch",
        "reportingInstance": "pod-a",
        "action": "Diagnose",
        "reason": "ComponentCrashLooping",
        "regarding": {
            "apiVersion": "nvidia.com/v1beta1",
            "kind": DCD,
            "namespace": "ns",
            "name": "g-worker",
            "uid": "uid-g-worker",
            "resourceVersion": "41",
        },
        "note": "restarted 2 times",
        "type": "Warning",
    }


def test_repeats_fold_into_one_series_patched_with_its_count_and_last_time() -> None:
    folder = Folder("pod-a")
    folder.observe(occurrence("restarted 2 times"), 0.0, WALL)
    create = folder.take()
    assert create is not None
    folder.done(create, exists=True)
    assert folder.observe(occurrence("restarted 3 times"), 10.0, WALL + 10) == "queued"
    assert folder.observe(occurrence("restarted 4 times"), 20.0, WALL + 20) == "folded"  # still waiting: one write
    patch = folder.take()
    assert patch is not None and folder.take() is None
    assert patch.name == create.name  # the same Event object
    assert patch.patch == {"series": {"count": 3, "lastObservedTime": micro_time(WALL + 20)}}
    folder.done(patch, exists=True)
    # the same words asked for again (a status another writer overwrote) are no new occurrence
    assert folder.observe(occurrence("restarted 4 times"), 30.0, WALL + 30) == "repeat"
    assert folder.take() is None


def test_a_repeat_during_the_write_is_sent_after_it_with_the_count_then() -> None:
    folder = Folder("pod-a")
    folder.observe(occurrence("restarted 2 times"), 0.0, WALL)
    create = folder.take()
    assert create is not None
    folder.observe(occurrence("restarted 3 times"), 1.0, WALL + 1)  # while the create is under way
    folder.done(create, exists=True)
    patch = folder.take()
    assert patch is not None and patch.patch == {"series": {"count": 2, "lastObservedTime": micro_time(WALL + 1)}}


def test_a_create_that_did_not_land_is_sent_again_as_a_create_with_the_series_so_far() -> None:
    folder = Folder("pod-a")
    folder.observe(occurrence("restarted 2 times"), 0.0, WALL)
    create = folder.take()
    assert create is not None
    folder.observe(occurrence("restarted 3 times"), 1.0, WALL + 1)
    folder.done(create, exists=False)
    again = folder.take()
    assert again is not None and again.patch is None and again.name == create.name
    assert again.create["series"] == {"count": 2, "lastObservedTime": micro_time(WALL + 1)}
    folder.done(again, exists=False)
    assert folder.series == {}  # refused, nothing waiting: a later occurrence starts afresh


def test_a_recovery_ends_the_crash_loops_series_and_a_new_loop_is_a_new_event() -> None:
    folder = Folder("pod-a")
    names = []
    for step, (words, reason) in enumerate(
        [
            ("restarted 2 times", REASON_CRASH_LOOPING),
            ("no container is crash-looping", REASON_RECOVERED),
            ("restarted 2 times", REASON_CRASH_LOOPING),  # the same words, but a crash loop of its own
        ]
    ):
        assert folder.observe(occurrence(words, reason), float(step), WALL + step) == "queued"
        write = folder.take()
        assert write is not None and write.patch is None
        names.append(write.name)
        folder.done(write, exists=True)
    assert len(set(names)) == 3
    assert [key[4] for key in folder.series] == [REASON_CRASH_LOOPING]  # the recovery's series ended too


def test_a_series_quiet_for_six_minutes_is_over_and_forgotten() -> None:
    folder = Folder("pod-a")
    folder.observe(occurrence("restarted 2 times"), 0.0, WALL)
    first = folder.take()
    assert first is not None
    folder.done(first, exists=True)
    folder.observe(occurrence("restarted 3 times", name="other"), 100.0, WALL + 100)
    other = folder.take()
    assert other is not None
    folder.done(other, exists=True)
    assert folder.observe(occurrence("restarted 3 times"), 361.0, WALL + 361) == "queued"
    second = folder.take()
    assert second is not None and second.patch is None and second.name != first.name
    folder.done(second, exists=True)
    folder.sweep(470.0)  # the other one's last occurrence was 370 s ago
    assert [key[2] for key in folder.series] == ["g-worker"]


def test_the_queue_is_bounded_an_occurrence_past_it_is_dropped_and_a_waiting_key_still_folds() -> None:
    folder = Folder("pod-a", capacity=2)
    assert [folder.observe(occurrence(name=f"c{i}"), 0.0, WALL) for i in range(3)] == ["queued", "queued", "dropped"]
    assert folder.observe(occurrence("restarted 3 times", name="c0"), 1.0, WALL + 1) == "folded"
    writes = [folder.take(), folder.take(), folder.take()]
    assert [w.name.split(".")[0] if w else None for w in writes] == ["c0", "c1", None]
    assert writes[0] is not None and writes[0].create["series"] == {
        "count": 2,
        "lastObservedTime": micro_time(WALL + 1),
    }
    assert "c2" not in {key[2] for key in folder.series}  # the dropped one left nothing behind


def test_the_token_bucket_gives_a_burst_then_the_steady_rate() -> None:
    bucket = TokenBucket(rate=2.0, burst=3, now=0.0)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(0.0) == 0.5  # the fourth waits for a token at 2 a second
    assert bucket.take(0.5) == 0.5  # the one taken at 0.5 s was spent by the fourth
    assert bucket.take(10.0) == 0.0  # refilled, to the burst at most
    assert [bucket.take(10.0) for _ in range(2)] == [0.0, 0.0]
    assert bucket.take(10.0) == 0.5


def test_event_names_are_client_gos_and_fit_a_dns_subdomain() -> None:
    assert event_name("g-worker", 1.5) == f"g-worker.{1_500_000_000:x}"
    assert len(event_name("x" * 253, WALL)) == 253


# --- stderr ----------------------------------------------------------------------------------------


def logged(format: str, level: str = "info") -> tuple[StderrLogger, io.StringIO]:
    stream = io.StringIO()
    return StderrLogger(stream, format, level, clock=lambda: "2026-12-03T14:00:00.000001Z"), stream  # type: ignore[arg-type]


def test_text_lines_are_what_crashwatch_always_wrote() -> None:
    log, stream = logged("text")
    log("synced in 0.10s: 3 objects")
    log("wrote DCD ns/a\nforged line", "info", About(DCD, "ns", "a"))
    log.fatal("no usable kubeconfig", 78)
    assert stream.getvalue() == (
        "crashwatch: synced in 0.10s: 3 objects\n"
        "crashwatch: wrote DCD ns/a\\nforged line\n"
        "crashwatch: no usable kubeconfig\n"
    )


def test_json_lines_are_one_object_each_with_time_level_msg_and_the_object() -> None:
    log, stream = logged("json")
    log("synced in 0.10s: 3 objects")
    log("wrote DCD ns/a\nforged line", "warning", About(DCD, "ns", "a"))
    log.fatal("no usable kubeconfig", 78)
    lines = stream.getvalue().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"time": "2026-12-03T14:00:00.000001Z", "level": "info", "msg": "synced in 0.10s: 3 objects"},
        {
            "time": "2026-12-03T14:00:00.000001Z",
            "level": "warning",
            "msg": "wrote DCD ns/a\nforged line",
            "object": {"kind": DCD, "namespace": "ns", "name": "a"},
        },
        {"time": "2026-12-03T14:00:00.000001Z", "level": "error", "msg": "no usable kubeconfig", "exit_code": 78},
    ]


def test_the_level_hides_what_is_less_important_but_never_an_error_that_ends_the_program() -> None:
    log, stream = logged("text", "warning")
    log("wrote DCD ns/a")
    log("retrying in 1.0s", "warning")
    log("event created", "debug")
    log.fatal("stopped", 1)
    assert stream.getvalue() == "crashwatch: retrying in 1.0s\ncrashwatch: stopped\n"
    debug, stream = logged("text", "debug")
    debug("event created", "debug")
    assert stream.getvalue() == "crashwatch: event created\n"


def test_a_real_clock_says_rfc_3339_in_utc() -> None:
    stream = io.StringIO()
    StderrLogger(stream, "json")("hello")
    when = json.loads(stream.getvalue())["time"]
    assert when.endswith("Z") and when[10] == "T" and len(when) == len("2026-12-03T14:00:00.000001Z")


def test_events_are_on_for_run_unless_turned_off_kubectl_style() -> None:
    from crashwatch.cli import build_parser

    parser = build_parser()
    for argv, on in (
        ([], True),
        (["--events"], True),
        (["--events=true"], True),
        (["--events=false"], False),
        (["--events=0"], False),
        (["--no-events"], False),
    ):
        assert parser.parse_args(["run", *argv]).events is on, argv


def test_the_event_counters_are_exposed_for_prometheus() -> None:
    from sinks.events import EventStats
    from sinks.metrics import Metrics

    metrics = Metrics()
    stats = EventStats()
    metrics.count_events(stats)
    stats.created, stats.patched, stats.dropped, stats.not_leader = 2, 5, 1, 3
    text = metrics.exposition().decode()
    for line in (
        'crashwatch_events_written_total{request="create"} 2.0',
        'crashwatch_events_written_total{request="patch"} 5.0',
        'crashwatch_events_dropped_total{reason="queue_full"} 1.0',
        'crashwatch_events_dropped_total{reason="refused"} 0.0',
        'crashwatch_events_dropped_total{reason="not_leader"} 3.0',
    ):
        assert line in text.splitlines(), line
    assert "crashwatch_events" not in Metrics().exposition().decode()  # tail, wait: no such series
