"""Names from the input cannot forge an output line or drive the terminal, on stdout or stderr."""

from __future__ import annotations

import json
from pathlib import Path

from builders import crashing, labels
from cli import run

FORGED = "p-0\n2026-11-20T10:09:00Z  ns/g/worker  RECOVERED\x1b[2J"


def test_a_crafted_pod_name_stays_on_its_line_escaped(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"type": "ADDED", "object": crashing(FORGED, pod_labels=labels())}) + "\n")
    result = run("replay", str(log))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    assert len(lines) == 2  # the component's line and the graph's: nothing forged between them
    assert "RECOVERED" not in lines[1] and "\x1b" not in result.stdout.decode()
    assert "pod=p-0\\n2026-11-20T10:09:00Z  ns/g/worker  RECOVERED\\x1b[2J container=main" in lines[0]
    # JSON lines carry the name as it is, escaped by JSON itself
    (first, _) = [json.loads(line) for line in run("replay", "-o", "json", str(log)).stdout.splitlines()]
    assert first["pod"] == FORGED


def test_a_bad_record_naming_a_crafted_file_is_one_stderr_line(tmp_path: Path) -> None:
    log = tmp_path / "bad\nname.jsonl"
    log.write_text('{"type": "ADDED", "object": {"kind": "Pod", "metadata": 7}}\n')
    result = run("replay", str(log))
    assert result.returncode == 65
    errors = result.stderr.decode().splitlines()
    assert len(errors) == 2 and errors[0].startswith("crashwatch: ") and "bad\\nname.jsonl:1" in errors[0]
