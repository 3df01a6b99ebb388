"""The reflector's namespace filter (a shard, a namespace selector) against the fake API server: another
namespace's objects are neither held nor handed on, a namespace let go is handed on as DELETED, and one
taken in is listed again without losing what the watch was delivering meanwhile."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from collector import Collector
from fakeapi import FakeApi, crashing, healthy

from stream.sources.client import KubeClient
from stream.sources.reflector import Reflector, WatchSettings
from stream.sources.resources import PODS

pytestmark = pytest.mark.anyio

FAST = WatchSettings(page_size=500, idle_timeout=5, initial_backoff=0.05, max_backoff=0.2)


async def reflect(client: KubeClient, collector: Collector, **kw: Any) -> Reflector:
    return Reflector(client, PODS, None, collector.emit, FAST, **kw)


async def watching(api: FakeApi, out: Collector, watches: int = 1) -> None:
    """Until the fake has seen this many watch requests: the list before the last one is done."""
    await out.wait_for(lambda: len(api.requests_of("GET", "pods", watch=True)) >= watches)


async def everything_before(api: FakeApi, out: Collector, marker: str, namespace: str) -> None:
    """Until a Pod made now in a kept namespace has been handed on (as test_watch_faults' helper)."""
    api.put("pods", healthy(marker, namespace=namespace))
    await out.wait_for(lambda: any(e.object.metadata.name == marker for e in out.events))  # type: ignore[union-attr]


def names(out: Collector) -> list[tuple[str, str, str]]:
    return [(e.type, e.object.metadata.namespace, e.object.metadata.name) for e in out.events]  # type: ignore[union-attr]


async def test_objects_of_namespaces_not_kept_cost_nothing_but_their_decoding(api: FakeApi, client: KubeClient) -> None:
    kept = {"ours"}
    api.put("pods", healthy("a", namespace="ours"))
    api.put("pods", healthy("b", namespace="theirs"))
    out = Collector()
    reflector = await reflect(client, out, keep=kept.__contains__)
    async with anyio.create_task_group() as tg:
        tg.start_soon(reflector.run)
        await watching(api, out)
        api.put("pods", crashing("b", namespace="theirs"))
        api.put("pods", crashing("a", namespace="ours"))
        api.delete("pods", "theirs", "b")
        api.put("pods", healthy("zz-marker", namespace="ours"))
        await out.wait_for(lambda: len(out.events) == 3)
        tg.cancel_scope.cancel()
    assert names(out) == [("ADDED", "ours", "a"), ("MODIFIED", "ours", "a"), ("ADDED", "ours", "zz-marker")]
    assert set(reflector.known) == {("ours", "a"), ("ours", "zz-marker")}
    assert reflector.resource_version == str(api.version)  # the others' events still move it on


async def test_a_namespace_let_go_is_deleted_and_one_taken_in_is_listed_again(api: FakeApi, client: KubeClient) -> None:
    kept = {"ours"}
    for namespace in ("ours", "new"):
        api.put("pods", healthy("a", namespace=namespace))
        api.put("pods", healthy("b", namespace=namespace))
    out = Collector()
    said: list[str] = []
    reflector = await reflect(client, out, keep=lambda ns: ns in kept, log=said.append)
    async with anyio.create_task_group() as tg:
        tg.start_soon(reflector.run)
        await watching(api, out)
        await everything_before(api, out, "m-0", "ours")
        assert names(out) == [("ADDED", "ours", "a"), ("ADDED", "ours", "b"), ("ADDED", "ours", "m-0")]
        out.events.clear()

        kept.add("new")  # relabelled in: the watch stops between two reads, a list brings its objects
        reflector.relist()
        api.put("pods", crashing("a", namespace="new"))  # changed meanwhile: the list has its latest state
        await out.wait_for(lambda: len(api.requests_of("GET", "pods", watch=False)) == 2)
        await watching(api, out, 2)
        await everything_before(api, out, "m-1", "ours")
        assert sorted(names(out)) == [("ADDED", "new", "a"), ("ADDED", "new", "b"), ("ADDED", "ours", "m-1")]
        new_a = next(e.object for e, seen in zip(out.events, names(out), strict=True) if seen[1:] == ("new", "a"))
        assert new_a.status.container_statuses[0].restart_count == 2  # type: ignore[union-attr]
        out.events.clear()

        kept.discard("ours")  # relabelled out: what is held of it goes, as DELETED
        await reflector.forget("ours")
        assert sorted(names(out)) == [
            ("DELETED", "ours", "a"),
            ("DELETED", "ours", "b"),
            ("DELETED", "ours", "m-0"),
            ("DELETED", "ours", "m-1"),
        ]
        out.events.clear()
        api.put("pods", crashing("b", namespace="ours"))  # no longer ours: not handed on
        api.put("pods", crashing("b", namespace="new"))
        await out.wait_for(lambda: len(out.events) == 1)
        tg.cancel_scope.cancel()
    assert names(out) == [("MODIFIED", "new", "b")]
    assert {key[0] for key in reflector.known} == {"new"}
    assert any("the namespaces kept changed, listing again" in line for line in said)
