"""Kubernetes Events (`events.k8s.io/v1`) on the DCDs and DGDs whose crash loops `crashwatch run` reports,
so `kubectl describe` and `kubectl events` show them.

Where the facts come from: the `StatusWanted` outputs the status patcher consumes. Each carries the
kstatus condition `Stalled`, which crashwatch owns outright (pipeline.status): `True` with the finding
while a crash loop holds (its message changes with every restart, since it counts them), `False` once it
clears where it said `True`. So a Warning `ComponentCrashLooping` (note: the finding) is recorded for
every wanted `Stalled=True` with new words, and a Normal `CrashLoopRecovered` for a wanted `Stalled=False`
(`SpecReplaced` when a spec change withdrew it with the failing Pods).
Nothing is diagnosed here, and the Events follow the status contract: decided once every resource is
listed, never for a status that already says it (a restarted watcher does not repeat them), and the
same words asked for again (a status another writer overwrote) are no new occurrence.

Folding, as client-go's events recorder (k8s.io/client-go/tools/events) does: one Event object per key
(regarding object, reason, action, reporting controller); a repeat of the key sets `series.count` and
`series.lastObservedTime` on it by PATCH instead of creating another object. A series ends after six
minutes without a repeat (client-go's), and, unlike client-go, when the object's crash loop ends or
starts again: each crash loop is one Warning series, each recovery one Normal. The key leaves out the
regarding object's resourceVersion (client-go's includes it), which changes with every status write.
A PATCH that finds its Event gone (Events expire, an hour by default) creates it again.

Rate and memory: the Event keys waiting to be written sit in the sinks' keyed work queue
(sinks.workqueue), bounded, and writes take tokens from its bucket (a burst, then a steady rate); a
repeat of a key already waiting only updates its series (the queue's coalescing), a repeat during its
write is written after it, and an occurrence that finds the queue full is dropped and counted. The
sink's input loop never waits for a write, so the pipeline (and with it the status patcher) is never
held back by Events. When the input ends (a stop), what waits is sent while tokens are at hand, and the
rest dropped.

Refusals: 403 (no RBAC for Events), 404 (the namespace is gone) and 422 (the server finds the Event
invalid) are said once each on stderr and counted; the watcher goes on. 429, 5xx and no answer are
retried a few times with backoff. With `--leader-elect` only the leader records and writes Events,
asked as each occurrence arrives and again as each write is sent, as status writes are.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import anyio
import msgspec
from anyio.abc import ObjectReceiveStream

from pipeline.findings import Finding
from pipeline.graph import REASONS
from pipeline.outputs import ComponentChange, Output, StatusWanted
from pipeline.status import (
    DCD_REASONS,
    DGD_STALLED_REASONS,
    STALLED,
    STALLED_RECOVERED_REASON,
    STALLED_REPLACED_REASON,
)
from sinks.crashed_output import LogReader, crashed
from sinks.workqueue import KeyedQueue, WorkQueue
from stream.model.messages import About, Logger, logger
from stream.model.times import micro_time
from stream.sources.client import ApiError, KubeClient

CONTROLLER = "crashwatch"
ACTION = "Diagnose"
REASON_CRASH_LOOPING = "ComponentCrashLooping"
REASON_RECOVERED = "CrashLoopRecovered"
REASON_OTHER_RECOVERED = "ComponentRecovered"  # a diagnosis other than a crash loop ended
REASON_REPLACED = "SpecReplaced"  # withdrawn: a spec change replaces the failing Pods
# the Normal Event's reason per `Stalled=False` reason (a crash loop's end otherwise)
CLEARED = {STALLED_RECOVERED_REASON: REASON_OTHER_RECOVERED, STALLED_REPLACED_REASON: REASON_REPLACED}
# the Warning's reason for each `Stalled` reason: the DGD's words (ComponentImagePullFailing ...), on DCDs too
WARNINGS = {DCD_REASONS[kind]: DGD_STALLED_REASONS[reason] for kind, reason in REASONS.items()} | {
    reason: reason for reason in DGD_STALLED_REASONS.values()
}
SERIES_REASONS = (*sorted(set(WARNINGS.values())), REASON_RECOVERED, REASON_OTHER_RECOVERED)
NOTE_LIMIT = 1024  # bytes: the API server refuses a longer note
NAME_LIMIT = 253
SERIES_WINDOW = 360.0  # client-go's finishTime: a series with no repeat for this long is over
EVENTS = "/apis/events.k8s.io/v1/namespaces/{namespace}/events"

EventType = Literal["Warning", "Normal"]
_encode = msgspec.json.Encoder().encode


@dataclass
class EventSettings:
    qps: float = 1.0  # writes per second, sustained...
    burst: int = 25  # ...and at once (client-go's event spam filter: a burst of 25)
    queue: int = 1000  # Event keys waiting to be written; an occurrence past that is dropped
    tries: int = 3  # a write refused with 429/5xx or not answered is tried this often
    request_timeout: float = 30.0
    series_window: float = SERIES_WINDOW
    instance: str = ""  # reportingInstance; "" for the Pod's name (HOSTNAME) or the host's
    logs: int = 0  # --event-logs: the crashed container's last lines under a DCD's Warning note (0: none)


class Regarding(msgspec.Struct, frozen=True, gc=False):
    """The object an Event is about: an ObjectReference with uid and resourceVersion."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    resource_version: str

    def reference(self) -> dict[str, str]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "resourceVersion": self.resource_version,
        }


