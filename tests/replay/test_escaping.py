"""Names from the input cannot forge an output line or drive the terminal, on stdout or stderr."""

from __future__ import annotations

import json
import re
import shlex
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
    # quoted, logfmt style: the value holds spaces
    assert 'pod="p-0\\n2026-11-20T10:09:00Z  ns/g/worker  RECOVERED\\x1b[2J" container=main' in lines[0]
    # JSON lines carry the name as it is, escaped by JSON itself
    (first, _) = [json.loads(line) for line in run("replay", "-o", "json", str(log)).stdout.splitlines()]
    assert first["pod"] == FORGED


def test_a_bad_record_naming_a_crafted_file_is_one_stderr_line(tmp_path: Path) -> None:
    log = tmp_path / "bad\nname.jsonl"
    log.write_text('{"type": "ADDED", "object": {"kind": "Pod", "metadata": 7}}\n')
    result = run("replay", "--summary", "none", str(log))
    assert result.returncode == 65
    errors = result.stderr.decode().splitlines()
    assert len(errors) == 2 and errors[0].startswith("crashwatch: ") and "bad\\nname.jsonl:1" in errors[0]


# what a script that wants the recoveries would grep: the verdict as the third field
RECOVERIES = re.compile(r"^\\S+  \\S+  RECOVERED$")


def test_values_with_spaces_or_quotes_are_quoted_so_no_value_passes_for_a_field(tmp_path: Path) -> None:
    """A Pod, graph or component named to forge a RECOVERED line: each value that holds a space, a quote
    or an `=` is quoted (logfmt), so the line splits into its own fields (as shell words), the verdict is
    the third, and a grep for recoveries by field matches no crash-looping line."""
    names = {
        "pod": 'p-0 x  RECOVERED "q" a=b',
        "graph": "g  RECOVERED",
        "component": 'w"  RECOVERED',
    }
    log = tmp_path / "log.jsonl"
    crash = crashing(names["pod"], pod_labels=labels(names["graph"], names["component"]))
    log.write_text(json.dumps({"type": "ADDED", "object": crash, "time": "2026-11-20T10:00:00Z"}) + "\n")
    result = run("replay", str(log))
    assert result.returncode == 0, result.stderr
    component, graph = result.stdout.decode().splitlines()
    assert component == (
        '2026-11-20T10:00:00Z  "ns/g  RECOVERED/w\\"  RECOVERED"  CRASH-LOOPING  '
        'pod="p-0 x  RECOVERED \\"q\\" a=b" container=main restarts=2 exit=1'
    )
    assert graph == (
        '2026-11-20T10:00:00Z  "ns/g  RECOVERED"  FAILED  '
        'component_crash_looping: "w\\"  RECOVERED" (restarts=2 exit=1)'
    )
    fields = shlex.split(component)
    assert fields[1:4] == ["ns/g  RECOVERED/w\"  RECOVERED", "CRASH-LOOPING", f"pod={names['pod']}"]
    assert shlex.split(graph)[2] == "FAILED"
    assert not RECOVERIES.match(component) and not RECOVERIES.match(graph)
    # and they do match the recovery lines, whose fields are plain
    log.write_text(log.read_text() + json.dumps({"type": "DELETED", "object": crash}) + "\n")
    lines = run("replay", str(log)).stdout.decode().splitlines()
    assert len(lines) == 4 and shlex.split(lines[2])[2] == "RECOVERED" == shlex.split(lines[3])[2]


def test_plain_names_are_never_quoted(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"type": "ADDED", "object": crashing("p-0", pod_labels=labels())}) + "\n")
    assert run("replay", str(log)).stdout.decode().splitlines()[0] == (
        "-  ns/g/worker  CRASH-LOOPING  pod=p-0 container=main restarts=2 exit=1"
    )
