"""The status patcher against a fake API server: conflicts, throttling, coalescing, rate and backoff."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import anyio
import msgspec
import pytest
from fakeapi import FakeApi, Fault

from pipeline.outputs import Output, StatusWanted
from pipeline.status import wanted_status
from pipeline.views import status_view
from sinks.status import PatchSettings, StatusPatcher
from stream.model.objects import Condition, DynamoComponentDeployment
from stream.sources.client import KubeClient

pytestmark = pytest.mark.anyio
PLURAL = "dynamocomponentdeployments"


def dcd(name: str, *conditions: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "DynamoComponentDeployment",
        "apiVersion": "nvidia.com/v1beta1",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 3},
        "status": {"conditions": list(conditions)},
    }


NOT_READY = {
    "type": "Available",
    "status": "False",
    "reason": "DeploymentNotReady",
    "message": "not ready",
    "observedGeneration": 3,
    "lastTransitionTime": "2026-12-01T00:00:00Z",
}
OTHER = {
    "type": "DynamoComponentReady",
    "status": "True",
    "reason": "Ready",
    "message": "ok",
    "lastTransitionTime": "2026-11-30T00:00:00Z",
}


def want(api: FakeApi, name: str, message: str) -> StatusWanted:
    """What the aggregator would want, decided on the object as the fake holds it now."""
    obj = msgspec.convert(api.objects[PLURAL][("ns", name)], DynamoComponentDeployment)
    condition = Condition("Available", "False", "ContainerCrashLooping", message, observed_generation=3)
    wanted = wanted_status(status_view(obj), (condition,), None, "2026-12-02T10:00:00Z")
    assert wanted is not None
    return wanted


def available(api: FakeApi, name: str) -> dict[str, Any]:
    return next(c for c in api.objects[PLURAL][("ns", name)]["status"]["conditions"] if c["type"] == "Available")


class Harness:
    def __init__(self, patcher: StatusPatcher) -> None:
        self.patcher = patcher
        self.send, self.receive = anyio.create_memory_object_stream[list[Output]](16)
        self.done = anyio.Event()

    async def run(self) -> None:
        try:
            await self.patcher.run(self.receive)
        finally:
            self.done.set()

    async def feed(self, *wanted: StatusWanted) -> None:
        await self.send.send(list(wanted))


async def wait_for(predicate: Any, timeout: float = 10) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


async def finished(h: Harness, timeout: float = 10) -> None:
    """End the patcher's input and wait for it to return, which it does once it has made every write it
    would make for what it was given: what the fake saw then is all it will see, no sleep needed."""
    await h.send.aclose()
    with anyio.fail_after(timeout):
        await h.done.wait()


def patches(api: FakeApi) -> list[Any]:
    return [r for r in api.requests if r.method == "PATCH"]


async def test_a_conflict_rereads_and_keeps_what_another_writer_added(api: FakeApi, client: KubeClient) -> None:
    api.put(PLURAL, dcd("w", NOT_READY, OTHER))
    wanted = want(api, "w", "crash")  # decided on the object at this resourceVersion...
    changed = copy.deepcopy(api.objects[PLURAL][("ns", "w")])
    changed["status"]["conditions"].append(
        {
            "type": "Custom",
            "status": "True",
            "reason": "Mine",
            "message": "m",
            "lastTransitionTime": "2026-12-01T00:00:00Z",
        }
    )
    api.put(PLURAL, changed)  # ...which another writer moves on before the write lands
    logged: list[str] = []
    h = Harness(StatusPatcher(client, log=logged.append))
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.patcher.run, h.receive)
        await h.feed(wanted)
        await wait_for(lambda: available(api, "w")["reason"] == "ContainerCrashLooping")
        await h.send.aclose()
    sent = patches(api)
    assert len(sent) == 2
    assert sent[0].body["metadata"]["resourceVersion"] != sent[1].body["metadata"]["resourceVersion"]
    conditions = api.objects[PLURAL][("ns", "w")]["status"]["conditions"]
    assert [c["type"] for c in conditions] == ["Available", "DynamoComponentReady", "Custom"]
    assert conditions[1] == OTHER and conditions[2]["reason"] == "Mine"
    assert conditions[0]["lastTransitionTime"] == "2026-12-01T00:00:00Z"  # False before and after
    assert h.patcher.stats.conflicts == 1 and h.patcher.stats.writes == 1


async def test_after_a_conflict_nothing_is_written_if_the_object_already_says_it(
    api: FakeApi, client: KubeClient
) -> None:
    api.put(PLURAL, dcd("w", NOT_READY))
    wanted = want(api, "w", "crash")
    done = copy.deepcopy(api.objects[PLURAL][("ns", "w")])
    done["status"]["conditions"] = [
        {
            "type": "Available",
            "status": "False",
            "reason": "ContainerCrashLooping",
            "message": "crash",
            "observedGeneration": 3,
            "lastTransitionTime": "2026-12-02T09:00:00Z",
        }
    ]
    api.put(PLURAL, done)  # someone (a previous crashwatch) already wrote it
    h = Harness(StatusPatcher(client))
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.patcher.run, h.receive)
        await h.feed(wanted)
        await wait_for(lambda: h.patcher.stats.unchanged == 1)
        await h.send.aclose()
    assert len(patches(api)) == 1  # the one refused with 409
    assert available(api, "w")["lastTransitionTime"] == "2026-12-02T09:00:00Z"


@pytest.mark.parametrize("status", [429, 500])
async def test_throttled_or_failed_writes_are_retried_after_retry_after(
    api: FakeApi, client: KubeClient, status: int
) -> None:
    api.put(PLURAL, dcd("w", NOT_READY))
    api.fault("patch", Fault("status", status=status, headers={"Retry-After": "1"}))
    h = Harness(StatusPatcher(client))
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.patcher.run, h.receive)
        await h.feed(want(api, "w", "crash"))
        await wait_for(lambda: available(api, "w")["reason"] == "ContainerCrashLooping")
        await h.send.aclose()
    sent = patches(api)
    assert len(sent) == 2 and sent[1].at - sent[0].at >= 0.95


async def test_while_a_write_is_in_flight_only_the_newest_wanted_status_follows(
    api: FakeApi, client: KubeClient
) -> None:
    api.put(PLURAL, dcd("w", NOT_READY))
    api.fault("patch", Fault("delay", seconds=0.5))
    h = Harness(StatusPatcher(client))
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.run)
        await h.feed(want(api, "w", "restarted 2 times"))
        await wait_for(lambda: len(patches(api)) == 1)
        for restarts in (3, 4, 5):
            await h.feed(want(api, "w", f"restarted {restarts} times"))
        await wait_for(lambda: available(api, "w")["message"] == "restarted 5 times")
        await finished(h)
    # restarts 3 and 4 were superseded before their turn; the 5 may need a second try (409: the first
    # write moved the resourceVersion on which it was decided)
    sent = [r.body["status"]["conditions"][0]["message"] for r in patches(api)]
    assert sent[0] == "restarted 2 times" and set(sent[1:]) == {"restarted 5 times"}
    assert h.patcher.stats.writes == 2


async def test_an_overwritten_failure_is_written_again_at_once_then_with_growing_backoff(
    api: FakeApi, client: KubeClient
) -> None:
    api.put(PLURAL, dcd("w", NOT_READY))
    settings = PatchSettings(reassert_initial=0.3, reassert_max=10)
    h = Harness(StatusPatcher(client, settings))
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.patcher.run, h.receive)
        for round_ in range(4):
            await h.feed(want(api, "w", "crash"))  # the aggregator wants it again after each overwrite
            await wait_for(lambda: available(api, "w")["reason"] == "ContainerCrashLooping")
            assert len(patches(api)) == round_ + 1
            api.put(PLURAL, dcd("w", NOT_READY))  # the other writer puts its verdict back
        await h.feed(want(api, "w", "crash, and a new restart"))  # something new: no waiting
        await wait_for(lambda: len(patches(api)) == 5)
        await h.send.aclose()
    times = [r.at for r in patches(api)]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # the first rewrite at once, then 0.3 s, doubling
    assert gaps[1] >= 0.28 and gaps[2] >= 0.58 and gaps[1] - gaps[0] >= 0.2
    assert gaps[3] < 0.25


async def test_writes_keep_to_the_rate_limit(api: FakeApi, client: KubeClient) -> None:
    for i in range(8):
        api.put(PLURAL, dcd(f"w{i}", NOT_READY))
    h = Harness(StatusPatcher(client, PatchSettings(qps=5, burst=2)))
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.patcher.run, h.receive)
        await h.feed(*(want(api, f"w{i}", "crash") for i in range(8)))
        await wait_for(lambda: len(patches(api)) == 8)
        await h.send.aclose()
    times = sorted(r.at for r in patches(api))
    assert times[-1] - times[0] >= (8 - 2) / 5 - 0.05


@pytest.mark.parametrize("status,logged_text", [(404, "is gone"), (422, "cannot write the status")])
async def test_a_gone_or_refused_object_is_not_retried(
    api: FakeApi, client: KubeClient, status: int, logged_text: str
) -> None:
    api.put(PLURAL, dcd("w", NOT_READY))
    api.fault("patch", Fault("status", status=status))
    logged: list[str] = []
    h = Harness(StatusPatcher(client, log=logged.append))
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.run)
        await h.feed(want(api, "w", "crash"))
        await wait_for(lambda: len(logged) == 1)
        await finished(h)  # a retry (after its 0.5 s backoff at least) would be made before it returns
    assert len(patches(api)) == 1
    assert logged_text in logged[0]


async def test_a_want_decided_before_our_last_write_came_back_needs_no_reread(api: FakeApi, client: KubeClient) -> None:
    """The aggregator counts a write as done before its echo arrives, so its next want carries the
    resourceVersion the write was made on; the patcher sends it with the one the write made."""
    api.put(PLURAL, dcd("w", NOT_READY))
    first = want(api, "w", "restarted 2 times")
    second = want(api, "w", "restarted 3")  # decided on the same observation as the first
    h = Harness(StatusPatcher(client))
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.patcher.run, h.receive)
        await h.feed(first)
        await wait_for(lambda: h.patcher.stats.writes == 1)
        await h.feed(second)
        await wait_for(lambda: h.patcher.stats.writes == 2)
        await h.send.aclose()
    assert h.patcher.stats.conflicts == 0 and len(patches(api)) == 2
    assert available(api, "w")["message"] == "restarted 3"


async def test_a_want_decided_before_our_last_write_came_back_that_says_the_same_is_not_sent(
    api: FakeApi, client: KubeClient
) -> None:
    """Beside the operator a graph is reset and answered within milliseconds, so a want decided on the
    version our answer was made on often comes after that answer landed. It says what the object says
    since our write: sending it (as the same again, an overwrite to answer) is a write that changes
    nothing, one more against the write budget."""
    api.put(PLURAL, dcd("w", NOT_READY))
    first = want(api, "w", "restarted 2 times")
    stale = want(api, "w", "restarted 2 times")  # the same, decided on the same observation
    h = Harness(StatusPatcher(client))
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.run)
        await h.feed(first)
        await wait_for(lambda: h.patcher.stats.writes == 1)
        await h.feed(stale)
        await finished(h)
    assert len(patches(api)) == 1
    assert h.patcher.stats.unchanged == 1
    assert available(api, "w")["message"] == "restarted 2 times"


async def test_when_its_input_ends_it_finishes_the_write_under_way(api: FakeApi, client: KubeClient) -> None:
    api.put(PLURAL, dcd("w", NOT_READY))
    api.fault("patch", Fault("delay", seconds=0.5))
    h = Harness(StatusPatcher(client))
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.patcher.run, h.receive)
        await h.feed(want(api, "w", "crash"))
        await wait_for(lambda: h.patcher.unfinished() == 1)
        await h.send.aclose()  # the watcher is stopping, the write has not been answered yet
    assert available(api, "w")["reason"] == "ContainerCrashLooping"
    assert h.patcher.unfinished() == 0


async def test_when_its_input_ends_a_reassert_waiting_out_its_backoff_is_dropped(
    api: FakeApi, client: KubeClient
) -> None:
    api.put(PLURAL, dcd("w", NOT_READY))
    h = Harness(StatusPatcher(client, PatchSettings(reassert_initial=60)))
    with anyio.fail_after(5):  # not the 60 s of the backoff
        async with anyio.create_task_group() as tg:
            tg.start_soon(h.patcher.run, h.receive)
            await h.feed(want(api, "w", "crash"))
            await wait_for(lambda: available(api, "w")["reason"] == "ContainerCrashLooping")
            api.put(PLURAL, dcd("w", NOT_READY))  # another writer overwrites it
            await h.feed(want(api, "w", "crash"))  # the same again: written again at once
            await wait_for(lambda: len(patches(api)) == 2)
            await wait_for(lambda: available(api, "w")["reason"] == "ContainerCrashLooping")
            api.put(PLURAL, dcd("w", NOT_READY))  # and again: a second in a row waits 60 s
            await h.feed(want(api, "w", "crash"))
            await wait_for(lambda: h.patcher.unfinished() == 1)
            await h.send.aclose()
    assert len(patches(api)) == 2
    assert available(api, "w")["reason"] == "DeploymentNotReady"  # the next watcher decides it again


# --- beside the Dynamo operator, which reconciles a graph after any write to one of its DCDs -------------------

DGDS = "dynamographdeployments"
PENDING = {
    "type": "Ready",
    "status": "False",
    "reason": "some_resources_are_not_ready",
    "message": "Resources not ready",
    "observedGeneration": 3,
    "lastTransitionTime": "2026-12-01T00:00:00Z",
}


def dgd(name: str, state: str = "pending") -> dict[str, Any]:
    return {
        "kind": "DynamoGraphDeployment",
        "apiVersion": "nvidia.com/v1beta1",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 3},
        "status": {"state": state, "conditions": [PENDING]},
    }


def want_failed_graph(api: FakeApi, name: str) -> StatusWanted:
    from stream.model.objects import DynamoGraphDeployment

    obj = msgspec.convert(api.objects[DGDS][("ns", name)], DynamoGraphDeployment)
    condition = Condition("Ready", "False", "component_crash_looping", "crash", observed_generation=3)
    wanted = wanted_status(status_view(obj), (condition,), "failed", "2026-12-02T10:00:00Z")
    assert wanted is not None
    return wanted


def graph_state(api: FakeApi, name: str) -> str:
    return str(api.objects[DGDS][("ns", name)]["status"]["state"])


async def test_a_graph_is_written_after_the_dcd_writes_of_its_namespace_have_landed(
    api: FakeApi, client: KubeClient
) -> None:
    api.put(PLURAL, dcd("w", NOT_READY))
    api.put(DGDS, dgd("llm"))
    api.fault("patch", Fault("delay", seconds=0.5))  # the first write sent (the DCD's) is slow
    h = Harness(StatusPatcher(client))
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.run)
        await h.feed(want_failed_graph(api, "llm"), want(api, "w", "crash"))  # the graph first in the batch
        await finished(h)
    sent = patches(api)
    assert [PLURAL in r.path for r in sent] == [True, False]  # the DCD's went first...
    assert sent[1].at - sent[0].at >= 0.45  # ...and the graph's only once it was answered


async def test_a_graph_that_clears_is_written_at_once_beside_a_slow_dcd_write(api: FakeApi, client: KubeClient) -> None:
    """A clear has nothing for the operator's reset to undo, and a fix's new generation must read it first."""
    from stream.model.objects import DynamoGraphDeployment

    api.put(PLURAL, dcd("w", NOT_READY))
    api.put(DGDS, dgd("llm", state="failed"))
    api.fault("patch", Fault("delay", seconds=0.5))  # the DCD's write, sent first, is slow
    obj = msgspec.convert(api.objects[DGDS][("ns", "llm")], DynamoGraphDeployment)
    cleared = wanted_status(status_view(obj), (PENDING_NOW,), "pending", "2026-12-02T10:00:00Z")
    assert cleared is not None
    h = Harness(StatusPatcher(client))
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.run)
        await h.feed(want(api, "w", "crash"))
        await wait_for(lambda: len(patches(api)) == 1)
        await h.feed(cleared)
        await finished(h)
    sent = patches(api)
    assert [PLURAL in r.path for r in sent] == [True, False]
    assert sent[1].at - sent[0].at < 0.4  # sent while the DCD's was still under way
    assert graph_state(api, "llm") == "pending"


PENDING_NOW = Condition("Ready", "False", "some_resources_are_not_ready", "Resources not ready", observed_generation=3)


async def test_a_graph_reset_that_our_dcd_write_set_off_is_answered_at_once(api: FakeApi, client: KubeClient) -> None:
    api.put(PLURAL, dcd("w", NOT_READY))
    api.put(DGDS, dgd("llm"))
    h = Harness(StatusPatcher(client, PatchSettings(reassert_initial=60)))
    with anyio.fail_after(20):  # not the 60 s of the backoff
        async with anyio.create_task_group() as tg:
            tg.start_soon(h.run)
            await h.feed(want_failed_graph(api, "llm"))
            await wait_for(lambda: graph_state(api, "llm") == "failed")
            for round_ in range(3):
                # one of our DCD writes, and the operator's reset of the graph that follows it: each reset
                # is answered at once, however many came before
                await h.feed(want(api, "w", f"crash {round_}"))
                await wait_for(lambda r=round_: available(api, "w")["message"] == f"crash {r}")  # type: ignore[misc]
                api.put(DGDS, dgd("llm"))
                await h.feed(want_failed_graph(api, "llm"))
                await wait_for(lambda: graph_state(api, "llm") == "failed")
            # a reset with no DCD write of ours before it: the first in a row is answered at once...
            api.put(DGDS, dgd("llm"))
            await h.feed(want_failed_graph(api, "llm"))
            await wait_for(lambda: graph_state(api, "llm") == "failed")
            graph_writes = len([r for r in patches(api) if DGDS in r.path])
            # ...and a second waits out the backoff: a fight, not our doing
            api.put(DGDS, dgd("llm"))
            await h.feed(want_failed_graph(api, "llm"))
            await wait_for(lambda: h.patcher.unfinished() == 1)
            await h.send.aclose()
    assert graph_writes == 5 and len([r for r in patches(api) if DGDS in r.path]) == 5
    assert graph_state(api, "llm") == "pending"