class Occurrence(msgspec.Struct, frozen=True, gc=False):
    """One thing that happened to a DCD or DGD, worth an Event."""

    regarding: Regarding
    type: EventType
    reason: str
    note: str


def occurrences(outputs: Sequence[Output]) -> list[Occurrence]:
    """What the pipeline's wanted statuses say happened: a crash loop holding (or holding on, in new
    words), or one that ended. Pure."""
    found: list[Occurrence] = []
    for output in outputs:
        if type(output) is not StatusWanted:
            continue
        stalled = next((c for c in output.decided if c.type == STALLED), None)
        if stalled is None or stalled.status not in ("True", "False"):
            continue
        regarding = Regarding(
            output.api_version, output.kind, output.namespace, output.name, output.uid, output.resource_version
        )
        if stalled.status == "True":
            reason = WARNINGS.get(stalled.reason, REASON_CRASH_LOOPING)
            found.append(Occurrence(regarding, "Warning", reason, note(stalled.message)))
        else:
            reason = CLEARED.get(stalled.reason, REASON_RECOVERED)
            found.append(Occurrence(regarding, "Normal", reason, note(stalled.message)))
    return found


def note(text: str) -> str:
    """`text` cut to the API's note limit (bytes of UTF-8), marked with an ellipsis when cut."""
    data = text.encode()
    if len(data) <= NOTE_LIMIT:
        return text
    return data[: NOTE_LIMIT - 3].decode(errors="ignore") + "..."


Key = tuple[str, str, str, str, str, str]  # regarding kind, namespace, name, uid; reason; action


@dataclass
class _Series:
    """One Event object: what its first occurrence said, and how often the key has occurred since."""

    name: str
    first: Occurrence
    event_time: str
    count: int
    last_observed: str
    seen: float  # monotonic time of the last occurrence
    last_note: str
    created: bool = False  # the Event exists on the server
    ended: bool = False  # the object's state changed: forget the series once its last write is done


@dataclass
class Write:
    """One request: create the Event (`patch` None) or update its series."""

    key: Key
    namespace: str
    name: str
    create: dict[str, object]
    patch: dict[str, object] | None
    about: About


Observed = Literal["queued", "folded", "repeat", "dropped"]


