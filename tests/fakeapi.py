"""A small fake Kubernetes API server for injecting faults a real one cannot be made to show on demand.

It keeps objects per resource with a global resourceVersion and a history of changes, and serves LIST
(with limit/continue), WATCH (from a resourceVersion, with bookmarks on request, 410 for a compacted
one), GET and merge-PATCH of the status subresource with resourceVersion preconditions, as the real API
server does, and a Pod's log (pods/log) as kubelet serves it through the API server: the current or the
previous instance of a container by its status, `tailLines`, then `limitBytes` counted from the first of
those lines. Faults are queued per request kind: an HTTP status with headers, a watch cut mid-stream, a
malformed line, a stream that goes silent, an ERROR event with 410 (and, for discovery, a status: a
401 or 403 at the first request). It may serve HTTPS with a certificate a test makes, and listen on a
port a stopped one used (a server that comes back). Every request is logged, with the time it came, for
the tests to assert on. `ServedFake` runs one on an event loop of its own, for the CLI run as a subprocess.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

RESOURCES = {
    ("", "pods"): "Pod",
    ("apps", "deployments"): "Deployment",
    ("nvidia.com", "dynamocomponentdeployments"): "DynamoComponentDeployment",
    ("nvidia.com", "dynamographdeployments"): "DynamoGraphDeployment",
    ("coordination.k8s.io", "leases"): "Lease",  # leader election: GET, POST (create), PUT (update)
    ("events.k8s.io", "events"): "Event",  # Kubernetes Events: POST (create), PATCH (a series' count)
    # the status admission webhook's registration: GET (its check, sinks.admission_trust)
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): "MutatingWebhookConfiguration",
}
CLUSTER_SCOPED = {"mutatingwebhookconfigurations"}  # kept under the namespace ""


@dataclass
class Fault:
    """What one request gets instead of the normal answer.

    kind: "status" (an HTTP error), "cut" (a watch that sends `after` events then drops the connection),
    "garbage" (a watch that sends `after` events then a malformed line), "silent" (a watch that sends
    `after` events then nothing, connection open), "gone" (a watch that sends an ERROR 410 event),
    "delay" (answer normally after `seconds`), "endless" (a watch that sends `after` events then one line
    that never ends, 64 KiB at a time, until the client goes or the server stops; a log that sends a line
    every `seconds` and never ends).
    """

    kind: str
    status: int = 500
    headers: dict[str, str] = field(default_factory=dict)
    after: int = 0
    seconds: float = 0.0


@dataclass
class Request:
    at: float
    method: str
    path: str
    query: dict[str, str]
    body: Any = None


class FakeApi:
    def __init__(self) -> None:
        self.version = 100
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {p: {} for _, p in RESOURCES}
        self.history: dict[str, list[tuple[int, str, dict[str, Any]]]] = {p: [] for _, p in RESOURCES}
        self.compacted = 0  # watches from before this resourceVersion get 410
        self.endless_bytes = 0  # how much of an endless line ("endless" fault) was sent
        self.faults: dict[str, list[Fault]] = {}  # key: "list pods", "watch pods", "patch", "get", "log"
        # a container's output per instance: (namespace, pod, container, previous) -> bytes
        self.logs: dict[tuple[str, str, str, bool], bytes] = {}
        self.logs_in_flight = 0  # log requests being answered now, and the most at once
        self.most_logs_in_flight = 0
        self.requests: list[Request] = []
        self.serve_dynamo = True
        self.dynamo_versions: tuple[str, ...] = ("v1beta1",)
        self.bookmark_every: float | None = None
        self._changed = asyncio.Event()  # set, and replaced by a fresh one, at every change
        self._stopping = asyncio.Event()  # ends the watches and the delays under way, so stop() waits for none
        self._watching: set[Any] = set()  # the transports of open watches
        self._runner: web.AppRunner | None = None
        self.url = ""

    # --- state, as a test changes it -----------------------------------------------------------------

    def _next(self) -> str:
        self.version += 1
        return str(self.version)

    def put(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object (a new resourceVersion), recorded in the watch history."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if plural not in CLUSTER_SCOPED:
            meta.setdefault("namespace", "ns")
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta["resourceVersion"] = self._next()
        key = (meta.get("namespace", ""), meta["name"])
        kind = "MODIFIED" if key in self.objects[plural] else "ADDED"
        self.objects[plural][key] = obj
        self.history[plural].append((self.version, kind, copy.deepcopy(obj)))
        self._notify()
        return obj

    def delete(self, plural: str, namespace: str, name: str) -> None:
        obj = self.objects[plural].pop((namespace, name))
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = self._next()
        self.history[plural].append((self.version, "DELETED", obj))
        self._notify()

    def put_log(self, namespace: str, pod: str, container: str, data: bytes, previous: bool = False) -> None:
        """What the container's current instance printed (`previous`: the instance before it)."""
        self.logs[(namespace, pod, container, previous)] = data

    def compact(self) -> None:
        """Forget the history: watches from an older resourceVersion now get 410 Gone."""
        self.compacted = self.version
        for plural in self.history:
            self.history[plural] = []

    def disconnect(self) -> None:
        """Drop every open watch connection, as a restarting server or a network blip does."""
        for transport in list(self._watching):
            transport.abort()
        self._watching.clear()

    def fault(self, key: str, *faults: Fault) -> None:
        self.faults.setdefault(key, []).extend(faults)

    def requests_of(self, method: str, plural: str, watch: bool | None = None) -> list[Request]:
        out = []
        for r in self.requests:
            if r.method != method or not r.path.rstrip("/").split("/")[-1].startswith(plural):
                continue
            if watch is not None and (r.query.get("watch") == "1") != watch:
                continue
            out.append(r)
        return out

    def _notify(self) -> None:
        """Wake the open watches, at once and without a task of its own that could outlive the test."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _take_fault(self, key: str) -> Fault | None:
        queue = self.faults.get(key)
        return queue.pop(0) if queue else None

    # --- serving -------------------------------------------------------------------------------------

    async def start(self, tls: ssl.SSLContext | None = None, port: int = 0) -> FakeApi:
        """Listen on loopback (HTTPS with `tls`), on `port` (0: a free one)."""
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port, ssl_context=tls, reuse_address=True)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"{'https' if tls is not None else 'http'}://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        """End every request under way (a watch, a delay) and close: no handler outlives the server."""
        self._stopping.set()
        self._notify()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _pause(self, seconds: float) -> bool:
        """Wait `seconds`, or less if the server stops meanwhile: True if it did."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stopping.wait()
        return self._stopping.is_set()

    def _shutting_down(self) -> web.Response:
        return _status(503, "ServiceUnavailable", "the server is shutting down")

    def kubeconfig(self, folder: Path, namespace: str = "ns", ca: bytes | None = None) -> Path:
        """A kubeconfig for this server (trusting the CA `ca` when it serves HTTPS)."""
        path = folder / "kubeconfig"
        cluster: dict[str, str] = {"server": self.url}
        if ca is not None:
            cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "fake",
                    "clusters": [{"name": "fake", "cluster": cluster}],
                    "users": [{"name": "u", "user": {"token": "secret"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u", "namespace": namespace}}],
                }
            )
        )
        return path

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else None
        self.requests.append(Request(time.monotonic(), request.method, request.path, dict(request.query), body))
        parts = [p for p in request.path.split("/") if p]
        if parts[:2] == ["apis", "nvidia.com"] and len(parts) == 3:  # discovery of one version
            fault = self._take_fault("discovery")
            if fault is not None and fault.kind == "status":
                return _status(fault.status, "Fault", "injected", fault.headers)
            if not self.serve_dynamo or parts[2] not in self.dynamo_versions:
                return _status(404, "NotFound", "the server could not find the requested resource")
            return web.json_response(
                {"resources": [{"name": "dynamocomponentdeployments"}, {"name": "dynamographdeployments"}]}
            )
        group = "" if parts[:1] == ["api"] else (parts[1] if len(parts) > 1 else "")
        rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
        namespace = None
        if rest[:1] == ["namespaces"] and len(rest) > 2:
            namespace, rest = rest[1], rest[2:]
        plural = rest[0] if rest else ""
        if (group, plural) not in RESOURCES:  # as the API server: 404 for what it does not serve (discovery too)
            return _status(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        if plural == "pods" and rest[2:] == ["log"] and request.method == "GET":
            self.logs_in_flight += 1
            self.most_logs_in_flight = max(self.most_logs_in_flight, self.logs_in_flight)
            try:
                return await self._log(request, namespace or "", name or "")
            finally:
                self.logs_in_flight -= 1
        if request.method == "GET" and name is None:
            if request.query.get("watch") == "1":
                return await self._watch(request, plural, namespace)
            return await self._list(request, group, plural, namespace)
        if request.method == "GET":
            return await self._get(plural, namespace or "", name or "")
        if request.method == "PATCH":
            return await self._patch(plural, namespace or "", name or "", body)
        if request.method in ("POST", "PUT"):
            return self._write(request.method, plural, namespace or "", name, body)
        return _status(405, "MethodNotAllowed", request.method)

    def _selected(
        self, obj: dict[str, Any], namespace: str | None, selector: str | None, fields: str | None = None
    ) -> bool:
        meta = obj["metadata"]
        if namespace is not None and meta.get("namespace") != namespace:
            return False
        for term in (fields or "").split(","):  # metadata.name=NAME, the one field selector crashwatch sends
            if term.startswith("metadata.name=") and meta.get("name") != term.split("=", 1)[1]:
                return False
        labels = meta.get("labels") or {}
        for term in (selector or "").split(","):  # `key` and `key=value`, the terms the tests send
            key, equals, value = term.partition("=")
            if term and (key not in labels or (equals and labels[key] != value)):
                return False
        return True

    async def _list(self, request: web.Request, group: str, plural: str, namespace: str | None) -> web.StreamResponse:
        fault = self._take_fault(f"list {plural}")
        if fault is not None and fault.kind == "status":
            return _status(fault.status, "Fault", "injected", fault.headers)
        if fault is not None and fault.kind == "delay" and await self._pause(fault.seconds):
            return self._shutting_down()
        selector = request.query.get("labelSelector")
        items = [o for k, o in sorted(self.objects[plural].items()) if self._selected(o, namespace, selector)]
        limit = int(request.query.get("limit", "0") or 0)
        start = int(request.query.get("continue", "0") or 0)
        page = items[start : start + limit] if limit else items[start:]
        more = limit and start + limit < len(items)
        kind = RESOURCES[(group, plural)]
        stripped = []
        for item in page:
            item = copy.deepcopy(item)
            item.pop("kind", None)  # as the API server: List items carry no kind
            item.pop("apiVersion", None)
            stripped.append(item)
        return web.json_response(
            {
                "kind": f"{kind}List",
                "apiVersion": "v1",
                "metadata": {
                    "resourceVersion": str(self.version),
                    **({"continue": str(start + limit)} if more else {}),
                },
                "items": stripped,
            }
        )

    async def _watch(self, request: web.Request, plural: str, namespace: str | None) -> web.StreamResponse:
        fault = self._take_fault(f"watch {plural}")
        if fault is not None and fault.kind == "status":
            return _status(fault.status, "Fault", "injected", fault.headers)
        if fault is not None and fault.kind == "delay" and await self._pause(fault.seconds):
            return self._shutting_down()
        since = int(request.query.get("resourceVersion") or self.version)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        transport = request.transport
        if transport is not None:
            self._watching.add(transport)
        try:
            return await self._stream(request, response, plural, namespace, fault, since)
        except ConnectionResetError:  # the watcher hung up (it stopped, or gave up on the stream): the end
            return response
        finally:
            self._watching.discard(transport)

    async def _stream(
        self,
        request: web.Request,
        response: web.StreamResponse,
        plural: str,
        namespace: str | None,
        fault: Fault | None,
        since: int,
    ) -> web.StreamResponse:
        selector = request.query.get("labelSelector")
        fields = request.query.get("fieldSelector")
        if (fault is not None and fault.kind == "gone") or since < self.compacted:
            error = {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "reason": "Expired",
                "code": 410,
                "message": f"too old resource version: {since} ({self.compacted})",
            }
            await response.write(json.dumps({"type": "ERROR", "object": error}).encode() + b"\n")
            return response
        sent = 0
        deadline = time.monotonic() + float(request.query.get("timeoutSeconds", "300"))
        last_bookmark = time.monotonic()
        while time.monotonic() < deadline and not self._stopping.is_set():
            changed = self._changed  # taken before the history is read: a change from now on sets it
            pending = [(v, k, o) for v, k, o in self.history[plural] if v > since]
            for version, kind, obj in pending:
                since = version
                if not self._selected(obj, namespace, selector, fields):
                    continue
                if fault is not None and sent >= fault.after:
                    return await self._misbehave(request, response, fault)
                await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
                sent += 1
            if fault is not None and sent >= fault.after and fault.kind in ("cut", "garbage", "silent"):
                return await self._misbehave(request, response, fault)
            if self.bookmark_every is not None and time.monotonic() - last_bookmark >= self.bookmark_every:
                kind = RESOURCES[next(k for k in RESOURCES if k[1] == plural)]
                bookmark = {"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": str(self.version)}}
                await response.write(json.dumps({"type": "BOOKMARK", "object": bookmark}).encode() + b"\n")
                since = max(since, self.version)
                last_bookmark = time.monotonic()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.05):
                    await changed.wait()
        return response

    async def _misbehave(self, request: web.Request, response: web.StreamResponse, fault: Fault) -> web.StreamResponse:
        if fault.kind == "garbage":
            await response.write(b'{"type": "MODIFIED", "object": {"kind": "Pod", "metadata": \n')
            await self._pause(30)
        elif fault.kind == "silent":
            await self._pause(3600)
        elif fault.kind == "cut":
            transport = request.transport
            if transport is not None:
                transport.abort()
        elif fault.kind == "endless":
            await response.write(b'{"type": "MODIFIED", "object": {"kind": "Pod", "metadata": {"name": "')
            piece = b"a" * (64 << 10)
            self.endless_bytes = 0
            try:
                while not self._stopping.is_set():
                    await response.write(piece)
                    self.endless_bytes += len(piece)
            except (ConnectionError, RuntimeError):  # the client has gone
                pass
        return response

    async def _get(self, plural: str, namespace: str, name: str) -> web.StreamResponse:
        fault = self._take_fault("get")
        if fault is not None and fault.kind == "status":
            return _status(fault.status, "Fault", "injected", fault.headers)
        obj = self.objects[plural].get((namespace, name))
        if obj is None:
            return _status(404, "NotFound", f"{plural} {name} not found")
        return web.json_response(obj)

    async def _log(self, request: web.Request, namespace: str, name: str) -> web.StreamResponse:
        """A container's log, as kubelet picks the instance (validateContainerLogStatus): `previous` is the
        last terminated one; the plain log is the current one when it runs or is terminated, the last
        terminated one while it waits; a container waiting with none has no log (400)."""
        fault = self._take_fault("log")
        if fault is not None and fault.kind == "status":
            return _status(fault.status, "Forbidden" if fault.status == 403 else "Fault", "injected", fault.headers)
        if fault is not None and fault.kind == "delay" and await self._pause(fault.seconds):
            return self._shutting_down()
        pod = self.objects["pods"].get((namespace, name))
        if pod is None:
            return _status(404, "NotFound", f"pods {name} not found")
        container = request.query.get("container", "")
        status = pod.get("status") or {}
        found = [c for key in ("containerStatuses", "initContainerStatuses") for c in status.get(key) or []]
        state = next((c for c in found if c.get("name") == container), None)
        if state is None:
            return _status(400, "BadRequest", f"container {container} is not valid for pod {name}")
        now, last = state.get("state") or {}, (state.get("lastState") or {}).get("terminated")
        if request.query.get("previous") == "true":
            if last is None:
                return _status(400, "BadRequest", f'previous terminated container "{container}" not found')
            previous = True
        elif "running" in now or "terminated" in now:
            previous = False
        elif last is not None:
            previous = True
        else:
            return _status(400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start')
        if fault is not None and fault.kind == "endless":
            return await self._endless_log(request, fault.seconds or 0.05)
        data = self.logs.get((namespace, name, container, previous), b"")
        data = _tail(data, int(request.query.get("tailLines", -1)))
        limit = int(request.query.get("limitBytes", "0") or 0)
        if limit > 0:
            data = data[:limit]
        return web.Response(body=data, content_type="text/plain")

    async def _endless_log(self, request: web.Request, every: float) -> web.StreamResponse:
        """A log that never ends: a line every `every` seconds, until the client goes or the server stops."""
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        try:
            while not await self._pause(every):
                await response.write(b"still loading\n")
        except (ConnectionError, RuntimeError):  # the client has gone
            pass
        return response

    async def _patch(self, plural: str, namespace: str, name: str, body: Any) -> web.StreamResponse:
        fault = self._take_fault("patch")
        if fault is not None and fault.kind == "delay":
            if await self._pause(fault.seconds):
                return self._shutting_down()  # the client has long gone: the write is not made
        elif fault is not None and fault.kind == "status":
            return _status(fault.status, "Fault", "injected", fault.headers)
        obj = self.objects[plural].get((namespace, name))
        if obj is None:
            return _status(404, "NotFound", f"{plural} {name} not found")
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != obj["metadata"]["resourceVersion"]:
            return _status(
                409, "Conflict", "the object has been modified; please apply your changes to the latest version"
            )
        updated = copy.deepcopy(obj)
        for key, value in (body.get("status") or {}).items():
            updated.setdefault("status", {})[key] = value
        for key, value in body.items():  # an Event's series: a top-level field, merged as a merge patch does
            if key not in ("metadata", "status"):
                updated[key] = value
        return web.json_response(self.put(plural, updated))


    def _write(self, method: str, plural: str, namespace: str, name: str | None, body: Any) -> web.StreamResponse:
        """Create (POST) or replace (PUT, with the resourceVersion as precondition) a whole object."""
        fault = self._take_fault(method.lower())
        if fault is not None and fault.kind == "status":
            return _status(fault.status, "Fault", "injected", fault.headers)
        key = (namespace, name or body["metadata"]["name"])
        current = self.objects[plural].get(key)
        if method == "POST" and current is not None:
            return _status(409, "AlreadyExists", f"{plural} {key[1]} already exists")
        if method == "PUT":
            if current is None:
                return _status(404, "NotFound", f"{plural} {key[1]} not found")
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                return _status(409, "Conflict", "the object has been modified")
        body["metadata"]["namespace"] = namespace
        return web.json_response(self.put(plural, body), status=201 if method == "POST" else 200)


def _tail(data: bytes, count: int) -> bytes:
    """The last `count` lines of `data` (a last line without its newline counts), as kubelet's tail."""
    if count < 0:
        return data
    start = len(data) - 1 if data.endswith(b"\n") else len(data)
    for _ in range(count):
        start = data.rfind(b"\n", 0, start)
        if start < 0:
            return data
    return data[start + 1 :]


def _status(code: int, reason: str, message: str, headers: dict[str, str] | None = None) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "message": message,
        "code": code,
    }
    return web.json_response(body, status=code, headers=headers or {})


