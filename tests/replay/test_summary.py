"""A replay ends saying what it read and what it found (crashwatch/summary.py), and its progress line on
a terminal never runs into a verdict line (crashwatch/progress.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from builders import container, pod
from cli import EXAMPLES, run

from crashwatch.progress import Cleared, Progress

LABELS = "nvidia.com/dynamo-graph-deployment-name and nvidia.com/dynamo-component"


def test_an_empty_log_says_nothing_matched_and_why(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for log in (str(empty), "/dev/null"):
        result = run("replay", log)
        assert (result.returncode, result.stdout) == (0, b"")
        assert result.stderr.decode().splitlines() == [
            f"crashwatch: no Dynamo graph or labelled Pod in {log}: no watch event or object of a kind replay "
            "reads (Pods, Deployments, DCDs, DGDs, LeaderWorkerSets)"
        ]


def test_crash_looping_pods_without_the_dynamo_labels_are_named_as_the_reason(tmp_path: Path) -> None:
    log = tmp_path / "web.jsonl"
    crashing = [pod(f"web-{i}", pod_labels={"app": "web"}, containers=[container(restarts=3)]) for i in range(3)]
    log.write_text("".join(json.dumps({"type": "MODIFIED", "object": obj}) + "\n" for obj in crashing))
    result = run("replay", str(log))
    assert (result.returncode, result.stdout) == (0, b"")
    assert result.stderr.decode() == (
        f"crashwatch: no Dynamo graph or labelled Pod in {log}: 3 Pod events, none with the labels {LABELS}\n"
    )


def test_a_slow_start_says_what_was_read_and_that_nothing_fails() -> None:
    log = EXAMPLES / "slow-start.jsonl"
    result = run("replay", str(log))
    assert (result.returncode, result.stdout) == (0, b"")
    assert result.stderr.decode() == (
        f"crashwatch: read 11 records from {log}: 1 graph, 1 component; nothing fails at the end\n"
    )


def test_what_fails_at_the_end_is_named_and_stdout_is_unchanged() -> None:
    log = EXAMPLES / "two-failing-components.json"
    result = run("replay", str(log))
    assert result.returncode == 0
    assert result.stdout == (EXAMPLES / "two-failing-components.expected.txt").read_bytes()
    assert result.stderr.decode().splitlines() == [
        f"crashwatch: read 16 records from {log}: 1 graph, 3 components",
        "crashwatch: 1 graph failing at the end: inference/disagg (DecodeWorker, PrefillWorker)",
    ]


def test_summary_json_is_the_last_line_of_stdout_and_none_says_nothing() -> None:
    log = EXAMPLES / "two-failing-components.json"
    expected = (EXAMPLES / "two-failing-components.expected.jsonl").read_bytes()
    result = run("replay", "-o", "json", "--summary", "json", str(log))
    assert (result.returncode, result.stderr) == (0, b"")
    *lines, last = result.stdout.splitlines(keepends=True)
    assert b"".join(lines) == expected
    assert json.loads(last) == {
        "kind": "summary",
        "logs": [str(log)],
        "records": 16,
        "bad": 0,
        "time_went_back": 0,
        "graphs": 1,
        "components": 3,
        "failing": [
            {
                "namespace": "inference",
                "graph": "disagg",
                "reason": "component_crash_looping",
                "components": ["DecodeWorker", "PrefillWorker"],
            }
        ],
        "matched": True,
        "why": None,
    }
    quiet = run("replay", "-o", "json", "--summary", "none", str(log))
    assert (quiet.returncode, quiet.stderr, quiet.stdout) == (0, b"", expected)


def test_the_progress_line_has_a_percentage_and_a_rate_and_is_cleared_before_a_verdict_line() -> None:
    err, out = io.StringIO(), io.BytesIO()
    progress = Progress(err, enabled=True, logs=2)
    progress.shown = progress.started = progress.shown - 10  # a line is due
    progress.add("big.jsonl", 30_180, lambda: (420_000_000, 1_000_000_000))
    drawn = err.getvalue()
    assert drawn.startswith("\r\033[K") and "replaying big.jsonl (1 of 2): 42% of 1.0 GB, 30,180 records (" in drawn
    assert drawn.endswith("/s)") and "\n" not in drawn
    Cleared(out, progress).write(b"2026-11-20T10:00:46Z  dynamo/llm  FAILED\n")
    assert err.getvalue() == drawn + "\r\033[K"  # cleared first: the verdict line starts a line of its own
    assert out.getvalue() == b"2026-11-20T10:00:46Z  dynamo/llm  FAILED\n"
    progress.shown -= 10
    progress.add("<stdin>", 1, lambda: None)  # a pipe: no size, the count and the rate
    assert "replaying <stdin> (2 of 2): 30,181 records (" in err.getvalue()


def test_a_text_file_gives_a_few_lines_not_one_per_line(tmp_path: Path) -> None:
    log = tmp_path / "text.txt"
    log.write_text("".join(f"hello world {n}\n" for n in range(100_000)))
    result = run("replay", str(log))
    assert result.returncode == 65
    lines = result.stderr.decode().splitlines()
    assert all(f"{log}:{n}: " in line for n, line in enumerate(lines[:20], 1))
    assert lines[20:] == [
        f"crashwatch: no Dynamo graph or labelled Pod in {log}: 100,000 bad records and nothing else",
        "crashwatch: 100,000 bad records skipped (the first 20 shown)",
    ]


def test_kubectl_table_output_is_named_with_the_command_that_gives_a_log(tmp_path: Path) -> None:
    table = (
        "NAME                      READY   STATUS             RESTARTS   AGE\n"
        "llm-vllmworker-6d9f7c8b5   0/1     CrashLoopBackOff   4          5m\n"
    )
    result = run("replay", "-", stdin=table.encode())
    assert result.returncode == 65
    lines = result.stderr.decode().splitlines()
    assert lines[0].startswith("crashwatch: <stdin>:1: ")
    assert lines[1] == (
        "crashwatch: <stdin>: looks like kubectl table output: use -o json "
        "(kubectl get pods -A --watch --output-watch-events -o json | crashwatch replay -)"
    )
    assert len([line for line in lines if "looks like" in line]) == 1
