"""Benchmark at a large cluster's size (issue 14): crashwatch `run` beside a controller-runtime Pod cache.

    python -m bench.scale                       # 150,000 Pods on the bench's own server, 60 s of churn
    python -m bench.scale --pods 20000 --control-plane   # the real control plane (tests/envtest.py)
    python -m bench.scale --quick               # 2,000 Pods, 10 s of churn: does it run

Both subjects run one after the other against the same server, each started as a user starts it:
`crashwatch run -A -o json --http-address 127.0.0.1:PORT` (status writes included) and the peer
(bench/peer, built by scripts/build-peer: a controller-runtime v0.25 informer cache of Pods with a
transform that keeps what the crash-loop rule reads, as the Dynamo operator's Pod cache does).

The cluster: N realistic Pods (tests/builders.py's, about 9 KB each), 20 replicas a component, 10
components a graph, graphs over 10 namespaces, with a DGD per graph and a DCD and a Deployment per
component; 1% of the components crash-loop at the start (one Pod each in CrashLoopBackOff after its
second restart). After the initial list comes churn: `--rate` Pod status updates a second for
`--duration` seconds, kubelet noise (readiness flips, a first restart) on random Pods, and among them
`--loops` crash loops a second starting (a Pod of a healthy component to CrashLoopBackOff) and ending
(the Pod Ready again, at least 3 s after it started). The generator keeps its own record of them.

What is measured, per subject:
- complete: from the process's start until /readyz answers 200 AND the server has received the
  status write of every crash loop present at the start (crashwatch: every Pod listed and every
  verdict decided and written); for the peer, until WaitForCacheSync returned (it prints it);
- ready: until /readyz first answered 200 (crashwatch) / the same sync (the peer);
- RSS peak (VmHWM) and steady (VmRSS at the end of the churn), CPU per 1,000 churn events (CPU time
  over the churn window / events the server pushed into its watch);
- crashwatch's verdict latency: the server's clock from pushing a loop's start or end into the Pod
  watch to receiving the DCD status write for it (bench server), or from a second plain watch seeing
  the Pod change to a watch of the DCDs seeing crashwatch's write (control plane);
- exactly once: for every crash loop started or ended in the churn, the DCD write (Stalled True, then
  False) and the component line on stdout must each come once, checked against the generator's record.

The bench server (`--pods` up to 150,000 and more) keeps every Pod rendered as the bytes an API server
sends, serves the paged LIST (limit/continue) by joining them and WATCH with bookmarks, and applies the
merge patches crashwatch sends (409 on a stale resourceVersion) and echoes them on the watches. A client
that only reads the List's bytes (a separate process, `read` mode) shows it is not the bottleneck.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from builders import dcd, deployment, dgd, set_crashing, set_running, worker_pod  # noqa: E402

from bench.latency import proc_usage  # noqa: E402

encode = msgspec.json.Encoder().encode
V = "nvidia.com/v1alpha1"
GROUP = "nvidia.com"
DCDS, DGDS = "dynamocomponentdeployments", "dynamographdeployments"
REPLICAS, COMPONENTS, NAMESPACES = 20, 10, 10

# the statuses a Pod moves between: noise cannot make a crash loop (restarts < 2, or Ready)
RUNNING, NOT_READY, RESTARTED, CRASHED_ONCE, LOOPING, RECOVERED = range(6)
NOISE = (RUNNING, NOT_READY, RESTARTED, CRASHED_ONCE)


# --- the cluster's shape ------------------------------------------------------------------------------


def place(i: int) -> tuple[str, str, str]:
    """Namespace, graph and component of Pod i."""
    graph = i // (REPLICAS * COMPONENTS)
    return f"team-{graph % NAMESPACES}", f"graph-{graph}", f"worker-{(i // REPLICAS) % COMPONENTS}"


POD_NAME = "{graph}-{component}-{i:06d}"  # the control plane's run names them as bench/loadgen does


def pod_name(i: int) -> str:
    _, graph, component = place(i)
    return POD_NAME.format(graph=graph, component=component, i=i)


class Renderer:
    """Pod i as the API server's bytes: the realistic Pod encoded once with markers, then replaced."""

    def __init__(self) -> None:
        template = worker_pod("@NS@", "@NAME@", "@GRAPH@", "@COMP@")
        template["metadata"]["uid"] = "@UID@"
        template["metadata"]["resourceVersion"] = "@RV@"
        statuses = [
            set_running(template)["status"],
            set_running(template, ready=False)["status"],
            set_running(template, restarts=1)["status"],
            set_crashing(template, 1)["status"],
            set_crashing(template, 2)["status"],
            set_running(template, restarts=2)["status"],
        ]
        del template["status"]
        self.head = encode(template)[:-1] + b',"status":'
        self.statuses = [encode(s) + b"}" for s in statuses]
        self.status_dicts = statuses

    def render(self, i: int, status: int, rv: int) -> bytes:
        ns, graph, component = place(i)
        return (
            self.head.replace(b"@NAME@", pod_name(i).encode())
            .replace(b"@NS@", ns.encode())
            .replace(b"@GRAPH@", graph.encode())
            .replace(b"@COMP@", component.encode())
            .replace(b"@comp@", component.encode())
            .replace(b"@UID@", f"{i:08x}-0000-4000-8000-{rv:012x}".encode())
            .replace(b"@RV@", str(rv).encode())
            + self.statuses[status]
        )


