"""crashwatch.leader's edge cases against the fake API server's Leases: who wins, when a lease counts as
expired (our clock, not the holder's), a renewal that keeps failing, a release, a forbidden Lease."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from fakeapi import FakeApi, Fault, Request

from crashwatch.leader import LeaderElector, LeaderSettings, LeaseForbidden
from stream.sources.client import KubeClient

pytestmark = pytest.mark.anyio

FAST = LeaderSettings(lease_duration=1.0, renew_deadline=0.6, retry_period=0.1, request_timeout=2.0)


def lease(api: FakeApi) -> dict[str, object]:
    spec: dict[str, object] = api.objects["leases"][("ns", "crashwatch")]["spec"]
    return spec


@asynccontextmanager
async def running(
    client: KubeClient, *names: str, log: Callable[[str], None] = lambda m: None
) -> AsyncIterator[list[LeaderElector]]:
    electors = [LeaderElector(client, "ns", FAST, log, holder=name) for name in names]
    async with anyio.create_task_group() as tg:
        for elector in electors:
            tg.start_soon(elector.run)
        yield electors
        tg.cancel_scope.cancel()


def updates(api: FakeApi) -> list[Request]:
    return [r for r in api.requests if r.method == "PUT" and "/leases/" in r.path]


def reads(api: FakeApi) -> list[Request]:
    return [r for r in api.requests if r.method == "GET" and "/leases/" in r.path]


async def until(predicate: Callable[[], bool], timeout: float = 5) -> float:
    began = anyio.current_time()
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)
    return anyio.current_time() - began


async def test_of_two_candidates_one_leads_and_the_lease_says_it(api: FakeApi, client: KubeClient) -> None:
    async with running(client, "a", "b") as (a, b):
        await until(lambda: a.is_leader() or b.is_leader())
        await until(lambda: len(updates(api)) >= 3)  # several renewals, as the fake saw them
        assert a.is_leader() != b.is_leader()
        leader = a if a.is_leader() else b
        spec = lease(api)
        assert spec["holderIdentity"] == leader.identity
        assert (spec["leaseDurationSeconds"], spec["leaseTransitions"]) == (1, 0)
        assert spec["acquireTime"] != spec["renewTime"]  # renewed, acquired once


async def test_an_expired_looking_lease_is_waited_out_on_our_own_clock(api: FakeApi, client: KubeClient) -> None:
    """A holder whose clock is an hour behind: its renewTime says expired, but we never saw it change."""
    spec = {
        "holderIdentity": "other",
        "leaseDurationSeconds": 1,
        "renewTime": "2000-01-01T00:00:00.000000Z",
        "acquireTime": "2000-01-01T00:00:00.000000Z",
        "leaseTransitions": 4,
    }
    api.put("leases", {"kind": "Lease", "metadata": {"name": "crashwatch", "namespace": "ns"}, "spec": spec})
    async with running(client, "a") as (a,):
        took = await until(a.is_leader)
    # the lower bound is the safety property (a lease duration on our clock); the upper one only says it
    # was taken about then, with room for a loaded machine (it failed at 1.6 s once with 7 runnable tasks)
    assert 1.0 <= took < 2 * FAST.lease_duration
    assert lease(api)["leaseTransitions"] == 5 and lease(api)["holderIdentity"] == "a"


async def test_a_lease_that_keeps_changing_is_never_taken(api: FakeApi, client: KubeClient) -> None:
    spec = {"holderIdentity": "other", "leaseDurationSeconds": 1, "renewTime": "0", "leaseTransitions": 0}
    api.put("leases", {"kind": "Lease", "metadata": {"name": "crashwatch", "namespace": "ns"}, "spec": spec})
    async with running(client, "a") as (a,):
        for n in range(12):  # the holder renews every 0.25 s, for 3 s
            await anyio.sleep(0.25)
            current = api.objects["leases"][("ns", "crashwatch")]
            api.put("leases", {**current, "spec": {**current["spec"], "renewTime": str(n)}})
            assert not a.is_leader()
        took = await until(a.is_leader)  # it stops renewing: a lease duration later, it is ours
    assert 0.8 < took < 1.6  # a lease duration (1 s) after the last renewal it saw, give or take a loaded loop


async def test_two_candidates_racing_for_an_expired_lease_never_both_win(api: FakeApi, client: KubeClient) -> None:
    spec = {"holderIdentity": "gone", "leaseDurationSeconds": 1, "renewTime": "x", "leaseTransitions": 0}
    api.put("leases", {"kind": "Lease", "metadata": {"name": "crashwatch", "namespace": "ns"}, "spec": spec})
    async with running(client, "a", "b", "c") as electors:
        await until(lambda: any(e.is_leader() for e in electors))
        # every candidate keeps looking at the lease; until the fake has answered a dozen more reads (each
        # loser several chances to take it wrongly), never more than one leads
        seen = len(reads(api))
        with anyio.fail_after(5):
            while len(reads(api)) < seen + 12:
                assert sum(e.is_leader() for e in electors) == 1
                await anyio.sleep(0.01)
    assert lease(api)["leaseTransitions"] == 1
    conflicts = [r for r in api.requests if r.method == "PUT"]
    assert len(conflicts) >= 1


async def test_a_leader_that_cannot_renew_stops_before_the_lease_expires_for_others(
    api: FakeApi, client: KubeClient
) -> None:
    said: list[str] = []
    async with running(client, "a", log=said.append) as (a,):
        await until(a.is_leader)
        api.fault("put", *[Fault("status", status=503)] * 100)  # every renewal fails from now on
        api.fault("get", *[Fault("status", status=503)] * 100)
        last_renewal = max(r.at for r in api.requests if r.method in ("PUT", "POST"))
        await until(lambda: not a.is_leader(), 2)
        stopped = time.monotonic() - last_renewal
        # it stops writing the moment the deadline passes; saying so follows when its renewal attempt ends
        await until(lambda: any("lost the lease" in line for line in said), 2)
    # about the renew deadline after its last renewal (0.6 s), and in any case before the 1 s lease can
    # run out for the others: the safety the deadline is for, with room for a loaded machine's lag
    assert FAST.renew_deadline - 0.05 < stopped < FAST.lease_duration, stopped


async def test_a_released_lease_is_taken_at_the_next_try(api: FakeApi, client: KubeClient) -> None:
    first = LeaderElector(client, "ns", FAST, lambda m: None, holder="a")
    async with anyio.create_task_group() as tg:
        tg.start_soon(first.run)
        await until(first.is_leader)
        tg.cancel_scope.cancel()
    await first.release()
    spec = lease(api)
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"]) == ("", 1)
    async with running(client, "b") as (b,):
        took = await until(b.is_leader)
    assert took < FAST.retry_period * 1.5
    assert lease(api)["leaseTransitions"] == 1


@pytest.mark.parametrize(
    "status,said",
    [
        (403, "not allowed to get, create or update the lease ns/crashwatch"),
        (401, "cannot get, create or update the lease ns/crashwatch: the API server does not accept the credentials"),
    ],
)
async def test_a_forbidden_lease_says_so(api: FakeApi, tmp_path: Path, status: int, said: str) -> None:
    api.fault("get", Fault("status", status=status))
    client = await KubeClient.connect(str(api.kubeconfig(tmp_path)))
    try:
        elector = LeaderElector(client, "ns", FAST, lambda m: None, holder="a")
        with pytest.raises(LeaseForbidden, match=said):
            await elector.run()
    finally:
        await client.close()


# a retry period far beyond every bound below: a candidate that takes the Lease sooner heard of it by its watch
SLOW = LeaderSettings(lease_duration=90.0, renew_deadline=60.0, retry_period=30.0, request_timeout=2.0)


def lease_watches(api: FakeApi) -> list[Request]:
    return api.requests_of("GET", "leases", watch=True)


async def _released_while_b_follows(
    api: FakeApi, client: KubeClient, said: list[str], watches: int = 1
) -> LeaderElector:
    """`a` leads and `b` follows (SLOW settings: its next try is half a minute away); `a` stops and
    releases the Lease; `b` once it leads (within 10 s, so by its watch)."""
    a = LeaderElector(client, "ns", SLOW, lambda m: None, holder="a")
    b = LeaderElector(client, "ns", SLOW, said.append, holder="b")
    async with anyio.create_task_group() as outer:
        async with anyio.create_task_group() as tg:
            tg.start_soon(a.run)
            await until(a.is_leader)
            outer.start_soon(b.run)
            # its watch open (the `watches`-th request: the ones before it failed) and its first try over
            await until(lambda: b.holder() == "a" and len(lease_watches(api)) >= watches)
            await anyio.sleep(0.2)
            tg.cancel_scope.cancel()
        await a.release()
        await until(b.is_leader, 10)
        outer.cancel_scope.cancel()
    return b


async def test_a_follower_watching_the_lease_takes_a_released_one_at_once_not_at_its_next_try(
    api: FakeApi, client: KubeClient
) -> None:
    said: list[str] = []
    b = await _released_while_b_follows(api, client, said)
    assert b.watch_events >= 1  # the release, as the watch showed it
    assert lease(api)["holderIdentity"] == "b" and lease(api)["leaseTransitions"] == 1
    watches = lease_watches(api)
    assert {w.query["fieldSelector"] for w in watches} == {"metadata.name=crashwatch"}
    assert all(w.path == "/apis/coordination.k8s.io/v1/namespaces/ns/leases" for w in watches)
    assert not any("watch: " in line or "cannot watch" in line for line in said), said


async def test_a_watch_that_drops_is_opened_again(api: FakeApi, client: KubeClient) -> None:
    api.fault("watch leases", Fault("cut"), Fault("status", status=500))  # cut at once, then one failure
    said: list[str] = []
    await _released_while_b_follows(api, client, said, watches=3)  # cut, refused, then open
    assert any("lease ns/crashwatch: watch: " in line for line in said)


async def test_a_refused_watch_is_said_once_and_the_lease_is_still_taken_by_reading_it(
    api: FakeApi, client: KubeClient
) -> None:
    """A Role without `watch` on leases (as k8s/watcher's before it had it): polling alone, as before."""
    api.fault("watch leases", Fault("status", status=403))
    spec = {"holderIdentity": "other", "leaseDurationSeconds": 1, "renewTime": "x", "leaseTransitions": 0}
    api.put("leases", {"kind": "Lease", "metadata": {"name": "crashwatch", "namespace": "ns"}, "spec": spec})
    said: list[str] = []
    async with running(client, "a", log=said.append) as (a,):
        await until(a.is_leader)  # a lease duration later, by its reads alone
    refused = [line for line in said if "cannot watch the lease ns/crashwatch" in line]
    assert len(refused) == 1 and "403" in refused[0]
    assert len(lease_watches(api)) == 1  # a refused watch is not asked for again
    assert a.watch_events == 0