def pod(name: str, namespace: str = "ns", graph: str = "g", component: str = "worker", **status: Any) -> dict[str, Any]:
    labels = {"nvidia.com/dynamo-graph-deployment-name": graph, "nvidia.com/dynamo-component": component}
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "status": status or {"phase": "Running"},
    }


def crashing(name: str, restarts: int = 2, **kw: Any) -> dict[str, Any]:
    container = {
        "name": "main",
        "restartCount": restarts,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
    }
    return pod(
        name, phase="Running", conditions=[{"type": "Ready", "status": "False"}], containerStatuses=[container], **kw
    )


def healthy(name: str, **kw: Any) -> dict[str, Any]:
    container = {"name": "main", "restartCount": 0, "state": {"running": {}}}
    return pod(
        name, phase="Running", conditions=[{"type": "Ready", "status": "True"}], containerStatuses=[container], **kw
    )


class ServedFake:
    """The fake API server on an event loop of its own, in a thread, for subprocess clients."""

    def __init__(self, tls: ssl.SSLContext | None = None, port: int = 0) -> None:
        self.loop = asyncio.new_event_loop()
        self.api = FakeApi()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.call(self.api.start(tls, port))

    def call(self, coroutine: object) -> object:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)  # type: ignore[arg-type]

    def do(self, fn: Callable[..., object], *args: object) -> None:
        async def run_it() -> None:
            fn(*args)

        self.call(run_it())

    @property
    def port(self) -> int:
        return int(self.api.url.rsplit(":", 1)[1])

    def stop(self) -> None:
        self.call(self.api.stop())

        async def cancel_the_rest() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self.call(cancel_the_rest())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        assert not self.thread.is_alive(), "the fake API server's loop did not stop"
        self.loop.close()  # its selector and self-pipe sockets with it
