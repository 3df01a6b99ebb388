"""The reflector against an API server that misbehaves on demand: the same client code as in a cluster.

Each test runs a real `KubeClient` (kubeconfig, kubernetes-asyncio, aiohttp) against tests/fakeapi.py
and asserts on the events handed on and on the requests the server saw.
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import pytest
from collector import Collector
from fakeapi import FakeApi, Fault, crashing, healthy

from stream.model.events import WatchEvent
from stream.model.messages import logger
from stream.sources.client import KubeClient
from stream.sources.reflector import Fatal, Reflector, WatchSettings
from stream.sources.resources import PODS, discover_dynamo

pytestmark = pytest.mark.anyio

FAST = WatchSettings(page_size=500, idle_timeout=5, initial_backoff=0.05, max_backoff=0.2)


async def reflect(client: KubeClient, collector: Collector, settings: WatchSettings = FAST, **kw: Any) -> Reflector:
    return Reflector(client, PODS, None, collector.emit, settings, **kw)


async def watching(api: FakeApi, out: Collector, watches: int = 1) -> None:
    """Until the fake has seen the reflector's watch request: its list is done, and what changes from now
    on reaches it by the watch."""
    await out.wait_for(lambda: len(api.requests_of("GET", "pods", watch=True)) >= watches)


async def everything_before(api: FakeApi, out: Collector, marker: str = "zz-marker") -> None:
    """Until a Pod made now has been handed on. A watch hands changes on in order, so whatever the
    reflector would hand on before it (a repeated or stray event) has been handed on by then: a bounded
    wait on progress, where a sleep would only hope that nothing else was coming."""
    api.put("pods", healthy(marker))
    await out.wait_for(lambda: any(e.object.metadata.name == marker for e in out.events))  # type: ignore[union-attr]
    assert out.events[-1].object.metadata.name == marker  # type: ignore[union-attr]
    del out.events[-1]


async def test_a_list_in_pages_then_a_watch_from_its_resource_version(api: FakeApi, client: KubeClient) -> None:
    for i in range(1203):
        api.put("pods", healthy(f"p-{i:04d}"))
    api.put("pods", {"kind": "Pod", "metadata": {"name": "unlabelled"}})  # the selector leaves it out
    listed_at = api.version
    out = Collector()
    reflector = await reflect(client, out)
    async with anyio.create_task_group() as tg:
        tg.start_soon(reflector.run)
        await out.wait_for(lambda: len(out.events) == 1203)
        api.put("pods", crashing("p-0007"))
        await out.wait_for(lambda: len(out.events) == 1204)
        tg.cancel_scope.cancel()
    lists = api.requests_of("GET", "pods", watch=False)
    assert [r.query.get("continue") for r in lists] == [None, "500", "1000"]
    assert all(r.query["labelSelector"] == PODS.label_selector and r.query["limit"] == "500" for r in lists)
    watch = api.requests_of("GET", "pods", watch=True)[0].query
    assert watch["resourceVersion"] == str(listed_at) and watch["allowWatchBookmarks"] == "true"
    assert {e.type for e in out.events[:1203]} == {"ADDED"}
    assert out.seen()[-1] == ("MODIFIED", "p-0007", str(api.version))
    assert all(e.time is not None for e in out.events)


async def test_a_list_hands_on_each_page_as_it_comes_and_a_retry_repeats_none(api: FakeApi, client: KubeClient) -> None:
    """150,000 Pods held until the last page cost some 400 MB: each page is handed on when it comes. A
    page that fails starts the list over, and what was handed on already is not handed on again."""
    for i in range(1203):
        api.put("pods", healthy(f"p-{i:04d}"))
    api.fault("list pods", Fault("delay"), Fault("status", status=500))  # the second page fails, once
    out = Collector()
    requested: list[int] = []  # how many List requests had been made at each hand-on

    async def emit(events: list[WatchEvent]) -> None:
        requested.append(len(api.requests_of("GET", "pods", watch=False)))
        await out.emit(events)

    reflector = Reflector(client, PODS, None, emit, FAST)
    async with anyio.create_task_group() as tg:
        tg.start_soon(reflector.run)
        await out.wait_for(lambda: len(out.events) == 1203)
        await watching(api, out)
        tg.cancel_scope.cancel()
    assert requested == [1, 4, 5]  # page 1 before page 2 was asked for; page 1 again (the retry) handed on nothing
    assert [r.query.get("continue") for r in api.requests_of("GET", "pods", watch=False)] == [
        None,
        "500",
        None,
        "500",
        "1000",
    ]
    assert {e.type for e in out.events} == {"ADDED"}
    assert sorted(e.object.metadata.name for e in out.events) == [f"p-{i:04d}" for i in range(1203)]  # type: ignore[union-attr]


async def test_pods_handed_on_hold_none_of_the_pages_they_came_in(api: FakeApi, client: KubeClient) -> None:
    """A Pod's label text is decoded as a view into its List page; a Pod handed on has a copy of its own,
    so the Pods a relist holds until its end (or a slow pipeline has not taken yet) hold no page."""
    pad = "x" * 20_000  # 200 Pods of 20 KB: 4 MB of pages, a few hundred KB of Pods
    for i in range(200):
        obj = healthy(f"p-{i:04d}")
        obj["metadata"]["annotations"] = {"pad": pad}
        api.put("pods", obj)
    out = Collector()
    reflector = await reflect(client, out, WatchSettings(page_size=50, idle_timeout=5))
    tracemalloc.start()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reflector.run)
            await out.wait_for(lambda: len(out.events) == 200)
            tg.cancel_scope.cancel()
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        out.events.clear()
        gc.collect()
        freed = before - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert freed < 1_000_000, f"the Pods handed on held {freed:,} bytes"


async def test_a_list_started_over_hands_on_what_went_away_meanwhile(api: FakeApi, client: KubeClient) -> None:
    """The continue token expires after the first page was handed on, and one of its Pods is deleted
    meanwhile: the list starts over, repeats nothing, and ends with that Pod's deletion."""
    for i in range(1203):
        api.put("pods", healthy(f"p-{i:04d}"))
    api.fault("list pods", Fault("delay"), Fault("status", status=410))
    out = Collector()

    async def emit(events: list[WatchEvent]) -> None:
        if not out.events:
            api.delete("pods", "ns", "p-0001")
        await out.emit(events)

    reflector = Reflector(client, PODS, None, emit, FAST)
    async with anyio.create_task_group() as tg:
        tg.start_soon(reflector.run)
        await watching(api, out)
        tg.cancel_scope.cancel()
    assert [e.type for e in out.events].count("ADDED") == 1203
    assert sorted(e.object.metadata.name for e in out.events if e.type == "ADDED") == [  # type: ignore[union-attr]
        f"p-{i:04d}" for i in range(1203)
    ]
    assert out.seen()[-1][:2] == ("DELETED", "p-0001")
    assert ("ns", "p-0001") not in reflector.known and len(reflector.known) == 1202