class Folder:
    """The recorder's pure part: folds occurrences into Event series and queues their writes.

    `observe` is called for each occurrence with the time (monotonic, for the series window; wall, for
    the Event's times); `take` hands out the next write, with the series as it stands then; `done` says
    how it went. The keys waiting for a write, and the one being written, are held in a keyed queue
    (`queue`: the recorder hands in its work queue; else a plain one of `capacity`), whose item for a
    key is its series. Bounded: at most `capacity` keys wait, and a series is forgotten once over.
    """

    def __init__(
        self,
        instance: str,
        capacity: int = 1000,
        window: float = SERIES_WINDOW,
        controller: str = CONTROLLER,
        action: str = ACTION,
        queue: KeyedQueue[Key, _Series] | None = None,
    ) -> None:
        self.instance = instance
        self.window = window
        self.controller = controller
        self.action = action
        self.series: dict[Key, _Series] = {}
        self.queue: KeyedQueue[Key, _Series] = queue if queue is not None else KeyedQueue(capacity)
        self._swept = 0.0

    def key(self, occurrence: Occurrence) -> Key:
        r = occurrence.regarding
        return (r.kind, r.namespace, r.name, r.uid, occurrence.reason, self.action)

    def observe(self, occurrence: Occurrence, now: float, wall: float) -> Observed:
        if now - self._swept >= self.window:
            self.sweep(now)
        key = self.key(occurrence)
        self._end_other(occurrence, key)
        series = self.series.get(key)
        if series is not None and not self.queue.active(key) and now - series.seen >= self.window:
            del self.series[key]  # over: a repeat after six quiet minutes starts a new Event
            series = None
        if series is not None:
            if occurrence.note == series.last_note:
                return "repeat"  # the same words asked for again: a rewritten status, not a new restart
            put = self.queue.put(key, series)  # "replaced" when it waits already: one write, the count grows
            if put != "dropped":
                self._count(series, occurrence, now, wall)
            return "folded" if put == "replaced" else put
        stamp = micro_time(wall)
        series = _Series(
            name=event_name(occurrence.regarding.name, wall),
            first=occurrence,
            event_time=stamp,
            count=1,
            last_observed=stamp,
            seen=now,
            last_note=occurrence.note,
        )
        if self.queue.put(key, series) == "dropped":
            return "dropped"
        self.series[key] = series
        return "queued"

    def _count(self, series: _Series, occurrence: Occurrence, now: float, wall: float) -> None:
        series.count += 1
        series.last_observed = micro_time(wall)
        series.seen = now
        series.last_note = occurrence.note

    def _end_other(self, occurrence: Occurrence, key: Key) -> None:
        """A crash loop (or another diagnosis) that starts ends the object's recovery series and those of
        other diagnoses, and a recovery ends them all."""
        for other in SERIES_REASONS:
            if other == occurrence.reason:
                continue
            other_key = (*key[:4], other, key[5])
            series = self.series.get(other_key)
            if series is None:
                continue
            if self.queue.active(other_key):
                series.ended = True
            else:
                del self.series[other_key]

    def take(self) -> Write | None:
        """The next write, or None when none waits (or only a repeat of the one under way)."""
        taken = self.queue.take()
        return self._write(*taken) if taken is not None else None

    def _write(self, key: Key, series: _Series) -> Write:
        first = series.first
        regarding = first.regarding
        body: dict[str, object] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": series.name, "namespace": regarding.namespace},
            "eventTime": series.event_time,
            "reportingController": self.controller,
            "reportingInstance": self.instance,
            "action": self.action,
            "reason": first.reason,
            "regarding": regarding.reference(),
            "note": first.note,
            "type": first.type,
        }
        patch: dict[str, object] | None = None
        if series.count > 1:
            body["series"] = {"count": series.count, "lastObservedTime": series.last_observed}
            if series.created:
                patch = {"series": body["series"]}
        about = About(regarding.kind, regarding.namespace, regarding.name)
        return Write(key, regarding.namespace, series.name, body, patch, about)

    def done(self, write: Write, exists: bool) -> None:
        """The write ended: `exists` when the Event is now on the server (created or patched)."""
        self.queue.done(write.key)
        series = self.series.get(write.key)
        if series is None:
            return
        if exists:
            series.created = True
        if self.queue.pending(write.key) is not None:
            return
        if series.ended or not series.created:
            # over, or never created (refused, or not the leader): a later occurrence starts afresh
            del self.series[write.key]

    def sweep(self, now: float) -> None:
        """Forget the series that are over, so memory follows the crash loops of the last minutes."""
        self._swept = now
        for key in [k for k, s in self.series.items() if not self.queue.active(k) and now - s.seen >= self.window]:
            del self.series[key]


def event_name(regarding: str, wall: float) -> str:
    """client-go's: the object's name and the time in hex nanoseconds (cut to fit a DNS subdomain)."""
    suffix = f".{int(wall * 1e9):x}"
    return regarding[: NAME_LIMIT - len(suffix)] + suffix


def reporting_instance() -> str:
    """The Pod's name (HOSTNAME in a Pod), else the host's; at most the API's 128 characters."""
    return (os.environ.get("HOSTNAME") or socket.gethostname() or CONTROLLER)[:128]


@dataclass
class EventStats:
    created: int = 0
    patched: int = 0
    dropped: int = 0  # the queue was full
    refused: int = 0  # 403, 404, 422 ...: not written, said once per status
    failed: int = 0  # no answer, or 429/5xx, after every try
    not_leader: int = 0  # not recorded or not sent: another replica holds the lease


