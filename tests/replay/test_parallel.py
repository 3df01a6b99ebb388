"""A large JSON-lines log decoded by worker processes says exactly what the serial reader says."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path
from typing import Any

import anyio
import pytest
from builders import container, dcd, deployment, dgd, labels, pod
from cli import EXAMPLES, run

from crashwatch.replay import ReplayOptions, replay

BAD_LINES = [
    "not json at all",
    "[1, 2]",
    '{"type": "ADDED"}',
    '{"type": "MODIFIED", "object": {"kind": "Pod", '
    '"metadata": {"name": "x"}, "status": {"containerStatuses": [{"name": "m", "restartCount": "2"}]}}}',
    # read by the filter, not the decoder: one of the log's Pods, whose labels are not all strings
    '{"type": "MODIFIED", "object": {"kind": "Pod", "metadata": {"name": "g1-worker-1", "namespace": "ns", '
    '"labels": {"nvidia.com/dynamo-graph-deployment-name": "g1", "nvidia.com/dynamo-component": 7}}}}',
]


def random_log(path: Path, seed: int, events: int = 1500, cut_last: bool = True) -> None:
    """Pods of three components in two namespaces crash, recover, move and leave; Deployments, DCDs and
    DGDs come and go; bad and blank lines are scattered in; the last line is cut short."""
    rng = random.Random(seed)
    lines: list[str] = []
    for graph in ("g1", "g2"):
        lines.append(json.dumps({"type": "ADDED", "object": dgd(graph, namespace="ns")}))
        for component in ("worker", "frontend"):
            lines.append(json.dumps({"type": "ADDED", "object": dcd(f"{graph}-{component}", graph, component)}))
            selector = {"app": f"{graph}-{component}"}
            lines.append(
                json.dumps(
                    {
                        "type": "ADDED",
                        "object": deployment(
                            f"{graph}-{component}", match_labels=selector, owner_dcd=f"{graph}-{component}"
                        ),
                    }
                )
            )
    for n in range(events):
        roll = rng.random()
        if roll < 0.01:
            lines.append(rng.choice(BAD_LINES))
            continue
        if roll < 0.02:
            lines.append("   ")
            continue
        if roll < 0.025:  # a List on one line: its Pods are read by the main process, not the workers
            items = [
                pod(
                    f"g1-worker-{i}",
                    uid=f"g1-worker-{i}-0",
                    pod_labels=labels("g1", "worker"),
                    ready=rng.random() < 0.5,
                )
                for i in range(3)
            ]
            lines.append(json.dumps({"kind": "PodList", "apiVersion": "v1", "items": items}))
            continue
        if roll < 0.03:
            obj = deployment(
                f"g1-{rng.choice(['worker', 'frontend'])}",
                match_labels={"app": "g1-worker"},
                available=rng.random() < 0.5,
            )
            lines.append(json.dumps({"type": "MODIFIED", "object": obj}))
            continue
        graph, component = rng.choice([("g1", "worker"), ("g1", "frontend"), ("g2", "worker")])
        name = f"{graph}-{component}-{rng.randrange(6)}"
        state = rng.choice(["running", "waiting", "waiting", "terminated"])
        obj = pod(
            name,
            namespace=rng.choice(["ns", "ns", "other"]),
            uid=f"{name}-{rng.randrange(2)}",
            pod_labels=labels(graph, component, app=f"{graph}-{component}") if rng.random() < 0.95 else {},
            containers=[
                container(restarts=rng.choice([0, 1, 2, 3, 5]), state=state, exit_code=rng.choice([0, 1, 137]))
            ],
            ready=rng.random() < 0.2,
            deleting=rng.random() < 0.03,
            resource_version=str(n),
        )
        kind = rng.choice(["ADDED", "MODIFIED", "MODIFIED", "MODIFIED", "DELETED"])
        lines.append(
            json.dumps({"type": kind, "object": obj, "time": f"2026-11-20T10:{n // 60 % 60:02d}:{n % 60:02d}Z"})
        )
    text = "\n".join(lines) + "\n"
    if cut_last:
        text += lines[-1][: len(lines[-1]) // 2]
    path.write_text(text)


def replay_in_process(*logs: Path, **options: Any) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    options.setdefault("summary", "none")  # (the summary's own tests are in test_summary.py)
    opts = ReplayOptions(logs=[str(log) for log in logs], progress=False, **options)
    code = anyio.run(replay, opts, out, err, None, lambda: "2026-12-01T00:00:00Z")
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("flags", [{"output": "json"}, {"patches": True}], ids=["json", "patches"])
def test_workers_say_what_the_serial_reader_says(tmp_path: Path, seed: int, flags: dict[str, Any]) -> None:
    log = tmp_path / "log.jsonl"
    random_log(log, seed)
    serial = replay_in_process(log, jobs=1, **flags)
    parallel = replay_in_process(log, jobs=2, range_bytes=2048, **flags)
    assert serial[0] == 65  # the bad lines and the cut last line
    assert "record is cut short (the log ends before it closes)" in serial[2]
    assert serial[1].count(b"\n") > 10  # verdicts changed many times
    assert parallel == serial


def test_strict_stops_at_the_same_record_with_workers(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    random_log(log, 4)
    serial = replay_in_process(log, jobs=1, strict=True)
    parallel = replay_in_process(log, jobs=3, range_bytes=1024, strict=True)
    assert serial[0] == 65 and "stopped at the first bad record" in serial[2]
    assert parallel == serial


def test_several_logs_and_a_pretty_printed_one_keep_their_order(tmp_path: Path) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    random_log(first, 5, cut_last=False)
    random_log(second, 6, cut_last=False)
    pretty = EXAMPLES / "two-failing-components.json"  # not JSON lines: read serially among the others
    serial = replay_in_process(first, pretty, second, jobs=1, output="json")
    parallel = replay_in_process(first, pretty, second, jobs=2, range_bytes=4096, output="json")
    assert parallel == serial
    assert serial[0] == 65  # random_log scatters bad lines in


def test_a_log_read_serially_between_two_read_by_workers(tmp_path: Path) -> None:
    """The same Pods in a gzip log (read serially) between two plain ones: what the workers' side
    remembered of those Pods must not outlive the serial read."""
    import gzip

    first, middle, last = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    random_log(first, 7, cut_last=False)
    random_log(middle, 8, cut_last=False)
    zipped = tmp_path / "b.jsonl.gz"
    zipped.write_bytes(gzip.compress(middle.read_bytes()))
    last.write_text(first.read_text())  # the same views again: after the middle log, some change things
    serial = replay_in_process(first, zipped, last, jobs=1, output="json")
    parallel = replay_in_process(first, zipped, last, jobs=2, range_bytes=4096, output="json")
    assert parallel == serial


def _line(kind: str, obj: dict[str, Any]) -> str:
    return json.dumps({"type": kind, "object": obj}) + "\n"


CRASHING = pod("p", uid="p-1", containers=[container(restarts=2)])
HEALTHY = pod("p", uid="p-1", containers=[container(state="running")], ready=True)


def test_a_view_seen_again_after_a_serial_log_changed_the_pod_is_not_dropped(tmp_path: Path) -> None:
    import gzip

    first, middle, last = tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz", tmp_path / "c.jsonl"
    first.write_text(_line("ADDED", CRASHING))
    middle.write_bytes(gzip.compress(_line("MODIFIED", HEALTHY).encode()))
    last.write_text(_line("MODIFIED", CRASHING))
    code, out, err = replay_in_process(first, middle, last, jobs=2, recovery_window=0)  # Ready clears at once
    assert (code, err) == (0, "")
    assert [line.split()[2] for line in out.decode().splitlines()] == [
        "CRASH-LOOPING",
        "FAILED",
        "RECOVERED",
        "RECOVERED",
        "CRASH-LOOPING",
        "FAILED",
    ]


def test_a_view_seen_again_after_a_list_line_changed_the_pod_is_not_dropped(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    listed = json.dumps({"kind": "PodList", "items": [HEALTHY]}) + "\n"  # read by the main process
    log.write_text(_line("ADDED", CRASHING) + listed + _line("MODIFIED", CRASHING))
    code, out, _ = replay_in_process(log, jobs=2, recovery_window=0)  # Ready clears at once
    assert code == 0
    assert [line.split()[2] for line in out.decode().splitlines()] == [
        "CRASH-LOOPING",
        "FAILED",
        "RECOVERED",
        "RECOVERED",
        "CRASH-LOOPING",
        "FAILED",
    ]


BAD_LABELS = pod(
    "p", uid="p-1", pod_labels={**labels(), "tier": 7}, containers=[container(state="running")], ready=True
)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_pod_whose_labels_are_not_strings_is_skipped_and_said_and_its_verdict_stands(
    tmp_path: Path, jobs: int
) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(_line("ADDED", CRASHING) + _line("MODIFIED", BAD_LABELS) + _line("ADDED", pod("q", ready=True)))
    code, out, err = replay_in_process(log, jobs=jobs, range_bytes=1024)
    assert code == 65
    assert err.splitlines() == [
        'crashwatch: Pod ns/p: metadata.labels["tier"] is a number, not a string (event skipped)',
        "crashwatch: 1 bad record skipped",
    ]
    assert [line.split()[2] for line in out.decode().splitlines()] == ["CRASH-LOOPING", "FAILED"]
    strict = replay_in_process(log, jobs=jobs, range_bytes=1024, strict=True)
    assert strict[0] == 65 and strict[1] == out
    assert strict[2].splitlines()[1:] == ["crashwatch: stopped at the first bad record (--strict)"]


def test_the_cli_takes_jobs() -> None:
    result = run("replay", "-j", "2", str(EXAMPLES / "rollout-recovers.jsonl"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode() == (EXAMPLES / "rollout-recovers.expected.txt").read_text()
    for bad in ("0", "two"):
        result = run("replay", "-j", bad, str(EXAMPLES / "rollout-recovers.jsonl"))
        assert result.returncode == 2
        assert b"--jobs" in result.stderr
