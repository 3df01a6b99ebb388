"""Bad input: one line naming the place and the problem, the right exit code, and nothing right lost."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import pytest
from cli import EXAMPLES, crashwatch_command, run

GOOD = (EXAMPLES / "rollout-recovers.jsonl").read_text().splitlines(keepends=True)
EXPECTED = (EXAMPLES / "rollout-recovers.expected.txt").read_text()


def with_bad_line(tmp_path: Path, bad: str, at: int = 3) -> Path:
    lines = list(GOOD)
    lines.insert(at, bad + "\n")
    path = tmp_path / "log.jsonl"
    path.write_text("".join(lines))
    return path


BAD_RECORDS = [
    ("not JSON", "this is not json", "not valid JSON"),
    ("not an object", "[1, 2, 3]", "not an object but an array"),
    ("no type", '{"object": {"kind": "Pod", "metadata": {"name": "x"}}}', "watch event lacks `type`"),
    ("no object", '{"type": "ADDED"}', "watch event lacks `object`"),
    ("object not an object", '{"type": "ADDED", "object": 5}', "`object` is a number, not an object"),
    ("unknown event type", '{"type": "UPSERTED", "object": {"kind": "Pod"}}', "Invalid enum value 'UPSERTED'"),
    (
        "wrong field type",
        '{"type": "MODIFIED", "object": {"kind": "Pod", "metadata": {"name": "x"}, "status": {"containerStatuses": '
        '[{"name": "main", "restartCount": "two"}]}}}',
        "Expected `int`, got `str` - at `$.object.status.containerStatuses[0].restartCount`",
    ),
    ("no kind", '{"type": "ADDED", "object": {"metadata": {"name": "x"}}}', "`object` lacks a string `kind`"),
    ("neither event nor object", '{"hello": "world"}', "not a watch event"),
]


@pytest.mark.parametrize("bad,problem", [(c[1], c[2]) for c in BAD_RECORDS], ids=[c[0] for c in BAD_RECORDS])
def test_bad_record_is_named_skipped_and_exits_65(tmp_path: Path, bad: str, problem: str) -> None:
    path = with_bad_line(tmp_path, bad)
    result = run("replay", str(path))
    err = result.stderr.decode().splitlines()
    assert err[0].startswith(f"crashwatch: {path}:4: ")
    assert problem in err[0]
    assert err[1] == "crashwatch: 1 bad record skipped"
    assert len(err) == 2
    assert result.returncode == 65
    assert result.stdout.decode() == EXPECTED  # every right verdict still printed, no wrong one


def test_strict_stops_at_the_first_bad_record_after_what_came_before(tmp_path: Path) -> None:
    path = with_bad_line(tmp_path, "garbage", at=14)  # after the crash loop was proven
    result = run("replay", "--strict", str(path))
    assert result.returncode == 65
    err = result.stderr.decode().splitlines()
    assert err == [
        f"crashwatch: {path}:15: not valid JSON (JSON is malformed: invalid character (byte 0))",
        "crashwatch: stopped at the first bad record (--strict)",
    ]
    assert result.stdout.decode() == "".join(EXPECTED.splitlines(keepends=True)[:2])


def test_truncated_last_line_as_a_killed_recorder_leaves(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text("".join(GOOD) + GOOD[12][:500])
    result = run("replay", str(path))
    assert result.returncode == 65
    assert result.stderr.decode().splitlines()[0] == (
        f"crashwatch: {path}:{len(GOOD) + 1}: record is cut short (the log ends before it closes)"
    )
    assert result.stdout.decode() == EXPECTED


def test_a_cut_line_in_the_middle_does_not_swallow_the_rest(tmp_path: Path) -> None:
    path = with_bad_line(tmp_path, GOOD[5][:300], at=6)
    result = run("replay", str(path))
    assert result.returncode == 65
    assert result.stderr.decode().startswith(f"crashwatch: {path}:7: record is cut short")
    assert result.stdout.decode() == EXPECTED


def test_pretty_printed_record_cut_short_before_the_next(tmp_path: Path) -> None:
    events = [json.loads(line) for line in GOOD]
    blocks = [json.dumps(e, indent=2) for e in events]
    cut = blocks[3].splitlines()[:20]
    text = "\n".join(blocks[:3]) + "\n" + "\n".join(cut) + "\n" + "\n".join(blocks[3:]) + "\n"
    path = tmp_path / "kubectl.json"
    path.write_text(text)
    result = run("replay", str(path))
    assert result.returncode == 65
    assert "record is cut short (a new one starts at line" in result.stderr.decode()
    assert result.stdout.decode() == EXPECTED


def test_truncated_gzip(tmp_path: Path) -> None:
    data = gzip.compress("".join(GOOD).encode())
    path = tmp_path / "log.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    result = run("replay", str(path))
    assert result.returncode == 65
    err = result.stderr.decode().splitlines()
    assert "compressed data ends early (truncated gzip)" in err[0] or "record is cut short" in err[0]
    assert "Traceback" not in result.stderr.decode()


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "log.yaml"
    path.write_text("type: ADDED\nobject:\n  kind: Pod\n---\ntype: [unclosed\n")
    result = run("replay", str(path))
    assert result.returncode == 65
    assert result.stderr.decode().startswith(f"crashwatch: {path}:")
    assert "not valid YAML" in result.stderr.decode()


def test_yaml_document_that_is_not_an_object(tmp_path: Path) -> None:
    path = tmp_path / "log.yml"
    path.write_text("- just\n- a list\n")
    result = run("replay", str(path))
    assert result.returncode == 65
    assert result.stderr.decode().splitlines()[0] == f"crashwatch: {path}: document 1: not an object but an array"


def test_list_item_problems_are_named_and_good_items_kept(tmp_path: Path) -> None:
    pod = json.loads(GOOD[12])["object"]
    path = tmp_path / "pods.json"
    path.write_text(json.dumps({"kind": "PodList", "items": [7, pod]}))
    result = run("replay", str(path))
    assert result.returncode == 65
    assert result.stderr.decode().splitlines()[0] == f"crashwatch: {path}:1: item 0: not an object but a number"
    assert b"CRASH-LOOPING" in result.stdout


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_unreadable_log_exits_66(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "nope.jsonl"
    if kind == "directory":
        path.mkdir()
    result = run("replay", str(EXAMPLES / "rollout-recovers.jsonl"), str(path))
    assert result.returncode == 66
    message = "cannot open: No such file or directory" if kind == "missing" else "is a directory, not a log"
    assert result.stderr.decode() == f"crashwatch: {path}: {message}\n"
    assert result.stdout == b""


@pytest.mark.parametrize("args", [[], ["replay"], ["replay", "-o", "xml", "x"], ["bogus"], ["replay", "-", "-"]])
def test_usage_errors_exit_2(args: list[str]) -> None:
    result = run(*args)
    assert result.returncode == 2
    error, see = result.stderr.decode().splitlines()  # the error's one line and where the help is, no usage
    assert ": error: " in error and see.startswith("see 'crashwatch")


def test_closed_stdout_is_no_traceback() -> None:
    big = "".join(GOOD) * 1
    proc = subprocess.Popen(
        [*crashwatch_command(), "replay", "-o", "json", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdin is not None
    proc.stdout.close()
    _, err = proc.communicate(big.encode(), timeout=60)
    assert b"Traceback" not in err
    assert proc.returncode in (0, 141)
