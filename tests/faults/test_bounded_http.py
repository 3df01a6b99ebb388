"""The watcher's ports against callers that try to starve them (sinks.bounded_http): connections that
send half their headers, half their body or nothing, a flood of connections, bodies past the bounds.

Each attack runs against the real server on loopback, with short limits so that a test waits seconds;
the figures under load (2,000 connections, memory) are bench/ports.py's."""

from __future__ import annotations

import resource
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import anyio
import pytest
from anyio.abc import SocketStream
from operators import webhook_certs

from sinks.admission import AdmissionServer, AdmissionSettings
from sinks.bounded_http import Limits
from sinks.http_server import HttpServer
from sinks.metrics import Metrics
from stream.model.messages import logger

pytestmark = pytest.mark.anyio

SHORT = Limits(0.5, 0.5, 0.5, 1, max_connections=8, max_body=1000, max_buffered=1500)
BOUND = 10  # seconds a test waits for a close due in under one


class Port:
    def __init__(self, server: HttpServer, url: str, said: list[str]) -> None:
        self.server, self.url, self.said = server, url, said
        self.host, port = url.removeprefix("http://").rsplit(":", 1)
        self.port = int(port)

    async def connect(self) -> SocketStream:
        return await anyio.connect_tcp(self.host, self.port)

    async def healthz(self) -> int:
        async with aiohttp.ClientSession() as session, session.get(self.url + "/healthz") as response:
            return response.status


@pytest.fixture
async def port() -> AsyncIterator[Port]:
    said: list[str] = []
    server = HttpServer("127.0.0.1", 0, Metrics(), lambda: None, logger(said.append), limits=SHORT)
    async with server.serving() as url:
        yield Port(server, url, said)


async def closed(stream: SocketStream) -> bytes:
    """What the server sent before it closed the connection (within BOUND seconds)."""
    received = b""
    with anyio.fail_after(BOUND):
        try:
            while True:
                received += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
            return received


@pytest.mark.parametrize(
    "sent,kind",
    [
        (b"", "headers too slow"),  # connects and sends nothing
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\n", "headers too slow"),  # half its headers
        (b"POST /healthz HTTP/1.1\r\nContent-Length: 100\r\n\r\n" + b"x" * 10, "body too slow"),  # half its body
    ],
)
async def test_a_connection_that_stalls_is_closed_within_its_timeout(port: Port, sent: bytes, kind: str) -> None:
    async with await port.connect() as stream:
        await stream.send(sent) if sent else None
        started = anyio.current_time()
        await closed(stream)
        assert anyio.current_time() - started < BOUND
    assert port.server.server.refused.counts == {kind: 1} and port.server.server.open == 0


async def test_an_idle_kept_alive_connection_is_closed_after_the_idle_timeout(port: Port) -> None:
    async with await port.connect() as stream:
        await stream.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answered = await closed(stream)  # answered, kept open, then closed once idle
    assert answered.startswith(b"HTTP/1.1 200 OK\r\n") and answered.endswith(b"\r\n\r\nok\n")
    assert b"Connection: close" not in answered
    assert port.server.server.refused.counts == {}  # an idle close is no refusal


@pytest.mark.parametrize(
    "sent,answer,kind",
    [
        (b"GET /healthz HTTP/1.1\r\n" + b"X-A: " + b"a" * 20_000 + b"\r\n\r\n", b"431", "headers too large"),
        (b"POST /healthz HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", b"413", "body too large"),
        (b"POST /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", b"411", "chunked body"),
        (b"GET /healthz SPDY/3\r\n\r\n", b"400", "not an HTTP/1.1 request"),
        (b"GET /healthz HTTP/1.1\r\nno colon\r\n\r\n", b"400", "malformed header"),
    ],
)
async def test_a_request_past_a_bound_is_answered_and_closed_unread(
    port: Port, sent: bytes, answer: bytes, kind: str
) -> None:
    async with await port.connect() as stream:
        await stream.send(sent)
        received = await closed(stream)
    assert received.startswith(b"HTTP/1.1 " + answer) and b"Connection: close" in received
    assert port.server.server.refused.counts == {kind: 1}
    (line,) = port.said
    assert line.startswith(f"the HTTP endpoints: refused a request: {kind}")


async def test_bodies_read_at_once_are_bounded_together(port: Port) -> None:
    first = await port.connect()
    async with first:  # 1,000 bytes announced and not yet sent: 500 of the 1,500 left
        await first.send(b"POST /healthz HTTP/1.1\r\nContent-Length: 1000\r\n\r\n")
        with anyio.fail_after(BOUND):
            while port.server.server._buffered == 0:
                await anyio.sleep(0.01)
        async with await port.connect() as second:
            await second.send(b"POST /healthz HTTP/1.1\r\nContent-Length: 600\r\n\r\n")
            assert (await closed(second)).startswith(b"HTTP/1.1 503")
        await first.send(b"x" * 1000)
        assert (await first.receive()).startswith(b"HTTP/1.1 405")  # read, then answered: GET only
    assert port.server.server._buffered == 0


async def test_a_flood_of_silent_connections_leaves_the_port_answering(port: Port) -> None:
    """2,000 connections that send nothing, opened as fast as the loop takes them, then /healthz: the
    port never holds more than its bound, and the newest caller gets in."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096 <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))
    streams: list[SocketStream] = []
    most = 0
    try:
        with anyio.fail_after(60):
            for _ in range(2000):
                streams.append(await port.connect())
                most = max(most, port.server.server.open)
            assert await port.healthz() == 200
    finally:
        for stream in streams:
            await stream.aclose()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert most <= 2 * SHORT.max_connections  # the bound, and the evicted ones on their way out
    assert port.server.server.refused.counts["too many connections"] >= 2000 - SHORT.max_connections
    assert sum("too many connections" in line for line in port.said) == 1


async def test_a_tls_handshake_that_fails_is_counted_and_said_once(tmp_path: Path) -> None:
    certs = webhook_certs(()).write(tmp_path / "certs")
    said: list[str] = []
    settings = AdmissionSettings("127.0.0.1", 0, str(certs / "tls.crt"), str(certs / "tls.key"), limits=SHORT)
    server = AdmissionServer(settings, logger(said.append))
    async with server.serving() as url:
        for _ in range(3):  # a caller that does not trust the certificate (an API server with a stale caBundle)
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                async with aiohttp.ClientSession() as session, session.post(url, data=b"{}"):
                    pass
        trusting = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        async with aiohttp.ClientSession() as session, session.post(url, data=b"{}", ssl=trusting) as response:
            assert response.status == 400
    with anyio.fail_after(BOUND):
        while server.server.refused.counts.get("TLS handshake failed", 0) < 3:
            await anyio.sleep(0.01)
    assert sum("refused a request: TLS handshake failed" in line for line in said) == 1
