"""A fix shipped as a spec change, replayed from a log (JSON lines, and the same events as YAML): the
old Pod's crashes stop counting at the change, while it crash-loops on its way out, and the graph is
never failed again; the same log with the spec change left out keeps it failed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from builders import container, dgd, labels, pod
from cli import run


def at(second: int) -> str:
    return f"2026-11-20T10:{second // 60:02d}:{second % 60:02d}Z"


def graph(command: str, generation: int) -> dict[str, Any]:
    worker = {
        "name": "VllmWorker",
        "type": "worker",
        "replicas": 1,
        "podTemplate": {"spec": {"containers": [{"name": "main", "command": [command]}]}},
    }
    return dgd("llm", "dynamo", generation=generation, spec={"components": [worker]})


def worker(name: str, restarts: int, ready: bool = False) -> dict[str, Any]:
    state = "running" if ready else "terminated"
    return pod(
        name,
        "dynamo",
        pod_labels=labels("llm", "VllmWorker"),
        containers=[container(state=state, restarts=restarts, exit_code=None if ready else 1)],
        ready=ready,
    )


def log(with_fix: bool = True) -> list[dict[str, Any]]:
    steps: list[tuple[int, str, dict[str, Any]]] = [
        (0, "ADDED", graph("serve --bad-flag", 1)),
        (40, "ADDED", worker("llm-vllmworker-old", 2)),  # crash-looping
        (60, "MODIFIED", graph("serve", 2)),  # the fix
        (80, "MODIFIED", worker("llm-vllmworker-old", 3)),  # crashes on, on its way out
        (90, "ADDED", worker("llm-vllmworker-new", 0, ready=True)),
        (95, "DELETED", worker("llm-vllmworker-old", 3)),
        (200, "MODIFIED", worker("llm-vllmworker-new", 0, ready=True)),
    ]
    return [
        {"type": kind, "object": obj, "time": at(second)}
        for second, kind, obj in steps
        if with_fix or obj["kind"] != "DynamoGraphDeployment" or kind == "ADDED"
    ]


def said(path: Path) -> list[dict[str, Any]]:
    result = run("replay", "-o", "json", str(path))
    assert result.returncode == 0, result.stderr.decode()
    return [json.loads(line) for line in result.stdout.decode().splitlines()]


def test_the_fixs_spec_change_ends_the_old_pods_crash_loop_in_replay_as_live(tmp_path: Path) -> None:
    jsonl, yamled = tmp_path / "fix.jsonl", tmp_path / "fix.yaml"
    jsonl.write_text("".join(json.dumps(event) + "\n" for event in log()))
    yamled.write_text(yaml.safe_dump_all(log()))
    verdicts = said(jsonl)
    assert said(yamled) == verdicts
    graphs = [(v["time"], v["failed"]) for v in verdicts if v["kind"] == "graph"]
    assert graphs == [(at(40), True), (at(60), False)]
    replaced = [v for v in verdicts if v["kind"] == "component" and v["time"] == at(60)]
    assert replaced[0]["crash_looping"] is False
    assert "a change that replaces them" in replaced[0]["message"]


def test_without_the_spec_change_the_old_pod_keeps_the_graph_failed_until_it_goes(tmp_path: Path) -> None:
    path = tmp_path / "nofix.jsonl"
    path.write_text("".join(json.dumps(event) + "\n" for event in log(with_fix=False)))
    graphs = [(v["time"], v["failed"]) for v in said(path) if v["kind"] == "graph"]
    assert graphs == [(at(40), True), (at(80), True), (at(95), False)]  # its crash at 80 counted