def graph_objects(pods: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """DGDs, DCDs and Deployments of the graphs the Pods belong to."""
    dgds, dcds, deployments = [], [], []
    for first in range(0, pods, REPLICAS * COMPONENTS):
        ns, graph, _ = place(first)
        dgds.append(dgd(graph, ns, api_version=V, realistic=True))
        for c in range(COMPONENTS):
            if first + c * REPLICAS >= pods:
                break
            component = f"worker-{c}"
            name = f"{graph}-{component}"
            dcds.append(dcd(name, graph, component, ns, api_version=V, realistic=True))
            deployments.append(
                deployment(name, ns, owner_dcd=name, graph=graph, component=component, realistic=True)
            )
    return dgds, dcds, deployments


# --- the churn and its record ------------------------------------------------------------------------


@dataclass
class Loop:
    component: tuple[str, str]  # namespace, DCD name
    pod: int
    started: float = 0.0  # when it was pushed (bench server) or written (control plane), perf_counter
    ended: float = 0.0


@dataclass
class Generator:
    """Which Pod changes how next, and the record of every crash loop started and ended."""

    pods: int
    rng: random.Random = field(default_factory=lambda: random.Random(14))
    status: list[int] = field(default_factory=list)
    looping: dict[tuple[str, str], Loop] = field(default_factory=dict)  # component -> its running loop
    record: list[tuple[str, Loop]] = field(default_factory=list)  # ("start" | "end", loop), in order
    candidates: list[int] | None = None  # the Pods loops may start on (control plane: a labelled subset)
    skip: int = 0  # the initial loops are on Pods from this one on

    def __post_init__(self) -> None:
        self.status = [RUNNING] * self.pods
        for first in range(self.skip, self.pods, REPLICAS * 100):  # 1% of the components loop at the start
            self._start(first + REPLICAS // 2, initial=True)

    def _component(self, i: int) -> tuple[str, str]:
        ns, graph, component = place(i)
        return ns, f"{graph}-{component}"

    def _start(self, i: int, initial: bool = False) -> Loop:
        loop = Loop(self._component(i), i)
        self.looping[loop.component] = loop
        self.status[i] = LOOPING
        if not initial:
            self.record.append(("start", loop))
        return loop

    def next(self, loops_share: float) -> tuple[str, int]:
        """The next change: ("noise" | "start" | "end", Pod index); the Pod's status is updated."""
        if self.rng.random() < loops_share:
            now = time.perf_counter()
            old = [loop for loop in self.looping.values() if loop.started and now - loop.started > 3]
            if old and self.rng.random() < 0.5:
                loop = self.rng.choice(old)
                del self.looping[loop.component]
                self.status[loop.pod] = RECOVERED
                self.record.append(("end", loop))
                return "end", loop.pod
            for _ in range(20):
                i = self.rng.choice(self.candidates) if self.candidates else self.rng.randrange(self.pods)
                if self._component(i) not in self.looping and self.status[i] != LOOPING:
                    self._start(i)
                    return "start", i
        while True:
            i = self.rng.randrange(self.pods)
            if self.status[i] != LOOPING and (self.candidates is None or i not in self._candidate_set):
                break
        self.status[i] = self.rng.choice([s for s in NOISE if s != self.status[i]])
        return "noise", i

    @property
    def _candidate_set(self) -> set[int]:
        if not hasattr(self, "_cset"):
            self._cset = set(self.candidates or ())
        return self._cset


# --- the bench's own API server ----------------------------------------------------------------------


@dataclass
class Kind:
    kind: str
    api_version: str
    items: list[bytes] = field(default_factory=list)
    index: dict[tuple[str, str], int] = field(default_factory=dict)
    docs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # patchable kinds
    history: deque[tuple[int, bytes]] = field(default_factory=lambda: deque(maxlen=50_000))
    watchers: set[asyncio.Queue[bytes | None]] = field(default_factory=set)
    # pages rendered ahead (joining 500 Pods costs the server more than sending them): by (continue, limit),
    # and the watch-list's initial events; forgotten when an object of the kind changes
    pages: dict[tuple[str, int], bytes] = field(default_factory=dict)
    initial: list[bytes] = field(default_factory=list)

    def add(self, obj: dict[str, Any], patchable: bool) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        self.index[key] = len(self.items)
        self.items.append(encode(obj))
        if patchable:
            self.docs[key] = obj


@dataclass
class Patch:
    at: float
    kind: str
    key: tuple[str, str]
    body: dict[str, Any]
    status: int


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


class BenchServer:
    """Pods, Deployments, DCDs and DGDs as an API server serves them: paged LIST, WATCH with bookmarks,
    status PATCH; churn pushed into the watches."""

    def __init__(self, pods: int) -> None:
        self.rv = 1000
        self.renderer = Renderer()
        self.generator = Generator(pods)
        self.kinds: dict[str, Kind] = {
            "pods": Kind("Pod", "v1"),
            "deployments": Kind("Deployment", "apps/v1"),
            DCDS: Kind("DynamoComponentDeployment", V),
            DGDS: Kind("DynamoGraphDeployment", V),
        }
        pod_kind = self.kinds["pods"]
        for i in range(pods):
            ns, _, _ = place(i)
            pod_kind.index[(ns, pod_name(i))] = i
            pod_kind.items.append(self.renderer.render(i, self.generator.status[i], self.rv))
        dgds, dcds, deployments = graph_objects(pods)
        for obj in dgds:
            self.kinds[DGDS].add(obj, True)
        for obj in dcds:
            self.kinds[DCDS].add(obj, True)
        for obj in deployments:
            self.kinds["deployments"].add(obj, False)
        self.patches: list[Patch] = []
        self.pushed = 0  # Pod churn events pushed into the watches
        self.pushed_at: dict[int, float] = {}  # rv of a loop's start or end -> when it was pushed
        self.bookmark_every = 1.0
        self.server: asyncio.Server | None = None
        self.connections: set[asyncio.StreamWriter] = set()
        self.url = ""

    async def start(self) -> str:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", 0, limit=1 << 20)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        for kind in self.kinds.values():
            for queue in kind.watchers:
                queue.put_nowait(None)
        if self.server is not None:
            self.server.close()
            for writer in list(self.connections):
                writer.close()
            await self.server.wait_closed()

    # HTTP/1.1 with keep-alive, as small as the two clients need: aiohttp's own server took 4 times as
    # long as a plain transport to send a 4.5 MB page, and would have been the bottleneck
    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                path, _, query_string = target.partition("?")
                query = dict(urllib.parse.parse_qsl(query_string))
                answer = await self.handle(method, path, query, body, writer)
                if answer is not None:
                    code, payload = answer
                    writer.write(
                        b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                        % (code, len(payload))
                    )
                    writer.write(payload)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            self.connections.discard(writer)
            writer.close()

    # routing
    async def handle(
        self, method: str, path: str, query: dict[str, str], body: bytes, writer: asyncio.StreamWriter
    ) -> tuple[int, bytes] | None:
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["apis"] and len(parts) == 3:  # discovery of a group version
            if parts[1] == GROUP and parts[2] == "v1alpha1":
                names = [DCDS, f"{DCDS}/status", DGDS, f"{DGDS}/status"]
                return 200, encode({"kind": "APIResourceList", "resources": [{"name": n} for n in names]})
            return _status(404, "NotFound", f"{path} is not served")
        rest = parts[2:] if parts[:1] == ["api"] else parts[3:] if parts[:1] == ["apis"] else None
        if not rest:
            return _status(404, "NotFound", f"{path} is not served")
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        kind = self.kinds.get(rest[0])
        if kind is None:
            return _status(404, "NotFound", f"{path} is not served")
        if len(rest) == 1 and method == "GET":
            if query.get("watch") in ("1", "true"):
                await self.watch(query, kind, writer)
                return None
            return self.list(query, kind, namespace)
        key = (namespace or "", rest[1])
        if key not in kind.index:
            return _status(404, "NotFound", f"{rest[0]} {key[0]}/{key[1]} not found")
        if method == "GET":
            return 200, kind.items[kind.index[key]]
        if method == "PATCH" and rest[2:] == ["status"] and key in kind.docs:
            return self.patch(body, rest[0], kind, key)
        return _status(405, "MethodNotAllowed", f"{method} {path}")

    def warm(self, limit: int = 500) -> None:
        """Render the Pod list's pages and watch-list events ahead, as a subject will ask for them."""
        pods = self.kinds["pods"]
        token = ""
        while True:
            _, page = self.list({"limit": str(limit), "continue": token}, pods, None)
            head = page[:300]
            at = head.find(b'"continue":"')
            if at < 0:
                break
            token = head[at + 12 : head.index(b'"', at + 12)].decode()
        self.initial_events(pods)

    def initial_events(self, kind: Kind) -> list[bytes]:
        if not kind.initial:
            kind.initial = [
                b"".join(b'{"type":"ADDED","object":' + item + b"}\n" for item in kind.items[first : first + 500])
                for first in range(0, len(kind.items), 500)
            ]
        return kind.initial

    def list(self, query: dict[str, str], kind: Kind, namespace: str | None) -> tuple[int, bytes]:
        limit = int(query.get("limit") or 0) or len(kind.items)
        token = query.get("continue", "")
        if namespace is None and (token, limit) in kind.pages:
            return 200, kind.pages[(token, limit)]
        rv, start = (int(x) for x in token.split(":")) if token else (self.rv, 0)
        items = kind.items
        if namespace is not None:  # filtered by the key
            keys = [k for k, _ in sorted(kind.index.items(), key=lambda kv: kv[1]) if k[0] == namespace]
            items = [kind.items[kind.index[k]] for k in keys]
        page = items[start : start + limit]
        end = start + len(page)
        meta: dict[str, str] = {"resourceVersion": str(rv)}
        if end < len(items):
            meta["continue"] = f"{rv}:{end}"
        head = encode({"kind": kind.kind + "List", "apiVersion": kind.api_version, "metadata": meta})
        body = b"".join((head[:-1], b',"items":[', b",".join(page), b"]}"))
        if namespace is None:
            kind.pages[(token, limit)] = body
        return 200, body

    async def watch(self, query: dict[str, str], kind: Kind, writer: asyncio.StreamWriter) -> None:
        """A chunked watch: from `resourceVersion`, or (sendInitialEvents, client-go's watch-list) every
        object ADDED, then a bookmark that ends the initial events, then what changes."""
        since = int(query.get("resourceVersion") or self.rv)
        timeout = float(query.get("timeoutSeconds") or 1800)
        bookmarks = query.get("allowWatchBookmarks") == "true"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")

        async def send(data: bytes) -> None:
            writer.write(b"%x\r\n" % len(data) + data + b"\r\n")
            await writer.drain()

        def bookmark(initial_end: bool = False) -> bytes:
            meta: dict[str, Any] = {"resourceVersion": str(self.rv)}
            if initial_end:
                meta["annotations"] = {"k8s.io/initial-events-end": "true"}
            mark = {"kind": kind.kind, "apiVersion": kind.api_version, "metadata": meta}
            return encode({"type": "BOOKMARK", "object": mark}) + b"\n"

        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        try:
            if query.get("sendInitialEvents") == "true":
                kind.watchers.add(queue)
                for chunk in self.initial_events(kind):
                    await send(chunk)
                await send(bookmark(initial_end=True))
            else:
                oldest = kind.history[0][0] if kind.history else self.rv
                if kind.history and since < oldest - 1:
                    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
                    await send(encode(gone) + b"\n")
                    await send(b"")
                    return
                for rv, event in kind.history:
                    if rv > since:
                        queue.put_nowait(event)
                kind.watchers.add(queue)
            deadline = time.monotonic() + timeout
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    event = await asyncio.wait_for(queue.get(), min(remaining, self.bookmark_every))
                except TimeoutError:
                    if bookmarks:
                        await send(bookmark())
                    continue
                if event is None:
                    break
                chunks = [event]
                while not queue.empty() and len(chunks) < 64:
                    more = queue.get_nowait()
                    if more is None:
                        break
                    chunks.append(more)
                await send(b"".join(chunks))
            await send(b"")
        finally:
            kind.watchers.discard(queue)

    def push(self, kind: Kind, event_type: str, obj: bytes, rv: int) -> None:
        event = b'{"type":"' + event_type.encode() + b'","object":' + obj + b"}\n"
        kind.pages.clear()
        kind.initial = []
        kind.history.append((rv, event))
        for queue in kind.watchers:
            queue.put_nowait(event)

    def patch(self, data: bytes, plural: str, kind: Kind, key: tuple[str, str]) -> tuple[int, bytes]:
        body = json.loads(data)
        at = time.perf_counter()
        doc = kind.docs[key]
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != doc["metadata"]["resourceVersion"]:
            self.patches.append(Patch(at, plural, key, body, 409))
            return _status(409, "Conflict", "the object has been modified")
        self.rv += 1
        doc["status"] = merge(doc.get("status") or {}, body.get("status") or {})
        doc["metadata"]["resourceVersion"] = str(self.rv)
        raw = encode(doc)
        kind.items[kind.index[key]] = raw
        self.push(kind, "MODIFIED", raw, self.rv)
        self.patches.append(Patch(at, plural, key, body, 200))
        return 200, raw

    def churn_one(self, share: float) -> tuple[str, int]:
        what, i = self.generator.next(share)
        self.rv += 1
        raw = self.renderer.render(i, self.generator.status[i], self.rv)
        pods = self.kinds["pods"]
        pods.items[i] = raw
        self.push(pods, "MODIFIED", raw, self.rv)
        self.pushed += 1
        if what != "noise":
            now = time.perf_counter()
            kind, loop = self.generator.record[-1]
            if kind == "start":
                loop.started = now
            else:
                loop.ended = now
        return what, i

    async def churn(self, rate: float, duration: float, loops: float, stop: asyncio.Event) -> float:
        """`rate` Pod status updates a second for `duration` s; the rate achieved."""
        share = loops / rate if rate else 0
        began = time.perf_counter()
        done = 0
        while not stop.is_set():
            now = time.perf_counter()
            if now - began >= duration:
                break
            due = int((now - began) * rate)
            while done < due:
                self.churn_one(share)
                done += 1
            await asyncio.sleep(0.005)
        return done / max(1e-9, time.perf_counter() - began)


def _status(code: int, reason: str, message: str) -> tuple[int, bytes]:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason}
    body["message"] = message
    return code, encode(body)


def write_kubeconfig(folder: Path, url: str) -> Path:
    path = folder / "kubeconfig"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "bench", "cluster": {"server": url}}],
        "users": [{"name": "bench", "user": {"token": "bench"}}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
        "current-context": "bench",
    }
    path.write_text(json.dumps(config))
    return path


