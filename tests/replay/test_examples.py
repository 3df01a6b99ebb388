"""The CLI on the bundled examples, in every format a log can come in."""

from __future__ import annotations

import datetime
import gzip
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli import EXAMPLES, run

CASES = [
    ("rollout-recovers.jsonl", [], "rollout-recovers.expected.txt"),
    ("rollout-recovers.jsonl", ["-o", "json"], "rollout-recovers.expected.jsonl"),
    ("rollout-recovers.jsonl", ["--patches"], "rollout-recovers.expected.patches.jsonl"),
    ("two-failing-components.json", [], "two-failing-components.expected.txt"),
    ("two-failing-components.json", ["-o", "json"], "two-failing-components.expected.jsonl"),
    ("two-failing-components.json", ["--patches"], "two-failing-components.expected.patches.jsonl"),
    ("grove-crash-loop.jsonl", [], "grove-crash-loop.expected.txt"),
    ("grove-crash-loop.jsonl", ["-o", "json"], "grove-crash-loop.expected.jsonl"),
    ("grove-crash-loop.jsonl", ["--patches"], "grove-crash-loop.expected.patches.jsonl"),
    ("lws-recreation-loop.jsonl", [], "lws-recreation-loop.expected.txt"),
    ("lws-recreation-loop.jsonl", ["-o", "json"], "lws-recreation-loop.expected.jsonl"),
    ("lws-recreation-loop.jsonl", ["--patches"], "lws-recreation-loop.expected.patches.jsonl"),
    ("diagnoses.jsonl", [], "diagnoses.expected.txt"),
    ("diagnoses.jsonl", ["-o", "json"], "diagnoses.expected.jsonl"),
    ("diagnoses.jsonl", ["--patches"], "diagnoses.expected.patches.jsonl"),
    ("slow-start.jsonl", [], "slow-start.expected.txt"),
    ("slow-start.jsonl", ["-o", "json"], "slow-start.expected.jsonl"),
    ("slow-start.jsonl", ["--patches"], "slow-start.expected.patches.jsonl"),
]


LOGS = sorted({log for log, _, _ in CASES})


def test_the_bundled_logs_are_what_the_builders_make(tmp_path: Path) -> None:
    """examples/generate.py, writing elsewhere, remakes every bundled log byte for byte: the realistic
    objects of tests/builders.py have not drifted from the logs the expected outputs were read against."""
    generate = [sys.executable, "-m", "examples.generate", str(tmp_path)]
    subprocess.run(generate, cwd=EXAMPLES.parent, check=True, capture_output=True)
    assert sorted(path.name for path in tmp_path.iterdir()) == LOGS
    for name in LOGS:
        assert (tmp_path / name).read_bytes() == (EXAMPLES / name).read_bytes(), name


@pytest.mark.parametrize("log,flags,expected", CASES, ids=[f"{c[0]} {' '.join(c[1])}" for c in CASES])
def test_example_matches_its_expected_output(log: str, flags: list[str], expected: str) -> None:
    before = _now()
    result = run("replay", *flags, str(EXAMPLES / log))
    after = _now()
    summary = result.stderr.decode().splitlines()  # what it read and found, and nothing else
    assert summary[0].startswith("crashwatch: read ") and " from " in summary[0], summary
    assert len(summary) == 1 or (summary[1].endswith(")") and "failing at the end: " in summary[1]), summary
    assert result.returncode == 0
    assert _mask_wall_clock(result.stdout.decode(), before, after) == (EXAMPLES / expected).read_text()


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def _mask_wall_clock(output: str, before: datetime.datetime, after: datetime.datetime) -> str:
    """A condition that flips on an event without a time of its own is stamped with the current time
    (docs/cli.md): the expected files say `<now>` there, and only a time taken during the run matches it."""

    def mask(found: re.Match[str]) -> str:
        when = datetime.datetime.fromisoformat(found.group(1).replace("Z", "+00:00"))
        return '"lastTransitionTime":"<now>"' if before <= when <= after else found.group(0)

    return re.sub(r'"lastTransitionTime":"([0-9T:-]+Z)"', mask, output)


@pytest.mark.parametrize("flags", [[], ["-o", "json"], ["--patches"]], ids=["text", "json", "patches"])
def test_lws_recreations_further_apart_than_the_group_window_are_no_loop(flags: list[str]) -> None:
    """The LWS example's group is recreated every 80-82 s: with a 1 s window no two recreations are close
    enough, so nothing crash-loops and nothing is written."""
    result = run(
        "replay", "--group-window", "1s", "--summary", "none", *flags, str(EXAMPLES / "lws-recreation-loop.jsonl")
    )
    assert (result.returncode, result.stderr, result.stdout) == (0, b"", b"")


