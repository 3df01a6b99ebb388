"""A crashed run's output as a record of a log: what `crashwatch record` writes for each `CrashOutput` it fed
the pipeline, and what every reader of logs turns back into one.

The record stands among the watch events, in the order the live pipeline was fed, shaped like one so that
a log stays one kind of line: `{"type": "CRASH_OUTPUT", "object": {"namespace", "pod", "uid", "container",
"finishedAt", "text", "restarts", "exitCode", "reason"}, "time"}` (how the run ended: the container's
restart count, its exit code and the kubelet's reason; 0 and "" where a record lacks them). Its `type` is
no watch event type, so no other reader of watch events takes it for an object. Decoding it is left to
stream.model.decode, which says where a bad one stands.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from stream.model.events import CrashOutput

CRASH_OUTPUT = "CRASH_OUTPUT"


class _Output(msgspec.Struct, rename="camel"):
    namespace: str
    pod: str
    uid: str
    container: str
    finished_at: str
    text: str
    restarts: int = 0
    exit_code: int = 0
    reason: str = ""


class _Record(msgspec.Struct):
    type: Literal["CRASH_OUTPUT"]
    object: _Output
    time: str | None = None


_encode = msgspec.json.Encoder().encode


def encode_crash_output(output: CrashOutput) -> bytes:
    """The record of a crashed run's output, on one line (JSON escapes every newline of the text)."""
    obj = _Output(
        output.namespace,
        output.pod,
        output.uid,
        output.container,
        output.finished_at,
        output.text,
        output.restarts,
        output.exit_code,
        output.reason,
    )
    return _encode(_Record("CRASH_OUTPUT", obj, output.time))


def crash_output_of(value: dict[str, Any]) -> CrashOutput:
    """A parsed CRASH_OUTPUT record as the event it stands for. Raises ValueError saying what is wrong."""
    try:
        record = msgspec.convert(value, _Record)
    except msgspec.ValidationError as exc:
        raise ValueError(f"wrong field: {exc}") from None
    obj = record.object
    for name, field in (
        ("namespace", obj.namespace),
        ("pod", obj.pod),
        ("uid", obj.uid),
        ("container", obj.container),
    ):
        if not field:
            raise ValueError(f"{CRASH_OUTPUT} without object.{name}")
    return CrashOutput(
        obj.namespace,
        obj.pod,
        obj.uid,
        obj.container,
        obj.finished_at,
        obj.text,
        record.time,
        obj.restarts,
        obj.exit_code,
        obj.reason,
    )
