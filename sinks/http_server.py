"""The watcher's HTTP endpoints, for Kubernetes probes and Prometheus.

`/healthz` (liveness) answers while the process's event loop runs: an API server that cannot be reached
is not a reason to restart the watcher, which retries on its own (and a restarted one would only retry
too). `/readyz` answers 200 once every watch has listed (before that no status is decided) and 503 once
a stop has begun; with leader election its body says whether this replica leads (a follower is ready
too: it diagnoses, and takes over without a warm-up). `/metrics` is the Prometheus text exposition of
sinks.metrics.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable

from aiohttp import web

from sinks.metrics import CONTENT_TYPE, Metrics

NotReady = Callable[[], str | None]  # why it is not ready, or None when it is
Detail = Callable[[], str | None]  # what a ready watcher adds to "ok", e.g. whether it leads


async def listen(runner: web.AppRunner, host: str | None, port: int, tls: ssl.SSLContext | None = None) -> str:
    """Set the runner up and listen (over TLS with `tls`); the URL, with the port chosen when asked for
    port 0. OSError if it cannot, the runner cleaned up."""
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=tls)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    bound, chosen = runner.addresses[0][:2]
    return f"{'https' if tls is not None else 'http'}://{f'[{bound}]' if ':' in bound else bound}:{chosen}"


class HttpServer:
    def __init__(
        self, host: str | None, port: int, metrics: Metrics, not_ready: NotReady, detail: Detail | None = None
    ) -> None:
        self.host, self.port = host, port
        self.metrics = metrics
        self.not_ready = not_ready
        self.detail = detail or (lambda: None)
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)

    async def start(self) -> str:
        """Listen; the URL it listens on (the port chosen, when asked for port 0). OSError if it cannot."""
        return await listen(self._runner, self.host, self.port)

    async def stop(self) -> None:
        await self._runner.cleanup()

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        reason = self.not_ready()
        if reason is not None:
            return web.Response(status=503, text=f"not ready: {reason}\n")
        detail = self.detail()
        return web.Response(text=f"ok: {detail}\n" if detail else "ok\n")

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE})