def test_the_slow_start_never_trips_a_diagnosis_even_with_short_graces() -> None:
    """Its worker was unschedulable for 4 minutes, pulled for 3 and was not Ready for 70 s: only graces
    shorter than the wait for a node say anything, and then only that."""
    result = run("replay", "--unschedulable-grace", "3m", str(EXAMPLES / "slow-start.jsonl"))
    assert result.returncode == 0
    assert result.stdout.decode().splitlines() == [
        "2026-11-20T10:03:02Z  dynamo/slow/VllmWorker  UNSCHEDULABLE  pod=slow-vllmworker-6d9f7c8b5-b7n3m "
        'message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: '
        '3 No preemption victims found for incoming pod."',
        "2026-11-20T10:03:02Z  dynamo/slow  FAILED  component_unschedulable: VllmWorker (Unschedulable)",
        "2026-11-20T10:04:02Z  dynamo/slow/VllmWorker  RECOVERED",
        "2026-11-20T10:04:02Z  dynamo/slow  RECOVERED",
    ]


def test_failed_state_all_fails_the_graph_for_every_diagnosis() -> None:
    """The diagnoses example with --failed-state all: the DGD says failed, in each diagnosis's words, and
    pending again once the last one is fixed; by default its state is never written."""
    states = []
    for flags in ([], ["--failed-state", "all"]):
        result = run("replay", "--patches", *flags, str(EXAMPLES / "diagnoses.jsonl"))
        assert result.returncode == 0
        patches = [json.loads(line) for line in result.stdout.splitlines()]
        states.append(
            [
                (
                    p["patch"]["status"].get("state"),
                    next(c["reason"] for c in p["patch"]["status"]["conditions"] if c["type"] == "Ready"),
                )
                for p in patches
                if p["kind"] == "DynamoGraphDeployment" and "state" in p["patch"]["status"]
            ]
        )
    assert states[0] == []
    assert states[1][0] == ("failed", "component_restart_looping")
    assert ("failed", "components_failing") in states[1]
    assert ("failed", "component_unschedulable") in states[1]
    assert states[1][-1] == ("pending", "some_resources_are_not_ready")


def test_json_lines_follow_the_contract() -> None:
    result = run("replay", "-o", "json", str(EXAMPLES / "two-failing-components.json"))
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    component_keys = [
        "kind",
        "time",
        "namespace",
        "graph",
        "component",
        "dcd",
        "crash_looping",
        "pod",
        "container",
        "restarts",
        "exit_code",
        "message",
    ]
    graph_keys = ["kind", "time", "namespace", "graph", "failed", "reason", "components", "message"]
    for line in lines:
        assert list(line) == (component_keys if line["kind"] == "component" else graph_keys)
        assert line["time"] is None  # kubectl output carries no times
    graphs = [line for line in lines if line["kind"] == "graph"]
    assert graphs[-1]["components"] == ["DecodeWorker", "PrefillWorker"]
    decode = next(line for line in lines if line.get("component") == "DecodeWorker")
    assert (decode["container"], decode["exit_code"], decode["dcd"]) == (
        "model-download",
        1,
        "disagg-decodeworker-0f1e2d",
    )
    prefill = next(line for line in lines if line.get("component") == "PrefillWorker")
    assert prefill["exit_code"] == 137


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _crashing_pod(events: list[dict[str, Any]], restarts: int) -> dict[str, Any]:
    for e in events:
        obj = e["object"]
        statuses = obj.get("status", {}).get("containerStatuses") or [{}]
        if obj["kind"] == "Pod" and statuses[0].get("restartCount") == restarts:
            return dict(obj)
    raise AssertionError(f"no Pod with {restarts} restarts")


@pytest.fixture
def expected_text() -> str:
    return (EXAMPLES / "rollout-recovers.expected.txt").read_text()


def test_gzip_and_stdin(tmp_path: Path, expected_text: str) -> None:
    data = (EXAMPLES / "rollout-recovers.jsonl").read_bytes()
    (tmp_path / "log.jsonl.gz").write_bytes(gzip.compress(data))
    assert run("replay", str(tmp_path / "log.jsonl.gz")).stdout.decode() == expected_text
    assert run("replay", "-", stdin=data).stdout.decode() == expected_text
    assert run("replay", "-", stdin=gzip.compress(data)).stdout.decode() == expected_text