async def test_a_dropped_watch_resumes_from_the_last_event_without_loss_or_repeat(
    api: FakeApi, client: KubeClient
) -> None:
    api.put("pods", healthy("a"))
    out = Collector()
    api.fault("watch pods", Fault("cut", after=2))
    reflector = await reflect(client, out)
    async with anyio.create_task_group() as tg:
        tg.start_soon(reflector.run)
        await out.wait_for(lambda: len(out.events) == 1)
        for restarts in range(1, 6):
            api.put("pods", crashing("a", restarts=restarts))
        await out.wait_for(lambda: len(out.events) >= 6)
        await everything_before(api, out)  # and nothing came twice before it
        tg.cancel_scope.cancel()
    versions = [int(v) for _, _, v in out.seen()]
    assert len(versions) == 6 and versions == sorted(set(versions))  # every change once, in order
    watches = api.requests_of("GET", "pods", watch=True)
    assert len(watches) == 2
    assert watches[1].query["resourceVersion"] == str(versions[2])  # resumed after the 2nd watched event
    assert len(api.requests_of("GET", "pods", watch=False)) == 1  # no relist


async def test_a_malformed_line_is_reported_and_the_watch_resumes(api: FakeApi, client: KubeClient) -> None:
    logged: list[str] = []
    out = Collector()
    api.fault("watch pods", Fault("garbage", after=1))
    reflector = await reflect(client, out, log=logged.append)
    async with anyio.create_task_group() as tg:
        tg.start_soon(reflector.run)
        await watching(api, out)  # so that the watch, not the list, carries the first change
        api.put("pods", crashing("a", restarts=1))
        api.put("pods", crashing("a", restarts=2))
        await out.wait_for(lambda: len(out.events) == 2)
        tg.cancel_scope.cancel()
    assert [t for t, _, _ in out.seen()] == ["ADDED", "MODIFIED"]
    assert any("unreadable watch event" in line for line in logged)
    assert len(api.requests_of("GET", "pods", watch=True)) == 2


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_throttling_and_server_errors_wait_at_least_retry_after(
    api: FakeApi, client: KubeClient, status: int
) -> None:
    api.put("pods", healthy("a"))
    api.fault("list pods", Fault("status", status=status, headers={"Retry-After": "1"}))
    api.fault("watch pods", Fault("status", status=status, headers={"Retry-After": "1"}))
    out = Collector()
    reflector = await reflect(client, out)
    async with anyio.create_task_group() as tg:
        tg.start_soon(reflector.run)
        await out.wait_for(lambda: len(api.requests_of("GET", "pods", watch=True)) == 2)
        tg.cancel_scope.cancel()
    lists = api.requests_of("GET", "pods", watch=False)
    watches = api.requests_of("GET", "pods", watch=True)
    assert len(lists) == 2 and lists[1].at - lists[0].at >= 0.95
    assert watches[1].at - watches[0].at >= 0.95
    assert out.seen() == [("ADDED", "a", out.seen()[0][2])]  # the list, once


