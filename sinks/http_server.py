"""The watcher's HTTP endpoints, for Kubernetes probes and Prometheus.

`/healthz` (liveness) answers while the process's event loop runs: an API server that cannot be reached
is not a reason to restart the watcher, which retries on its own (and a restarted one would only retry
too). `/readyz` answers 200 once every watch has listed (before that no status is decided) and 503 once
a stop has begun; with leader election its body says whether this replica leads (a follower is ready
too: it diagnoses, and takes over without a warm-up). `/metrics` is the Prometheus text exposition of
sinks.metrics.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from http import HTTPStatus

from sinks.bounded_http import BoundedServer, Limits, Request, Response
from sinks.metrics import CONTENT_TYPE, Metrics
from stream.model.messages import Logger

NotReady = Callable[[], str | None]  # why it is not ready, or None when it is
Detail = Callable[[], str | None]  # what a ready watcher adds to "ok", e.g. whether it leads
# probes and scrapes carry no body; a few connections at once are plenty (kubelet, Prometheus, a person)
LIMITS = Limits(max_connections=32)


class HttpServer:
    def __init__(
        self,
        host: str | None,
        port: int,
        metrics: Metrics,
        not_ready: NotReady,
        log: Logger,
        detail: Detail | None = None,
        limits: Limits = LIMITS,
    ) -> None:
        self.metrics = metrics
        self.not_ready = not_ready
        self.detail = detail or (lambda: None)
        self.server = BoundedServer("the HTTP endpoints", host, port, self._handle, log, limits)
        self._routes = {"/healthz": self._healthz, "/readyz": self._readyz, "/metrics": self._metrics}

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        """Listen while inside; the URL (the port chosen, when asked for port 0). OSError if it cannot."""
        async with self.server.serving() as url:
            yield url

    async def _handle(self, request: Request) -> Response:
        route = self._routes.get(request.path)
        if route is None:
            self.server.refused("no such path", request.path[:80])
            return Response(HTTPStatus.NOT_FOUND, b"not found\n")
        if request.method != "GET":
            self.server.refused("not a GET", request.method[:20])
            return Response(HTTPStatus.METHOD_NOT_ALLOWED, b"GET only\n")
        return route()

    def _healthz(self) -> Response:
        return Response(HTTPStatus.OK, b"ok\n")

    def _readyz(self) -> Response:
        reason = self.not_ready()
        if reason is not None:
            return Response(HTTPStatus.SERVICE_UNAVAILABLE, f"not ready: {reason}\n".encode())
        detail = self.detail()
        return Response(HTTPStatus.OK, (f"ok: {detail}\n" if detail else "ok\n").encode())

    def _metrics(self) -> Response:
        return Response(HTTPStatus.OK, self.metrics.exposition(), CONTENT_TYPE)
