"""Leader election on a `coordination.k8s.io/v1` Lease, with client-go's algorithm (tools/leaderelection).

Every replica of `crashwatch run --leader-elect` lists, watches and diagnoses; only the one holding the
Lease writes status. The rules, as client-go's:

- A candidate reads the Lease. It acquires it when it is absent (create), released (no holder), or
  expired: its record (holder, times, duration, transitions) has not changed for `leaseDurationSeconds`
  as measured on *our own* clock since we last saw it change; no two clocks are compared.
- Every write of the Lease carries the resourceVersion it was read at: of two candidates that saw it
  expire, one update wins and the other gets 409 Conflict. A takeover increments `leaseTransitions` and
  sets `acquireTime`; a renewal keeps both.
- The leader renews every retry period (first optimistically from the Lease it last wrote, then, on
  any error, by reading it again). It counts itself the leader only until `renew deadline` after the
  start of its last successful renewal: past that it stops writing at once, while the others still
  wait out the longer lease duration (so two never write at the same time), and it becomes a
  candidate again.
- On stop (SIGTERM) the leader releases the Lease: no holder, `leaseDurationSeconds: 1`, so a
  successor takes over at its next try instead of waiting out the lease (client-go's ReleaseOnCancel).

Three deviations, all for a faster failover and none weakening the rules above:

- A candidate waits the retry period plus at most 20% jitter between tries (client-go: up to 120%: its
  jitter spreads many candidates, we expect two or three).
- It tries again at the moment the lease it observes expires rather than at its next tick.
- It also *watches* the Lease (a watch on the namespace's leases with `fieldSelector
  metadata.name=<lease>`, resumed when the server ends it, re-opened with backoff when it fails, taken
  for stuck after 90 s of silence). A change it shows counts as seen at the moment it arrives, on our
  own clock, exactly as one seen by a read: an event can only come after its change was written, so
  the expiry it implies is never earlier than the truth. A watch event never takes the Lease by
  itself: it wakes the candidate, which reads the Lease and writes with the resourceVersion read, as
  at any try. So a released (no holder) or deleted Lease is tried within a request's latency instead
  of at the next tick (SIGTERM failover: milliseconds rather than up to 1.2 retry periods). The polling
  goes on beside it, so a watch that is refused (a Role without `watch` on leases: said once) or
  broken costs speed, never correctness.
"""

from __future__ import annotations

import math
import os
import random
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import msgspec

from stream.model.messages import About, logger
from stream.model.times import now_micro
from stream.sources.client import ApiError, Backoff, KubeClient
from stream.sources.kubeconfig import SERVICE_ACCOUNT

Log = Callable[[str], None]
JITTER = 0.2  # a candidate's pause between tries: the retry period times 1 to 1 + JITTER
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode
# the fields of a Lease's spec that make its record: a change of any of them restarts the expiry clock
RECORD = ("holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime", "leaseTransitions")
GONE = (None,) * len(RECORD)  # the record of a Lease seen deleted: no holder, so a candidate tries at once
WATCH_IDLE = 90.0  # a watch of the Lease silent this long (bookmarks come about once a minute) is stuck
WATCH_MAX_LINE = 1 << 20  # a Lease is a few hundred bytes: a longer watch line is no Lease


@dataclass
class LeaderSettings:
    name: str = "crashwatch"  # the Lease's name
    namespace: str | None = None  # None: the Pod's (in a cluster), else the kubeconfig context's
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    request_timeout: float = 30.0


class LeaseForbidden(Exception):
    """Not allowed to read or write the Lease: the message says which."""


class _WatchBroken(Exception):
    """The Lease's watch sent something it should not (an error, garbage) or nothing for too long."""

    def __init__(self, message: str, gone: bool = False) -> None:
        super().__init__(message)
        self.gone = gone


def identity() -> str:
    """The Pod's name (HOSTNAME in a Pod) and a random suffix: two processes never share one."""
    host = os.environ.get("HOSTNAME") or socket.gethostname()
    return f"{host}_{uuid.uuid4()}"


def default_namespace(client: KubeClient) -> str:
    """In a cluster the Pod's namespace (the service account's namespace file), else the kubeconfig
    context's."""
    namespace_file = SERVICE_ACCOUNT / "namespace"
    if "KUBERNETES_SERVICE_HOST" in os.environ and namespace_file.exists():
        namespace = Path(namespace_file).read_text().strip()
        if namespace:
            return namespace
    return client.default_namespace