# --- the subjects ------------------------------------------------------------------------------------


class Process:
    """A subject's process, its stdout and stderr lines collected by threads as they come."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
        self.out: list[tuple[float, bytes]] = []
        self.err: list[str] = []
        self.threads = [
            threading.Thread(target=self._pump, args=(self.process.stdout, self.out, True), daemon=True),
            threading.Thread(target=self._pump, args=(self.process.stderr, self.err, False), daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def _pump(self, stream: Any, lines: list[Any], stamped: bool) -> None:
        for raw in stream:
            lines.append((time.perf_counter(), raw) if stamped else raw.decode(errors="replace").rstrip())

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for thread in self.threads:
            thread.join(timeout=5)
        return self.process.returncode

    def alive(self) -> None:
        if self.process.poll() is not None:
            time.sleep(0.2)
            tail = "\n  ".join(self.err[-15:])
            raise RuntimeError(f"{self.process.args[0]} exited with {self.process.returncode}:\n  {tail}")


@dataclass
class Figures:
    name: str
    ready: float = 0.0  # s from start
    complete: float = 0.0  # s from start
    peak_rss: int = 0
    steady_rss: int = 0
    cpu_per_1000: float = 0.0  # CPU seconds per 1,000 churn events
    core_share: float = 0.0  # of a core, during the churn
    cpu_to_complete: float = 0.0  # CPU seconds from start to complete (a loaded machine's wall time drifts)
    events: int = 0
    rate: float = 0.0
    latency: list[float] = field(default_factory=list)  # ms
    lost: int = 0
    repeated: int = 0
    checked: int = 0
    notes: list[str] = field(default_factory=list)


def crashwatch_args(kubeconfig: Path, port: int, namespace: str | None) -> list[str]:
    script = Path(sys.executable).parent / "crashwatch"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "crashwatch"]
    scope = ["-n", namespace] if namespace else ["-A"]
    return [
        *command,
        "run",
        *scope,
        "-o",
        "json",
        "--kubeconfig",
        str(kubeconfig),
        "--http-address",
        f"127.0.0.1:{port}",
        # no kubelet behind this API server serves a crashed run's output (and the peer reads none): the
        # causes' cost is measured apart, by bench/causes.py
        "--read-causes=false",
    ]


def peer_bin() -> Path:
    folder = os.environ.get("CRASHWATCH_PEER_BIN")
    if not folder:
        built = subprocess.run([str(ROOT / "scripts" / "build-peer")], capture_output=True, text=True, check=False)
        if built.returncode != 0:
            raise SystemExit(f"scale: building the peer failed:\n{built.stderr}")
        folder = built.stdout.strip().splitlines()[-1]
    return Path(folder) / "peer"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def until(predicate: Callable[[], bool], process: Process, timeout: float, what: str) -> float:
    deadline = time.perf_counter() + timeout
    while not predicate():
        process.alive()
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{what} not seen in {timeout:.0f}s; stderr:\n  " + "\n  ".join(process.err[-15:]))
        await asyncio.sleep(0.02)
    return time.perf_counter()


async def ready_at(session: aiohttp.ClientSession, port: int, process: Process, timeout: float) -> float:
    deadline = time.perf_counter() + timeout
    while True:
        process.alive()
        with contextlib.suppress(aiohttp.ClientError, OSError):
            async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                if response.status == 200:
                    return time.perf_counter()
        if time.perf_counter() > deadline:
            raise RuntimeError("crashwatch not ready in time; stderr:\n  " + "\n  ".join(process.err[-15:]))
        await asyncio.sleep(0.02)


def stalled(patch: dict[str, Any]) -> str | None:
    """ "True" or "False": the Stalled condition a DCD status write sets, if any."""
    for condition in (patch.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Stalled":
            return str(condition.get("status"))
    return None


def exactly_once(
    record: list[tuple[str, Loop]], writes: list[tuple[tuple[str, str], str]], lines: list[tuple[tuple[str, str], bool]]
) -> tuple[int, int, int]:
    """Checked, lost, repeated: per component, the DCD writes (Stalled True / False) and the component
    lines (crash_looping true / false) against the generator's starts and ends."""
    expected: dict[tuple[tuple[str, str], bool], int] = {}
    for kind, loop in record:
        key = (loop.component, kind == "start")
        expected[key] = expected.get(key, 0) + 1
    lost = repeated = 0
    for got in (
        [(c, s == "True") for c, s in writes],
        lines,
    ):
        counts: dict[tuple[tuple[str, str], bool], int] = {}
        for key in got:
            counts[key] = counts.get(key, 0) + 1
        for key in expected.keys() | counts.keys():
            want, have = expected.get(key, 0), counts.get(key, 0)
            lost += max(0, want - have)
            repeated += max(0, have - want)
    return len(record), lost, repeated


