"""stderr as the commands write it, through the installed CLI: the historic text lines, or JSON lines with
--log-format json (the errors that end the program and usage errors included), filtered by --log-level."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cli import EXAMPLES, run

GOOD = (EXAMPLES / "rollout-recovers.jsonl").read_text()
EXPECTED = (EXAMPLES / "rollout-recovers.expected.txt").read_text()


def bad_log(tmp_path: Path) -> Path:
    log = tmp_path / "bad.jsonl"
    log.write_text(GOOD + "{not json\n")
    return log


def objects(stderr: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.decode().splitlines()]


def test_text_stays_what_it_was(tmp_path: Path) -> None:
    result = run("replay", str(bad_log(tmp_path)))
    assert result.returncode == 65 and result.stdout.decode() == EXPECTED
    lines = result.stderr.decode().splitlines()
    assert lines[-1] == "crashwatch: 1 bad record skipped"
    assert lines[0].startswith(f"crashwatch: {tmp_path / 'bad.jsonl'}:") and len(lines) == 2


def test_json_lines_for_bad_records_and_the_error_that_ends_the_replay(tmp_path: Path) -> None:
    result = run("replay", "--log-format", "json", str(bad_log(tmp_path)))
    assert result.returncode == 65 and result.stdout.decode() == EXPECTED  # stdout untouched
    skipped, summary = objects(result.stderr)
    assert skipped["level"] == "warning" and skipped["msg"].startswith(str(tmp_path / "bad.jsonl"))
    assert {k: v for k, v in summary.items() if k != "time"} == {
        "level": "error",
        "msg": "1 bad record skipped",
        "exit_code": 65,
    }
    assert summary["time"].endswith("Z")


def test_the_level_hides_warnings_but_not_the_error_that_ends_the_program(tmp_path: Path) -> None:
    result = run("replay", "--log-level", "error", str(bad_log(tmp_path)))
    assert result.returncode == 65
    assert result.stderr.decode() == "crashwatch: 1 bad record skipped\n"


def test_a_log_that_cannot_be_opened_is_one_json_error(tmp_path: Path) -> None:
    result = run("replay", "--log-format=json", str(tmp_path / "missing.jsonl"))
    assert result.returncode == 66
    (line,) = objects(result.stderr)
    assert line["level"] == "error" and line["exit_code"] == 66 and "missing.jsonl" in line["msg"]


def test_a_usage_error_is_one_json_object_under_json(tmp_path: Path) -> None:
    result = run("replay", "--log-format", "json", "--strict", "-j", "0", str(EXAMPLES / "rollout-recovers.jsonl"))
    assert result.returncode == 2
    (line,) = objects(result.stderr)
    assert line["level"] == "error" and line["exit_code"] == 2 and "-j/--jobs" in line["msg"]
    text = run("replay", "-j", "0", str(EXAMPLES / "rollout-recovers.jsonl"))
    assert text.returncode == 2 and text.stderr.decode().startswith("crashwatch replay: error: argument -j/--jobs")


def test_a_record_file_that_cannot_be_created_is_one_json_error(tmp_path: Path) -> None:
    result = run("record", "-A", "--log-format", "json", "-o", str(tmp_path / "no" / "such" / "dir.jsonl"))
    assert result.returncode == 73
    (line,) = objects(result.stderr)
    assert line["exit_code"] == 73 and "cannot create" in line["msg"]


def test_events_take_kubectls_booleans() -> None:
    bad = run("run", "--events=maybe")
    assert bad.returncode == 2 and b"not true or false: 'maybe'" in bad.stderr
    bad = run("tail", "--no-events")  # tail writes no Events: the flag is run's alone
    assert bad.returncode == 2 and b"--no-events" in bad.stderr
