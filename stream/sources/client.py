"""The connection to the API server: where it is, who we are, and requests that return bytes.

kubernetes-asyncio resolves the kubeconfig or the in-cluster service account (contexts, exec plugins,
token refresh, client certificates, TLS; stream.sources.kubeconfig picks which and says what is wrong)
and owns the aiohttp session; nothing here uses its models. Bodies go out and come back as bytes, for
msgspec to encode and decode: the hot path never builds a generated model object. The status patcher
(sinks/) writes through the same client. Every request tells the client's `Reachability` whether the
server answered (stream.sources.reachability), so a command knows a wrong context from a blip.
"""

from __future__ import annotations

import os
import random
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec

from stream.sources.kubeconfig import (
    DEFAULT_KUBECONFIG,
    ConfigError,
    api_client,
    in_cluster,
    load_in_cluster,
    load_kubeconfig,
    quiet_library,
    user_words,
)
from stream.sources.reachability import Reachability, no_answer


class ApiError(Exception):
    """The API server answered with an error status (or could not be reached: status 0)."""

    def __init__(self, status: int, reason: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}" if status else message)
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        """Worth another try later: unreachable, throttled, or the server's own trouble."""
        return self.status == 0 or self.status == 429 or self.status >= 500

    @property
    def refusal(self) -> str:
        """A 401 or 403 in words that tell them apart: credentials the server does not take, or a user it
        knows who may not do this."""
        why = self.message or self.reason
        if self.status == 401:
            return f"the API server does not accept the credentials (401 Unauthorized: {why}): are they expired?"
        return f"not allowed ({self.status} {self.reason or 'Forbidden'}: {why})"


class Unreachable(ApiError):
    """No answer at all: the connection was refused, the name does not resolve, TLS failed, or nothing came
    back within the timeout (stream.sources.reachability says which, and what to check)."""

    def __init__(self, server: str, cause: str, hint: str) -> None:
        super().__init__(0, cause, f"cannot reach the API server at {server}: {cause}")
        self.hint = hint

    @property
    def advice(self) -> str:
        """The one line a command that gives up says: what failed, and what to check."""
        return f"{self.message} - {self.hint}" if self.hint else self.message


class _Status(msgspec.Struct):
    reason: str = ""
    message: str = ""


_decode_status = msgspec.json.Decoder(_Status).decode


@dataclass
class Response:
    status: int
    body: bytes