# --- the run on the bench server ---------------------------------------------------------------------


async def read_only(url: str, page: int) -> tuple[float, int]:
    """Seconds a client that only reads the bytes needs for the whole Pod list, run as its own process."""
    code = """
import socket, sys, time
host, port = sys.argv[1].rsplit("/", 1)[-1].split(":")
page = sys.argv[2]
sock = socket.create_connection((host, int(port)))
buffer = bytearray(64 << 20)
view = memoryview(buffer)
began, total, token = time.perf_counter(), 0, ""
while True:
    target = f"/api/v1/pods?limit={page}" + (f"&continue={token}" if token else "")
    sock.sendall(f"GET {target} HTTP/1.1\\r\\nHost: bench\\r\\n\\r\\n".encode())
    got = 0
    while (end := bytes(view[:got]).find(b"\\r\\n\\r\\n")) < 0:
        got += sock.recv_into(view[got:])
    head = bytes(view[:end]).decode().lower()
    length = int(head.split("content-length:")[1].split()[0])
    need = end + 4 + length
    while got < need:
        got += sock.recv_into(view[got:])
    total += length
    body = bytes(view[end + 4 : end + 4 + 300])
    at = body.find(b'"continue":"')
    if at < 0:
        break
    token = body[at + 12 : body.index(b'"', at + 12)].decode()
print(time.perf_counter() - began, total)
"""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, url, str(page), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await process.communicate()
    seconds, size = out.split()
    return float(seconds), int(size)