def _record(lease: dict[str, Any]) -> tuple[object, ...]:
    spec = lease.get("spec") or {}
    return tuple(spec.get(key) for key in RECORD)


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        settings: LeaderSettings,
        log: Log,
        on_gain: Callable[[], None] = lambda: None,
        holder: str | None = None,
        clock: Callable[[], float] = anyio.current_time,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.settings = settings
        self.log = logger(log)
        self.about = About("Lease", namespace, settings.name)
        self.on_gain = on_gain
        self.identity = holder or identity()
        self.clock = clock
        self.path = LEASES.format(namespace=namespace)
        self.where = f"{namespace}/{settings.name}"
        self._lease: dict[str, Any] | None = None  # the Lease as last read or written
        self._observed: tuple[object, ...] | None = None  # its record...
        self._observed_at = -math.inf  # ...and when (our clock) we saw it change
        self._valid_until = -math.inf  # we lead until then: the last renewal's start + the renew deadline
        self._leading = False
        self._reported_holder: str | None = None
        self._last_error = ""
        self._wake: anyio.Event | None = None  # set by the Lease's watch when it shows a change
        self._watch_refused = False  # the watch was refused (a Role without it): polling alone, said once
        self.transitions = 0  # leadership gained, for tests and metrics
        self.watch_events = 0  # Lease changes the watch showed, for tests

    # --- what the rest of the watcher asks ------------------------------------------------------------

    def is_leader(self) -> bool:
        """Whether a status write may be sent now: we hold the Lease and renewed it within the deadline."""
        return self._leading and self.clock() < self._valid_until

    def holder(self) -> str:
        """The holder last observed ("" when none)."""
        return str(self._observed[0] or "") if self._observed is not None else ""

    def describe(self) -> str:
        """Who leads, for /readyz."""
        if self.is_leader():
            return f"leading (lease {self.where})"
        holder = self.holder()
        return f"following (lease {self.where} held by {holder})" if holder else f"following (lease {self.where})"

    # --- the loop -------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Acquire, lead while renewals succeed, and go back to being a candidate when one fails."""
        while True:
            await self._acquire()
            self._leading = True
            self.transitions += 1
            self.log(
                f"leading: acquired the lease {self.where} as {self.identity}; writing status from now on",
                "info",
                self.about,
            )
            self.on_gain()
            await self._renew()
            self._leading = False
            self.log(
                f"lost the lease {self.where}: not renewed within the {self.settings.renew_deadline:g}s renew "
                "deadline; stopped writing status",
                "warning",
                self.about,
            )

    async def _acquire(self) -> None:
        """Try until the Lease is ours: every retry period, at the moment the observed lease expires, and
        whenever the watch shows it released or deleted."""
        forbidden: LeaseForbidden | None = None
        async with anyio.create_task_group() as tg:
            if not self._watch_refused:
                tg.start_soon(self._follow)
            try:
                while True:
                    self._wake = anyio.Event()  # before the try: a change seen during it wakes the wait at once
                    if await self._try():
                        break
                    await self._chance()
            except LeaseForbidden as exc:  # raised as itself, not in a group: the caller says it and stops
                forbidden = exc
            self._wake = None
            tg.cancel_scope.cancel()
        if forbidden is not None:
            raise forbidden

    async def _chance(self) -> None:
        """Wait for the next try: the pause (retry period or the observed expiry), or less when the watch
        shows the Lease open to take (released or deleted). A renewal it shows does not end the wait."""
        with anyio.move_on_after(self._pause()):
            while True:
                wake = self._wake
                if wake is None:
                    wake = self._wake = anyio.Event()
                await wake.wait()
                if not self.holder():
                    return
                self._wake = anyio.Event()

    async def _renew(self) -> None:
        """Renew every retry period; return when a renewal did not succeed within the renew deadline."""
        while True:
            await anyio.sleep(self.settings.retry_period)
            while True:
                remaining = self._valid_until - self.clock()
                if remaining <= 0:
                    return
                renewed = False
                with anyio.move_on_after(remaining):
                    renewed = await self._try()
                if renewed:
                    break
                if self.holder() not in ("", self.identity):  # someone else took it: we are out at once
                    self._valid_until = -math.inf
                    return
                await anyio.sleep(min(self.settings.retry_period, max(0.0, self._valid_until - self.clock())))

    def _pause(self) -> float:
        """Until the next try of a candidate: the retry period with a little jitter, or less, to try at
        the moment the lease observed expires."""
        pause = self.settings.retry_period * (1 + JITTER * random.random())
        if self._observed is not None and self.holder():
            expires = self._observed_at + self._duration() - self.clock()
            if 0 < expires < pause:
                pause = expires + 0.001
        return pause

    def _duration(self) -> float:
        seconds = self._observed[1] if self._observed is not None else None
        return float(seconds) if isinstance(seconds, int | float) else self.settings.lease_duration

    # --- the Lease's watch: when to try, never whether --------------------------------------------------

    async def _follow(self) -> None:
        """Watch the Lease while a candidate, so a change is seen when it happens rather than at the next
        poll; resumed from the last resourceVersion when the server ends the watch, from now after 410
        Gone, with backoff after a failure. Refused (401, 403) or not served: said once, polling alone."""
        backoff = Backoff(0.5, max(1.0, self.settings.retry_period * 4))
        version = ""
        while True:
            query = {
                "fieldSelector": f"metadata.name={self.settings.name}",
                "watch": "1",
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(random.randint(240, 360)),
            }
            if version:
                query["resourceVersion"] = version
            problem = ""
            retry_after: float | None = None
            try:
                received, version = await self._watch_once(query, version)
                if received:
                    backoff.reset()
                continue  # the server ended it: resume at once
            except ApiError as exc:
                if exc.status in (401, 403, 404, 405):
                    self._watch_refused = True
                    self.log(
                        f"cannot watch the lease {self.where} ({exc.status} {exc.message or exc.reason}): "
                        f"reading it every {self.settings.retry_period:g}s instead",
                        "warning",
                        self.about,
                    )
                    return
                if exc.status == 410:
                    version = ""
                    continue
                problem, retry_after = str(exc), exc.retry_after
            except _WatchBroken as exc:
                if exc.gone:
                    version = ""
                    continue
                problem = str(exc)
            except (OSError, TimeoutError) as exc:
                problem = f"connection lost: {exc or type(exc).__name__}"
            except Exception as exc:  # aiohttp's payload errors, a reset mid-chunk
                if not type(exc).__module__.startswith("aiohttp"):
                    raise
                problem = f"connection lost: {exc or type(exc).__name__}"
            delay = backoff.next(retry_after)
            # once per kind of failure, as the reads' errors: the delay is left out of the line for that
            self._say_error(f"watch: {problem}; watching again with backoff, reading it every retry period")
            await anyio.sleep(delay)

    async def _watch_once(self, query: dict[str, str], version: str) -> tuple[bool, str]:
        """One watch request until the server ends it: whether any event came, and the last
        resourceVersion seen."""
        received = False
        async with self.client.stream(self.path, query, connect_timeout=self._timeout()) as content:
            pending = b""
            while True:
                chunk = b""
                with anyio.move_on_after(WATCH_IDLE) as idle:
                    chunk = await content.readany()
                if idle.cancelled_caught:
                    raise _WatchBroken(f"nothing received for {WATCH_IDLE:g}s, the watch looks stuck")
                if not chunk:
                    return received, version
                *lines, pending = (pending + chunk).split(b"\n")
                if len(pending) > WATCH_MAX_LINE:
                    raise _WatchBroken(f"a watch line longer than {WATCH_MAX_LINE:,} bytes: no Lease")
                for line in lines:
                    if line.strip():
                        version = self._watched(line) or version
                        received = True

    def _watched(self, line: bytes) -> str:
        """Take in one watch event of the Lease; its resourceVersion."""
        try:
            event = _decode(line)
            kind, lease = event["type"], event["object"]
            meta = lease["metadata"]
        except (msgspec.DecodeError, KeyError, TypeError) as exc:
            raise _WatchBroken(f"unreadable watch event ({exc}): {line[:120]!r}") from None
        if kind == "ERROR":
            code = lease.get("code")
            raise _WatchBroken(f"the server sent an error: {code} {lease.get('message', '')}", gone=code == 410)
        version = str(meta.get("resourceVersion") or "")
        if kind == "BOOKMARK" or meta.get("name") != self.settings.name:
            return version
        if self._leading:  # the leader goes by its own reads and writes alone
            return version
        record = GONE if kind == "DELETED" else _record(lease)
        if record != self._observed:
            self._observed, self._observed_at = record, self.clock()
            self.watch_events += 1
            if self._wake is not None:
                self._wake.set()
        return version

    # --- one try: client-go's tryAcquireOrRenew -----------------------------------------------------

    def _timeout(self) -> float:
        return min(self.settings.request_timeout, self.settings.renew_deadline)

    async def _try(self) -> bool:
        try:
            return await self._try_once()
        except ApiError as exc:
            if exc.status == 401:  # bad credentials, not a missing grant: said so (ApiError.refusal)
                raise LeaseForbidden(f"cannot get, create or update the lease {self.where}: {exc.refusal}") from None
            if exc.status == 403:
                raise LeaseForbidden(
                    f"not allowed to get, create or update the lease {self.where} "
                    f"(coordination.k8s.io leases): {exc.message or exc.reason}"
                ) from None
            self._say_error(str(exc))
            return False

    def _say_error(self, message: str) -> None:
        if message != self._last_error:  # once per kind of failure, not every retry period
            self._last_error = message
            self.log(f"lease {self.where}: {message}", "warning", self.about)

    async def _try_once(self) -> bool:
        # 1. the leader's fast path: update the Lease it last wrote, assuming nobody else did
        if self._leading and self._lease is not None and self.holder() == self.identity:
            try:
                await self._update(self._lease, takeover=False)
                return True
            except ApiError as exc:
                if exc.status in (401, 403):
                    raise
        # 2. read it, or create it
        try:
            response = await self.client.request("GET", f"{self.path}/{self.settings.name}", timeout=self._timeout())
        except ApiError as exc:
            if exc.status != 404:
                raise
            return await self._create()
        lease = _decode(response.body)
        now = self.clock()
        record = _record(lease)
        if record != self._observed:
            self._observed, self._observed_at = record, now
        self._lease = lease
        holder = self.holder()
        if holder != self._reported_holder:
            self._reported_holder = holder
            if holder and holder != self.identity:
                self.log(f"the lease {self.where} is held by {holder}: following", "info", self.about)
        # 3. held by another, and not expired as we measure it
        if holder and holder != self.identity and self._observed_at + self._duration() > now:
            return False
        # 4. ours to renew, or to take over
        await self._update(lease, takeover=holder != self.identity)
        return True

    def _spec(self, old: dict[str, Any], takeover: bool, stamp: str) -> dict[str, Any]:
        spec = dict(old)
        spec["holderIdentity"] = self.identity
        spec["leaseDurationSeconds"] = max(1, math.ceil(self.settings.lease_duration))
        spec["renewTime"] = stamp
        if takeover or not spec.get("acquireTime"):
            spec["acquireTime"] = stamp
        if takeover:
            spec["leaseTransitions"] = int(old.get("leaseTransitions") or 0) + 1
        else:
            spec.setdefault("leaseTransitions", 0)
        return spec

    async def _update(self, lease: dict[str, Any], takeover: bool) -> None:
        started = self.clock()
        body = dict(lease)
        body["spec"] = self._spec(lease.get("spec") or {}, takeover, now_micro())
        response = await self.client.request(
            "PUT",
            f"{self.path}/{self.settings.name}",
            body=_encode(body),  # metadata.resourceVersion as read: the precondition
            content_type="application/json",
            timeout=self._timeout(),
        )
        self._written(_decode(response.body), started)

    async def _create(self) -> bool:
        started = self.clock()
        stamp = now_micro()
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.settings.name, "namespace": self.namespace},
            "spec": self._spec({"leaseTransitions": 0}, takeover=False, stamp=stamp),
        }
        try:
            response = await self.client.request(
                "POST", self.path, body=_encode(body), content_type="application/json", timeout=self._timeout()
            )
        except ApiError as exc:
            if exc.status == 409:  # another candidate created it first: read it next time
                return False
            raise
        self._written(_decode(response.body), started)
        return True

    def _written(self, lease: dict[str, Any], started: float) -> None:
        self._lease = lease
        self._observed, self._observed_at = _record(lease), self.clock()
        self._reported_holder = self.identity
        self._valid_until = started + self.settings.renew_deadline
        self._last_error = ""

    # --- stop -----------------------------------------------------------------------------------------

    async def release(self) -> None:
        """Give the Lease up (no holder, 1 s), if we hold it, so that a successor need not wait it out."""
        was_leading = self._leading
        self._leading = False
        self._valid_until = -math.inf
        if self._lease is None or self.holder() != self.identity:
            return
        lease = self._lease
        for attempt in range(2):
            stamp = now_micro()
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != self.identity:
                return  # someone else holds it by now
            spec.update(holderIdentity="", leaseDurationSeconds=1, acquireTime=stamp, renewTime=stamp)
            try:
                response = await self.client.request(
                    "PUT",
                    f"{self.path}/{self.settings.name}",
                    body=_encode({**lease, "spec": spec}),
                    content_type="application/json",
                    timeout=self._timeout(),
                )
                break
            except ApiError as exc:
                if exc.status == 409 and attempt == 0:  # a renewal cut short may have landed: read it again
                    try:
                        got = await self.client.request(
                            "GET", f"{self.path}/{self.settings.name}", timeout=self._timeout()
                        )
                    except ApiError:
                        pass
                    else:
                        lease = _decode(got.body)
                        continue
                self.log(f"cannot release the lease {self.where}: {exc}", "warning", self.about)
                return
        else:
            return
        self._lease = _decode(response.body)
        self._observed, self._observed_at = _record(self._lease), self.clock()
        if was_leading:
            self.log(f"released the lease {self.where}", "info", self.about)
