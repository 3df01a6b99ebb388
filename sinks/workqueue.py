"""The keyed work queue of the sinks that write to the API server: status writes and Events.

Items are put under a key (the object they are about, or the Event series), and per key:
- coalescing: an item put while an older one of its key still waits replaces it, and keeps its turn;
- one at a time: while an item of a key is being handled (taken, not yet done), a newer one of that key
  waits, and is handed out once the first is done;
- bounded, when given a capacity: an item of a key that is not waiting yet is dropped once `capacity`
  keys wait.
Turns are first come, first served, by when a key began to wait.

`KeyedQueue` is that bookkeeping alone, pure, for a part that folds its own items (sinks.events.Folder).
`WorkQueue` adds what a sink does with it in the event loop: `serve` hands each item to a handler in a
task of its own (an item superseded before its handler started is skipped), or a consumer pulls items
one at a time (`ready`, `take`, `done`); `pace` takes a token from the one TokenBucket (the rate limit);
`backoff` is the one Backoff for retries; `newer` lets a handler wait (a backoff of its own) and be cut
short when its item is superseded or the queue closes. `close` drains: what is being handled finishes,
what waits is still handed out, and a handler sees `closed` to drop what should not be done at a stop;
a consumer that drops at a stop what would wait for tokens paces with `finish=False` and calls `drop`.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, Literal, TypeVar

import anyio

from stream.sources.client import Backoff, TokenBucket

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
Put = Literal["queued", "replaced", "dropped"]


class KeyedQueue(Generic[K, T]):
    """Keyed items waiting their turn: the newest per key, one of a key handled at a time. Pure."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity
        self._waiting: dict[K, tuple[int, T]] = {}  # per key: its turn, and its newest item
        self._turns: list[tuple[int, K]] = []  # a heap of the waiting keys that are not being handled
        self._busy: set[K] = set()  # keys being handled
        self._next = itertools.count()

    def put(self, key: K, item: T) -> Put:
        """Add `item`; "replaced" when an older item of its key was waiting, "dropped" when full."""
        waiting = self._waiting.get(key)
        if waiting is not None:
            self._waiting[key] = (waiting[0], item)
            return "replaced"
        if self.capacity is not None and len(self._waiting) >= self.capacity:
            return "dropped"
        turn = next(self._next)
        self._waiting[key] = (turn, item)
        if key not in self._busy:
            heapq.heappush(self._turns, (turn, key))
        return "queued"

    def take(self) -> tuple[K, T] | None:
        """The next key whose turn it is and its item, now being handled; None when none can be."""
        if not self._turns:
            return None
        _, key = heapq.heappop(self._turns)
        _, item = self._waiting.pop(key)
        self._busy.add(key)
        return key, item

    def done(self, key: K) -> None:
        """The item of `key` taken last is handled: a newer one of the key may now be taken, in its turn."""
        self._busy.remove(key)
        waiting = self._waiting.get(key)
        if waiting is not None:
            heapq.heappush(self._turns, (waiting[0], key))

    def pending(self, key: K) -> T | None:
        """The item of `key` waiting, if any: a handler of an older one learns it was superseded."""
        waiting = self._waiting.get(key)
        return waiting[1] if waiting is not None else None

    def busy(self, key: K) -> bool:
        """Whether an item of `key` is being handled."""
        return key in self._busy

    def active(self, key: K) -> bool:
        """Whether an item of `key` waits or is being handled."""
        return key in self._busy or key in self._waiting

    def takeable(self) -> bool:
        """Whether `take` would hand out an item."""
        return bool(self._turns)

    def unfinished(self) -> int:
        """Keys with an item waiting or being handled."""
        return len(self._busy) + sum(1 for key in self._waiting if key not in self._busy)

    def drop(self) -> int:
        """Forget every item waiting (a stop that does not wait for them); how many there were."""
        dropped = len(self._waiting)
        self._waiting.clear()
        self._turns.clear()
        return dropped

    def __len__(self) -> int:
        """Keys with an item waiting."""
        return len(self._waiting)


