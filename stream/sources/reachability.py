"""Whether the API server answers, as one client's requests find it, and how to say that it does not.

Before the server has ever answered, a refused connection, a name that does not resolve, a certificate
that is not trusted or no answer within the request timeout is a wrong context or a cluster that is
down: no retry fixes it, and the command that meets it says so in one line and exits (crashwatch.live).
Once the server has answered, the same failure is a blip (an API server restarting, a network hiccup):
the watches retry it, and it is said here, once when it starts, again at most once a minute while it
lasts, and once when the server answers again, rather than once per request retried. The reasons are
the user's words (`connection refused`, `the name x does not resolve`), never the library's
(`Connect call failed ('127.0.0.1', 1)`, `(_ssl.c:1006)`).
"""

from __future__ import annotations

import errno
import math
import os
import ssl
from collections.abc import Callable

import aiohttp
import anyio

from stream.model.messages import Logger

REMIND_EVERY = 60.0  # seconds between two lines about one outage
CONTEXT_HINT = "is the context right?"


def no_answer(exc: BaseException, timeout: float | None = None) -> tuple[str, str]:
    """Why a request got no answer at all, and what to check: the user's words, kubectl's spirit."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        error = exc.certificate_error
        why = getattr(error, "verify_message", None) or getattr(error, "reason", None) or "refused"
        return (
            f"its certificate is not trusted ({why})",
            "does the kubeconfig's certificate-authority belong to this cluster?",
        )
    if isinstance(exc, aiohttp.ClientSSLError):
        return f"the TLS handshake failed ({_ssl_reason(exc.os_error)})", "does the server speak HTTPS?"
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return f"the name {exc.host} does not resolve", CONTEXT_HINT
    if isinstance(exc, aiohttp.ClientConnectorError):
        return _os_words(exc.os_error), CONTEXT_HINT
    if isinstance(exc, TimeoutError):
        within = f" within {timeout:g}s" if timeout else ""
        return f"no answer{within}", "is the context right, and the network open to the server?"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection without an answer", ""
    if isinstance(exc, OSError):
        return _os_words(exc), ""
    return str(exc) or type(exc).__name__, ""


def _os_words(error: OSError) -> str:
    """An OSError by its errno (`connection refused`), not by asyncio's text of it."""
    if error.errno and error.errno in errno.errorcode:
        words = os.strerror(error.errno)
        return words[:1].lower() + words[1:]
    return error.strerror or str(error) or type(error).__name__


def _ssl_reason(error: OSError) -> str:
    """OpenSSL's reason (`WRONG_VERSION_NUMBER`) as words, without the source file it came from."""
    reason = getattr(error, "reason", None)
    if isinstance(error, ssl.SSLError) and reason:
        return str(reason).lower().replace("_", " ")
    return _os_words(error)


class Reachability:
    """What one client's requests found of the server: whether it ever answered, and since when it has
    not. Its lines go to `log`, silent until the command's first contact succeeded (before that, the
    command says the one line itself)."""

    def __init__(self, server: str, clock: Callable[[], float] = anyio.current_time) -> None:
        self.server = server
        self.clock = clock  # anyio's, which the waits use too
        self.answered = False  # the server answered once: a failure since is a blip, not a wrong context
        self.down_since: float | None = None  # anyio's clock: when the current outage began
        self.cause = ""  # why the last request got no answer
        self.log: Logger = Logger()
        self._said_at = -math.inf
        self._changed: anyio.Event | None = None  # set at the next change, for those waiting on one

    @property
    def unreachable(self) -> str | None:
        """The line that says the server cannot be reached now, or None while it answers."""
        if self.down_since is None:
            return None
        return f"cannot reach the API server at {self.server}: {self.cause}"

    def failed(self, cause: str) -> None:
        """A request got no answer (connection refused, no such host, TLS, timed out)."""
        now = self.clock()
        self.cause = cause
        if self.down_since is None:
            self.down_since = self._said_at = now
            self._wake()
            if self.answered:
                self.log(f"{self.unreachable}; retrying until it answers", "warning")
        elif self.answered and now - self._said_at >= REMIND_EVERY:
            self._said_at = now
            self.log(f"{self.unreachable} (for {_duration(now - self.down_since)}); still retrying", "warning")

    def reached(self) -> None:
        """The server answered a request (whatever its status)."""
        first, self.answered = not self.answered, True
        if self.down_since is None:
            return
        gone = self.clock() - self.down_since
        self.down_since = None
        self._wake()
        if not first:
            self.log(f"the API server at {self.server} answers again (after {_duration(gone)})")

    async def down_for(self, seconds: float) -> str:
        """Return once the server has not answered for `seconds` in a row; the line that says so."""
        while True:
            while self.down_since is None:
                await self._change().wait()
            with anyio.move_on_after(self.down_since + seconds - self.clock()):
                await self._change().wait()  # it answered again before that: wait for the next outage
                continue
            return f"{self.unreachable}, for {_duration(seconds)}"

    def _change(self) -> anyio.Event:
        if self._changed is None:
            self._changed = anyio.Event()
        return self._changed

    def _wake(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest}s" if rest else f"{minutes}m"