class EventRecorder:
    """The sink: occurrences in from the pipeline's outputs, Event writes out, at the bucket's pace."""

    def __init__(
        self,
        client: KubeClient,
        settings: EventSettings | None = None,
        log: Callable[[str], None] | None = None,
        is_leader: Callable[[], bool] | None = None,
        clock: Callable[[], float] = anyio.current_time,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.settings = settings or EventSettings()
        self.log: Logger = logger(log)
        self.is_leader = is_leader or (lambda: True)
        self.clock = clock
        self.wall = wall
        self.stats = EventStats()
        # the Event keys waiting to be written, one write at a time, at the bucket's pace
        self.queue: WorkQueue[Key, _Series] = WorkQueue(
            self.settings.qps, self.settings.burst, self.settings.queue, retry_max=5.0, clock=clock
        )
        self.folder = Folder(
            self.settings.instance or reporting_instance(),
            self.settings.queue,
            self.settings.series_window,
            queue=self.queue,
        )
        self._said: set[int] = set()
        # --event-logs: each DCD's current finding (from the verdict changes), whose container's last lines
        # a Warning's note carries; read when the Event is written, never in the input loop
        self._findings: dict[tuple[str, str], Finding] = {}
        self.logs: LogReader | None = None
        if self.settings.logs > 0:
            self.logs = LogReader(
                client, self.settings.logs, timeout=min(5.0, self.settings.request_timeout), log=self._no_logs
            )

    def _no_logs(self, message: str) -> None:
        self.log(message, "warning")

    async def run(self, receive: ObjectReceiveStream[list[Output]]) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._write_all)
            try:
                async with receive:
                    async for batch in receive:
                        self.observe(batch)
            finally:
                self.queue.close()

    def observe(self, outputs: Sequence[Output]) -> None:
        """Fold a batch's occurrences in; never waits."""
        if self.logs is not None:
            for output in outputs:
                if type(output) is ComponentChange and output.dcd is not None:
                    if crashed(output.finding):
                        self._findings[(output.namespace, output.dcd)] = output.finding  # type: ignore[assignment]
                    else:
                        self._findings.pop((output.namespace, output.dcd), None)
        for occurrence in occurrences(outputs):
            if not self.is_leader():
                self.stats.not_leader += 1
                continue
            if self.folder.observe(occurrence, self.clock(), self.wall()) == "dropped":
                self.stats.dropped += 1

    async def _write_all(self) -> None:
        """Send the queued writes one at a time, each after a token. When the input ends (a stop), what
        is queued is sent while tokens are at hand, and the rest dropped: Events never hold a stop."""
        while await self.queue.ready():
            if not await self.queue.pace(finish=False):  # stopping: what would wait for tokens is dropped
                self.stats.dropped += self.queue.drop()
                return
            write = self.folder.take()  # after the wait: the series as it stands now
            if write is None:
                continue
            exists = False
            try:
                exists = await self._send(write)
            finally:
                self.folder.done(write, exists)

    async def _with_logs(self, write: Write) -> None:
        """A new Warning on a DCD, with --event-logs: its note gains the crashed container's last lines."""
        regarding = write.create.get("regarding")
        if (
            self.logs is None
            or write.patch is not None
            or write.create.get("type") != "Warning"
            or not isinstance(regarding, dict)
            or regarding.get("kind") != "DynamoComponentDeployment"
        ):
            return
        finding = self._findings.get((write.namespace, str(regarding.get("name"))))
        if finding is None:
            return
        last = await self.logs.read(write.namespace, finding.pod, finding.container)
        if last is not None and last.lines:
            which = "previous run" if last.previous else "last run"
            said = f"{write.create['note']}\nlast lines of container {last.container} ({which}):\n"
            write.create["note"] = note(said + "\n".join(last.lines))

    async def _send(self, write: Write) -> bool:
        await self._with_logs(write)
        path = EVENTS.format(namespace=write.namespace)
        backoff = self.queue.backoff()
        for attempt in range(self.settings.tries):
            if not self.is_leader():  # asked as late as can be, as status writes do
                self.stats.not_leader += 1
                return False
            try:
                if write.patch is not None:
                    try:
                        await self.client.request(
                            "PATCH",
                            f"{path}/{write.name}",
                            body=_encode(write.patch),
                            content_type="application/merge-patch+json",
                            timeout=self.settings.request_timeout,
                        )
                        self.stats.patched += 1
                        self.log(f"event {write.name}: {_series(write)}", "debug", write.about)
                        return True
                    except ApiError as exc:
                        if exc.status != 404:
                            raise
                        write.patch = None  # the Event expired meanwhile: create it again, series and all
                await self.client.request(
                    "POST",
                    path,
                    body=_encode(write.create),
                    content_type="application/json",
                    timeout=self.settings.request_timeout,
                )
                self.stats.created += 1
                self.log(f"event {write.name}: {write.create['type']} {write.create['reason']}", "debug", write.about)
                return True
            except ApiError as exc:
                if not exc.retryable:
                    self.stats.refused += 1
                    if exc.status not in self._said:
                        self._said.add(exc.status)
                        self.log(
                            f"cannot write Events ({exc}); crashwatch goes on, and says this once",
                            "warning",
                            write.about,
                        )
                    return False
                if attempt + 1 < self.settings.tries:
                    await anyio.sleep(backoff.next(exc.retry_after))
                    continue
                self.stats.failed += 1
                self.log(f"an Event was not written: {exc}", "warning", write.about)
        return False


def _series(write: Write) -> str:
    series = (write.patch or {}).get("series")
    return f"series count {series['count']}" if isinstance(series, dict) else "updated"
