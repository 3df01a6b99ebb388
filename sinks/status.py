"""The status patcher: writes the DCD and DGD statuses the aggregator wants, and nothing else.

What to write is decided upstream (pipeline.status); how is decided here. The wanted statuses go through
the sinks' keyed work queue (sinks.workqueue), keyed by object: each object has at most one write in
flight, and while it is in flight the newest wanted status replaces any older one (coalescing).
A write is a JSON merge patch of the status subresource that carries the observed resourceVersion, so a
concurrent writer makes it fail with 409 instead of being overwritten: then the object is read again,
the pipeline's decision rebased onto what it says now (`StatusWanted.onto`: the owned conditions merged
in, other conditions untouched; nothing is decided again here), and the write retried, or dropped if the
object already says it. 429 and 5xx are retried with the queue's backoff, honouring Retry-After.
The queue's token bucket bounds the rate of writes. When another writer overwrites a failure that still
holds, the aggregator wants the same status again: the first such rewrite is sent at once, and further
ones in a row wait with per-object exponential backoff, so two writers never fight in a tight loop. DCD
writes go before DGD writes: the Dynamo operator reconciles a graph 10-30 ms after any write to one of its
DCDs and recomputes the graph's `state`, so a DGD write of `state: failed` waits until the DCD writes of
its namespace under way have landed, and the reset that follows is answered at once (see
docs/status.md). A DGD write that clears goes at once: a reset takes nothing from it, and a fix's new
generation must read the clear before the operator's first status of it does. When its input ends (the
watcher is stopping), the queue is closed and drained: the writes under way and those not yet sent are
finished, and the reasserts of overwritten statuses are dropped, never waited for: the next watcher
decides them again from what it observes.

With leader election (crashwatch.leader) only the leader writes: `is_leader` is asked at the moment each
write is sent, and a write wanted while it says no is dropped. The watcher decides every status again
from what it observes when it gains the lease.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import msgspec
from anyio.abc import ObjectReceiveStream

from pipeline.outputs import Output, StatusWanted
from pipeline.views import status_view
from sinks.workqueue import WorkQueue
from stream.model.messages import About, logger
from stream.model.objects import DynamoComponentDeployment, DynamoGraphDeployment
from stream.model.times import now_seconds, since
from stream.sources.client import ApiError, KubeClient, Unreachable
from stream.sources.resources import Resource, dynamo_resources

Log = Callable[[str], None]
DGD_KIND = "DynamoGraphDeployment"
FAILED = "failed"
_encode = msgspec.json.Encoder().encode


@dataclass
class PatchSettings:
    qps: float = 50.0
    burst: int = 100
    concurrency: int = 8
    request_timeout: float = 30.0
    # an overwritten status is written again at once; a second overwrite in a row waits this long...
    reassert_initial: float = 1.0
    reassert_max: float = 300.0  # ...doubling up to this
    # a DGD overwritten this soon after our last DCD write in its namespace is the operator's reset that
    # our write set off (it follows within 10-30 ms): answered at once, not counted as a fight
    provoked_window: float = 2.0
    retry_max: float = 30.0


@dataclass
class _WriteState:
    """One object's writes beside the queue (which holds its newest wanted status): what landed last."""

    written: tuple[object, ...] | None = None  # what our last successful write said
    written_at: float = 0.0
    repeats: int = 0  # writes in a row of the same status: another writer keeps overwriting it
    episode: int = 0  # a DGD's: counts our DCD writes in its namespace, each of which restarts its backoff
    # our last write: the resourceVersion it was made on, and the one it made. A want decided on the
    # former (the aggregator counted our write before its echo came back) is sent with the latter,
    # which spares a 409 and a reread when statuses change in quick succession.
    wrote_on: str = ""
    wrote_to: str = ""
    provoked_by: float = -1.0  # the DCD write (its time) whose graph reset this graph last answered at once


Key = tuple[str, str, str]  # kind, namespace, name


