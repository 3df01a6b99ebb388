"""The crash-loop rule, clause by clause, each with its negation."""

from __future__ import annotations

from typing import Any

import pytest
from builders import container, pod, typed_pod

from pipeline.crashloop import crash_loop
from pipeline.findings import Finding


def check(raw: dict[str, Any]) -> Finding | None:
    return crash_loop(typed_pod(raw))


CASES: list[tuple[str, dict[str, Any], tuple[str, int, int] | None]] = [
    ("two restarts, waiting after exit 1", pod(containers=[container(restarts=2)]), ("main", 2, 1)),
    ("one restart is not yet a loop", pod(containers=[container(restarts=1)]), None),
    ("many restarts", pod(containers=[container(restarts=17, exit_code=2)]), ("main", 17, 2)),
    ("Ready Pod", pod(containers=[container(restarts=5)], ready=True), None),
    ("phase Succeeded", pod(containers=[container(restarts=5)], phase="Succeeded"), None),
    ("phase Failed", pod(containers=[container(restarts=5)], phase="Failed"), None),
    ("phase Pending counts", pod(containers=[container(restarts=2)], phase="Pending"), ("main", 2, 1)),
    ("being deleted", pod(containers=[container(restarts=5)], deleting=True), None),
    ("running again after restarts", pod(containers=[container(restarts=5, state="running", last_exit=1)]), None),
    (
        "terminated now, non-zero",
        pod(containers=[container(restarts=2, state="terminated", exit_code=3)]),
        ("main", 2, 3),
    ),
    (
        "terminated now with 0: its own exit decides, not the last one",
        pod(containers=[container(restarts=2, state="terminated", exit_code=0, last_exit=1)]),
        None,
    ),
    ("waiting after exit 0", pod(containers=[container(restarts=4, exit_code=0)]), None),
    ("waiting with no termination recorded", pod(containers=[container(restarts=3, exit_code=None)]), None),
    ("OOMKilled 137", pod(containers=[container(restarts=2, exit_code=137, reason="OOMKilled")]), ("main", 2, 137)),
    (
        "init container loop",
        pod(
            containers=[container(restarts=0, exit_code=None)],
            init=[container("init-model", restarts=2)],
            phase="Pending",
        ),
        ("init-model", 2, 1),
    ),
    (
        "init container with one restart",
        pod(containers=[container(restarts=0, exit_code=None)], init=[container("init-model", restarts=1)]),
        None,
    ),
    (
        "second of several containers",
        pod(containers=[container("sidecar", state="running"), container("main", restarts=3, exit_code=9)]),
        ("main", 3, 9),
    ),
    (
        "init containers are checked first",
        pod(containers=[container("main", restarts=3)], init=[container("init", restarts=2, exit_code=4)]),
        ("init", 2, 4),
    ),
    ("no container statuses yet", pod(containers=[]), None),
]


@pytest.mark.parametrize("raw,expected", [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_rule(raw: dict[str, Any], expected: tuple[str, int, int] | None) -> None:
    finding = check(raw)
    if expected is None:
        assert finding is None
    else:
        assert finding is not None
        assert (finding.container, finding.restarts, finding.exit_code) == expected
        assert finding.pod == raw["metadata"]["name"]


def test_finding_message_names_pod_container_restarts_and_exit_code() -> None:
    finding = check(pod("w-1", containers=[container(restarts=3, exit_code=137, reason="OOMKilled")]))
    assert finding is not None
    assert finding.describe() == (
        "container main of Pod w-1 restarted 3 times and is down after exit code 137 (OOMKilled)"
    )
