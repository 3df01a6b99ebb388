"""The sinks' keyed work queue on plain objects: coalescing per key, one item of a key at a time, turns
first come first served, the bound, and, in the event loop, serving handlers, draining at close, the
rate limit on a fake clock and waits cut short by a newer item."""

from __future__ import annotations

import anyio
import pytest

from sinks.workqueue import KeyedQueue, WorkQueue


def test_a_newer_item_replaces_a_waiting_one_and_keeps_its_turn() -> None:
    queue: KeyedQueue[str, int] = KeyedQueue()
    assert [queue.put("a", 1), queue.put("b", 1), queue.put("a", 2)] == ["queued", "queued", "replaced"]
    assert len(queue) == 2 and queue.pending("a") == 2
    assert [queue.take(), queue.take(), queue.take()] == [("a", 2), ("b", 1), None]


def test_an_item_of_a_key_being_handled_waits_until_it_is_done_then_takes_the_turn_it_came_in() -> None:
    queue: KeyedQueue[str, int] = KeyedQueue()
    queue.put("a", 1)
    assert queue.take() == ("a", 1) and queue.busy("a")
    assert queue.put("a", 2) == "queued"  # a new item: the one being handled is no longer waiting
    queue.put("b", 1)
    assert queue.put("a", 3) == "replaced"
    assert queue.take() == ("b", 1)  # b's turn: a is still being handled
    assert queue.take() is None and queue.pending("a") == 3 and queue.unfinished() == 2
    queue.put("c", 1)
    queue.done("a")
    assert queue.take() == ("a", 3)  # it came in before c
    queue.done("b")
    queue.done("a")
    assert queue.take() == ("c", 1)
    queue.done("c")
    assert (queue.unfinished(), queue.active("a"), queue.busy("a")) == (0, False, False)


def test_past_its_capacity_a_new_key_is_dropped_while_a_waiting_key_still_takes_its_newest() -> None:
    queue: KeyedQueue[str, int] = KeyedQueue(capacity=2)
    assert [queue.put(key, 1) for key in "abc"] == ["queued", "queued", "dropped"]
    assert queue.put("a", 2) == "replaced"
    assert queue.pending("c") is None and not queue.active("c")
    taken = queue.take()
    assert taken == ("a", 2)
    assert queue.put("c", 1) == "queued"  # a's place came free when it was taken
    assert queue.drop() == 2 and queue.take() is None and len(queue) == 0


@pytest.mark.anyio
async def test_serving_hands_out_the_newest_item_of_a_key_one_at_a_time_and_drains_at_close() -> None:
    queue: WorkQueue[str, int] = WorkQueue(rate=1000, burst=1000)
    handled: list[tuple[str, int]] = []
    running: set[str] = set()
    gate = anyio.Event()

    async def handle(key: str, item: int) -> None:
        assert key not in running  # one item of a key at a time
        running.add(key)
        handled.append((key, item))
        if item == 1:
            await gate.wait()
        running.discard(key)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(queue.serve, handle)
            queue.put("a", 1)
            await anyio.wait_all_tasks_blocked()
            assert handled == [("a", 1)]
            for item in (2, 3, 4):  # while the first is handled: only the newest follows it
                queue.put("a", item)
            queue.put("b", 1)
            queue.close()  # what waits is still handed out
            await anyio.wait_all_tasks_blocked()
            assert sorted(handled) == [("a", 1), ("b", 1)]
            gate.set()
    assert handled[-1] == ("a", 4) and len(handled) == 3
    assert queue.unfinished() == 0


@pytest.mark.anyio
async def test_an_item_superseded_before_its_handler_started_is_skipped() -> None:
    queue: WorkQueue[str, int] = WorkQueue(rate=1000, burst=1000)
    handled: list[int] = []

    async def handle(key: str, item: int) -> None:
        handled.append(item)

    queue.put("a", 1)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            got = await queue.get()  # taken, its handler not started yet
            assert got == ("a", 1)
            queue.put("a", 2)
            await queue._handle(handle, *got)
            tg.start_soon(queue.serve, handle)
            queue.close()
    assert handled == [2]


@pytest.mark.anyio
async def test_the_rate_limit_gives_the_burst_then_waits_and_a_stop_drops_what_would_wait() -> None:
    now = [100.0]
    queue: WorkQueue[str, int] = WorkQueue(rate=2.0, burst=2, clock=lambda: now[0])
    assert [await queue.pace(finish=False), await queue.pace(finish=False)] == [True, True]
    now[0] += 0.5  # one token back
    assert await queue.pace(finish=False)
    queue.close()
    with anyio.fail_after(5):  # a token 0.5 s away is not waited for once stopped
        assert not await queue.pace(finish=False)
    now[0] += 10.0
    assert await queue.pace(finish=False)  # at hand: sent even at a stop


@pytest.mark.anyio
async def test_a_wait_is_cut_short_by_a_newer_item_of_its_key_or_by_close_and_runs_out_otherwise() -> None:
    queue: WorkQueue[str, int] = WorkQueue(rate=1000, burst=1000)
    assert await queue.newer("a", 0.01) is False  # ran out: nothing newer
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            cut: list[bool] = []

            async def wait(key: str) -> None:
                cut.append(await queue.newer(key, 60))

            tg.start_soon(wait, "a")
            tg.start_soon(wait, "b")
            await anyio.wait_all_tasks_blocked()
            queue.put("a", 1)  # wakes a's wait alone
            await anyio.wait_all_tasks_blocked()
            assert cut == [True]
            queue.close()
    assert cut == [True, True]
    assert await queue.newer("c", 60) is True  # closed: at once


@pytest.mark.anyio
async def test_draining_waits_for_an_item_held_behind_its_keys_handler() -> None:
    queue: WorkQueue[str, int] = WorkQueue(rate=1000, burst=1000)
    queue.put("a", 1)
    assert queue.take() == ("a", 1)
    queue.put("a", 2)
    queue.close()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            got: list[tuple[str, int] | None] = []

            async def pull() -> None:
                got.append(await queue.get())
                got.append(await queue.get())

            tg.start_soon(pull)
            await anyio.wait_all_tasks_blocked()
            assert got == []  # closed, but a's newer item waits for the first to be done
            queue.done("a")
    assert got == [("a", 2), None]  # then nothing is left to hand out
    assert queue.unfinished() == 1  # the one handed out, until it is done
    queue.done("a")
    assert queue.unfinished() == 0
