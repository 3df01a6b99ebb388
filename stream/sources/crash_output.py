"""The reader of crashed runs' output: each crash the pipeline asks about (pipeline.outputs.ExplainWanted)
read from the kubelet and handed back as a `CrashOutput` event, from which the core reads why it crashed.

What is read: the run of the container that ended at `finished_at`, in the Pod of that uid. The Pod is read
first: one recreated under the name (another uid), gone, on no node (no kubelet holds an output of it), or
whose container has moved past that run (kubelet keeps a container's current and previous instances only)
is skipped. The run is asked for as the
plain log while the container is itself terminated in it, and as `previous=true` when it is the last
terminated state of a container that runs or waits again (stream.sources.container_logs). The Pod is read
again after the log: a run that moved meanwhile may have been read from the wrong instance. A container
that restarted (its run now the previous instance) is read once more as `previous`; one that crashed again
or went is skipped rather than misread.

Bounds: the last `lines` lines within `limit` bytes of the run's output, whole lines only (an output whose
last lines fill the limit even when fewer are asked for is skipped: its end, where the cause is, would be
missing), within `timeout` seconds a read; UTF-8 with what is not replaced.

Pacing, for a cluster full of crash loops: at most `in_flight` reads at once, each started with a token
of one bucket (`rate` a second, `burst` at once), and the reads not started yet held in one bounded queue
where the newest wanted read of a Pod replaces its older one and, when the queue is full, the oldest is
dropped. `stop` ends the reads under way. A 403 (or 401) is said once, and nothing more is read; any other
failure is a warning, at most one a minute (with how many more there were), and that crash is skipped.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
import msgspec

from stream.model.crash_record import encode_crash_output
from stream.model.events import CrashOutput
from stream.model.messages import Logger, logger
from stream.model.times import now_rfc3339
from stream.sources.client import ApiError, TokenBucket
from stream.sources.container_logs import LogClient, container_status, get_pod, instance, read_tail, scheduled

Emit = Callable[[list[CrashOutput]], Awaitable[None]]
Tap = Callable[[bytes], None]


@dataclass(frozen=True)
class ReadSettings:
    lines: int = 5000  # of the end of a run's output, at most
    limit: int = 512 << 10  # bytes of it, at most
    timeout: float = 10.0  # seconds a read may take, its requests (the Pod twice, its log) together
    in_flight: int = 2  # reads at once
    rate: float = 1.0  # reads started a second, on average
    burst: int = 5  # reads started at once after a quiet spell
    queue: int = 256  # wanted reads not started yet (one per Pod)
    warn_every: float = 60.0  # seconds between two warnings of failed reads


class Wanted(msgspec.Struct, frozen=True, gc=False):
    """A crash whose output is to be read: the container of the Pod (of that uid) whose run ended at
    `finished_at`, and how it ended (handed back with the output)."""

    namespace: str
    pod: str
    uid: str
    container: str
    finished_at: str
    restarts: int = 0
    exit_code: int = 0
    reason: str = ""


class ReadStats:
    """What the reader did, for messages and tests."""

    def __init__(self) -> None:
        self.read = 0  # outputs handed on
        self.skipped = 0  # crashes with no run to read (a Pod gone, recreated or on no node; kubelet moved on)
        self.failed = 0  # reads that failed (warned of, at most one a minute)
        self.dropped = 0  # wanted reads dropped from a full queue
        self.replaced = 0  # wanted reads replaced in the queue by a newer one of their Pod
        self.in_flight = 0


class CrashOutputReader:
    def __init__(
        self,
        client: LogClient,
        emit: Emit,
        settings: ReadSettings | None = None,
        log: Callable[[str], None] | None = None,
        tap: Tap | None = None,
        clock: Callable[[], str] = now_rfc3339,
    ) -> None:
        """`emit` hands an output on (into the pipeline's events); `tap` is told its record first (a
        recorder), as a watch's events are, so that the record keeps the order the pipeline saw."""
        self.client, self.emit, self.tap, self.clock = client, emit, tap, clock
        self.settings = settings or ReadSettings()
        self.log: Logger = logger(log)
        self.stats = ReadStats()
        self.refused = False  # a 403: nothing more is read
        self._queue: OrderedDict[tuple[str, str], Wanted] = OrderedDict()
        self._work = anyio.Event()  # set while the queue may hold something
        self._idle = anyio.Event()  # set while nothing is queued or being read
        self._idle.set()
        self._scope: anyio.CancelScope | None = None
        self._stopped = False
        self._warned_at = -float("inf")
        self._unsaid = 0  # failures not warned of since the last warning

    # --- what the wiring calls ------------------------------------------------------------------------

    def want(self, wanted: Wanted) -> None:
        """Queue a read (never waits): the newest of a Pod replaces its older one not started yet."""
        if self.refused or self._stopped:
            return
        queue, key = self._queue, (wanted.namespace, wanted.pod)
        if queue.pop(key, None) is not None:
            self.stats.replaced += 1
        queue[key] = wanted
        if len(queue) > self.settings.queue:
            queue.popitem(last=False)
            self.stats.dropped += 1
        self._work.set()
        if self._idle.is_set():
            self._idle = anyio.Event()

    async def run(self) -> None:
        """Read what is wanted until `stop`: a read starts once a slot is free and the bucket has a token,
        and only then is taken from the queue (so a newer crash of its Pod may still replace it)."""
        settings = self.settings
        bucket = TokenBucket(settings.rate, settings.burst, anyio.current_time())
        slots = anyio.Semaphore(settings.in_flight)
        with anyio.CancelScope() as self._scope:
            if self._stopped:
                return
            async with anyio.create_task_group() as tg:
                while True:
                    await self._work.wait()
                    await slots.acquire()
                    delay = bucket.take(anyio.current_time())
                    if delay > 0:
                        await anyio.sleep(delay)
                    if not self._queue:  # cleared meanwhile (a 403)
                        self._work = anyio.Event()
                        slots.release()
                        continue
                    _, wanted = self._queue.popitem(last=False)
                    if not self._queue:
                        self._work = anyio.Event()
                    self.stats.in_flight += 1
                    tg.start_soon(self._read_one, wanted, slots)

    def stop(self) -> None:
        """End the reads under way and read nothing more."""
        self._stopped = True
        self._queue.clear()
        if self._scope is not None:
            self._scope.cancel()
        self._check_idle()

    async def settled(self) -> None:
        """Wait until every read wanted so far is done (handed on, skipped or failed)."""
        await self._idle.wait()

    # --- one read -----------------------------------------------------------------------------------

    async def _read_one(self, wanted: Wanted, slots: anyio.Semaphore) -> None:
        try:
            output = await self.read(wanted)
            if output is not None:
                self.stats.read += 1
                if self.tap is not None:  # no await between the record and the send: the order is the same
                    self.tap(encode_crash_output(output))
                await self.emit([output])
        finally:
            self.stats.in_flight -= 1
            slots.release()
            self._check_idle()

    def _check_idle(self) -> None:
        if not self._queue and not self.stats.in_flight:
            self._idle.set()

    async def read(self, wanted: Wanted) -> CrashOutput | None:
        """One crash's output, or None: skipped, failed (warned of), or not allowed (said once). Its
        requests together take at most the timeout."""
        if self.refused:
            return None
        timeout = self.settings.timeout
        try:
            with anyio.fail_after(timeout):
                return await self._read(wanted)
        except TimeoutError:
            where = f"container {wanted.container} of Pod {wanted.namespace}/{wanted.pod}"
            self._failed(f"reading the output of {where}: no whole answer within {timeout:g}s")
            return None

    async def _read(self, wanted: Wanted) -> CrashOutput | None:
        settings = self.settings
        namespace, pod, container = wanted.namespace, wanted.pod, wanted.container
        try:
            previous = await self._where(wanted)
        except ApiError as exc:
            self._trouble(exc, "pods", wanted)
            return None
        while True:  # once more when the container restarted during the read (see below): at most twice,
            # as a run can move from the plain log to `previous` only once
            if previous is None:
                return None
            try:
                tail = await read_tail(
                    self.client, namespace, pod, container, previous, settings.lines, settings.limit, settings.timeout
                )
            except ApiError as exc:
                self._trouble(exc, "pods/log", wanted)
                return None
            if not tail.whole:
                self._failed(
                    f"the output of container {container} of Pod {namespace}/{pod}: its last lines are longer "
                    f"than {settings.limit >> 10}KiB; its cause is not read"
                )
                return None
            try:
                now = await self._where(wanted)
            except ApiError as exc:
                self._trouble(exc, "pods", wanted)
                return None
            if now == previous:
                break
            if not (previous is False and now is True):  # it crashed again, or went: maybe misread
                return None
            # terminated when read, restarted since (kubelet restarts at once after a first crash, and a
            # container without a readiness probe is Ready again): the plain log read may be the new run's,
            # but the run is the previous instance now, and is read there
            previous = now
        text = tail.data.decode("utf-8", errors="replace")
        return CrashOutput(
            namespace,
            pod,
            wanted.uid,
            container,
            wanted.finished_at,
            text,
            self.clock(),
            wanted.restarts,
            wanted.exit_code,
            wanted.reason,
        )

    async def _where(self, wanted: Wanted) -> bool | None:
        """Which log holds the crashed run now (`container_logs.instance`); None: skipped, the Pod gone,
        recreated or on no node, or the run no longer kept."""
        try:
            found = await get_pod(self.client, wanted.namespace, wanted.pod, self.settings.timeout)
        except ApiError as exc:
            if exc.status != 404:
                raise
            found = None
        status = None
        if found is not None and found.metadata.uid == wanted.uid and scheduled(found):
            status = container_status(found, wanted.container)
        where = instance(status, wanted.finished_at) if status is not None else None
        if where is None:
            self.stats.skipped += 1
        return where

    def _trouble(self, exc: ApiError, what: str, wanted: Wanted) -> None:
        """A request failed: a refusal is said once and ends the reading; anything else is a warning."""
        if exc.status not in (401, 403):
            where = f"container {wanted.container} of Pod {wanted.namespace}/{wanted.pod}"
            self._failed(f"reading the output of {where} ({what}): {exc}")
        elif not self.refused:
            self.refused = True
            self._queue.clear()
            self.log(f"not allowed to read {what}: causes are not read; everything else goes on ({exc})", "warning")

    def _failed(self, message: str) -> None:
        """A warning, at most one every `warn_every` seconds, saying how many were not said since."""
        self.stats.failed += 1
        now = time.monotonic()
        if now - self._warned_at < self.settings.warn_every:
            self._unsaid += 1
            return
        more = f" ({self._unsaid} more failed reads not said since)" if self._unsaid else ""
        self._warned_at, self._unsaid = now, 0
        self.log(message + more, "warning")