class TokenBucket:
    """Client-side rate limiting, as client-go's token bucket: `rate` requests a second on average,
    `burst` at once. `take` says how long to wait for the next token; time is handed in, so one bucket
    serves the status writes (anyio's clock) and the Events (a clock tests can fake)."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.tokens = float(burst)
        self.last = now

    def take(self, now: float) -> float:
        """Take a token; the seconds until it is really there (0: at once)."""
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        self.tokens -= 1
        return max(0.0, -self.tokens / self.rate)


class Backoff:
    """The one retry schedule: exponential with full jitter (many watchers restarting at once do not
    retry in step), and never sooner than the server asked with Retry-After."""

    __slots__ = ("ceiling", "failures", "initial")

    def __init__(self, initial: float = 0.5, ceiling: float = 30.0) -> None:
        self.initial = initial
        self.ceiling = ceiling
        self.failures = 0

    def next(self, retry_after: float | None = None) -> float:
        """The delay before the next try, counting one more failure."""
        delay = random.uniform(0, min(self.ceiling, self.initial * 2**self.failures))
        self.failures += 1
        return delay if retry_after is None else max(delay, retry_after)

    def reset(self) -> None:
        """It worked: the next failure starts over from `initial`."""
        self.failures = 0


class KubeClient:
    """One API server, its credentials, and an aiohttp session with its TLS settings."""

    def __init__(self, api: Any, namespace: str, source: str) -> None:
        self._api = api  # kubernetes_asyncio.client.ApiClient
        self._config = api.configuration
        self.server: str = self._config.host.rstrip("/")
        self.default_namespace = namespace
        self.source = source  # where the configuration came from, for messages
        self.reach = Reachability(self.server)  # whether the server answers, as every request finds it

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, context: str | None = None) -> KubeClient:
        """kubectl's order: --kubeconfig, $KUBECONFIG, the in-cluster service account, ~/.kube/config."""
        from kubernetes_asyncio import client
        from kubernetes_asyncio.config.config_exception import ConfigException

        quiet_library()
        configuration = client.Configuration()
        path = kubeconfig or os.environ.get("KUBECONFIG")
        in_pod = in_cluster(path, context)
        try:
            if in_pod:
                namespace, source = load_in_cluster(configuration)
            else:
                path = path or DEFAULT_KUBECONFIG
                namespace, source = await load_kubeconfig(path, context, configuration)
        except ConfigError:
            raise
        except (ConfigException, AssertionError, KeyError, TypeError, AttributeError, OSError, ValueError) as exc:
            where = "in-cluster configuration" if in_pod else f"kubeconfig {path}"
            raise ConfigError(f"{where}: {user_words(exc)}") from None
        return cls(api_client(configuration, source), namespace, source)

    async def close(self) -> None:
        await self._api.close()

    async def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "crashwatch"}
        if content_type:
            headers["Content-Type"] = content_type
        await self._api.update_params_for_auth(headers, [], ["BearerToken"])
        return headers

    @asynccontextmanager
    async def _open(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None,
        body: bytes | None,
        content_type: str | None,
        timeout: aiohttp.ClientTimeout,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        rest = self._api.rest_client
        extra: dict[str, Any] = {}
        if rest.proxy:
            extra["proxy"] = rest.proxy
        if rest.server_hostname:
            extra["server_hostname"] = rest.server_hostname
        try:
            response = await rest.pool_manager.request(
                method,
                self.server + path,
                params=query,
                data=body,
                headers=await self._headers(content_type),
                timeout=timeout,
                **extra,
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            cause, hint = no_answer(exc, timeout.total or timeout.connect)
            self.reach.failed(cause)
            raise Unreachable(self.server, cause, hint) from None
        self.reach.reached()
        try:
            if response.status >= 400:
                raise await _error(response)
            yield response
        except BaseException:
            response.close()  # a watch given up on (stuck, cancelled) must not linger in the pool
            raise
        else:
            response.release()  # back to the pool for the next request

    async def request(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        timeout: float = 30.0,
    ) -> Response:
        """One request, its whole answer read; raises ApiError for an error status or no answer."""
        async with self._open(method, path, query, body, content_type, aiohttp.ClientTimeout(total=timeout)) as resp:
            try:
                data = await resp.read()
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                raise ApiError(0, "", f"reading {path}: {no_answer(exc, timeout)[0]}") from None
            return Response(resp.status, data)

    @asynccontextmanager
    async def stream(
        self, path: str, query: Mapping[str, str], connect_timeout: float = 30.0
    ) -> AsyncIterator[aiohttp.StreamReader]:
        """A long response (a watch), read as it comes; the caller bounds each read (a stuck stream)."""
        timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout, sock_connect=connect_timeout)
        async with self._open("GET", path, query, None, None, timeout) as response:
            yield response.content


async def _error(response: aiohttp.ClientResponse) -> ApiError:
    try:
        body = await response.read()
        status = _decode_status(body)
        reason, message = status.reason, status.message or body[:200].decode(errors="replace")
    except (aiohttp.ClientError, TimeoutError, OSError, msgspec.DecodeError, msgspec.ValidationError):
        reason, message = response.reason or "", ""
    retry_after = None
    header = response.headers.get("Retry-After")
    if header:
        try:
            retry_after = max(0.0, float(header))
        except ValueError:
            retry_after = None
    return ApiError(response.status, reason or (response.reason or ""), message.strip(), retry_after)
