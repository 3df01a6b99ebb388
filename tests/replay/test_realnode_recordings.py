"""Replay of what `crashwatch record` took on the real node, kept as regression logs (tests/data/realnode).

diagnoses.jsonl.gz: tests/e2e/test_realnode_diagnoses.py's six cases (an image never pulled, a missing Secret key,
a GPU request, a child OOM-killed under exit 0, a container exiting 0, one OOM-killed with exit 137), each
diagnosed and then fixed, as a real kubelet and scheduler wrote them, and crashwatch's own status writes. It is
that test's record, trimmed there: only the cases' namespaces, renamed to fixed names, without managedFields,
gzipped (made by running it with CRASHWATCH_KEEP_RECORDING=tests/data/realnode/diagnoses.jsonl.gz; that test checks
the trimmed copy replays as the live `run` spoke). No rule reads Kubernetes Events: the scheduler's verdict is the
Pod's PodScheduled condition, which the record holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli import run

DATA = Path(__file__).resolve().parents[1] / "data" / "realnode"
SHORT = ("--image-pull-grace", "5s", "--config-error-grace", "5s", "--unschedulable-grace", "5s")
WINDOW = ("--recovery-window", "30s")  # the recording run's flags


def replay(*flags: str) -> list[dict[str, Any]]:
    done = run("replay", "--summary", "none", "-o", "json", *flags, *WINDOW, str(DATA / "diagnoses.jsonl.gz"))
    assert (done.returncode, done.stderr) == (0, b"")
    return [json.loads(line) for line in done.stdout.decode().splitlines()]


def verdicts(lines: list[dict[str, Any]], namespace: str) -> list[tuple[str, str | None, str | int | None]]:
    """Per line of the namespace: its kind, its diagnosis (a crash loop's: "crash_loop"; a graph's: its reason;
    None on recovery), and the finding's reason (a crash loop's: its exit code)."""
    return [
        (
            (line["kind"], line.get("diagnosis"), line.get("reason"))
            if line["kind"] == "component" and not line["crash_looping"]
            else ("component", "crash_loop", line["exit_code"])
            if line["kind"] == "component"
            else (line["kind"], line["reason"], None)
        )
        for line in lines
        if line["namespace"] == namespace
    ]


CASES = [
    ("rd-image-never-pulled", "image_pull_failing", "ErrImageNeverPull", "component_image_pull_failing"),
    ("rd-missing-secret-key", "config_error", "CreateContainerConfigError", "component_config_error"),
    ("rd-gpu-unschedulable", "unschedulable", "Unschedulable", "component_unschedulable"),
    ("rd-child-oom-killed", "oom_killed", "OOMKilled", "component_oom_killed"),
    ("rd-exits-0", "restart_loop", "Completed", "component_restart_looping"),
    ("rd-oom-killed-137", "crash_loop", 137, "component_crash_looping"),
]


@pytest.mark.parametrize("namespace,diagnosis,reason,graph_reason", CASES, ids=[c[0] for c in CASES])
def test_each_real_diagnosis_replays_with_the_recording_runs_graces_and_recovers(
    namespace: str, diagnosis: str, reason: str | int, graph_reason: str
) -> None:
    assert verdicts(replay(*SHORT), namespace) == [
        ("component", diagnosis, reason),
        ("graph", graph_reason, None),
        ("component", None, None),  # recovered, after the fix
        ("graph", None, None),
    ]


def test_the_real_findings_keep_their_words() -> None:
    lines = {line["namespace"]: line for line in replay(*SHORT) if line["kind"] == "component" and line["pod"]}
    assert "Insufficient nvidia.com/gpu" in lines["rd-gpu-unschedulable"]["detail"]
    assert "worker-token" in lines["rd-missing-secret-key"]["detail"]
    oom = lines["rd-child-oom-killed"]
    assert (oom["exit_code"], oom["memory_limit"], oom["restarts"]) == (0, "16Mi", 2)
    assert "OOM-killed (memory limit 16Mi, exit code 0)" in oom["message"]
    assert lines["rd-oom-killed-137"]["message"].endswith("after exit code 137 (OOMKilled, memory limit 16Mi)")
    assert "(restartPolicy Always restarts it forever)" in lines["rd-exits-0"]["message"]


def test_with_the_default_graces_only_the_diagnoses_without_one_are_made() -> None:
    """The missing Secret and the GPU request were fixed about 20 s in, within their default graces (2 and 15
    minutes): never a diagnosis then; ErrImageNeverPull and the restart-based ones have no grace."""
    lines = replay()
    assert {line["namespace"] for line in lines} == {
        "rd-image-never-pulled",
        "rd-child-oom-killed",
        "rd-exits-0",
        "rd-oom-killed-137",
    }
    assert verdicts(lines, "rd-image-never-pulled")[0] == ("component", "image_pull_failing", "ErrImageNeverPull")