async def test_a_silent_watch_is_taken_for_stuck_and_resumed(api: FakeApi, client: KubeClient) -> None:
    logged: list[str] = []
    out = Collector()
    api.fault("watch pods", Fault("silent"))
    settings = WatchSettings(idle_timeout=0.5, initial_backoff=0.01, max_backoff=0.05)
    reflector = await reflect(client, out, settings, log=logged.append)
    async with anyio.create_task_group() as tg:
        tg.start_soon(reflector.run)
        await watching(api, out)
        api.put("pods", crashing("a"))  # made while the first watch says nothing
        await out.wait_for(lambda: len(out.events) == 1)
        tg.cancel_scope.cancel()
    watches = api.requests_of("GET", "pods", watch=True)
    assert len(watches) == 2 and watches[1].at - watches[0].at >= 0.5
    assert any("looks stuck" in line for line in logged)


async def test_bookmarks_move_the_resume_point(api: FakeApi, client: KubeClient) -> None:
    api.bookmark_every = 0.1
    out = Collector()
    reflector = await reflect(client, out)
    async with anyio.create_task_group() as tg:
        tg.start_soon(reflector.run)
        await watching(api, out)  # after its list: only a bookmark can tell it of the version moving on
        api.put("deployments", {"kind": "Deployment", "metadata": {"name": "unrelated"}})  # moves the version
        await out.wait_for(lambda: reflector.resource_version == str(api.version))
        tg.cancel_scope.cancel()
    assert out.events == []  # bookmarks are not events


