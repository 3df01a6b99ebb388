"""The live commands as data: what each one watches, which sinks it runs, and what it waits for.

`run`, `tail`, `record`, `wait` and `get` share one wiring (crashwatch.live), which reads the command's
`CommandSpec` and never its name: a new live command is one more entry here, not a new branch there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Command = Literal["run", "tail", "record", "wait", "get"]


@dataclass(frozen=True)
class CommandSpec:
    name: Command
    # without the Dynamo CRDs the command has nothing to do, and says what is missing (else it watches
    # Pods and Deployments only)
    needs_dynamo: str | None = None
    prints_changes: bool = True  # verdict changes to stdout (record: not when the log goes to stdout)
    writes_status: bool = False  # the status patcher and, with --events, Kubernetes Events
    leads: bool = False  # --leader-elect: only the Lease holder writes
    decides_at_sync: bool = False  # statuses or readiness are decided once every watch has listed
    judge: Literal["wait", "get"] | None = None  # a sink that decides the exit code, and stops the watches
    reads_logs: bool = False  # --log-lines: the crashed container's last lines, from the kubelet
    # --read-causes: each new crash's output read from the kubelet (stream.sources.crash_output), for the
    # core to name why it crashed and fail a graph at the first crash when the cause is certain
    explains: bool = False
    # --admission-address: the status admission webhook, answered from the pipeline's read side
    # (crashwatch.stages.PipelineReads) by the replica that writes status
    admits: bool = False


COMMANDS: dict[Command, CommandSpec] = {
    "run": CommandSpec(
        "run",
        needs_dynamo="no status to write",
        writes_status=True,
        leads=True,
        decides_at_sync=True,
        admits=True,
        explains=True,
    ),
    "tail": CommandSpec("tail", reads_logs=True, explains=True),
    "record": CommandSpec("record", explains=True),  # the outputs read are recorded, for replay to read
    "wait": CommandSpec(
        "wait",
        needs_dynamo="no graph",
        prints_changes=False,
        decides_at_sync=True,
        judge="wait",
        reads_logs=True,
        explains=True,
    ),
    "get": CommandSpec(
        "get",
        needs_dynamo="no graph",
        prints_changes=False,
        decides_at_sync=True,
        judge="get",
        reads_logs=True,
        explains=True,
    ),
}