# upper bounds (seconds) of the buckets of write delays: from the event that decided a status to the
# write that landed it
DELAY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass
class PatchStats:
    writes: int = 0
    conflicts: int = 0
    retries: int = 0
    unchanged: int = 0  # already saying what was wanted: found so when read again, or since our own last write
    failures: int = 0
    not_leader: int = 0  # not sent: another replica holds the lease (--leader-elect)
    delay_buckets: tuple[float, ...] = DELAY_BUCKETS  # upper bounds, seconds
    delays: list[int] = field(default_factory=lambda: [0] * (len(DELAY_BUCKETS) + 1))  # per bucket, then over
    delay_sum: float = 0.0

    def observe_delay(self, seconds: float) -> None:
        self.delays[bisect.bisect_left(self.delay_buckets, seconds)] += 1
        self.delay_sum += seconds


class StatusPatcher:
    def __init__(
        self,
        client: KubeClient,
        settings: PatchSettings | None = None,
        log: Log | None = None,
        clock: Callable[[], str] | None = None,
        is_leader: Callable[[], bool] | None = None,
    ) -> None:
        self.client = client
        self.is_leader = is_leader or (lambda: True)
        self.settings = settings or PatchSettings()
        self.log = logger(log)
        self.clock = clock or now_seconds
        self.stats = PatchStats()
        # the newest wanted status per object, one write of an object at a time, at --qps and --burst
        self.queue: WorkQueue[Key, StatusWanted] = WorkQueue(
            self.settings.qps, self.settings.burst, retry_max=self.settings.retry_max
        )
        self._objects: dict[Key, _WriteState] = {}
        self._requests = anyio.CapacityLimiter(self.settings.concurrency)
        # DCD writes being sent, per namespace, and an event set whenever one ends: a DGD write waits
        # for them (the operator resets a graph's state after any write to one of its DCDs)
        self._dcd_sending: dict[str, int] = {}
        self._dcd_landed = anyio.Event()
        self._dcd_written_at: dict[str, float] = {}  # when our last DCD write per namespace landed
        # the DGDs' entries by namespace, for a DCD write to reach its graphs without a scan of every object
        self._graphs: dict[str, dict[Key, _WriteState]] = {}

    async def run(self, receive: ObjectReceiveStream[list[Output]]) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.queue.serve, self._drive)
            try:
                async with receive:
                    async for batch in receive:
                        wants = [item for item in batch if isinstance(item, StatusWanted)]
                        # DCDs first: their writes start (and are counted) before a DGD write of the batch looks
                        for item in sorted(wants, key=lambda w: w.kind == DGD_KIND):
                            self._want(item)
            finally:
                self.queue.close()  # drained: a reassert waiting out its backoff is dropped (see _reassert)

    async def _after_dcd_writes(self, namespace: str) -> None:
        """Wait until no DCD write of `namespace` is being sent."""
        while self._dcd_sending.get(namespace, 0) > 0:
            landed = self._dcd_landed
            await landed.wait()

    def _dcd_ended(self, namespace: str) -> None:
        left = self._dcd_sending[namespace] - 1
        if left:
            self._dcd_sending[namespace] = left
        else:
            del self._dcd_sending[namespace]
        self._dcd_landed.set()
        self._dcd_landed = anyio.Event()

    def _dcd_written(self, namespace: str) -> None:
        """One of our DCD writes landed. The operator will reset the state of the DCD's graph (it reconciles
        a graph after any write to one of its DCDs), and the flip that made us write (a Pod Ready for a
        moment, a new restart) makes it overwrite the graph on its own too: a new episode, not a fight.
        The graphs of the namespace start their backoff afresh, and a reset that follows within the
        provoked window is answered at once besides."""
        self._dcd_written_at[namespace] = anyio.current_time()
        for entry in self._graphs.get(namespace, {}).values():
            entry.repeats = 0
            entry.episode += 1

    def _provoked(self, namespace: str, entry: _WriteState) -> bool:
        """Whether one of our DCD writes in `namespace` landed within the provoked window, and this graph
        has not yet answered a reset after it: a reset now is the operator's answer to that write. One
        answer per graph per DCD write, so an operator that rewrites on its own still meets the backoff."""
        landed = self._dcd_written_at.get(namespace)
        if (
            landed is None
            or landed == entry.provoked_by
            or anyio.current_time() - landed >= self.settings.provoked_window
        ):
            return False
        entry.provoked_by = landed
        return True

    def unfinished(self) -> int:
        """Objects with a write under way or waiting to be sent."""
        return self.queue.unfinished()

    def _want(self, wanted: StatusWanted) -> None:
        key = (wanted.kind, wanted.namespace, wanted.name)
        if key not in self._objects:
            entry = self._objects[key] = _WriteState()
            if wanted.kind == DGD_KIND:
                self._graphs.setdefault(wanted.namespace, {})[key] = entry
        self.queue.put(key, wanted)  # newer replaces older: only the newest is ever written

    async def _drive(self, key: Key, wanted: StatusWanted) -> None:
        """Write an object's newest wanted status (the queue hands out one of an object at a time)."""
        entry = self._objects[key]
        try:
            if wanted.owned() == entry.written and entry.wrote_on and wanted.resource_version == entry.wrote_on:
                # decided on the version our last write was made on, before its echo came back: the
                # object says it since that write, and no one has overwritten it that we know of
                self.stats.unchanged += 1
                return
            if wanted.owned() == entry.written:
                repeats = await self._reassert(key, entry, wanted)
                if repeats is None:
                    return
            else:
                repeats = 0
            episode = entry.episode
            if wanted.kind == DGD_KIND:
                sent = await self._write_graph(key, entry, wanted)
            else:
                sent = await self._write_component(key, entry, wanted)
            if sent:
                entry.written = wanted.owned()
                entry.written_at = anyio.current_time()
                # a DCD write of ours that landed meanwhile restarted the count
                entry.repeats = repeats if entry.episode == episode else 0
        finally:
            if self.queue.pending(key) is None and entry.written is None:
                self._forget(key)

    async def _reassert(self, key: Key, entry: _WriteState, wanted: StatusWanted) -> int | None:
        """The same again: someone overwrote it. Wait, longer each time in a row; the writes in a row once
        this one lands, or None when it is dropped (the watcher is stopping) or superseded meanwhile.

        The first rewrite goes at once: the operator overwrote it on a trigger of its own (a Deployment's
        ready count changed, one of the graph's DCDs was written), which a status write does not set off
        again. So does the answer to a graph's reset that our own DCD write provoked (it reconciles the
        graph after any write to one of its DCDs): that is not a fight, and is not counted. Other rewrites
        in a row back off."""
        if self.queue.closed:
            return None
        provoked = False
        if entry.repeats == 0:
            delay = 0.0
        elif wanted.kind == DGD_KIND and self._provoked(wanted.namespace, entry):
            provoked, delay = True, 0.0
        else:
            delay = min(self.settings.reassert_max, self.settings.reassert_initial * 2 ** (entry.repeats - 1))
        remaining = entry.written_at + delay - anyio.current_time()
        if remaining > 0 and await self.queue.newer(key, remaining):
            return None  # stopping, or a newer want came meanwhile: that one is decided about instead
        return entry.repeats if provoked else entry.repeats + 1

    async def _write_graph(self, key: Key, entry: _WriteState, wanted: StatusWanted) -> bool:
        if wanted.state == FAILED:  # the state the operator's reset would undo; nothing else waits
            await self._after_dcd_writes(wanted.namespace)
            if self.queue.pending(key) is not None:
                return False  # a newer want came meanwhile: that one is written instead
        return await self._write(key, entry, wanted)

    async def _write_component(self, key: Key, entry: _WriteState, wanted: StatusWanted) -> bool:
        self._dcd_sending[wanted.namespace] = self._dcd_sending.get(wanted.namespace, 0) + 1
        try:
            sent = await self._write(key, entry, wanted)
        finally:
            self._dcd_ended(wanted.namespace)
        if sent:
            self._dcd_written(wanted.namespace)
        return sent

    def _forget(self, key: Key) -> None:
        """Nothing to write and nothing written: the object's entry goes."""
        self._objects.pop(key, None)
        graphs = self._graphs.get(key[1])
        if graphs is not None and graphs.pop(key, None) is not None and not graphs:
            del self._graphs[key[1]]

    async def _write(self, key: Key, entry: _WriteState, wanted: StatusWanted) -> bool:
        """Patch until it lands, is no longer needed, or is superseded. True when the object says it."""
        resource = _resource(wanted)
        path = resource.path(wanted.namespace, wanted.name, "status")
        where = f"{wanted.kind} {wanted.namespace}/{wanted.name}"
        about = About(wanted.kind, wanted.namespace, wanted.name)
        backoff = self.queue.backoff()
        current: StatusWanted | None = wanted
        while True:
            if current is None:
                self.stats.unchanged += 1
                return True
            if entry.wrote_to and current.resource_version == entry.wrote_on:
                current = msgspec.structs.replace(current, resource_version=entry.wrote_to)
            body = _encode(_patch(current))
            await self.queue.pace()  # --qps and --burst
            try:
                async with self._requests:
                    if not self.is_leader():  # asked as late as can be: a lost lease stops writes at once
                        self.stats.not_leader += 1
                        return False
                    response = await self.client.request(
                        "PATCH",
                        path,
                        body=body,
                        content_type="application/merge-patch+json",
                        timeout=self.settings.request_timeout,
                    )
            except ApiError as exc:
                if exc.status == 409:
                    self.stats.conflicts += 1
                    found, current = await self._reread(resource, wanted, where)
                    if not found:
                        return False
                    continue
                if exc.status == 404:
                    self.log(f"{where} is gone; its status is not written", "warning", about)
                    return False
                if not exc.retryable:
                    self.stats.failures += 1
                    self.log(f"cannot write the status of {where}: {exc}", "error", about)
                    return False
                self.stats.retries += 1
                delay = backoff.next(exc.retry_after)
                if not isinstance(exc, Unreachable):  # an outage is said once, by the client's Reachability
                    self.log(f"writing the status of {where}: {exc}; retrying in {delay:.1f}s", "warning", about)
                await anyio.sleep(delay)
                if self.queue.pending(key) is not None:
                    return False  # superseded while waiting: the newer one is written instead
                continue
            self.stats.writes += 1
            late = _delay(wanted.time)
            if late is not None:
                self.stats.observe_delay(late)
            after = f" ({late * 1000:.0f} ms after the event)" if late is not None else ""
            self.log(f"wrote {where}: {_describe(current)}{after}", "info", about)
            try:
                entry.wrote_on, entry.wrote_to = current.resource_version, _written(response.body)
            except (msgspec.DecodeError, msgspec.ValidationError):
                entry.wrote_on = entry.wrote_to = ""
            return True

    async def _reread(self, resource: Resource, wanted: StatusWanted, where: str) -> tuple[bool, StatusWanted | None]:
        """Whether the object is still there (not gone, not replaced by another of the same name), and
        the write it now needs: the wanted status rebased onto what it says now, or None if it says it."""
        backoff = self.queue.backoff()
        while True:
            try:
                response = await self.client.request(
                    "GET", resource.path(wanted.namespace, wanted.name), timeout=self.settings.request_timeout
                )
                break
            except ApiError as exc:
                if exc.status == 404:
                    return False, None
                if not exc.retryable:
                    self.log(f"cannot read {where}: {exc}")
                    return False, None
                await anyio.sleep(backoff.next(exc.retry_after))
        try:
            obj = resource.object_decoder().decode(response.body)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            self.log(f"cannot read {where}: {exc}")
            return False, None
        if not isinstance(obj, DynamoComponentDeployment | DynamoGraphDeployment):
            return False, None
        obj.api_version = obj.api_version or wanted.api_version
        view = status_view(obj)
        if view.uid != wanted.uid:
            return False, None
        return True, wanted.onto(view, self.clock())


class _Meta(msgspec.Struct, rename="camel"):
    resource_version: str = ""


class _Written(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


_decode_written = msgspec.json.Decoder(_Written).decode


def _written(body: bytes) -> str:
    """The resourceVersion a write produced, from the object the server sent back."""
    return _decode_written(body).metadata.resource_version


def _patch(wanted: StatusWanted) -> dict[str, object]:
    body = wanted.patch()
    if wanted.resource_version:
        body["metadata"] = {"resourceVersion": wanted.resource_version}  # the precondition
    return body


def _resource(wanted: StatusWanted) -> Resource:
    version = wanted.api_version.rpartition("/")[2]
    dcd, dgd = dynamo_resources(version)
    return dgd if wanted.kind == dgd.kind else dcd


def _describe(wanted: StatusWanted) -> str:
    state = f"state={wanted.state} " if wanted.state is not None else ""
    return state + ", ".join(f"{c.type}={c.status} {c.reason}" for c in wanted.decided)


def _delay(event_time: str) -> float | None:
    """Seconds since the event that decided a write, when its time says (live events carry milliseconds;
    a time to the second says too little)."""
    return since(event_time) if "." in event_time else None