async def measure_crashwatch(server: BenchServer, args: argparse.Namespace, kubeconfig: Path) -> Figures:
    figures = Figures("crashwatch")
    port = free_port()
    initial = dict(server.generator.looping)
    patches_before = len(server.patches)
    process = Process(crashwatch_args(kubeconfig, port, None))
    try:
        async with aiohttp.ClientSession() as session:
            ready = await ready_at(session, port, process, args.timeout)
            figures.ready = ready - process.started

            def first_writes() -> bool:
                written = {p.key for p in server.patches[patches_before:] if p.kind == DCDS and p.status == 200}
                return all(c in written for c in initial)

            await until(first_writes, process, args.timeout, "the initial crash loops' status writes")
            figures.cpu_to_complete = proc_usage(process.process.pid)[0]
            last = max(
                p.at for p in server.patches[patches_before:] if p.kind == DCDS and p.key in initial and p.status == 200
            )
            figures.complete = max(ready, last) - process.started
            await asyncio.sleep(args.settle)
            await churn_phase(server, args, process, figures)
            await asyncio.sleep(args.settle)
    finally:
        process.stop()
    phase_patches = [p for p in server.patches[patches_before:] if p.kind == DCDS and p.status == 200]
    churn_record = [(k, loop) for k, loop in server.generator.record if loop.started >= figures_window[0]]
    writes = [(p.key, s) for p in phase_patches if p.at >= figures_window[0] and (s := stalled(p.body)) is not None]
    lines = component_lines(process, figures_window[0])
    figures.checked, figures.lost, figures.repeated = exactly_once(churn_record, writes, lines)
    figures.latency = loop_latencies(churn_record, phase_patches)
    figures.notes += [line for line in process.err if "synced in" in line]
    return figures


