"""The connection to the API server: where it is, who we are, and requests that return bytes.

kubernetes-asyncio resolves the kubeconfig or the in-cluster service account (contexts, exec plugins,
token refresh, client certificates, TLS) and owns the aiohttp session; nothing here uses its models.
Bodies go out and come back as bytes, for msgspec to encode and decode: the hot path never builds a
generated model object. The status patcher (sinks/) writes through the same client.
"""

from __future__ import annotations

import os
import random
import re
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG = "~/.kube/config"


class ConfigError(Exception):
    """No usable kubeconfig or in-cluster configuration; the message says what is wrong."""


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


def _check_kubeconfig(file: str) -> None:
    """Say in one line what is wrong with a kubeconfig that is empty or no YAML mapping at all, before the
    client library trips over it with a message about its own internals."""
    try:
        text = Path(file).expanduser().read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start]
        raise ConfigError(
            f"kubeconfig {file}: not a text file (byte 0x{byte:02x} at offset {exc.start:,} is not UTF-8): "
            "a kubeconfig is YAML"
        ) from None
    except OSError as exc:
        raise ConfigError(f"kubeconfig {file}: cannot be read: {exc.strerror or exc}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError(f"kubeconfig {file}: not YAML{at}: {problem}") from None
    if document is None:
        raise ConfigError(f"kubeconfig {file}: is empty")
    if not isinstance(document, dict):
        raise ConfigError(f"kubeconfig {file}: not a kubeconfig (a YAML mapping with clusters, users, contexts)")


# the client library's words for what a user did (kubernetes_asyncio's ConfigException texts), in ours
_LIBRARY_WORDS = (
    (re.compile(r"File does not exists?: (.*)"), "names a file that does not exist: {0}"),
    (re.compile(r"Invalid kube-config file\. No configuration found\.?"), "has no clusters, users or contexts"),
    (re.compile(r"Expected key (\S+) in (.+)"), "{1} has no {0}"),
)


def _in_our_words(text: str) -> str:
    for pattern, words in _LIBRARY_WORDS:
        found = pattern.fullmatch(text.strip())
        if found is not None:
            return words.format(*found.groups())
    return text


def _in_cluster(path: str | None, context: str | None) -> bool:
    """Whether to use the in-cluster service account: no kubeconfig or context was asked for, and this
    runs in a Pod that has one."""
    return (
        path is None
        and context is None
        and "KUBERNETES_SERVICE_HOST" in os.environ
        and (SERVICE_ACCOUNT / "token").exists()
    )


def _load_in_cluster(configuration: Any) -> tuple[str, str]:
    """The service account's configuration; the namespace it runs in (its file, else default), and the source."""
    from kubernetes_asyncio import config

    config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    namespace = "default"
    namespace_file = SERVICE_ACCOUNT / "namespace"
    if namespace_file.exists():
        namespace = namespace_file.read_text().strip() or namespace
    return namespace, "in-cluster service account"


async def _load_kubeconfig(path: str, context: str | None, configuration: Any) -> tuple[str, str]:
    """The kubeconfig's configuration (`path` may list several files, as $KUBECONFIG does); the current
    context's namespace (else default), and the source. What is wrong with it is said in one line."""
    from kubernetes_asyncio import config

    # start-up, before any other task runs: a stat of the kubeconfig blocks nobody
    files = [p for p in path.split(os.pathsep) if p and Path(p).expanduser().exists()]  # noqa: ASYNC240
    if not files:
        raise ConfigError(f"no kubeconfig at {path} and not running in a cluster")
    for file in files:
        _check_kubeconfig(file)
    if context is not None:
        _check_context(path, context)
    loader = await config.load_kube_config(
        config_file=path, context=context, client_configuration=configuration, persist_config=False
    )
    current = loader.current_context or {}
    namespace = (current.get("context") or {}).get("namespace") or "default"
    return namespace, f"kubeconfig {path}" + (f", context {context}" if context else "")


def _check_context(path: str, context: str) -> None:
    """A context asked for that the kubeconfig lacks is named, with those it has."""
    from kubernetes_asyncio import config

    contexts, _ = config.list_kube_config_contexts(path)
    names = [c.get("name") for c in contexts or []]
    if context not in names:
        raise ConfigError(f"kubeconfig {path}: no context named {context!r} (it has {', '.join(names)})")


def _api_client(configuration: Any, source: str) -> Any:
    """The client library's ApiClient, which builds the TLS context: a CA or client certificate that cannot
    be read or used is said in one line."""
    from kubernetes_asyncio import client

    try:
        return client.ApiClient(configuration)
    except (ssl.SSLError, OSError) as exc:
        certificates = ", ".join(f for f in (configuration.ssl_ca_cert, configuration.cert_file) if f)
        why = getattr(exc, "reason", None) or exc.strerror or exc
        raise ConfigError(f"{source}: its certificates ({certificates}) cannot be used: {why}") from None


class KubeClient:
    """One API server, its credentials, and an aiohttp session with its TLS settings."""

    def __init__(self, api: Any, namespace: str, source: str) -> None:
        self._api = api  # kubernetes_asyncio.client.ApiClient
        self._config = api.configuration
        self.server: str = self._config.host.rstrip("/")
        self.default_namespace = namespace
        self.source = source  # where the configuration came from, for messages

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, context: str | None = None) -> KubeClient:
        """kubectl's order: --kubeconfig, $KUBECONFIG, the in-cluster service account, ~/.kube/config."""
        from kubernetes_asyncio import client
        from kubernetes_asyncio.config.config_exception import ConfigException

        configuration = client.Configuration()
        path = kubeconfig or os.environ.get("KUBECONFIG")
        in_cluster = _in_cluster(path, context)
        try:
            if in_cluster:
                namespace, source = _load_in_cluster(configuration)
            else:
                path = path or DEFAULT_KUBECONFIG
                namespace, source = await _load_kubeconfig(path, context, configuration)
        except ConfigError:
            raise
        except (ConfigException, AssertionError, KeyError, TypeError, AttributeError, OSError, ValueError) as exc:
            where = "in-cluster configuration" if in_cluster else f"kubeconfig {path}"
            raise ConfigError(f"{where}: {_in_our_words(str(exc)) or type(exc).__name__}") from None
        return cls(_api_client(configuration, source), namespace, source)

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
            raise ApiError(0, "", f"cannot reach {self.server}: {_describe(exc)}") from None
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
                raise ApiError(0, "", f"reading {path}: {_describe(exc)}") from None
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


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, aiohttp.ClientConnectorError):  # say "connection refused", not aiohttp's whole repr
        return exc.os_error.strerror or str(exc.os_error) or type(exc.os_error).__name__
    text = str(exc)
    return text or type(exc).__name__