@pytest.mark.parametrize("how", ["event", "status"])
async def test_gone_relists_and_hands_on_the_difference(api: FakeApi, client: KubeClient, how: str) -> None:
    for name in ("stays", "changes", "goes", "replaced"):
        api.put("pods", healthy(name))
    out = Collector()
    reflector = await reflect(client, out)
    async with anyio.create_task_group() as tg:
        tg.start_soon(reflector.run)
        await out.wait_for(lambda: len(out.events) == 4)
        # changes happen, the history is compacted away before the watch saw them, the watch drops:
        # resuming from its resourceVersion finds it gone (an ERROR event, or an HTTP 410)
        if how == "status":
            api.fault("watch pods", Fault("status", status=410))
        api.put("pods", crashing("changes"))
        api.delete("pods", "ns", "goes")
        api.delete("pods", "ns", "replaced")
        api.put("pods", {**healthy("replaced"), "metadata": {**healthy("replaced")["metadata"], "uid": "uid-new"}})
        api.put("pods", crashing("new"))
        api.compact()
        api.disconnect()
        await out.wait_for(lambda: reflector.lists == 2 and len(out.events) >= 9, timeout=3)
        await everything_before(api, out)  # and nothing more than the difference came before it
        tg.cancel_scope.cancel()
    after = out.events[4:]
    summary = sorted((e.type, e.object.metadata.name, e.object.metadata.uid) for e in after)  # type: ignore[union-attr]
    assert summary == [
        ("ADDED", "new", "uid-new"),
        ("ADDED", "replaced", "uid-new"),
        ("DELETED", "goes", "uid-goes"),
        ("DELETED", "replaced", "uid-replaced"),
        ("MODIFIED", "changes", "uid-changes"),
    ]
    deleted = [e for e in after if e.type == "DELETED"]
    assert out.events.index(deleted[-1]) < out.events.index(next(e for e in after if e.type == "ADDED"))


async def test_a_reflector_is_out_of_sync_from_its_second_failure_in_a_row_until_a_request_succeeds(
    api: FakeApi, client: KubeClient
) -> None:
    api.put("pods", healthy("a"))
    logged: list[str] = []
    out = Collector()
    reflector = await reflect(client, out, log=logged.append)
    busy = Fault("status", status=503, headers={"Retry-After": "1"})  # each failure held a second
    assert not reflector.in_sync  # nothing listed yet
    async with anyio.create_task_group() as tg:
        tg.start_soon(reflector.run)
        await watching(api, out)
        assert reflector.in_sync
        # a dropped watch (a failure) whose resume finds 410 Gone, and a relist that fails once and
        # succeeds on its retry: routine, never out of sync
        api.fault("watch pods", Fault("gone"))
        api.fault("list pods", Fault("status", status=500))
        api.disconnect()
        await out.wait_for(lambda: reflector.lists == 2)
        assert reflector.in_sync and reflector.failures == 0
        assert not any("out of sync" in line for line in logged)
        # the watch after the relist is answered before the next faults are queued (else it could take one)
        await everything_before(api, out, "after-relist-2")
        # a relist failing past its retry: out of sync while it keeps failing, in sync once a list completes
        api.fault("watch pods", Fault("gone"))
        api.fault("list pods", busy, busy, busy)
        api.disconnect()
        await out.wait_for(lambda: not reflector.in_sync)
        assert reflector.lists == 2  # the relist has not completed
        await out.wait_for(lambda: reflector.lists == 3, timeout=15)
        assert reflector.in_sync
        await everything_before(api, out, "after-relist-3")
        # a watch that cannot be resumed: dropped, then refused; in sync once a watch is answered (no relist)
        watches = len(api.requests_of("GET", "pods", watch=True))
        api.fault("watch pods", busy)
        api.disconnect()
        await out.wait_for(lambda: not reflector.in_sync)
        await out.wait_for(lambda: reflector.in_sync, timeout=15)
        assert len(api.requests_of("GET", "pods", watch=True)) == watches + 2 and reflector.lists == 3
        tg.cancel_scope.cancel()
    said = [line for line in logged if "sync" in line]
    assert (
        said
        == [
            "pods in all namespaces: out of sync until a LIST completes or a WATCH is answered",
            "pods in all namespaces: in sync again",
        ]
        * 2
    ), said