figures_window = [0.0, 0.0]


def component_lines(process: Process, since: float) -> list[tuple[tuple[str, str], bool]]:
    out = []
    for at, raw in process.out:
        if at < since:
            continue
        line = json.loads(raw)
        if line.get("kind") == "component":
            out.append(((line["namespace"], line["dcd"]), bool(line["crash_looping"])))
    return out


def loop_latencies(record: list[tuple[str, Loop]], patches: list[Patch]) -> list[float]:
    """ms from pushing a loop's start (end) to the first DCD write of Stalled True (False) after it."""
    out = []
    for kind, loop in record:
        at = loop.started if kind == "start" else loop.ended
        want = "True" if kind == "start" else "False"
        later = [p.at for p in patches if p.key == loop.component and p.at >= at and stalled(p.body) == want]
        if later:
            out.append((min(later) - at) * 1000)
    return out


async def churn_phase(server: BenchServer, args: argparse.Namespace, process: Process, figures: Figures) -> None:
    pid = process.process.pid
    cpu0, _, _ = proc_usage(pid)
    pushed0 = server.pushed
    figures_window[0] = time.perf_counter()
    stop = asyncio.Event()
    samples: list[int] = []

    async def sample() -> None:
        while not stop.is_set():
            samples.append(proc_usage(pid)[1])
            await asyncio.sleep(1)

    sampler = asyncio.create_task(sample())
    figures.rate = await server.churn(args.rate, args.duration, args.loops, stop)
    stop.set()
    await sampler
    figures_window[1] = time.perf_counter()
    cpu1, rss, hwm = proc_usage(pid)
    figures.events = server.pushed - pushed0
    figures.cpu_per_1000 = (cpu1 - cpu0) / max(1, figures.events) * 1000
    figures.core_share = (cpu1 - cpu0) / (figures_window[1] - figures_window[0])
    figures.steady_rss = rss
    figures.peak_rss = hwm


