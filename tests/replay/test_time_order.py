"""A log gives the same verdicts however it is read, even when its times go back.

Two recordings one after the other, or clocks that disagree, make a log's times go back; the core ends
a recovery window or a grace by an event's time (and by a batch's last one), so without one rule for
such times the verdicts depended on where batches ended: one file, several files, a pipe read record by
record, worker processes. The rule (stream/sources/timeline.py, docs/formats.md): a record whose time is
earlier than the latest read, or that has none, is taken at the latest time read, said once on stderr.
"""

from __future__ import annotations

import datetime
import io
import itertools
import json
import os
import threading
from pathlib import Path
from typing import Any

import anyio
from builders import container, dcd, dgd, labels, pod
from cli import EXAMPLES, run
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from crashwatch.replay import ReplayOptions, replay

START = datetime.datetime(2026, 11, 20, 10, 0, tzinfo=datetime.UTC)
COMPONENTS = [("g1", "worker"), ("g1", "frontend"), ("g2", "worker")]


def _stamp(seconds: int) -> str:
    return (START + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


PODS = [(graph, component, f"{graph}-{component}-{n}") for graph, component in COMPONENTS for n in range(2)]
# what happens to a Pod next: its container crashes (once more), runs Ready or not, it is seen again
# unchanged (a resourceVersion bump: the filter drops it), it cannot pull its image, or it is deleted (and
# comes back with a new uid). A record seen again carries no time of its own (it is taken at the latest):
# a dropped record whose own later time passes two deadlines at once is the core's matter (Pipeline.feed
# advances by a dropped record's time only at a batch's end), not the reading rule's, and is left out here
STEPS = ["crash", "crash", "crash", "ready", "ready", "running", "again", "again", "again", "image", "delete"]


@st.composite
def logs(draw: st.DrawFn) -> list[str]:
    """A log's lines: graphs and DCDs, then Pods crashing, running and recovering, with times that
    mostly go forward, sometimes back (a second recording), and now and then are missing."""
    lines = [json.dumps({"type": "ADDED", "object": dgd(graph)}) for graph in ("g1", "g2")]
    lines += [json.dumps({"type": "ADDED", "object": dcd(f"{g}-{c}", g, c)}) for g, c in COMPONENTS]
    restarts = dict.fromkeys(range(len(PODS)), 0)
    incarnation = dict.fromkeys(range(len(PODS)), 0)
    last: dict[int, dict[str, Any]] = {}
    seen: dict[int, tuple[str, int]] = {}  # each Pod's last step and restart count: the same again is no change
    clock = 0
    for _ in range(draw(st.integers(1, 80))):
        which = draw(st.integers(0, len(PODS) - 1))
        graph, component, name = PODS[which]
        step = draw(st.sampled_from(STEPS))
        kind = "MODIFIED" if which in last else "ADDED"
        state = {"crash": "waiting", "image": "waiting", "delete": "waiting"}.get(step, "running")
        waiting = "ImagePullBackOff" if step == "image" else "CrashLoopBackOff"
        again = which in last and (step == "again" or (step, restarts[which]) == seen.get(which))
        if again:
            obj = last[which]
        else:
            if step == "crash":
                restarts[which] += 1
            obj = pod(
                name,
                uid=f"{name}-{incarnation[which]}",
                pod_labels=labels(graph, component),
                containers=[container(restarts=restarts[which], state=state, exit_code=1, waiting=waiting)],
                ready=step == "ready",
            )
        if step == "delete":
            kind = "DELETED"
            restarts[which], incarnation[which] = 0, incarnation[which] + 1
            last.pop(which, None)
        else:
            last[which] = obj
            seen[which] = (step, restarts[which])
        record: dict[str, Any] = {"type": kind, "object": obj}
        move = draw(st.sampled_from(["forward", "forward", "forward", "far", "back", "back", "none"]))
        if move == "back":
            clock -= draw(st.integers(1, 300))
        elif move == "forward":
            clock += draw(st.integers(0, 20))
        elif move == "far":  # past a recovery window
            clock += draw(st.integers(60, 200))
        if move != "none" and not again:
            record["time"] = _stamp(clock)
        lines.append(json.dumps(record))
    if draw(st.booleans()):  # a bookmark's time ends what is due by then
        lines.append(json.dumps({"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {}}, "time": _stamp(clock)}))
    return lines


def _replay(logs: list[str], jobs: int, stdin: Any = None) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    options = ReplayOptions(logs=logs, progress=False, jobs=jobs, range_bytes=1024, recovery_window=60, output="json")
    code = anyio.run(replay, options, out, err, stdin, lambda: "2026-12-01T00:00:00Z")
    return code, out.getvalue(), err.getvalue()


def _piped(text: bytes) -> tuple[int, bytes, str]:
    """The log through a real pipe, read record by record as it comes."""
    read, write = os.pipe()

    def writer() -> None:
        with open(write, "wb") as pipe:
            pipe.write(text)

    thread = threading.Thread(target=writer)
    thread.start()
    with open(read, "rb") as stdin:
        result = _replay(["-"], 1, stdin)
    thread.join()
    return result


def _record(kind: str, obj: dict[str, Any], seconds: int) -> str:
    return json.dumps({"type": kind, "object": obj, "time": _stamp(seconds)})


def _worker(restarts: int, ready: bool) -> dict[str, Any]:
    state = "running" if ready else "waiting"
    containers = [container(restarts=restarts, state=state)]
    return pod("g1-worker-0", uid="u", pod_labels=labels("g1", "worker"), containers=containers, ready=ready)


# crash-looping, Ready at 10 s, seen again unchanged at 100 s (its recovery window ended at 70 s), then a
# crash stamped 20 s: read record by record the window closed before the crash, read in one batch after it
SEEN_AGAIN_THEN_BACK = [
    json.dumps({"type": "ADDED", "object": dgd("g1")}),
    _record("ADDED", _worker(2, ready=False), 0),
    _record("MODIFIED", _worker(2, ready=True), 10),
    _record("MODIFIED", _worker(2, ready=True), 100),
    _record("MODIFIED", _worker(3, ready=False), 20),
]


@example(lines=SEEN_AGAIN_THEN_BACK, cuts=[])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=logs(), cuts=st.lists(st.integers(0, 10_000), max_size=2))
def test_verdicts_do_not_depend_on_how_the_log_is_read(tmp_path: Path, lines: list[str], cuts: list[int]) -> None:
    text = "\n".join(lines) + "\n"
    whole = tmp_path / "whole.jsonl"
    whole.write_text(text)
    at = sorted({0, len(lines), *(cut % (len(lines) + 1) for cut in cuts)})
    parts = []
    for index, (start, stop) in enumerate(itertools.pairwise(at)):
        part = tmp_path / f"part{index}.jsonl"
        part.write_text("".join(line + "\n" for line in lines[start:stop]))
        parts.append(str(part))
    reference = _replay([str(whole)], 1)
    assert reference[0] == 0, reference[2]
    said = _said(reference[2])
    assert len(said) <= 1
    for jobs in (1, 2):
        for how, logs in (("one file", [str(whole)]), (f"{len(parts)} files", parts)):
            code, out, err = _replay(logs, jobs)
            assert (code, out) == reference[:2], f"{how}, -j {jobs}"
            assert len(_said(err)) == len(said), f"{how}, -j {jobs}"
    code, out, err = _piped(text.encode())
    assert (code, out) == reference[:2], "a pipe"
    assert len(_said(err)) == len(said), "a pipe"


def _said(err: str) -> list[str]:
    return [line for line in err.splitlines() if "time goes back" in line]


def test_two_recordings_one_after_the_other_give_what_each_does_as_a_file(tmp_path: Path) -> None:
    """The issue's case: a second recording whose times start before the first one's end."""
    first, second = EXAMPLES / "slow-start.jsonl", EXAMPLES / "diagnoses.jsonl"
    two = tmp_path / "two.jsonl"
    two.write_bytes(first.read_bytes() + second.read_bytes())
    one_file = run("replay", str(two))
    assert one_file.returncode == 0, one_file.stderr
    assert run("replay", str(first), str(second)).stdout == one_file.stdout
    assert run("replay", "-", stdin=two.read_bytes()).stdout == one_file.stdout
    assert run("replay", "-j", "2", str(two)).stdout == one_file.stdout
    verdicts = [line.split()[2] for line in one_file.stdout.decode().splitlines()]
    assert verdicts.count("UNSCHEDULABLE") == 1 and verdicts[-1] == "RECOVERED"
    back = [line for line in one_file.stderr.decode().splitlines() if "time goes back" in line]
    assert back == [
        f"crashwatch: {two}: time goes back from 2026-11-20T10:18:20Z to 2026-11-20T10:00:00Z (recordings one after "
        "the other?): a record older than the latest time read is taken at that time (said once)"
    ]


def test_a_dropped_record_whose_time_passes_two_deadlines_is_read_alike(tmp_path: Path) -> None:
    """Times in order, none missing: worker-0's crash loop is held until 10:01:00 (Ready at 10:00:00,
    a 60 s window), worker-1's image pull grace ends at 10:03:00. Seen again unchanged at 10:01:02: read
    as a batch of its own (a pipe) the first deadline ends there, read in one batch both end at the next
    update's time; each takes effect at its own moment either way, so the component shows RECOVERED
    between them both ways (before deadlines were taken one moment at a time, not in one batch)."""
    worker = labels("g1", "worker")

    def crashing(restarts: int, ready: bool = False) -> dict[str, Any]:
        state = "running" if ready else "waiting"
        return pod(
            "g1-worker-0",
            uid="u0",
            pod_labels=worker,
            containers=[container(restarts=restarts, state=state)],
            ready=ready,
        )

    pulling = pod("g1-worker-1", uid="u1", pod_labels=worker, containers=[container(waiting="ImagePullBackOff")])
    lines = [
        json.dumps({"type": "ADDED", "object": dgd("g1")}),
        _record("ADDED", crashing(2), 0),
        _record("ADDED", pulling, 0),
        _record("MODIFIED", crashing(2, ready=True), 0),
        _record("MODIFIED", crashing(2, ready=True), 62),  # dropped by the filter
        _record("MODIFIED", crashing(3), 185),
    ]
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(lines) + "\n")
    assert _replay([str(log)], 1)[1] == _piped(log.read_bytes())[1]

    out = _replay([str(log)], 1)[1].decode().splitlines()
    assert [(json.loads(line)["time"], json.loads(line)["crash_looping"]) for line in out if '"component"' in line][
        :2
    ] == [("2026-11-20T10:00:00Z", True), ("2026-11-20T10:01:00Z", False)]


def test_a_pod_deleted_after_its_window_ended_recovers_at_the_window_s_end_however_read(tmp_path: Path) -> None:
    """g1-worker-0 crash-loops, is Ready at 10:00:00 (held until 10:01:00, a 60 s window), and is deleted
    at 10:01:01, just after a change of another Pod that the filter drops. Time passes to each change's
    time before the store takes the change, so the Pod recovers at 10:01:00 with its view still there,
    whether a batch ended after the dropped record (a pipe, -j 2's small ranges) or not (one file, -j 1):
    before, in one batch the deletion came first and the recovery read 10:01:01."""
    worker = labels("g1", "worker")

    def crashing(restarts: int, ready: bool = False, name: str = "g1-worker-0") -> dict[str, Any]:
        state = "running" if ready else "waiting"
        containers = [container(restarts=restarts, state=state)]
        return pod(name, uid=name, pod_labels=worker, containers=containers, ready=ready)

    lines = [
        json.dumps({"type": "ADDED", "object": dgd("g1")}),
        _record("ADDED", crashing(2), 0),
        _record("ADDED", crashing(1, name="g1-worker-1"), 0),
        _record("MODIFIED", crashing(2, ready=True), 0),
        *(_record("MODIFIED", crashing(1, name="g1-worker-1"), 30) for _ in range(40)),  # dropped, long lines
        _record("MODIFIED", crashing(1, name="g1-worker-1"), 61),  # dropped: its time passes the window's end
        _record("DELETED", crashing(2, ready=True), 61),
    ]
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join(lines) + "\n")
    reference = _replay([str(log)], 1)[1]
    assert _replay([str(log)], 2)[1] == reference and _piped(log.read_bytes())[1] == reference
    times = [
        (json.loads(line)["time"], json.loads(line)["crash_looping"])
        for line in reference.decode().splitlines()
        if '"component"' in line
    ]
    assert times == [("2026-11-20T10:00:00Z", True), ("2026-11-20T10:01:00Z", False)]
