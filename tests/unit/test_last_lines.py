"""The crashed container's last lines (sinks.crashed_output): which run kubelet is asked for, how they are bounded
and escaped, what a caller without rights gets, and where tail, wait and get -o wide put them. The API
server is a stub that answers as kubelet (through the API server's proxy) does."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import msgspec
import pytest
from builders import container, crashing, dgd, event, pod

from pipeline.outputs import GraphReadiness, Output
from pipeline.pipeline import Pipeline
from sinks.crashed_output import LastLines, LogReader, bounded, crashed, print_lines_with_logs
from sinks.lines import text_line
from sinks.stdout import change_printer
from sinks.table import GraphTable
from sinks.wait import GraphWaiter
from stream.sources.client import ApiError, Response

T0 = "2026-11-20T10:00:00Z"


class Kubelet:
    """Answers GET pod and GET pod/log: `current` is the container's output now (its crashed run during a
    backoff), `previous` the run before (None: kubelet has none, 400 as the real one says)."""

    def __init__(self, running: bool, current: bytes, previous: bytes | None = None, status: int = 200) -> None:
        self.running = running
        self.current = current
        self.previous = previous
        self.status = status
        self.asked: list[tuple[str, dict[str, str]]] = []

    async def request(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        timeout: float = 30.0,
    ) -> Response:
        self.asked.append((path, dict(query or {})))
        if self.status != 200:
            raise ApiError(self.status, "Forbidden", 'pods "p-0" is forbidden: cannot get resource "pods/log"')
        if not path.endswith("/log"):
            state = "running" if self.running else "waiting"
            obj = pod(containers=[container(state=state, restarts=2, last_exit=1)])
            return Response(200, json.dumps(obj).encode())
        if (query or {}).get("previous") == "true":
            if self.previous is None:
                raise ApiError(400, "BadRequest", 'previous terminated container "main" in pod "p-0" not found')
            return Response(200, self.previous)
        return Response(200, self.current)

    @contextlib.asynccontextmanager
    async def stream(self, path: str, query: Mapping[str, str], connect_timeout: float = 30.0) -> AsyncIterator[Body]:
        yield Body((await self.request("GET", path, query)).body)


class Body:
    """A body read as it comes, as aiohttp's StreamReader reads it."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def read(self, n: int = -1) -> bytes:
        n = len(self.data) if n < 0 else n
        chunk, self.data = self.data[:n], self.data[n:]
        return chunk


def read(kubelet: Kubelet, lines: int = 3) -> LastLines | None:
    async def go() -> LastLines | None:
        return await LogReader(kubelet, lines).read("ns", "p-0", "main")

    return anyio.run(go, backend="asyncio")


def test_while_the_container_runs_again_its_crashed_run_is_the_previous_one() -> None:
    kubelet = Kubelet(running=True, current=b"starting\n", previous=b"a\nb\nTraceback\nKeyError: 'x'\n")
    last = read(kubelet)
    assert last == LastLines("ns", "p-0", "main", True, ("b", "Traceback", "KeyError: 'x'"))
    path, query = kubelet.asked[-1]
    assert path == "/api/v1/namespaces/ns/pods/p-0/log"
    assert query == {"container": "main", "tailLines": "3", "limitBytes": "4096", "previous": "true"}


def test_during_a_backoff_its_crashed_run_is_the_plain_log() -> None:
    kubelet = Kubelet(running=False, current=b"loading\nOOM\n", previous=b"an older run\n")
    last = read(kubelet)
    assert last is not None and (last.previous, last.lines) == (False, ("loading", "OOM"))
    assert "previous" not in kubelet.asked[-1][1]


def test_a_previous_run_kubelet_no_longer_has_falls_back_to_the_current_one() -> None:
    last = read(Kubelet(running=True, current=b"only run\n", previous=None))
    assert last is not None and (last.previous, last.lines) == (False, ("only run",))