class WorkQueue(KeyedQueue[K, T]):
    """The keyed queue in the event loop, with the rate limit and retry schedule of its writes."""

    def __init__(
        self,
        rate: float,
        burst: int,
        capacity: int | None = None,
        retry_initial: float = 0.5,
        retry_max: float = 30.0,
        clock: Callable[[], float] = anyio.current_time,
    ) -> None:
        super().__init__(capacity)
        self.rate = rate
        self.burst = burst
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self.clock = clock
        self.closed = False
        self._bucket: TokenBucket | None = None  # made at the first token, on the clock then running
        self._changed = anyio.Event()  # set (and replaced) when an item is put or done, or at close
        self._stopped = anyio.Event()
        self._newer: dict[K, anyio.Event] = {}  # per key waiting in `newer`

    def put(self, key: K, item: T) -> Put:
        put = super().put(key, item)
        if put != "dropped":
            self._changed = _set(self._changed)
            newer = self._newer.pop(key, None)
            if newer is not None:
                newer.set()
        return put

    def done(self, key: K) -> None:
        super().done(key)
        self._changed = _set(self._changed)

    def close(self) -> None:
        """No more items will come: drain (see the module's docstring), and cut every wait in `newer` short."""
        self.closed = True
        self._stopped.set()
        self._changed = _set(self._changed)
        for newer in self._newer.values():
            newer.set()
        self._newer.clear()

    async def ready(self) -> bool:
        """Wait until an item can be taken: True; False once closed with none left waiting."""
        while not self.takeable():
            if self.closed and not self._waiting:
                return False
            changed = self._changed
            await changed.wait()
        return True

    async def get(self) -> tuple[K, T] | None:
        """The next item to handle (call `done` after it), waiting for one; None once closed and drained."""
        if not await self.ready():
            return None
        return self.take()

    async def serve(self, handle: Callable[[K, T], Awaitable[None]]) -> None:
        """Hand every item to `handle`, each in a task of its own, until closed and drained; returns once
        every handler has returned."""
        async with anyio.create_task_group() as tg:
            while (got := await self.get()) is not None:
                tg.start_soon(self._handle, handle, *got)

    async def _handle(self, handle: Callable[[K, T], Awaitable[None]], key: K, item: T) -> None:
        try:
            if self.pending(key) is None:  # else superseded before it started: the newer one is handled
                await handle(key, item)
        finally:
            self.done(key)

    async def pace(self, finish: bool = True) -> bool:
        """Take a token of the rate limit, waiting until it is there. False only with `finish` unset, when
        the queue closed (or was closed) while it would wait: what needs a token more is not sent."""
        now = self.clock()
        if self._bucket is None:
            self._bucket = TokenBucket(self.rate, self.burst, now)
        delay = self._bucket.take(now)
        if delay <= 0:
            return True
        if finish:
            await anyio.sleep(delay)
            return True
        with anyio.move_on_after(delay):
            await self._stopped.wait()
        return not self.closed

    def backoff(self) -> Backoff:
        """The retry schedule of one item's write."""
        return Backoff(self.retry_initial, self.retry_max)

    async def newer(self, key: K, seconds: float) -> bool:
        """Wait `seconds`, or less: True when cut short because a newer item of `key` came or the queue
        closed (at once when that is so already)."""
        if not (self.closed or key in self._waiting):
            event = self._newer.setdefault(key, anyio.Event())
            with anyio.move_on_after(seconds):
                await event.wait()
            if self._newer.get(key) is event:
                del self._newer[key]  # the time ran out
        return self.closed or key in self._waiting


def _set(event: anyio.Event) -> anyio.Event:
    """Wake the waiters of `event`, and a fresh one for the next wait."""
    event.set()
    return anyio.Event()
