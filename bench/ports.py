"""The watcher's two ports under attack: memory, the event loop's lag and /healthz while a caller floods
the webhook's port with connections and 8 MiB reviews.

A child process serves the admission webhook (TLS, its production limits) and the HTTP endpoints, as
`crashwatch run --admission-address --http-address` does, with a task that measures how late the event
loop wakes it (what a watch event would wait). This process then attacks on loopback only, bounded in
count and time: `--connections` connections that each finish a TLS handshake and send nothing (the
issue's 1,800 took the old server to 537 MiB), then `--reviews` reviews of 8 MiB, `--parallel` at a
time; /healthz is asked throughout. Prints the child's peak RSS (VmHWM), the loop's worst lag, the
refusals counted, and /healthz's slowest answer.

    python -m bench.ports [--connections 2000] [--reviews 20] [--parallel 8]
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


async def serve(certs: Path) -> None:
    """The child: both servers, a loop-lag probe; prints the URLs, then the figures on stdin's close."""
    from sinks.admission import AdmissionServer, AdmissionSettings
    from sinks.http_server import HttpServer
    from sinks.metrics import Metrics
    from stream.model.messages import logger

    lines: list[str] = []
    settings = AdmissionSettings("127.0.0.1", 0, str(certs / "tls.crt"), str(certs / "tls.key"))
    admission = AdmissionServer(settings, logger(lines.append))
    http = HttpServer("127.0.0.1", 0, Metrics(), lambda: None, logger(lines.append))
    lag = 0.0

    async def probe() -> None:
        nonlocal lag
        while True:
            before = time.monotonic()
            await anyio.sleep(0.01)
            lag = max(lag, time.monotonic() - before - 0.01)

    async with admission.serving() as hook, http.serving() as url, anyio.create_task_group() as tg:
        tg.start_soon(probe)
        print(json.dumps({"admission": hook, "http": url}), flush=True)
        await anyio.to_thread.run_sync(sys.stdin.read)
        proc = await anyio.Path("/proc/self/status").read_text()
        status = dict(line.split(":", 1) for line in proc.splitlines())
        figures = {
            "peak_rss_mib": int(status["VmHWM"].split()[0]) / 1024,
            "loop_lag_max_ms": lag * 1000,
            "refused": admission.server.refused.counts,
            "answers": admission.answers.counts,
            "log_lines": len(lines),
        }
        print(json.dumps(figures), flush=True)
        tg.cancel_scope.cancel()


async def attack(urls: dict[str, str], ca: Path, connections: int, reviews: int, parallel: int) -> dict[str, Any]:
    import aiohttp

    host, port = urls["admission"].removeprefix("https://").split("/")[0].rsplit(":", 1)
    trusting = ssl.create_default_context(cafile=str(ca))
    slowest = 0.0

    async def healthz() -> None:
        nonlocal slowest
        async with aiohttp.ClientSession() as session:
            while True:
                started = time.monotonic()
                async with session.get(urls["http"] + "/healthz") as response:
                    assert response.status == 200
                slowest = max(slowest, time.monotonic() - started)
                await anyio.sleep(0.05)

    opened: list[Any] = []
    failed = 0
    body = _review(8 << 20)
    with anyio.fail_after(300):
        async with anyio.create_task_group() as tg:
            tg.start_soon(healthz)
            started = time.monotonic()
            for _ in range(connections):
                try:
                    stream = await anyio.connect_tcp(
                        host, int(port), ssl_context=trusting, tls_standard_compatible=False
                    )
                    opened.append(stream)
                except (OSError, ssl.SSLError, anyio.BrokenResourceError, anyio.EndOfStream):
                    failed += 1  # closed by the server: the port was full
            flood = time.monotonic() - started
            for stream in opened:
                await stream.aclose()
            limiter = anyio.CapacityLimiter(parallel)
            statuses: list[int] = []

            async def post() -> None:
                async with (
                    limiter,
                    aiohttp.ClientSession() as session,
                    session.post(urls["admission"], data=body, ssl=trusting) as response,
                ):
                    statuses.append(response.status)

            started = time.monotonic()
            async with anyio.create_task_group() as posts:
                for _ in range(reviews):
                    posts.start_soon(post)
            sent = time.monotonic() - started
            tg.cancel_scope.cancel()
    return {
        "connections": connections,
        "handshakes_refused": failed,
        "flood_seconds": round(flood, 1),
        "reviews_8mib": len(statuses),
        "review_statuses": sorted(set(statuses)),
        "reviews_seconds": round(sent, 1),
        "healthz_slowest_ms": round(slowest * 1000, 1),
    }


def _review(size: int) -> bytes:
    """An AdmissionReview of `size` bytes: a DGD status write whose spec is padded (read, then let through)."""
    obj = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": "g", "namespace": "ns", "uid": "u", "generation": 2, "resourceVersion": "7"},
        "spec": {"padding": ""},
        "status": {"state": "pending", "conditions": []},
    }
    request = {"uid": "u-1", "operation": "UPDATE", "subResource": "status", "object": obj, "oldObject": obj}
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    pad = size - len(json.dumps(review)) - 16
    obj["spec"]["padding"] = "x" * (pad // 2)
    return json.dumps(review).encode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--reviews", type=int, default=20)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--serve", metavar="CERTS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        anyio.run(serve, Path(args.serve))
        return
    from operators import webhook_certs

    with tempfile.TemporaryDirectory() as folder:
        certs = webhook_certs(()).write(Path(folder))
        child = subprocess.Popen(
            [sys.executable, "-m", "bench.ports", "--serve", str(certs)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert child.stdin is not None and child.stdout is not None
        try:
            urls = json.loads(child.stdout.readline())
            seen = anyio.run(attack, urls, certs / "ca.crt", args.connections, args.reviews, args.parallel)
            child.stdin.close()
            served = json.loads(child.stdout.readline())
        finally:
            child.kill() if child.poll() is None else None
            child.wait(timeout=10)
    print(json.dumps({**seen, **served}, indent=2))


if __name__ == "__main__":
    main()
