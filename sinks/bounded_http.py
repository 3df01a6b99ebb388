"""A small HTTP/1.1 server whose every read is bounded in time and size: the watcher's two ports.

The watcher's ports (`--http-address`: probes and `/metrics`; `--admission-address`: the webhook) share
the process, and its event loop, with the watches. A caller that can reach a port must not be able to
starve them: each connection has a deadline for its TLS handshake and headers, one for its body and one
for the idle time between two requests (until the next request's headers are in); there are at most
`max_connections` at once: when the port is full, the connection that has waited longest for its
caller (a handshake, headers, or the next request not yet in) is closed to make room, so that a caller
who opens connections and sends nothing cannot keep a prober out, and when every connection is busy the
new one is closed as soon as it is accepted, before any TLS (no file descriptor or handshake buffer is
spent on it); a body is read only when its declared length fits both its own bound and what all the bodies being
read at once may hold, and never past that length. A request that breaks a bound is answered (when it
still can be) and its connection closed; each kind of refusal is counted (`refused`, read by
`/metrics`) and said in one log line, then at most once a `QUIET` period with how many followed.

Only what the watcher's endpoints need is spoken: requests with a `Content-Length` (no chunked bodies),
`Expect: 100-continue`, keep-alive. The handler gets the whole body and answers with a whole body.
"""

from __future__ import annotations

import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus

import anyio
from anyio.abc import ByteStream, SocketAttribute, SocketListener, TaskGroup
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.tls import TLSStream

from stream.model.messages import Logger

QUIET = 60.0  # seconds between two log lines of the same refusal


@dataclass(frozen=True)
class Limits:
    """How long each part of a request may take, and how much a connection and its body may hold."""

    header_timeout: float = 5.0  # from the accept (TLS handshake included) to the end of the headers
    body_timeout: float = 10.0  # from the end of the headers to the end of the body
    idle_timeout: float = 30.0  # between two requests on a kept-alive connection
    write_timeout: float = 10.0  # to send an answer to a caller that does not read it
    max_connections: int = 64
    max_header_bytes: int = 16 << 10
    max_body: int = 0  # bytes of one request's body (0: requests carry no body)
    max_buffered: int = 0  # bytes of the bodies being read at once, all connections together


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes = b""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"


Handler = Callable[[Request], Awaitable[Response]]
# How a TLS port gets its context at each accept: the certificate may have been rotated since (sinks.tls_files)
TlsContext = Callable[[], ssl.SSLContext]


class Refused(Exception):
    """A request broken off: the kind of refusal (a metric label), and the answer it still gets, if any."""

    def __init__(self, kind: str, status: int | None = None, detail: str = "") -> None:
        super().__init__(kind)
        self.kind, self.status, self.detail = kind, status, detail


@dataclass
class Refusals:
    """How many requests of each kind were refused, and when each kind was last said."""

    name: str
    log: Logger
    counts: dict[str, int] = field(default_factory=dict)
    _said: dict[str, tuple[float, int]] = field(default_factory=dict)  # kind: (when last said, count then)

    def __call__(self, kind: str, detail: str = "") -> None:
        self.counts[kind] = count = self.counts.get(kind, 0) + 1
        now = time.monotonic()
        said = self._said.get(kind)
        if said is not None and now - said[0] < QUIET:
            return
        since = f" ({count - said[1] - 1} more since the last line)" if said is not None and count - said[1] > 1 else ""
        self._said[kind] = (now, count)
        self.log(f"{self.name}: refused a request: {kind}{f': {detail}' if detail else ''}{since}", "warning")