async def peer_synced(process: Process, args: argparse.Namespace, figures: Figures) -> None:
    """Until the peer says its cache synced: its time and CPU to that, then the settling pause."""
    await until(lambda: any(b'"synced"' in raw for _, raw in process.out), process, args.timeout, "peer synced")
    synced = json.loads(next(raw for _, raw in process.out if b'"synced"' in raw))
    figures.ready = figures.complete = synced["seconds"]
    figures.cpu_to_complete = synced["cpu"]
    figures.notes.append(f"{synced['pods']} Pods in its cache")
    await asyncio.sleep(args.settle)


async def measure_peer(server: BenchServer, args: argparse.Namespace, kubeconfig: Path) -> Figures:
    figures = Figures("peer")
    process = Process(
        [str(args.peer), f"--kubeconfig={kubeconfig}", "--interval=1s"],
        # client-go's default since 1.35 is the streaming watch-list; --peer-paged-list turns it off
        env={"KUBE_FEATURE_WatchListClient": "false" if args.peer_paged_list else "true"},
    )
    try:
        await peer_synced(process, args, figures)
        await churn_phase(server, args, process, figures)
    finally:
        process.stop()
    return figures


async def run_bench_server(args: argparse.Namespace) -> list[Figures]:
    began = time.perf_counter()
    server = BenchServer(args.pods)
    size = sum(map(len, server.kinds["pods"].items))
    print(
        f"bench server: {args.pods:,} Pods ({size / args.pods / 1024:.1f} KB each, {size / 2**30:.2f} GiB), "
        f"{len(server.kinds[DCDS].items):,} DCDs, {len(server.kinds[DGDS].items):,} DGDs, "
        f"{len(server.kinds['deployments'].items):,} Deployments, "
        f"{len(server.generator.looping)} crash loops at the start; rendered in {time.perf_counter() - began:.1f} s",
        file=sys.stderr,
    )
    await server.start()
    results: list[Figures] = []
    try:
        with tempfile.TemporaryDirectory(prefix="crashwatch-scale-") as folder:
            kubeconfig = write_kubeconfig(Path(folder), server.url)
            server.warm()
            await read_only(server.url, 500)  # the first read after rendering is slower: not the server's pace
            seconds, read = await read_only(server.url, 500)
            print(
                f"a client that only reads the List's bytes: {seconds:.2f} s for {read / 2**30:.2f} GiB",
                file=sys.stderr,
            )
            reader = Figures("read-only client", ready=seconds, complete=seconds)
            for subject in args.subjects:
                server.warm()
                if subject == "crashwatch":
                    results.append(await measure_crashwatch(server, args, kubeconfig))
                else:
                    results.append(await measure_peer(server, args, kubeconfig))
                print(f"  {subject}: done: {results[-1]}", file=sys.stderr)
            results.append(reader)
    finally:
        await server.stop()
    return results


# --- the report --------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    import math

    return ordered[min(len(ordered), max(1, math.ceil(q / 100 * len(ordered)))) - 1]


