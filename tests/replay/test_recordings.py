"""Recordings of real runs as regression logs: `crashwatch record` of a scenario on the real node beside the
real Dynamo operator (tests/e2e/test_realnode_operator.py), replayed here without either.

realnode-operator-crash-loop.jsonl.gz: a worker that serves the operator's probes for 11 s and exits 1,
through the kubelet's backoffs to its third restart, then the fix (a new spec: the operator's new DCD, its
Deployment and Pod, the old ones deleted). Every watch event is kept, in order, with its time; trimmed of
what no diagnosis reads (managedFields; the Pods', Deployments' and Dynamo objects' pod templates cut to
the containers' names and images) and gzipped. The live run's component verdicts were these too (the e2e
test compares its own recording's replay with its run).

realnode-lws-recreation-loop.jsonl.gz: a multinode worker on the real LeaderWorkerSet controller (a group of
a leader and a worker; the worker exits 1 after 2 s in every incarnation), which LWS recreates at each
first restart, until the DGD's restart gives the Pod template a restart time, which the worker reads and
stays up with: LWS rolls the new template out (the looping group's leader deleted, then its worker) and the
rolled-out group is Ready 14.6 s after the fix. Trimmed the same way (the e2e test checks that the trimmed
copy replays to its run's verdicts, and to the untrimmed record's patches). The expected outputs are what
the live run said but for its false recovery (see below), which crashwatch no longer makes.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from cli import run

RECORDINGS = Path(__file__).resolve().parent / "recordings"
LOGS = sorted(RECORDINGS.glob("*.jsonl.gz"))  # each with <name>.expected.jsonl and <name>.expected.patches.jsonl
LOG = RECORDINGS / "realnode-operator-crash-loop.jsonl.gz"
FLAGS = ("--recovery-window", "30s")  # as the real-node tier ran them


def expected_output(log: Path, kind: str) -> Path:
    return log.with_name(f"{log.name.removesuffix('.jsonl.gz')}.{kind}")


@pytest.mark.parametrize(
    "flags,expected",
    [(["-o", "json"], "expected.jsonl"), (["--patches"], "expected.patches.jsonl")],
    ids=["json", "patches"],
)
@pytest.mark.parametrize("log", LOGS, ids=[log.name.removesuffix(".jsonl.gz") for log in LOGS])
def test_each_recording_replays_to_its_expected_output(log: Path, flags: list[str], expected: str) -> None:
    result = run("replay", "--summary", "none", *flags, *FLAGS, str(log))
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    assert result.stdout.decode() == expected_output(log, expected).read_text()


def test_every_recording_has_its_expected_outputs() -> None:
    assert len(LOGS) >= 2
    for log in LOGS:
        for expected in ("expected.jsonl", "expected.patches.jsonl"):
            assert expected_output(log, expected).is_file(), expected_output(log, expected)


def replayed(log: Path) -> list[dict[str, Any]]:
    result = run("replay", "-o", "json", *FLAGS, str(log))
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.decode().splitlines()]


def test_the_recording_reads_as_a_crash_loop_held_through_a_restart_then_cleared_by_the_fix() -> None:
    lines = replayed(LOG)
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


LWS_LOG = RECORDINGS / "realnode-lws-recreation-loop.jsonl.gz"


def test_the_lws_recording_reads_as_a_recreation_loop_until_the_spec_change_that_replaces_it() -> None:
    """The group loop is reported at the second recreation after a failure and held until the DGD's restart
    (a spec change that replaces the worker, 08:18:17.971), withdrawn then in the words of a replacement,
    and never raised again: the old group's last crash is of the old spec."""
    components = [line for line in replayed(LWS_LOG) if line["kind"] == "component"]
    assert components[0]["lws"] == "llm-vllmdecodeworker-deb29ea9-0" and components[0]["recreations"] == 2
    assert [(c["time"], c["crash_looping"]) for c in components] == [
        ("2026-12-05T08:18:17.463Z", True),
        ("2026-12-05T08:18:17.971Z", False),
    ]
    assert components[-1]["message"] == "its crash-looping Pods are of the spec before a change that replaces them"


def test_without_the_dgd_the_lws_loop_is_held_until_the_rolled_out_group_is_ready(tmp_path: Path) -> None:
    """The same events without the DGD (a watcher that never saw the change): the loop holds through the
    rollout until the rolled-out group is Ready (08:18:32.384). When the rollout deleted the looping group's
    leader (08:18:18.249) its worker, up again and Ready after its last crash, was the group's only Pod
    left: a group without its leader is no Ready group, so there is no false recovery in between (there
    was one, 08:18:18.464 to 08:18:21.376, before that rule)."""
    log = tmp_path / "without-dgd.jsonl"
    with gzip.open(LWS_LOG, "rt") as recorded:
        kept = [line for line in recorded if json.loads(line)["object"]["kind"] != "DynamoGraphDeployment"]
    log.write_text("".join(kept))
    components = [line for line in replayed(log) if line["kind"] == "component"]
    assert [(c["time"], c["crash_looping"]) for c in components] == [
        ("2026-12-05T08:18:17.463Z", True),
        ("2026-12-05T08:18:21.457Z", True),  # the third recreation: the same loop, counted on
        ("2026-12-05T08:18:32.384Z", False),
    ]
