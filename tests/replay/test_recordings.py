"""Recordings of real runs as regression logs: `crashwatch record` of a scenario on the real node beside the
real Dynamo operator (tests/e2e/test_realnode_operator.py), replayed here without either.

realnode-operator-crash-loop.jsonl.gz: a worker that serves the operator's probes for 11 s and exits 1,
through the kubelet's backoffs to its third restart, then the fix (a new spec: the operator's new DCD, its
Deployment and Pod, the old ones deleted). Every watch event is kept, in order, with its time; trimmed of
what no diagnosis reads (managedFields; the Pods', Deployments' and Dynamo objects' pod templates cut to
the containers' names and images) and gzipped. The live run's component verdicts were these too (the e2e
test compares its own recording's replay with its run).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli import run

RECORDINGS = Path(__file__).resolve().parent / "recordings"
LOG = RECORDINGS / "realnode-operator-crash-loop.jsonl.gz"
FLAGS = ("--recovery-window", "30s")  # as the real-node tier ran it


@pytest.mark.parametrize(
    "flags,expected",
    [(["-o", "json"], "expected.jsonl"), (["--patches"], "expected.patches.jsonl")],
    ids=["json", "patches"],
)
def test_the_recording_replays_to_its_expected_output(flags: list[str], expected: str) -> None:
    result = run("replay", *flags, *FLAGS, str(LOG))
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    assert result.stdout.decode() == (RECORDINGS / f"realnode-operator-crash-loop.{expected}").read_text()


def test_the_recording_reads_as_a_crash_loop_held_through_a_restart_then_cleared_by_the_fix() -> None:
    result = run("replay", "-o", "json", *FLAGS, str(LOG))
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.decode().splitlines()]
    components = [line for line in lines if line["kind"] == "component"]
    graphs = [line for line in lines if line["kind"] == "graph"]
    # restart 2 makes the loop; restart 3 (the container Ready for a moment between) only updates it
    assert [(c["crash_looping"], c["restarts"], c["exit_code"]) for c in components] == [
        (True, 2, 1),
        (True, 3, 1),
        (False, None, None),
    ]
    # the fix comes with a new DCD (the operator names a worker's DCD after its spec's hash)
    assert components[0]["dcd"] == components[1]["dcd"] != components[2]["dcd"]
    assert [g["failed"] for g in graphs] == [True, True, False]