def test_a_caller_without_rights_is_told_once_and_goes_on_without_logs() -> None:
    said: list[str] = []
    kubelet = Kubelet(running=False, current=b"", status=403)

    async def go() -> list[LastLines | None]:
        reader = LogReader(kubelet, 3, log=said.append)
        return [await reader.read("ns", "p-0", "main"), await reader.read("ns", "p-1", "main")]

    assert anyio.run(go, backend="asyncio") == [None, None]
    assert len(said) == 1 and "cannot read container logs" in said[0]
    assert len(kubelet.asked) == 1  # not asked again


def test_lines_are_bounded_in_count_and_bytes_and_escaped() -> None:
    assert bounded(b"1\n2\n3\n4\n", 2) == ("3", "4")
    # the byte bound cuts at the start, and the line it cuts is left out
    assert bounded(b"x" * 5000 + b"\nlast\n", 10, limit=100) == ("last",)
    assert bounded(b"\x1b[31mred\x1b[0m\tok\r\n", 5) == ("\\x1b[31mred\\x1b[0m\\tok",)
    assert bounded("caf\u00e9 \u2028x".encode() + b"\xff\n", 5) == ("caf\u00e9 \\u2028x\ufffd",)
    (long,) = bounded(b"y" * 1000 + b"\n", 5)
    assert long.startswith("y" * 300) and long.endswith("(700 more characters)")
    assert bounded(b"", 5) == () and bounded(b"x\n", 0) == ()


def test_only_containers_that_ran_have_last_lines() -> None:
    pipeline = Pipeline()
    out = pipeline.feed([event("ADDED", crashing(restarts=2), T0)])
    finding = pipeline.aggregator.verdicts()[("ns", "g", "worker")]
    assert crashed(finding) and out
    pulling = pod(containers=[container(state="waiting", exit_code=None, waiting="ErrImageNeverPull")])
    pipeline.feed([event("MODIFIED", pulling, T0)])
    assert not crashed(pipeline.aggregator.verdicts()[("ns", "g", "worker")])


@pytest.mark.anyio
async def test_tail_prints_the_last_lines_under_each_new_crash() -> None:
    pipeline = Pipeline()
    outputs = pipeline.feed([event("ADDED", crashing(restarts=2), T0)])
    kubelet = Kubelet(running=False, current=b"boom\n")
    for fmt in ("text", "json"):
        send, receive = anyio.create_memory_object_stream[list[Output]](4)
        out = io.BytesIO()
        async with anyio.create_task_group() as tg:
            printer = change_printer(fmt)
            tg.start_soon(print_lines_with_logs, receive, out, printer, LogReader(kubelet, 5), fmt)
            async with send:
                await send.send(outputs)
        lines = out.getvalue().decode().splitlines()
        if fmt == "text":
            assert lines[0] == text_line(outputs[0]).decode().rstrip("\n")  # type: ignore[arg-type]
            assert lines[1:3] == ["  last lines of container main of Pod p-0 (last run):", "  | boom"]
            assert "FAILED" in lines[3]
        else:
            logs = json.loads(lines[1])
            assert logs == {
                "kind": "logs",
                "time": T0,
                "namespace": "ns",
                "graph": "g",
                "component": "worker",
                "pod": "p-0",
                "container": "main",
                "previous": False,
                "lines": ["boom"],
            }


def _readiness() -> list[Output]:
    pipeline = Pipeline(synced=False, readiness=True)
    pipeline.feed([event("ADDED", dgd(), T0), event("ADDED", crashing(restarts=2), T0)])
    return pipeline.sync(T0)