async def test_forbidden_is_fatal_and_says_what(api: FakeApi, client: KubeClient) -> None:
    api.fault("list pods", Fault("status", status=403))
    reflector = await reflect(client, Collector())
    with pytest.raises(Fatal) as caught:
        await reflector.run()
    assert caught.value.forbidden
    assert "not allowed to list and watch pods in all namespaces" in str(caught.value)


async def test_an_unreachable_server_is_retried_and_said_once_an_outage(tmp_path: Path) -> None:
    """Each retry of a server that does not answer is not a line of its own (every reflector would repeat
    it): the client's Reachability says the outage once, and once that it ended."""
    fake = await FakeApi().start()
    config = fake.kubeconfig(tmp_path)
    port = int(fake.url.rsplit(":", 1)[1])
    kube = await KubeClient.connect(str(config))
    logged: list[str] = []
    kube.reach.log = logger(logged.append)
    collected = Collector()
    try:
        reflector = Reflector(kube, PODS, None, collected.emit, FAST, log=logged.append)
        async with anyio.create_task_group() as tg:
            tg.start_soon(reflector.run)
            with anyio.fail_after(30):
                while reflector.lists < 1:
                    await anyio.sleep(0.01)
            await fake.stop()  # nothing listens there now
            with anyio.fail_after(30):
                while reflector.errors < 3:  # retried, and retried again
                    await anyio.sleep(0.01)
            assert kube.reach.unreachable == f"cannot reach the API server at {fake.url}: connection refused"
            fake = await FakeApi().start(port=port)  # it comes back
            fake.put("pods", crashing("p-0"))
            with anyio.fail_after(30):
                while not collected.events:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    finally:
        await kube.close()
        await fake.stop()
    outage = [line for line in logged if "API server" in line]
    assert len(outage) == 2, logged
    assert outage[0] == f"cannot reach the API server at {fake.url}: connection refused; retrying until it answers"
    assert outage[1].startswith(f"the API server at {fake.url} answers again (after ")
    assert not any("retrying in" in line for line in logged), logged


@pytest.mark.parametrize(
    "served,chosen",
    [(("v1beta1",), "v1beta1"), (("v1alpha1",), "v1alpha1"), (("v1alpha1", "v1beta1"), "v1beta1"), ((), None)],
)
async def test_the_dynamo_crds_version_is_discovered_preferring_v1beta1(
    api: FakeApi, client: KubeClient, served: tuple[str, ...], chosen: str | None
) -> None:
    api.dynamo_versions = served
    assert await discover_dynamo(client) == chosen


async def test_a_watch_event_of_another_shape_costs_that_event_alone(api: FakeApi, client: KubeClient) -> None:
    """`null` where Kubernetes allows an absent field reads as absent; a Pod without a name is skipped,
    said once; the watch goes on, with no retry."""
    out = Collector()
    logged: list[str] = []
    reflector = await reflect(client, out, log=logged.append)
    async with anyio.create_task_group() as tg:
        tg.start_soon(reflector.run)
        await watching(api, out)
        nulls = crashing("p-null", initContainerStatuses=None)
        nulls["metadata"]["ownerReferences"] = None
        api.put("pods", nulls)
        nameless = crashing("")
        api.put("pods", nameless)
        api.put("pods", healthy("p-after"))
        await out.wait_for(lambda: any(e.object.metadata.name == "p-after" for e in out.events))  # type: ignore[union-attr]
        tg.cancel_scope.cancel()
    assert [e.object.metadata.name for e in out.events] == ["p-null", "p-after"]  # type: ignore[union-attr]
    assert logged == ["pods in all namespaces: a watch event skipped: Pod without metadata.name"]
    assert len(api.requests_of("GET", "pods", watch=True)) == 1  # no retry: the same watch went on
