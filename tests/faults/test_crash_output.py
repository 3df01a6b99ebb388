"""The reader of crashed runs' output (stream.sources.crash_output) against the fake API server, which serves
a Pod's log as kubelet does: which instance is read, what is skipped, the bounds, a refusal, the pacing and
a stop. The real client (kubeconfig, kubernetes-asyncio, aiohttp) talks to it, as in a cluster."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from fakeapi import FakeApi, Fault, Request, pod

from stream.model.crash_record import encode_crash_output
from stream.model.events import CrashOutput
from stream.sources.client import KubeClient
from stream.sources.crash_output import CrashOutputReader, ReadSettings, Wanted

pytestmark = pytest.mark.anyio

ENDED = "2026-11-20T10:01:00Z"
EARLIER = "2026-11-20T10:00:30Z"
GATED = b"INFO loading meta-llama/Llama-3.1-8B-Instruct\nOSError: You are trying to access a gated repo.\n"


def worker(name: str = "w-0", *, state: str, ended: str = ENDED, last_ended: str | None = None) -> dict[str, Any]:
    """A worker Pod on a node whose container `main` is `terminated` in the run that ended at `ended`, or
    runs (or waits in a backoff) again after it, that run being its last terminated state (ended at
    `last_ended`, `ended` by default)."""
    if state == "terminated":
        status = {"state": {"terminated": {"exitCode": 1, "finishedAt": ended}}, "restartCount": 0}
        if last_ended is not None:
            status["lastState"] = {"terminated": {"exitCode": 1, "finishedAt": last_ended}}
    else:
        now = {"running": {}} if state == "running" else {"waiting": {"reason": "CrashLoopBackOff"}}
        last = {"terminated": {"exitCode": 1, "finishedAt": last_ended or ended}}
        status = {"state": now, "lastState": last, "restartCount": 1}
    return {**pod(name, phase="Running", containerStatuses=[{"name": "main", **status}]), "spec": {"nodeName": "n"}}


def wanted(name: str = "w-0", ended: str = ENDED) -> Wanted:
    return Wanted("ns", name, f"uid-{name}", "main", ended)


class Outputs:
    """What a reader hands on, and the records it taps, in the order it did."""

    def __init__(self) -> None:
        self.outputs: list[CrashOutput] = []
        self.order: list[str] = []

    async def emit(self, outputs: list[CrashOutput]) -> None:
        self.outputs += outputs
        self.order.append("emit")

    def tap(self, record: bytes) -> None:
        self.order.append("tap")


def reader(
    client: KubeClient, out: Outputs | None = None, said: list[str] | None = None, **settings: Any
) -> CrashOutputReader:
    out = out or Outputs()
    log = (said if said is not None else []).append
    return CrashOutputReader(client, out.emit, ReadSettings(**settings), log=log, tap=out.tap)


def logs(api: FakeApi) -> list[Request]:
    return [r for r in api.requests if r.path.endswith("/log")]


async def log_asked(api: FakeApi) -> None:
    """Until the reader has asked for a log (the moment a test moves the Pod on under it)."""
    while not logs(api):
        await anyio.sleep(0.01)


def pod_reads(api: FakeApi) -> list[Request]:
    return [r for r in api.requests if r.method == "GET" and "/pods/" in r.path and not r.path.endswith("/log")]


async def test_a_container_terminated_in_that_run_is_read_as_its_plain_log(api: FakeApi, client: KubeClient) -> None:
    api.put("pods", worker(state="terminated", last_ended=EARLIER))
    api.put_log("ns", "w-0", "main", GATED)
    api.put_log("ns", "w-0", "main", b"an older run\n", previous=True)
    output = await reader(client).read(wanted())
    assert output is not None and output.text == GATED.decode()
    assert (output.namespace, output.pod, output.uid, output.container, output.finished_at) == (
        "ns", "w-0", "uid-w-0", "main", ENDED
    )
    (asked,) = logs(api)
    assert asked.query == {"container": "main", "tailLines": "5000", "limitBytes": str(512 << 10)}
    assert len(pod_reads(api)) == 2  # before, and after: the run had not moved


@pytest.mark.parametrize("state", ["running", "waiting"])
async def test_a_run_before_the_current_instance_is_read_as_previous(
    api: FakeApi, client: KubeClient, state: str
) -> None:
    api.put("pods", worker(state=state))
    api.put_log("ns", "w-0", "main", GATED, previous=True)
    api.put_log("ns", "w-0", "main", b"the new run starting\n")
    output = await reader(client).read(wanted())
    assert output is not None and output.text == GATED.decode()
    assert logs(api)[0].query["previous"] == "true"


async def test_a_pod_recreated_under_its_name_gone_or_on_no_node_is_skipped_unread(
    api: FakeApi, client: KubeClient
) -> None:
    recreated = worker(state="terminated")
    recreated["metadata"]["uid"] = "uid-of-another"
    api.put("pods", recreated)
    api.put_log("ns", "w-0", "main", GATED)
    unscheduled = worker("w-1", state="terminated")
    del unscheduled["spec"]  # no kubelet: the API server would answer its log with nothing at all
    api.put("pods", unscheduled)
    read = reader(client)
    assert await read.read(wanted()) is None
    assert await read.read(wanted("gone")) is None
    assert await read.read(wanted("w-1")) is None
    assert logs(api) == [] and read.stats.skipped == 3


async def test_a_run_kubelet_no_longer_keeps_is_skipped_unread(api: FakeApi, client: KubeClient) -> None:
    api.put("pods", worker(state="waiting", last_ended="2026-11-20T10:03:00Z"))  # it crashed again since
    api.put_log("ns", "w-0", "main", b"the crash after\n", previous=True)
    assert await reader(client).read(wanted()) is None
    assert logs(api) == []


@pytest.mark.parametrize("then", ["running", "waiting"])
async def test_a_run_whose_container_restarts_while_it_is_read_is_read_again_as_previous(
    api: FakeApi, client: KubeClient, then: str
) -> None:
    """Terminated when the Pod was read, restarted before its plain log was (kubelet restarts at once after
    a first crash): that log may be the new run's, so the run is read again where it is now, `previous`."""
    api.put("pods", worker(state="terminated"))
    api.put_log("ns", "w-0", "main", GATED)
    api.fault("log", Fault("delay", seconds=0.5))
    read = reader(client)
    async with anyio.create_task_group() as tg:

        async def restart() -> None:
            await log_asked(api)
            api.put("pods", worker(state=then))
            api.put_log("ns", "w-0", "main", b"the new run starting\n")
            api.put_log("ns", "w-0", "main", GATED, previous=True)

        tg.start_soon(restart)
        output = await read.read(wanted())
    assert output is not None and output.text == GATED.decode()
    assert [r.query.get("previous") for r in logs(api)] == [None, "true"]
    assert len(pod_reads(api)) == 3  # before, after the plain log (moved), after the previous one (still)


