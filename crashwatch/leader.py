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

Two deviations, both for a faster failover and neither weakening the rule: a candidate waits the retry
period plus at most 20% jitter between tries (client-go: up to 120%: its jitter spreads many candidates,
we expect two or three), and it tries again at the moment the lease it observes expires rather than at
its next tick.
"""

from __future__ import annotations

import datetime
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

from stream.client import SERVICE_ACCOUNT, ApiError, KubeClient
from stream.messages import About, logger

Log = Callable[[str], None]
JITTER = 0.2  # a candidate's pause between tries: the retry period times 1 to 1 + JITTER
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode
# the fields of a Lease's spec that make its record: a change of any of them restarts the expiry clock
RECORD = ("holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime", "leaseTransitions")


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


def micro_time() -> str:
    """Now as a Kubernetes MicroTime (RFC 3339, microseconds, UTC)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
        self.transitions = 0  # leadership gained, for tests and metrics

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
        while True:
            if await self._try():
                return
            await anyio.sleep(self._pause())

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

    # --- one try: client-go's tryAcquireOrRenew -----------------------------------------------------

    def _timeout(self) -> float:
        return min(self.settings.request_timeout, self.settings.renew_deadline)

    async def _try(self) -> bool:
        try:
            return await self._try_once()
        except ApiError as exc:
            if exc.status in (401, 403):
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
        body["spec"] = self._spec(lease.get("spec") or {}, takeover, micro_time())
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
        stamp = micro_time()
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
            stamp = micro_time()
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