def report(results: list[Figures], args: argparse.Namespace) -> bool:
    by = {f.name: f for f in results}
    cw, peer, reader = by.get("crashwatch"), by.get("peer"), by.get("read-only client")
    mib = 2**20

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}x" if b else "-"

    where = "the real control plane" if args.control_plane else "the bench server"
    print(
        f"\n# {args.pods:,} Pods on {where}, churn {args.rate:,.0f}/s asked for {args.duration:.0f} s, "
        f"{os.cpu_count()} cores\n"
    )
    if reader is not None:
        print(f"a client that only reads the List's bytes: {reader.complete:.2f} s\n")
    print("| | crashwatch | peer (controller-runtime) | crashwatch / peer | target |")
    print("|---|---|---|---|---|")
    ok = True
    if cw and peer:
        big = args.pods >= 100_000
        rows = [
            (
                "first complete diagnosis (crashwatch) / cache synced (peer)",
                f"{cw.complete:.2f} s",
                f"{peer.complete:.2f} s",
                ratio(cw.complete, peer.complete),
                "<= 2x the peer" + (", <= 10 s" if big else ""),
            ),
            (
                "CPU time until then",
                f"{cw.cpu_to_complete:.2f} s",
                f"{peer.cpu_to_complete:.2f} s",
                ratio(cw.cpu_to_complete, peer.cpu_to_complete),
                "",
            ),
            ("ready (/readyz 200)", f"{cw.ready:.2f} s", f"{peer.ready:.2f} s", ratio(cw.ready, peer.ready), ""),
            (
                "peak RSS",
                f"{cw.peak_rss / mib:.0f} MiB",
                f"{peer.peak_rss / mib:.0f} MiB",
                ratio(cw.peak_rss, peer.peak_rss),
                "<= the peer" + (", <= 400 MB" if big else ""),
            ),
            (
                "steady RSS (end of churn)",
                f"{cw.steady_rss / mib:.0f} MiB",
                f"{peer.steady_rss / mib:.0f} MiB",
                ratio(cw.steady_rss, peer.steady_rss),
                "",
            ),
            (
                "CPU per 1,000 churn events",
                f"{cw.cpu_per_1000 * 1000:.0f} ms",
                f"{peer.cpu_per_1000 * 1000:.0f} ms",
                ratio(cw.cpu_per_1000, peer.cpu_per_1000),
                "",
            ),
            (
                "share of a core under churn",
                f"{cw.core_share:.2f} ({cw.rate:,.0f}/s)",
                f"{peer.core_share:.2f} ({peer.rate:,.0f}/s)",
                ratio(cw.core_share, peer.core_share),
                "< 0.5 at 1,000/s" if big else "",
            ),
        ]
        for row in rows:
            print("| " + " | ".join(row) + " |")
        ok = cw.complete <= 2 * peer.complete and cw.peak_rss <= peer.peak_rss
    elif cw or peer:
        for f in (cw, peer):
            if f:
                print(
                    f"| {f.name}: complete {f.complete:.2f} s, ready {f.ready:.2f} s, peak {f.peak_rss / mib:.0f} MiB, "
                    f"steady {f.steady_rss / mib:.0f} MiB, {f.cpu_per_1000 * 1000:.0f} ms CPU / 1,000 events | | | |"
                )
    if cw:
        lat = cw.latency
        print(
            f"\ncrashwatch verdict latency under churn ({len(lat)} loops started or ended): "
            f"p50 {percentile(lat, 50):.0f} ms, p90 {percentile(lat, 90):.0f} ms, p99 {percentile(lat, 99):.0f} ms, "
            f"max {max(lat, default=float('nan')):.0f} ms"
        )
        print(f"exactly once: {cw.checked} crash loops started or ended, {cw.lost} lost, {cw.repeated} repeated")
        ok = ok and cw.lost == 0 and cw.repeated == 0
        for note in cw.notes:
            print(note)
    if peer:
        for note in peer.notes:
            print(f"peer: {note}")
    print("\nRESULT " + json.dumps({f.name: {k: v for k, v in f.__dict__.items() if k != "latency"} for f in results}))
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=150_000, help="Pods in the cluster (default: 150,000)")
    parser.add_argument(
        "--rate", type=float, default=1000, help="Pod status updates a second in the churn (default: 1000)"
    )
    parser.add_argument("--duration", type=float, default=60, help="seconds of churn per subject (default: 60)")
    parser.add_argument("--loops", type=float, default=2, help="crash loops started or ended a second (default: 2)")
    parser.add_argument("--settle", type=float, default=3, help="seconds to wait before and after the churn")
    parser.add_argument("--timeout", type=float, default=300, help="give up on a subject after this long")
    parser.add_argument(
        "--control-plane", action="store_true", help="the real control plane instead of the bench server"
    )
    parser.add_argument("--noise-pods", type=int, default=1000, help="control plane: Pods the load generator rewrites")
    parser.add_argument("--load-inflight", type=int, default=32, help="control plane: most load writes unanswered")
    parser.add_argument(
        "--apiserver-arg", action="append", default=[], help="control plane: an extra kube-apiserver flag"
    )
    parser.add_argument(
        "--peer-paged-list",
        action="store_true",
        help="the peer lists in pages (client-go's WatchListClient off) instead of its default streaming watch-list",
    )
    parser.add_argument("--only", choices=("crashwatch", "peer"), help="measure one subject alone")
    parser.add_argument("--quick", action="store_true", help="2,000 Pods, 10 s of churn at 200/s: does it run")
    args = parser.parse_args(argv)
    if args.quick:
        args.pods, args.duration, args.rate, args.loops, args.settle = 2000, 10, 200, 4, 2
    args.subjects = [args.only] if args.only else ["crashwatch", "peer"]
    if "peer" in args.subjects:
        args.peer = peer_bin()
    if args.control_plane:
        from bench.scale_controlplane import run_control_plane

        results = asyncio.run(run_control_plane(args))
    else:
        results = asyncio.run(run_bench_server(args))
    return 0 if report(results, args) else 1


if __name__ == "__main__":
    sys.exit(main())