@pytest.mark.anyio
async def test_wait_shows_the_last_lines_on_failure_as_text_and_json() -> None:
    outputs = _readiness()
    assert any(isinstance(o, GraphReadiness) and o.verdict == "failed" for o in outputs)
    for fmt in ("text", "json"):
        out = io.BytesIO()
        kubelet = Kubelet(running=True, current=b"", previous=b"ValueError: no model\n")
        waiter = GraphWaiter([("ns", "g")], fmt, out, lambda _: None, lambda: None, logs=LogReader(kubelet, 5))
        send, receive = anyio.create_memory_object_stream[list[Output]](4)
        async with send:
            await send.send(outputs)
        await waiter.run(receive)
        assert waiter.result == "failed"
        text = out.getvalue().decode()
        if fmt == "text":
            assert text.splitlines()[1:] == [
                "  last lines of container main of Pod p-0 (previous run):",
                "  | ValueError: no model",
            ]
        else:
            document: dict[str, Any] = msgspec.json.decode(text)
            assert document["last_lines"] == [
                {
                    "namespace": "ns",
                    "pod": "p-0",
                    "container": "main",
                    "previous": True,
                    "lines": ["ValueError: no model"],
                }
            ]


@pytest.mark.anyio
async def test_get_wide_shows_them_under_the_table_and_the_plain_table_does_not() -> None:
    outputs = _readiness()
    for view in ("wide", "table"):
        out = io.BytesIO()
        kubelet = Kubelet(running=False, current=b"exit 1\n")
        table = GraphTable(None, view, False, out, lambda _: None, lambda: None, logs=LogReader(kubelet, 5))
        send, receive = anyio.create_memory_object_stream[list[Output]](4)
        async with send:
            await send.send(outputs)
        await table.run(receive)
        text = out.getvalue().decode()
        assert ("  | exit 1" in text) == (view == "wide")


class EventsApi(Kubelet):
    """The kubelet stub, which also takes Event writes (POST/PATCH) and keeps their bodies."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.events: list[dict[str, Any]] = []

    async def request(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        timeout: float = 30.0,
    ) -> Response:
        if "/events" in path:
            self.events.append(json.loads(body or b"{}"))
            return Response(201, b"{}")
        return await super().request(method, path, query, body, content_type, timeout)


async def recorded(api: EventsApi, logs: int) -> list[dict[str, Any]]:
    from builders import dcd

    from sinks.events import EventRecorder, EventSettings

    pipeline = Pipeline(synced=False)
    pipeline.feed([event("ADDED", dgd(), T0), event("ADDED", dcd("g-worker"), T0)])
    pipeline.sync(T0)
    outputs = pipeline.feed([event("ADDED", crashing(restarts=2), T0)])
    recorder = EventRecorder(api, EventSettings(logs=logs))  # type: ignore[arg-type]
    send, receive = anyio.create_memory_object_stream[list[Output]](4)
    async with anyio.create_task_group() as tg:
        tg.start_soon(recorder.run, receive)
        async with send:
            await send.send(outputs)
            with anyio.fail_after(10):
                while len(api.events) < 2:
                    await anyio.sleep(0.01)
    return api.events


@pytest.mark.anyio
async def test_event_logs_add_the_last_lines_to_the_dcds_warning_and_only_with_the_option() -> None:
    finding = "container main of Pod p-0 restarted 2 times and is down after exit code 1"
    with_logs = await recorded(EventsApi(running=False, current=b"\x1b[1mloading\nRuntimeError: CUDA\n"), 10)
    notes = {e["regarding"]["kind"]: e["note"] for e in with_logs}
    assert notes["DynamoComponentDeployment"] == (
        f"{finding}\nlast lines of container main (last run):\n\\x1b[1mloading\nRuntimeError: CUDA"
    )
    assert notes["DynamoGraphDeployment"] == f"Components crash-looping: worker: {finding}"  # no logs there
    api = EventsApi(running=False, current=b"secret\n")
    without = await recorded(api, 0)
    assert {e["note"] for e in without} == {finding, f"Components crash-looping: worker: {finding}"}
    assert not any("/log" in path for path, _ in api.asked)  # not even asked for