def test_several_logs_replay_in_order(tmp_path: Path, expected_text: str) -> None:
    lines = (EXAMPLES / "rollout-recovers.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "a.jsonl").write_text("".join(lines[:14]))
    (tmp_path / "b.jsonl").write_text("".join(lines[14:]))
    result = run("replay", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"))
    assert result.stdout.decode() == expected_text


def test_yaml_documents_and_lists(tmp_path: Path) -> None:
    events = _events(EXAMPLES / "rollout-recovers.jsonl")
    (tmp_path / "log.yaml").write_text(yaml.safe_dump_all(events))
    result = run("replay", "-o", "json", str(tmp_path / "log.yaml"))
    assert result.returncode == 0, result.stderr
    got = [json.loads(line) for line in result.stdout.splitlines()]
    want = [json.loads(line) for line in (EXAMPLES / "rollout-recovers.expected.jsonl").read_text().splitlines()]
    assert got == want
    # a snapshot: a List whose items lack kind (as the API server sends them), in YAML and in JSON
    item = {k: v for k, v in _crashing_pod(events, 3).items() if k != "kind"}
    snapshot = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [item]}
    (tmp_path / "pods.yml").write_text(yaml.safe_dump(snapshot))
    (tmp_path / "pods.json").write_text(json.dumps(snapshot, indent=4))
    for name in ("pods.yml", "pods.json"):
        result = run("replay", "-o", "json", str(tmp_path / name))
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        assert [(line["kind"], line.get("restarts")) for line in lines] == [("component", 3), ("graph", None)], name
        assert lines[0]["time"] is None


def test_kubectl_list_with_kinds_and_unknown_kinds_are_skipped(tmp_path: Path) -> None:
    events = _events(EXAMPLES / "rollout-recovers.jsonl")
    snapshot = {
        "kind": "List",
        "apiVersion": "v1",
        "items": [{"kind": "Service", "metadata": {"name": "x"}}, _crashing_pod(events, 3)],
    }
    (tmp_path / "all.json").write_text(json.dumps(snapshot))
    result = run("replay", str(tmp_path / "all.json"))
    assert result.returncode == 0, result.stderr
    assert b"CRASH-LOOPING" in result.stdout and b"restarts=3" in result.stdout


def test_help_shows_an_example() -> None:
    result = run("replay", "--help")
    assert result.returncode == 0
    assert b"crashwatch replay examples/rollout-recovers.jsonl" in result.stdout


def test_a_pipe_on_stdin_is_diagnosed_record_by_record() -> None:
    """`kubectl ... --watch | crashwatch replay -`: each change shows up before the input ends."""
    import subprocess
    import threading

    from cli import crashwatch_command

    lines = (EXAMPLES / "rollout-recovers.jsonl").read_bytes().splitlines(keepends=True)
    proc = subprocess.Popen([*crashwatch_command(), "replay", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    watchdog = threading.Timer(30, proc.kill)  # a regression must fail the test, not hang it
    watchdog.start()
    try:
        for line in lines[:13]:  # up to the event that proves the crash loop
            proc.stdin.write(line)
        proc.stdin.flush()
        first = proc.stdout.readline()  # would block until EOF if records were held back for a batch
        assert b"CRASH-LOOPING" in first and b"restarts=2" in first
    finally:
        watchdog.cancel()
        proc.stdin.close()
        proc.wait(timeout=30)
        proc.stdout.close()
    assert proc.returncode == 0


@pytest.mark.parametrize("form", ["yaml", "workers"])
def test_the_diagnoses_read_the_same_from_yaml_and_with_decoding_workers(form: str, tmp_path: Path) -> None:
    """A Pod's spec stays JSON text (the OOM rule reads its memory limit from it): a YAML log turns it into
    text on the way, and decoding workers read it from their own buffers; both say what the JSON does."""
    log = EXAMPLES / "diagnoses.jsonl"
    if form == "yaml":
        events = [json.loads(line) for line in log.read_text().splitlines()]
        target = tmp_path / "diagnoses.yaml"
        target.write_text(yaml.safe_dump_all(events))
        result = run("replay", "--summary", "none", str(target))
    else:
        result = run("replay", "--summary", "none", "-j", "2", str(log))
    assert (result.returncode, result.stderr) == (0, b"")
    assert result.stdout.decode() == (EXAMPLES / "diagnoses.expected.txt").read_text()
    assert "limit=80Gi" in result.stdout.decode()
