"""The crashed container's last lines of output, for `tail`, `wait` and `get -o wide`: the first thing a
person reads of a crash loop, without finding the Pod and running `kubectl logs --previous` by hand.

They are read with the caller's own credentials (the kubeconfig the command runs with), so RBAC decides
who sees logs: a caller without `get` on `pods/log` is told so once, and the command goes on without them.
Which run crashed depends on where the container is: while it runs again, kubelet serves the crashed run
as `log?previous=true`; during a backoff the crashed run is the container's current one, served as the
plain log. So the Pod is read first, and a `previous` that kubelet no longer has falls back to the plain log
(the reading itself is stream.sources.container_logs', shared with the reader of causes).

Bounded twice: kubelet is asked for the last N lines and at most a few KiB (`tailLines`, `limitBytes`),
and what comes back is cut again to those bounds, each line to one printable line (control characters
and escape sequences escaped, sinks.text), so a container's output can neither flood nor drive a
terminal. Logs never go into status; the watcher (`run`) reads none. Nothing here decides a diagnosis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import BinaryIO, Literal

import msgspec
from anyio.abc import ObjectReceiveStream

from pipeline.findings import OOM_KILLED, RESTART_LOOP, Finding
from pipeline.outputs import ComponentChange, Output
from sinks.text import printable
from stream.sources.client import ApiError
from stream.sources.container_logs import LogClient, container_status, get_pod, read_tail

DEFAULT_LINES = 10  # --log-lines
MAX_BYTES = 4096  # of a container's output, asked of kubelet and kept
LINE_LIMIT = 300  # characters of one line shown

class LastLines(msgspec.Struct, frozen=True):
    """A container's last lines: which run they are of (`previous`: the run before the current one)."""

    namespace: str
    pod: str
    container: str
    previous: bool
    lines: tuple[str, ...]


def crashed(finding: Finding | None) -> bool:
    """Whether the finding is of a container that ran and stopped (a crash loop, a group's last failure,
    an exit-0 restart loop, an OOM kill), whose output says why; not an image pull, a config error or an
    unschedulable Pod, which never ran."""
    if finding is None or not finding.container or not finding.pod:
        return False
    return finding.diagnosis in ("", RESTART_LOOP, OOM_KILLED)


def bounded(data: bytes, lines: int, limit: int = MAX_BYTES) -> tuple[str, ...]:
    """The last `lines` lines of `data`, within its last `limit` bytes (a line cut at that edge is left
    out), each made printable on one line and cut to LINE_LIMIT characters."""
    if lines <= 0 or not data:
        return ()
    if len(data) > limit:
        data = data[-limit:]
        newline = data.find(b"\n")
        data = data[newline + 1 :] if newline >= 0 else data
    text = data.decode("utf-8", errors="replace")
    parts = text.split("\n")  # a container's lines end in \n alone: a \u2028 in one is shown, not split on
    if parts and not parts[-1]:
        parts.pop()
    return tuple(printable(line.removesuffix("\r"), LINE_LIMIT) for line in parts[-lines:])


class LogReader:
    def __init__(
        self,
        client: LogClient,
        lines: int = DEFAULT_LINES,
        limit: int = MAX_BYTES,
        timeout: float = 10.0,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.lines = lines
        self.limit = limit
        self.timeout = timeout
        self.log = log
        self._refused = False  # said once: the caller may not read logs

    async def read(self, namespace: str, pod: str, container: str) -> LastLines | None:
        """The last lines of the container's crashed run, or None when they cannot be had."""
        if self.lines <= 0 or self._refused:
            return None
        client, lines, limit, timeout = self.client, self.lines, self.limit, self.timeout
        try:
            found = await get_pod(client, namespace, pod, timeout)
            status = container_status(found, container) if found is not None else None
            # running again now: its crashed run is kubelet's previous one; else the plain log is
            previous = status is not None and status.state.running is not None
            try:
                tail = await read_tail(client, namespace, pod, container, previous, lines, limit, timeout)
            except ApiError as exc:
                if not previous or exc.status != 400:
                    raise
                previous = False  # kubelet keeps no previous run (the container was recreated): the current one
                tail = await read_tail(client, namespace, pod, container, False, lines, limit, timeout)
        except ApiError as exc:
            if exc.status in (401, 403):
                self._refused = True
                if self.log is not None:
                    self.log(f"cannot read container logs ({exc}); going on without them")
            return None
        return LastLines(namespace, pod, container, previous, bounded(tail.data, lines, limit))


def text_block(last: LastLines) -> bytes:
    """The lines under a text line, indented and marked, so a reader (or a grep) tells them apart."""
    which = "previous run" if last.previous else "last run"
    head = f"  last lines of container {last.container} of Pod {last.pod} ({which}):"
    if not last.lines:
        head += " (none)"
    body = "".join(f"  | {line}\n" for line in last.lines)
    return (printable(head) + "\n" + body).encode()


class LogsLine(msgspec.Struct):
    """`tail -o json` (and `-o yaml`): the lines after a component's line, keys in this order."""

    kind: Literal["logs"]
    time: str | None
    namespace: str
    graph: str
    component: str
    pod: str
    container: str
    previous: bool
    lines: tuple[str, ...]


_encode = msgspec.json.Encoder().encode


def logs_line(change: ComponentChange, last: LastLines, fmt: Literal["json", "yaml"] = "json") -> bytes:
    line = LogsLine(
        "logs",
        change.time,
        change.namespace,
        change.graph,
        change.component,
        last.pod,
        last.container,
        last.previous,
        last.lines,
    )
    return _encode(line) + b"\n" if fmt == "json" else b"---\n" + msgspec.yaml.encode(line)


async def print_lines_with_logs(
    receive: ObjectReceiveStream[list[Output]],
    out: BinaryIO,
    render: Callable[[Output], bytes | None],
    reader: LogReader,
    fmt: Literal["text", "json", "yaml"],
) -> None:
    """`tail`'s printer: each verdict line as sinks.stdout prints it, and under a component's new crash
    its container's last lines (read before the next batch is taken: a crash loop is slow, and the
    bounded stream in front holds the pipeline back meanwhile rather than growing)."""
    async with receive:
        async for batch in receive:
            chunk = b""
            for item in batch:
                line = render(item)
                if line is None:
                    continue
                chunk += line
                if type(item) is ComponentChange and crashed(item.finding):
                    finding = item.finding
                    assert finding is not None
                    last = await reader.read(item.namespace, finding.pod, finding.container)
                    if last is not None:
                        chunk += text_block(last) if fmt == "text" else logs_line(item, last, fmt)
            if chunk:
                out.write(chunk)
                out.flush()
