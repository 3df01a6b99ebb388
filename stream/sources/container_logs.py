"""A container's output, read from the kubelet through the API server: the I/O shared by the two readers of
a crashed run (sinks.crashed_output's last lines for a person, stream.sources.crash_output's output for
the causes).

Which instance holds a run: kubelet serves a container's current instance as the plain log and the one
before it (the status's `lastState`) as `previous=true`; during a backoff, with no instance running, the
plain log is the last terminated one too. So the Pod is read first (`get_pod`), and its container status
says where a run is (`instance`).

Bounded twice. kubelet is asked for the last `lines` lines within `limit` bytes, but `limitBytes` counts
from the first of those lines, so an answer that fills the limit lacks the output's end: it is asked
again for half as many lines as came, up to `TRIES` requests in all (`read_tail` says whether what it
returns reaches the end). The body is read as it comes and never beyond `limit` bytes, whatever the
server sends, and the whole read is bounded in time.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import Protocol

import aiohttp
import anyio
import msgspec

from stream.model.objects import ContainerStatus, Pod
from stream.sources.client import ApiError, Response

TRIES = 3  # log requests for one tail, at most: the first, then twice with fewer lines
_CHUNK = 1 << 16

_read_pod = msgspec.json.Decoder(Pod).decode


class _Placement(msgspec.Struct):
    node_name: str = msgspec.field(default="", name="nodeName")


_read_placement = msgspec.json.Decoder(_Placement).decode


class Body(Protocol):
    """A response body read as it comes (aiohttp's StreamReader)."""

    async def read(self, n: int = -1) -> bytes: ...


class LogClient(Protocol):
    """What of stream.sources.client.KubeClient reading logs needs."""

    async def request(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        timeout: float = 30.0,
    ) -> Response: ...

    def stream(
        self, path: str, query: Mapping[str, str], connect_timeout: float = 30.0
    ) -> AbstractAsyncContextManager[Body]: ...


class Tail(msgspec.Struct, frozen=True):
    """The end of a container's output: `data` its last lines within the bytes asked for; `whole` False when
    even the fewest lines asked for filled them (the output's very end is then not in `data`)."""

    data: bytes
    whole: bool


def pod_path(namespace: str, pod: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{pod}"


async def get_pod(client: LogClient, namespace: str, pod: str, timeout: float) -> Pod | None:
    """The Pod as the API server has it now; None when its answer is no Pod. Raises ApiError (404: gone)."""
    response = await client.request("GET", pod_path(namespace, pod), timeout=timeout)
    try:
        return _read_pod(response.body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def scheduled(pod: Pod) -> bool:
    """Whether a node runs the Pod (`spec.nodeName`): one that no node took has no kubelet and so no output,
    and the API server answers its log with nothing at all, which is no run's output."""
    try:
        return bool(_read_placement(pod.spec).node_name)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False


def container_status(pod: Pod, container: str) -> ContainerStatus | None:
    """The status of the named container, init containers included."""
    for statuses in (pod.status.container_statuses, pod.status.init_container_statuses):
        for status in statuses:
            if status.name == container:
                return status
    return None


def instance(status: ContainerStatus, finished_at: str) -> bool | None:
    """Which log holds the container's run that ended at `finished_at`: False the plain log (the container
    is itself terminated in that run), True `previous` (the run is its last terminated state: a new
    instance runs, or waits in a backoff, after it), None neither (kubelet has moved on)."""
    terminated = status.state.terminated
    if terminated is not None:
        return False if (terminated.finished_at or "") == finished_at else None
    last = status.last_state.terminated
    if last is not None and (last.finished_at or "") == finished_at:
        return True
    return None


async def read_tail(
    client: LogClient,
    namespace: str,
    pod: str,
    container: str,
    previous: bool,
    lines: int,
    limit: int,
    timeout: float,
) -> Tail:
    """The last `lines` lines of one instance's output within `limit` bytes (see the module), read within
    `timeout` seconds in all. Raises ApiError (status 0 for no answer in time or a broken body)."""
    path = pod_path(namespace, pod) + "/log"
    query = {"container": container, "tailLines": str(lines), "limitBytes": str(limit)}
    if previous:
        query["previous"] = "true"
    try:
        with anyio.fail_after(timeout):
            for _ in range(TRIES):
                async with client.stream(path, query, connect_timeout=timeout) as body:
                    data = await _at_most(body, limit)
                if len(data) < limit:
                    return Tail(data, True)
                came = data.count(b"\n")  # whole lines in the limit: half as many should end within it
                fewer = max(1, min(lines, came) // 2) if came else lines // 8
                if fewer < 1 or fewer >= lines:  # one line alone fills the limit
                    break
                lines = fewer
                query["tailLines"] = str(lines)
    except TimeoutError:
        raise ApiError(0, "", f"reading {path}: no whole answer within {timeout:g}s") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise ApiError(0, "", f"reading {path}: {exc or type(exc).__name__}") from None
    return Tail(data, False)


async def _at_most(body: Body, limit: int) -> bytes:
    """The body, or its first `limit` bytes when it is longer (the rest is never read)."""
    parts: list[bytes] = []
    size = 0
    while size < limit:
        chunk = await body.read(min(_CHUNK, limit - size))
        if not chunk:
            break
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts)

