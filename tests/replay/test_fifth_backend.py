"""A backend plugged in from outside the product (tests/gangs.py: its own kind, Pods, rule, words and
tunable), through `crashwatch replay` as a plugin runs it: registered, then the command line as shipped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from builders import container, labels, pod

GANGS = Path(__file__).resolve().parent.parent / "gangs.py"
GANG = "gangs.test.crashwatch.io/gang"
T = "2026-11-20T10:00:{:02d}Z"


def gangset(name: str, members: int) -> dict[str, Any]:
    meta = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1"}
    spec = {"members": members}
    return {"apiVersion": "gangs.test.crashwatch.io/v1", "kind": "GangSet", "metadata": meta, "spec": spec}


def member(name: str, ready: bool) -> dict[str, Any]:
    running = container(state="running", ready=ready)
    return pod(name, pod_labels=labels("g", "trainer", **{GANG: "team-a"}), containers=[running], ready=ready)


def log(path: Path) -> Path:
    """A gang of three wanted, two Ready: short from second 0; a Pod that is no gang's beside it."""
    records = [
        ("ADDED", gangset("team-a", 3), 0),
        ("ADDED", member("a-0", True), 0),
        ("ADDED", member("a-1", True), 0),
        ("ADDED", member("a-2", False), 0),
        ("ADDED", pod("loner", pod_labels=labels("g", "frontend"), containers=[container(state="running")]), 0),
        ("MODIFIED", member("a-2", False), 40),
    ]
    path.write_text("".join(json.dumps({"type": t, "object": o, "time": T.format(s)}) + "\n" for t, o, s in records))
    return path


def replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GANGS), "replay", "--no-progress", "-j", "1", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_plugged_in_backend_reads_its_kind_claims_its_pods_and_speaks_its_own_words(tmp_path: Path) -> None:
    path = log(tmp_path / "gangs.jsonl")
    done = replay("-o", "json", "--gang-grace", "30s", str(path))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    component = next(line for line in lines if line["kind"] == "component")
    # its tunable: the grace of 30s from second 0 ended before the event at second 40, at second 30
    assert component["time"] == "2026-11-20T10:00:30Z"
    assert (component["component"], component["gang"], component["short"]) == ("trainer", "team-a", 1)
    assert component["message"] == "GangSet team-a is short of 1 Ready members for over 30s"
    graph = next(line for line in lines if line["kind"] == "graph")
    assert graph["failed"] and graph["components"] == ["trainer"]
    text = replay("--gang-grace", "30s", str(path))
    assert "CRASH-LOOPING  gang=team-a short=1 pod=a-0" in text.stdout
    assert "FAILED  component_crash_looping: trainer (short=1 exit=0)" in text.stdout


def test_the_backends_tunable_is_a_flag_of_its_own_and_its_default_holds(tmp_path: Path) -> None:
    path = log(tmp_path / "gangs.jsonl")
    assert replay("-o", "json", str(path)).stdout == ""  # the default grace (1m) has not passed by second 40
    help_text = replay("--help").stdout
    assert "--gang-grace DURATION" in help_text and "--group-window DURATION" in help_text
    refused = replay("--gang-grace", "soon", str(path))
    assert refused.returncode == 2 and "not a duration" in refused.stderr


def test_without_the_plugin_the_same_log_is_read_and_the_kind_skipped(tmp_path: Path) -> None:
    path = log(tmp_path / "gangs.jsonl")
    plain = subprocess.run(
        [sys.executable, "-m", "crashwatch", "replay", "--no-progress", "-o", "json", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert plain.returncode == 0 and plain.stdout == "", plain.stderr