async def test_a_run_that_moves_past_while_it_is_read_is_skipped(api: FakeApi, client: KubeClient) -> None:
    """Read as `previous`, and crashed again before that log came: the previous instance is another run."""
    api.put("pods", worker(state="running"))
    api.put_log("ns", "w-0", "main", GATED, previous=True)
    api.fault("log", Fault("delay", seconds=0.5))
    read = reader(client)
    async with anyio.create_task_group() as tg:

        async def crash_again() -> None:
            await log_asked(api)
            api.put("pods", worker(state="waiting", last_ended="2026-11-20T10:03:00Z"))

        tg.start_soon(crash_again)
        assert await read.read(wanted()) is None
    assert len(logs(api)) == 1


async def test_a_huge_output_is_read_to_its_end_in_whole_lines_within_the_bounds(
    api: FakeApi, client: KubeClient
) -> None:
    """kubelet counts limitBytes from the first of the lines asked for: 5,000 lines of 200 bytes fill
    512KiB before their end, so fewer lines are asked for, and the end comes whole."""
    lines = [f"line {i:06d} ".encode() + b"x" * 187 + b"\n" for i in range(20_000)]
    api.put("pods", worker(state="terminated"))
    api.put_log("ns", "w-0", "main", b"".join(lines) + GATED)
    output = await reader(client).read(wanted())
    assert output is not None
    assert output.text.endswith(GATED.decode()) and output.text.startswith("line ")
    assert len(output.text.encode()) <= 512 << 10
    assert [r.query["tailLines"] for r in logs(api)] == ["5000", str(524288 // 200 // 2)]


async def test_an_output_whose_last_line_alone_fills_the_bound_is_not_read(api: FakeApi, client: KubeClient) -> None:
    api.put("pods", worker(state="terminated"))
    api.put_log("ns", "w-0", "main", b"start\n" + b"y" * (600 << 10) + b"\n")
    said: list[str] = []
    read = reader(client, said=said)
    assert await read.read(wanted()) is None
    assert logs(api)[-1].query["tailLines"] == "1" and read.stats.failed == 1  # the last line alone, at last
    (warning,) = said
    assert "longer than 512KiB; its cause is not read" in warning


async def test_an_endless_log_is_given_up_after_the_timeout(api: FakeApi, client: KubeClient) -> None:
    api.put("pods", worker(state="terminated"))
    api.fault("log", Fault("endless", seconds=0.05))
    said: list[str] = []
    start = time.monotonic()
    assert await reader(client, said=said, timeout=1.0).read(wanted()) is None
    assert time.monotonic() - start < 30  # generous: the timeout is 1 s
    assert len(said) == 1 and "no whole answer within 1s" in said[0]


async def test_a_refusal_is_said_once_and_nothing_more_is_read(api: FakeApi, client: KubeClient) -> None:
    for name in ("w-0", "w-1", "w-2"):
        api.put("pods", worker(name, state="terminated"))
    api.fault("log", Fault("status", status=403))
    said: list[str] = []
    out = Outputs()
    read = reader(client, out, said)
    async with anyio.create_task_group() as tg:
        tg.start_soon(read.run)
        read.want(wanted("w-0"))
        with anyio.fail_after(10):
            await read.settled()
        read.want(wanted("w-1"))
        read.want(wanted("w-2"))
        with anyio.fail_after(10):
            await read.settled()
        read.stop()
    assert len(logs(api)) == 1 and out.outputs == []
    (warning,) = said
    assert warning.startswith("not allowed to read pods/log: causes are not read; everything else goes on")


async def test_other_failures_are_warned_of_at_most_once_a_minute(api: FakeApi, client: KubeClient) -> None:
    for name in ("w-0", "w-1", "w-2"):
        api.put("pods", worker(name, state="terminated"))
    api.fault("log", *[Fault("status", status=500)] * 3)
    said: list[str] = []
    read = reader(client, said=said)
    for name in ("w-0", "w-1", "w-2"):
        assert await read.read(wanted(name)) is None
    assert read.stats.failed == 3 and len(logs(api)) == 3
    (warning,) = said
    assert "reading the output of container main of Pod ns/w-0 (pods/log): 500" in warning


async def paced(api: FakeApi, client: KubeClient, names: list[str], **settings: Any) -> Outputs:
    """Every one of `names` wanted at once, read to the end."""
    for name in names:
        api.put("pods", worker(name, state="terminated"))
        api.put_log("ns", name, "main", GATED)
    out = Outputs()
    read = reader(client, out, **settings)
    async with anyio.create_task_group() as tg:
        tg.start_soon(read.run)
        for name in names:
            read.want(wanted(name))
        with anyio.fail_after(60):
            await read.settled()
        read.stop()
    assert sorted(o.pod for o in out.outputs) == names
    assert out.order == ["tap", "emit"] * len(names)  # each record before its send: the record's order is the feed's
    return out


async def test_no_more_than_two_reads_are_under_way_at_once(api: FakeApi, client: KubeClient) -> None:
    names = [f"w-{i:02d}" for i in range(8)]
    api.fault("log", *[Fault("delay", seconds=0.3)] * len(names))
    await paced(api, client, names, rate=1000.0, burst=1000)  # the bucket never in the way
    assert api.most_logs_in_flight == 2


async def test_reads_start_at_the_bucket_s_rate(api: FakeApi, client: KubeClient) -> None:
    names = [f"w-{i:02d}" for i in range(12)]
    rate, burst = 10.0, 3
    await paced(api, client, names, rate=rate, burst=burst, in_flight=len(names))  # no slot in the way
    first: dict[str, float] = {}  # each read starts by reading its Pod, once it has a token
    for request in pod_reads(api):
        first.setdefault(request.path, request.at)
    starts = sorted(first.values())
    assert len(starts) == len(names)
    # a slow machine only starts them later: a bound below on the time they took, above on how many came early
    assert starts[-1] - starts[0] >= (len(names) - burst) / rate - 0.1
    assert sum(at - starts[0] < 0.25 for at in starts) <= burst + 0.25 * rate + 1


async def test_the_newest_wanted_read_of_a_pod_replaces_its_older_one_and_the_queue_is_bounded(
    api: FakeApi, client: KubeClient
) -> None:
    for name in ("w-0", "w-1", "w-2", "w-3"):
        api.put("pods", worker(name, state="terminated"))
        api.put_log("ns", name, "main", GATED)
    out = Outputs()
    read = reader(client, out, queue=2)
    read.want(wanted("w-0", EARLIER))
    read.want(wanted("w-0"))  # a newer crash of w-0: it replaces the older one
    read.want(wanted("w-1"))
    read.want(wanted("w-2"))  # the queue holds 2: the oldest (w-0) is dropped
    read.want(wanted("w-3"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(read.run)
        with anyio.fail_after(10):
            await read.settled()
        read.stop()
    assert sorted(o.pod for o in out.outputs) == ["w-2", "w-3"]  # read side by side
    assert (read.stats.replaced, read.stats.dropped) == (1, 2)


async def test_a_stop_ends_a_read_under_way(api: FakeApi, client: KubeClient) -> None:
    api.put("pods", worker(state="terminated"))
    api.put_log("ns", "w-0", "main", GATED)
    api.fault("log", Fault("delay", seconds=60))
    out = Outputs()
    read = reader(client, out)
    start = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(read.run)
        read.want(wanted())
        with anyio.fail_after(10):
            while api.logs_in_flight == 0:
                await anyio.sleep(0.01)
        read.stop()
    assert time.monotonic() - start < 30 and out.outputs == []  # not the 60 s the server would take
    read.want(wanted())  # a stopped reader reads nothing more
    with anyio.fail_after(1):
        await read.settled()


async def test_a_record_of_an_output_is_one_line() -> None:
    record = encode_crash_output(CrashOutput("ns", "p", "u", "main", ENDED, "a\nb\r\n\x1b[31m", "t"))
    assert b"\n" not in record and record.startswith(b'{"type":"CRASH_OUTPUT","object":{')
