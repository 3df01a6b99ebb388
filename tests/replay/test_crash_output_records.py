"""A record's crashed-run outputs (`CRASH_OUTPUT` records, stream.model.crash_record) replayed: written
as `crashwatch record` writes them (its Recorder, the reader's own encoding), read back in every form a
log takes, serially, by worker processes and from a pipe, they fail the graph at the first crash with
the same line at the same time; a bad or oversized one is one bad record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from builders import container, dcd, dgd, pod
from cli import run

from stream.model.crash_record import encode_crash_output
from stream.model.events import CrashOutput
from stream.sources.record import Recorder

CORPUS = Path(__file__).resolve().parents[1] / "data" / "crashlogs"
GATED = (CORPUS / "vllm-model_access_denied-1.log").read_text()
T = "2026-11-20T10:{:02d}:{:02d}.000Z"
ENDED = "2026-11-20T10:01:00Z"


def at(minute: int, second: int = 0) -> str:
    return T.format(minute, second)


def event(kind: str, obj: dict[str, object], time: str) -> bytes:
    return json.dumps({"type": kind, "object": obj, "time": time}).encode()


def session(path: Path, uid: str = "uid-ns-w-0", text: str = GATED) -> None:
    """A graph whose worker crashes once, and that crash's output, read two seconds later, as `record`
    writes them: each event when it came, the output when it went into the pipeline, the end's time."""
    crashed = pod("w-0", containers=[container(state="terminated", restarts=0, exit_code=1, ran=(at(0), ENDED))])
    recorder = Recorder(str(path))
    recorder.write(event("ADDED", dgd(), at(0)))
    recorder.write(event("ADDED", dcd("g-worker"), at(0)))
    recorder.write(event("ADDED", crashed, at(1)))
    recorder.write(encode_crash_output(CrashOutput("ns", "w-0", uid, "main", ENDED, text, at(1, 2))))
    recorder.close(at(2))


def crashed_lines(*args: str, stdin: bytes | None = None) -> list[str]:
    result = run("replay", *args, stdin=stdin)
    assert result.returncode == 0, result.stderr.decode()
    return [line for line in result.stdout.decode().splitlines() if "CRASHED" in line]


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    path = tmp_path / "session.jsonl"
    session(path)
    return path


def test_a_recorded_output_fails_the_graph_at_the_first_crash_read_serially_in_parallel_and_from_a_pipe(
    recorded: Path,
) -> None:
    (line,) = crashed_lines(str(recorded), "-j", "1")
    assert line.startswith(at(1, 2)) and "cause=model_access_denied" in line
    assert crashed_lines(str(recorded), "-j", "2") == [line]
    assert crashed_lines("-", stdin=recorded.read_bytes()) == [line]
    patches = run("replay", "--patches", str(recorded)).stdout.decode()
    assert "ComponentCrashedCertainCause" in patches and "ContainerCrashedCertainCause" in patches
    assert "Client Error" not in patches  # words built from the cause, never a line of the output


def test_every_form_of_a_log_reads_the_record_in_its_place(recorded: Path, tmp_path: Path) -> None:
    (line,) = crashed_lines(str(recorded))
    records = [json.loads(raw) for raw in recorded.read_bytes().splitlines()]
    forms = {
        "array.json": json.dumps(records, indent=2),  # jq -s .
        "pretty.json": "\n".join(json.dumps(r, indent=4) for r in records) + "\n",  # kubectl's pretty records
        "one-line-array.json": json.dumps(records),  # jq -c -s .
        "session.yaml": yaml.safe_dump_all(records),
    }
    for name, text in forms.items():
        path = tmp_path / name
        path.write_text(text)
        assert crashed_lines(str(path)) == [line], name


def test_the_output_of_a_pod_since_recreated_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    session(path, uid="uid-of-an-older-pod")
    assert crashed_lines(str(path)) == []


def test_a_bad_or_oversized_record_is_one_bad_record(recorded: Path, tmp_path: Path) -> None:
    lines = recorded.read_bytes().splitlines()
    output = json.loads(lines[3])
    del output["object"]["pod"]
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join([*lines[:3], json.dumps(output).encode(), *lines[4:]]) + b"\n")
    result = run("replay", str(bad))
    assert result.returncode == 65 and b"CRASHED" not in result.stdout
    assert f"{bad}:4: wrong field: Object missing required field `pod`" in result.stderr.decode()
    huge = tmp_path / "huge.jsonl"
    session(huge, text=GATED + "x" * (2 << 20) + "\n")
    result = run("replay", "--max-record-size", "1Mi", str(huge))
    assert result.returncode == 65 and b"CRASHED" not in result.stdout
    said = result.stderr.decode()
    assert f"{huge}:4: record is " in said and "(--max-record-size): skipped" in said