class BoundedServer:
    def __init__(
        self,
        name: str,
        host: str | None,
        port: int,
        handler: Handler,
        log: Logger,
        limits: Limits,
        tls: TlsContext | None = None,
    ) -> None:
        """`name` says which port a log line is about (e.g. "the admission webhook")."""
        self.host, self.port, self.handler, self.limits, self.tls = host, port, handler, limits, tls
        self.refused = Refusals(name, log)
        self.open = 0  # connections now
        self._buffered = 0  # bytes of the bodies being read now
        self._waiting: dict[object, anyio.CancelScope] = {}  # connections waiting for their caller, oldest first

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        """Listen while inside; the URL (the port chosen, when asked for port 0). OSError if it cannot.
        Leaving closes every connection at once."""
        listener = await anyio.create_tcp_listener(local_host=self.host, local_port=self.port)
        async with listener, anyio.create_task_group() as tg:
            for one in listener.listeners:
                assert isinstance(one, SocketListener)  # a TCP listener's, each
                tg.start_soon(self._accept, one, tg)
            address = listener.listeners[0].extra(SocketAttribute.local_address)
            bound, chosen = address[:2] if isinstance(address, tuple) else (address, self.port)
            scheme = "https" if self.tls is not None else "http"
            yield f"{scheme}://{f'[{bound}]' if ':' in str(bound) else bound}:{chosen}"
            tg.cancel_scope.cancel()

    async def _accept(self, listener: SocketListener, tg: TaskGroup) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:  # e.g. out of file descriptors: said once in a while, not in a busy loop
                self.refused("accept failed", exc.strerror or str(exc))
                await anyio.sleep(0.1)
                continue
            if self.open >= self.limits.max_connections:
                if not self._waiting:
                    self.refused("too many connections", f"{self.open} open and busy: a new one closed")
                    await stream.aclose()
                    continue
                self.refused("too many connections", f"{self.open} open: the one waiting longest closed")
                self._waiting.pop(next(iter(self._waiting))).cancel()
            self.open += 1
            tg.start_soon(self._connection, stream)

    @contextlib.contextmanager
    def _wait_for_caller(self, key: object) -> Iterator[anyio.CancelScope]:
        """A phase in which the connection waits for its caller: the first to close when the port is full."""
        with anyio.CancelScope() as scope:
            self._waiting[key] = scope
            try:
                yield scope
            finally:
                self._waiting.pop(key, None)

    async def _connection(self, raw: ByteStream) -> None:
        stream: ByteStream = raw
        key = object()
        try:
            with self._wait_for_caller(key) as waiting, anyio.fail_after(self.limits.header_timeout):
                if self.tls is not None:
                    stream = await self._handshake(raw)
                reader = BufferedByteReceiveStream(stream)
                head = await _head(reader, self.limits.max_header_bytes)
            while not waiting.cancel_called and head is not None and await self._exchange(stream, reader, head):
                with self._wait_for_caller(key) as waiting, anyio.move_on_after(self.limits.idle_timeout) as idle:
                    head = await _head(reader, self.limits.max_header_bytes)
                if idle.cancelled_caught:
                    break
        except TimeoutError:
            self.refused("headers too slow", f"not in within {self.limits.header_timeout:g}s")
        except Refused as refusal:
            self.refused(refusal.kind, refusal.detail)
            if refusal.status is not None:
                await self._send(stream, Response(refusal.status, f"{refusal.kind}\n".encode()), close=True)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
            pass  # the caller went away
        finally:
            self.open -= 1
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                await stream.aclose()

    async def _handshake(self, raw: ByteStream) -> ByteStream:
        assert self.tls is not None
        try:
            return await TLSStream.wrap(raw, server_side=True, ssl_context=self.tls(), standard_compatible=False)
        except ssl.SSLError as exc:
            raise Refused("TLS handshake failed", detail=exc.reason or str(exc)) from None
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            # as a client that does not trust the certificate may: is the caller's CA bundle the one that signed it?
            raise Refused("TLS handshake failed", detail="the caller closed the connection") from None

    async def _exchange(self, stream: ByteStream, reader: BufferedByteReceiveStream, head: bytes) -> bool:
        """One request and its answer; whether the connection stays open for another."""
        method, path, version, headers = _parse(head)
        length = _length(headers, self.limits.max_body)
        if length > self.limits.max_buffered - self._buffered:
            raise Refused("too many bodies at once", HTTPStatus.SERVICE_UNAVAILABLE, f"{length} bytes more")
        self._buffered += length
        try:
            if length and headers.get("expect", "").lower() == "100-continue":
                await self._write(stream, b"HTTP/1.1 100 Continue\r\n\r\n")
            try:
                with anyio.fail_after(self.limits.body_timeout):
                    body = await reader.receive_exactly(length) if length else b""
            except TimeoutError:
                raise Refused("body too slow", detail=f"not read within {self.limits.body_timeout:g}s") from None
            except anyio.IncompleteRead:
                raise Refused("body cut short", detail=f"fewer than {length} bytes") from None
            try:
                response = await self.handler(Request(method, path, headers, body))
            except Exception as exc:  # a defect: said, answered, and the port goes on
                raise Refused("the handler failed", HTTPStatus.INTERNAL_SERVER_ERROR, repr(exc)) from None
            del body
        finally:
            self._buffered -= length
        keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        await self._send(stream, response, close=not keep)
        return keep

    async def _send(self, stream: ByteStream, response: Response, close: bool) -> None:
        head = (
            f"HTTP/1.1 {response.status} {_reason(response.status)}\r\n"
            f"Content-Type: {response.content_type}\r\nContent-Length: {len(response.body)}\r\n"
            + ("Connection: close\r\n" if close else "")
            + "\r\n"
        )
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
            await self._write(stream, head.encode("latin-1") + response.body)

    async def _write(self, stream: ByteStream, data: bytes) -> None:
        try:
            with anyio.fail_after(self.limits.write_timeout):
                await stream.send(data)
        except TimeoutError:
            raise Refused("answer not read", detail=f"not taken within {self.limits.write_timeout:g}s") from None


async def _head(reader: BufferedByteReceiveStream, bound: int) -> bytes | None:
    """The request line and headers; None when the caller closed between requests."""
    try:
        head = await reader.receive_until(b"\r\n\r\n", bound)
    except anyio.DelimiterNotFound:
        head = None
    except anyio.IncompleteRead:
        return None
    if head is None or len(head) > bound:  # over the bound, in one piece or more
        raise Refused("headers too large", HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, f"over {bound} bytes")
    return head


def _parse(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    """The method, path, HTTP version and headers of a request's head."""
    line, *lines = head.decode("latin-1").split("\r\n")
    parts = line.split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0") or not parts[1].startswith("/"):
        raise Refused("not an HTTP/1.1 request", HTTPStatus.BAD_REQUEST, repr(line[:80]))
    headers: dict[str, str] = {}
    for header in lines:
        name, colon, value = header.partition(":")
        if not colon or not name or name != name.strip():
            raise Refused("malformed header", HTTPStatus.BAD_REQUEST, repr(header[:80]))
        headers[name.lower()] = value.strip()
    return parts[0], parts[1].split("?", 1)[0], parts[2], headers


def _length(headers: dict[str, str], bound: int) -> int:
    """The body's declared length, within `bound`."""
    if "transfer-encoding" in headers:
        raise Refused("chunked body", HTTPStatus.LENGTH_REQUIRED, "a Content-Length is needed")
    text = headers.get("content-length", "0")
    if not text.isdigit() or len(text) > 12:
        raise Refused("malformed header", HTTPStatus.BAD_REQUEST, f"Content-Length {text[:20]!r}")
    length = int(text)
    if length > bound:
        raise Refused("body too large", HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"{length} bytes, over {bound}")
    return length


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"
