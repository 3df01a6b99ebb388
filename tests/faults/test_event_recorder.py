"""The Event recorder against the fake API server, for what a real one cannot be made to do on demand:
a rate limit that holds writes back while status writes go on, an Event that expires between two
occurrences, refusals and throttling, and a lease lost between an occurrence and its write."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import pytest
from fakeapi import FakeApi, Fault

from crashwatch.stages import Events, pipeline_stage
from pipeline.outputs import Output, StatusWanted
from pipeline.status import wanted_status
from pipeline.views import status_view
from sinks.events import EventRecorder, EventSettings
from sinks.status import StatusPatcher
from stream.model.objects import Condition, DynamoComponentDeployment
from stream.sources.client import KubeClient

pytestmark = pytest.mark.anyio
DCDS = "dynamocomponentdeployments"
EVENTS = "events"


def wanted(name: str, restarts: int, status: str = "True", api: FakeApi | None = None) -> StatusWanted:
    """What the aggregator wants for a DCD whose Pod restarted `restarts` times: the Stalled condition the
    recorder reads (decided on the object as the fake holds it, when given)."""
    message = f"container main of Pod {name}-0 restarted {restarts} times and is down after exit code 1"
    reason = "ContainerCrashLooping"
    if status == "False":
        message, reason = "no container is crash-looping", "NoCrashLoop"
    stalled = Condition("Stalled", status, reason, message, observed_generation=1)
    if api is not None:
        obj = msgspec.convert(api.objects[DCDS][("ns", name)], DynamoComponentDeployment)
        decided = (Condition("Available", "False", reason, message, observed_generation=1), stalled)
        found = wanted_status(status_view(obj), decided, None, "2026-12-03T10:00:00Z")
        assert found is not None
        return found
    return StatusWanted(
        "2026-12-03T10:00:00Z",
        "nvidia.com/v1beta1",
        "DynamoComponentDeployment",
        "ns",
        name,
        f"uid-{name}",
        "7",
        (stalled,),
        (stalled,),
        None,
    )


def dcd(name: str) -> dict[str, Any]:
    return {
        "kind": "DynamoComponentDeployment",
        "apiVersion": "nvidia.com/v1beta1",
        "metadata": {"name": name, "namespace": "ns", "generation": 1},
        "status": {"conditions": []},
    }


class Harness:
    def __init__(self, recorder: EventRecorder) -> None:
        self.recorder = recorder
        self.send, self.receive = anyio.create_memory_object_stream[list[Output]](16)

    async def feed(self, *items: StatusWanted) -> None:
        await self.send.send(list(items))


async def wait_for(predicate: Any, timeout: float = 10) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


def requests(api: FakeApi, method: str) -> list[Any]:
    """The requests made of Events with this method (a PATCH names one: .../events/NAME)."""
    return [r for r in api.requests if r.method == method and "/apis/events.k8s.io/" in r.path]


async def test_a_rate_limited_recorder_never_holds_back_status_writes_nor_a_stop(
    api: FakeApi, client: KubeClient
) -> None:
    api.put(DCDS, dcd("w"))
    # one Event at once, then one every 1000 s
    recorder = EventRecorder(client, EventSettings(qps=0.001, burst=1, queue=1, instance="test"))
    patcher = StatusPatcher(client)
    send_status, receive_status = anyio.create_memory_object_stream[list[Output]](1)
    send_events, receive_events = anyio.create_memory_object_stream[list[Output]](1)
    send, receive = anyio.create_memory_object_stream[Events](1)

    class Feed:
        """A stand-in for the pipeline: hands each wanted status on as its one output."""

        def __init__(self) -> None:
            self.rejected: list[Any] = []

        def sync(self, time: str | None) -> list[Output]:
            return []

        def feed(self, batch: list[Any]) -> list[Output]:
            return list(batch)

    async with anyio.create_task_group() as tg:
        tg.start_soon(patcher.run, receive_status)
        tg.start_soon(recorder.run, receive_events)
        tg.start_soon(pipeline_stage, receive, [send_status, send_events], Feed(), print)
        async with send:
            for restarts in range(2, 40):
                await send.send([wanted("w", restarts, api=api)])  # type: ignore[list-item]
                await wait_for(lambda n=restarts: f"restarted {n} times" in str(api.objects[DCDS][("ns", "w")]))
    # every status landed while the recorder waited for its next token, the restarts folding into the
    # one series update waiting; that was dropped, at once, when the input ended: no stop waits for it
    (post,) = requests(api, "POST")
    assert "restarted 2 times" in post.body["note"] and "series" not in post.body
    assert requests(api, "PATCH") == []
    assert (recorder.stats.created, recorder.stats.patched, recorder.stats.dropped) == (1, 0, 1)


async def test_an_event_gone_before_its_series_is_updated_is_created_again_with_the_series(
    api: FakeApi, client: KubeClient
) -> None:
    h = Harness(EventRecorder(client, EventSettings(instance="test")))
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.recorder.run, h.receive)
        await h.feed(wanted("w", 2))
        await wait_for(lambda: len(api.objects[EVENTS]) == 1)
        ((key, created),) = api.objects[EVENTS].items()
        await h.feed(wanted("w", 3))
        await wait_for(lambda: api.objects[EVENTS][key].get("series", {}).get("count") == 2)
        api.delete(EVENTS, *key)  # it expired (an hour by default)
        await h.feed(wanted("w", 4))
        await wait_for(lambda: len(requests(api, "POST")) == 2)
        await h.send.aclose()
    again = api.objects[EVENTS][key]
    assert again["series"]["count"] == 3 and again["note"] == created["note"]
    assert [r.method for r in api.requests if "/apis/events.k8s.io/" in r.path] == [
        "POST",
        "PATCH",
        "PATCH",
        "POST",
    ]
    assert (h.recorder.stats.created, h.recorder.stats.patched) == (2, 1)


async def test_refusals_are_said_once_throttling_is_retried_and_the_recorder_goes_on(
    api: FakeApi, client: KubeClient
) -> None:
    said: list[str] = []
    h = Harness(EventRecorder(client, EventSettings(instance="test"), log=said.append))
    api.fault("post", Fault("status", 403), Fault("status", 403), Fault("status", 429, headers={"Retry-After": "0"}))
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.recorder.run, h.receive)
        await h.feed(wanted("a", 2))
        await h.feed(wanted("b", 2))
        await wait_for(lambda: h.recorder.stats.refused == 2)
        await h.feed(wanted("c", 2))  # throttled once, then created
        await wait_for(lambda: h.recorder.stats.created == 1)
        await h.feed(wanted("a", 3))  # a refused create is forgotten: a later occurrence creates it
        await wait_for(lambda: h.recorder.stats.created == 2)
        await h.send.aclose()
    assert len(said) == 1 and "403" in said[0] and "cannot write Events" in said[0]
    assert sorted(e["regarding"]["name"] for e in api.objects[EVENTS].values()) == ["a", "c"]
    assert "series" not in next(e for e in api.objects[EVENTS].values() if e["regarding"]["name"] == "a")


async def test_a_replica_that_does_not_lead_records_and_sends_nothing(api: FakeApi, client: KubeClient) -> None:
    leading = [True]
    h = Harness(EventRecorder(client, EventSettings(instance="test"), is_leader=lambda: leading[0]))
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.recorder.run, h.receive)
        leading[0] = False
        await h.feed(wanted("w", 2), wanted("w", 3), wanted("w", 0, status="False"))
        await wait_for(lambda: h.recorder.stats.not_leader == 3)
        leading[0] = True
        await h.feed(wanted("w", 4))
        await wait_for(lambda: h.recorder.stats.created == 1)
        await h.send.aclose()
    ((event,),) = [list(api.objects[EVENTS].values())]
    assert "restarted 4 times" in event["note"] and "series" not in event
