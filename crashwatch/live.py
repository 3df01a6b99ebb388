"""`crashwatch run`, `tail`, `record`, `wait` and `get`: live list+watch sources through the replay's
stages, each command with its own sinks.

One wiring serves them all, reading what each command is from its `CommandSpec` (crashwatch.commands):
`tail` prints verdict changes (and needs get/list/watch rights alone), `run` also writes DCD and DGD
status (and Events, and may elect a leader), `record` also writes every event it receives to a log that
`replay` reads, `wait` weighs the named graphs into an exit code, `get` prints one snapshot of them once
everything is listed; `run`, `wait` and `get` need the Dynamo CRDs. Statuses and readiness are decided
only after every resource has been listed once (`Synced`): a watcher that starts must see every Pod
before it may conclude that a failure has cleared, and a waiter before it may say a graph does not exist.

A first SIGTERM or SIGINT stops the watches and lets what they already received run through: its lines
are printed and its status writes finished, for at most the grace period (a Deployment's rollout sends
SIGTERM, and a failure found a moment before should not wait for the next watcher). A second signal, or
one that comes before the watches have started, stops at once.

`run --leader-elect` runs several replicas: each lists, watches and diagnoses, and only the holder of
the Lease (crashwatch.leader) writes status. When a replica gains the lease, every status is decided
again from what it observes (the pipeline is synced once more); on stop, once its writes are finished,
the leader releases the lease.

Each command but with `--read-causes=false` also reads the output of each new crash the pipeline asks
about (stream.sources.crash_output, paced and bounded) and feeds it back in with the watch events, so the
core names why a container crashed; `record` writes it into its log in that place, for `replay`.

`--shard-index`/`--shard-count` and `--namespace-selector` (run, tail, record) keep some namespaces only
(stream.model.shards): given namespaces (-n) of other shards are not watched at all; otherwise every watch
drops the objects of other namespaces right after decoding them. A shard leads on a Lease of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import resource
import signal
import ssl
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import BinaryIO, TextIO

import anyio
from anyio.abc import ObjectSendStream, TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream

from crashwatch import exitcodes
from crashwatch.commands import COMMANDS, Command, CommandSpec
from crashwatch.errors import leaves
from crashwatch.leader import LeaderElector, LeaderSettings, LeaseForbidden, default_namespace
from crashwatch.stages import TICK, Events, PipelineReads, Synced, Tick, pipeline_stage
from crashwatch.stderr_log import LogFormat, StderrLogger
from pipeline.backends import registry as backends
from pipeline.diagnoses import Settings
from pipeline.filter import Rejected
from pipeline.holds import DEFAULT_RECOVERY_WINDOW
from pipeline.outputs import ExplainWanted, Listed, Output
from pipeline.pipeline import Pipeline
from sinks.admission import PATH, AdmissionServer, AdmissionSettings, LetThrough
from sinks.admission_trust import TrustCheck
from sinks.crashed_output import LogReader, print_lines_with_logs
from sinks.events import EventRecorder, EventSettings
from sinks.http_server import HttpServer
from sinks.metrics import Metrics, metrics_sink
from sinks.status import PatchSettings, StatusPatcher
from sinks.stdout import Format, change_printer, print_lines
from sinks.table import GraphTable
from sinks.wait import GraphWaiter
from stream.model.events import BadRecord, CrashOutput, ReducedPod, WatchEvent
from stream.model.messages import Level, Logger
from stream.model.shards import NamespaceFilter
from stream.model.times import now_rfc3339
from stream.sources.client import ApiError, Backoff, KubeClient, Unreachable
from stream.sources.crash_output import CrashOutputReader, Wanted
from stream.sources.kubeconfig import ConfigError
from stream.sources.namespaces import SelectedNamespaces
from stream.sources.record import Recorder
from stream.sources.reflector import Fatal, Reflector, WatchSettings
from stream.sources.resources import (
    DEPLOYMENTS,
    PODS,
    NotAnApiServer,
    Resource,
    discover_dynamo,
    dynamo_resources,
    served,
)

BUFFER = 64
# get: how long its snapshot waits for the outputs of the crashes it listed (their causes may fail a graph)
SNAPSHOT_CAUSES_WAIT = 10.0


@dataclass
class LiveOptions:
    command: Command
    namespaces: list[str] = field(default_factory=list)
    all_namespaces: bool = False
    kubeconfig: str | None = None
    context: str | None = None
    output: str = "text"  # text|json|yaml; wait: also name; get: table|wide|json|yaml|name
    record: str | None = None
    graphs: list[str] | None = None  # wait, get: the DGDs named (in the one namespace); None: every one
    selector: str | None = None  # wait, get: only the DGDs whose labels match (-l, kubectl's syntax)
    headers: bool = True  # get: the table's header row (--no-headers: none)
    timeout: float | None = None  # wait: give up after this long (seconds), counted from the start
    tunables: dict[str, float] = field(default_factory=dict)  # the backends' (pipeline.backends), by name
    recovery_window: float = DEFAULT_RECOVERY_WINDOW  # seconds Ready before a crash-looping Pod recovers
    diagnoses: Settings = field(default_factory=Settings)  # graces and --failed-state (pipeline.diagnoses)
    grace_period: float = 10.0
    http_address: tuple[str | None, int] | None = None  # serve /healthz, /readyz, /metrics there
    admission: AdmissionSettings | None = None  # run: serve the status admission webhook (sinks.admission)
    watch: WatchSettings = field(default_factory=WatchSettings)
    patch: PatchSettings = field(default_factory=PatchSettings)
    leader: LeaderSettings | None = None  # run --leader-elect: write status only while holding this Lease
    namespace_filter: NamespaceFilter | None = None  # run, tail, record: a shard, a namespace selector
    events: EventSettings | None = None  # run: write Kubernetes Events (None: --events=false)
    log_format: LogFormat = "text"  # stderr: crashwatch.stderr_log
    log_level: Level = "info"
    log_lines: int = 0  # tail, wait, get -o wide: the crashed container's last lines (0: none; sinks.crashed_output)
    read_causes: bool = True  # each new crash's output read for its cause (stream.sources.crash_output)


class _Stop(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


@dataclass
class _Lifecycle:
    """Whether every watch has listed, whether a signal asked for a stop, and how the running watcher
    winds down (set once it runs)."""

    synced: bool = False
    stopping: bool = False
    code: int = exitcodes.OK
    stop_watches: Callable[[], None] | None = None
    unfinished: Callable[[], int] = lambda: 0
    is_leader: Callable[[], bool] = lambda: True  # whether status writes may be sent now
    in_sync: Callable[[], bool] = lambda: True  # whether every watch is in sync now (once listed)
    replan: Callable[[], None] = lambda: None  # decide every status again (the lease was gained)
    unreachable: Callable[[], str | None] = lambda: None  # why the API server cannot be reached now
    started: float = field(default_factory=time.monotonic)  # the command's start, connection included


def stderr_log(err: TextIO, format: LogFormat = "text", level: Level = "info") -> StderrLogger:
    return StderrLogger(err, format, level)


WAIT_CODES = {
    "ready": exitcodes.OK,
    "failed": exitcodes.FAILED,
    "not_found": exitcodes.NOT_FOUND,
    "timeout": exitcodes.TIMEOUT,
    "unreachable": exitcodes.UNREACHABLE,
}


async def live(options: LiveOptions, out: BinaryIO, err: TextIO) -> int:
    log = stderr_log(err, options.log_format, options.log_level)
    started = time.monotonic()
    # `wait --timeout 0` decides from one list: no deadline, the waiter gives up after its first look
    deadline = anyio.current_time() + options.timeout if options.timeout else math.inf
    try:
        client = await KubeClient.connect(options.kubeconfig, options.context)
    except ConfigError as exc:
        log(str(exc), "error")
        return exitcodes.CONFIG
    client.reach.log = log  # an outage once the server has answered: said once, not per request retried
    code = exitcodes.OK
    life = _Lifecycle(unreachable=lambda: client.reach.unreachable, started=started)
    elector: LeaderElector | None = None
    spec = COMMANDS[options.command]
    if spec.leads and options.leader is not None:
        namespace = options.leader.namespace or default_namespace(client)
        elector = LeaderElector(client, namespace, options.leader, log, on_gain=lambda: life.replan())
        life.is_leader = elector.is_leader
    _more_files()
    async with contextlib.AsyncExitStack() as servers:  # left last: they answer until the lease is released
        served = await _servers(options, log, life, elector, servers)
        if served is None:
            await client.close()
            return exitcodes.CONFIG
        metrics, admission = served
        trust = _trust(options.admission, admission, client, metrics, life, log)
        try:
            async with anyio.create_task_group() as tg:
                # from the start: a stop while the server is still unreachable too
                tg.start_soon(_signals, life, options.grace_period, log)
                if elector is not None:
                    tg.start_soon(_lead, elector, log)
                if trust is not None:
                    tg.start_soon(trust.run)
                code = await _watch(client, options, out, log, life, metrics, deadline, admission)
                if life.stopping:
                    code = life.code
                tg.cancel_scope.cancel()
        except* _Stop as group:
            code = next(exc.code for exc in leaves(group) if isinstance(exc, _Stop))
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                if elector is not None:  # its writes are finished or given up: a successor may take over now
                    await elector.release()
                await client.close()
    return code


def _more_files() -> None:
    """Raise the soft limit on open files to the hard one: each port bounds its connections well below
    it (sinks.bounded_http), and the watches and status writes keep theirs."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = min(hard, 1 << 16) if hard != resource.RLIM_INFINITY else 1 << 16
        if soft != resource.RLIM_INFINITY and soft < wanted:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


async def _servers(
    options: LiveOptions, log: Logger, life: _Lifecycle, elector: LeaderElector | None, stack: AsyncExitStack
) -> tuple[Metrics | None, AdmissionServer | None] | None:
    """The metrics and the servers the options ask for, listening until `stack` closes; None once it said
    why one cannot."""
    spec = COMMANDS[options.command]
    metrics: Metrics | None = None
    if options.http_address is not None:
        metrics = Metrics()
        if spec.leads:
            metrics.lead(life.is_leader)
        host, port = options.http_address
        server = HttpServer(
            host, port, metrics, lambda: _not_ready(life), log, elector.describe if elector is not None else None
        )
        metrics.count_refusals("http", server.server.refused.counts)
        try:
            url = await stack.enter_async_context(server.serving())
        except OSError as exc:
            log(f"cannot listen on {host or ''}:{port} for --http-address: {exc.strerror or exc}", "error")
            return None
        log(f"serving /healthz, /readyz and /metrics at {url}")
    admission: AdmissionServer | None = None
    if options.admission is not None and spec.admits:
        admission = await _admission(options.admission, log, stack)
        if admission is None:
            return None
        if metrics is not None:
            metrics.count_refusals("admission", admission.server.refused.counts)
            metrics.count_answers(admission.answers)
    return metrics, admission


async def _admission(settings: AdmissionSettings, log: Logger, stack: AsyncExitStack) -> AdmissionServer | None:
    """The webhook's server, listening until `stack` closes; None once it said why it cannot."""
    try:
        admission = AdmissionServer(settings, log)
    except (OSError, ssl.SSLError) as exc:
        files = f"--tls-cert-file and --tls-private-key-file ({settings.certificate} and {settings.key})"
        files += f" or --tls-client-ca-file ({settings.client_ca})" if settings.client_ca else ""
        log(f"cannot use {files}: {exc.strerror or exc}", "error")
        return None
    try:
        url = await stack.enter_async_context(admission.serving())
    except OSError as exc:
        where = f"{settings.host or ''}:{settings.port}"
        log(f"cannot listen on {where} for --admission-address: {exc.strerror or exc}", "error")
        return None
    log(f"serving the status admission webhook at {url}")
    return admission


def _trust(
    settings: AdmissionSettings | None,
    admission: AdmissionServer | None,
    client: KubeClient,
    metrics: Metrics | None,
    life: _Lifecycle,
    log: Logger,
) -> TrustCheck | None:
    """With --admission-configuration, the check that the API server can call the webhook (by the replica
    that answers), its gauge on /metrics."""
    if admission is None or settings is None or settings.configuration is None:
        return None
    trust = TrustCheck(
        client, settings.configuration, admission.tls, PATH, admission.calls, log, lambda: life.is_leader()
    )
    if metrics is not None:
        metrics.registry.register(trust.collector())
    return trust


async def _lead(elector: LeaderElector, log: Logger) -> None:
    try:
        await elector.run()
    except LeaseForbidden as exc:
        log(str(exc), "error")
        raise _Stop(exitcodes.NOPERM) from None


def _not_ready(life: _Lifecycle) -> str | None:
    if life.stopping:
        return "stopping"
    if not life.synced:
        return "not every watch has listed yet"
    if not life.in_sync():
        return "a watch is out of sync (its last two requests failed)"
    return None


def _blocked(life: _Lifecycle) -> LetThrough | None:
    """Why this replica must not answer a status write with a change: only the writer decides."""
    if not life.is_leader():
        return LetThrough("this replica does not lead", routine=True)
    return None if life.synced and life.in_sync() and not life.stopping else LetThrough(_not_ready(life) or "")


class _Unreached(Exception):
    """The first contact failed: the server never answered (the message says why and what to check)."""


async def _discover(client: KubeClient, options: LiveOptions, log: Logger) -> str | None:
    """The Dynamo CRDs' version: the command's first contact, which fails at once on a server that does not
    answer at all (a wrong context is no blip), and waits out one that answers with 429 or 5xx."""
    backoff = Backoff(options.watch.initial_backoff, options.watch.max_backoff)
    while True:
        try:
            return await discover_dynamo(client, options.watch.request_timeout)
        except ApiError as exc:
            if isinstance(exc, Unreachable) and not client.reach.answered:
                raise _Unreached(exc.advice) from None
            if exc.status in (401, 403):
                what = exc.refusal if exc.status == 401 else f"not allowed: {exc.message or exc.reason}"
                log(f"cannot discover the API of {client.server}: {what}", "error")
                raise _Stop(exitcodes.NOPERM) from None
            if not exc.retryable:
                log(f"discovering the Dynamo CRDs at {client.server}: {exc}", "error")
                raise _Stop(exitcodes.UNAVAILABLE) from None
            delay = backoff.next(exc.retry_after)
            log(f"{exc}; retrying in {delay:.1f}s", "warning")
            await anyio.sleep(delay)


async def _watch(
    client: KubeClient,
    options: LiveOptions,
    out: BinaryIO,
    log: Logger,
    life: _Lifecycle,
    metrics: Metrics | None,
    deadline: float = math.inf,
    admission: AdmissionServer | None = None,
) -> int:
    spec = COMMANDS[options.command]
    scopes, where = _scopes(client, options)
    found = await _resources(client, options, spec, log, deadline)
    if isinstance(found, int):
        if found in (exitcodes.UNREACHABLE, exitcodes.TIMEOUT):  # `wait` still says its result on stdout
            judge = _judge(options, spec, scopes, where, out, log, life)
            if isinstance(judge, GraphWaiter):
                await judge.give_up("unreachable" if found == exitcodes.UNREACHABLE else "timeout")
        return found
    resources, version = found
    names = ", ".join(r.plural for r in resources) + (f" ({version})" if version else "")
    log(f"watching {names} in {where} at {client.server} ({client.source})")
    wiring = _Wiring(client, options, spec, out, log, life, metrics)
    judge = _judge(options, spec, scopes, where, out, log, life, wiring.reader, wiring.crash_reader is not None)
    code = exitcodes.OK
    try:
        async with anyio.create_task_group() as tg:
            sinks = wiring.start_sinks(tg, judge)
            pipeline = Pipeline(
                clock=now_rfc3339,
                synced=False,
                readiness=judge is not None,
                tunables=options.tunables,
                recovery_window=options.recovery_window,
                diagnoses=options.diagnoses,
                explains=wiring.crash_reader is not None,  # asked only of a reader that answers
            )

            def report(problem: BadRecord | Rejected) -> bool:
                log(f"a watch event skipped: {problem}", "warning")
                return True

            reads = None
            if admission is not None:
                reads = PipelineReads(pipeline, now_rfc3339, lambda: _blocked(life))
                admission.attach(reads.admit)
            tg.start_soon(pipeline_stage, wiring.receive_events, sinks, pipeline, report, reads)
            await wiring.watch(resources, scopes, deadline)
    except* Fatal as group:
        fatal = [exc for exc in leaves(group) if isinstance(exc, Fatal)]
        for exc in fatal:
            log(str(exc), "error")
        code = exitcodes.NOPERM if any(exc.forbidden for exc in fatal) else exitcodes.UNAVAILABLE
    finally:
        life.replan = lambda: None
        if admission is not None:
            admission.attach(None)
        wiring.close_recorder()
    return _judged(code, judge, life.unreachable() is not None)


async def _resources(
    client: KubeClient, options: LiveOptions, spec: CommandSpec, log: Logger, deadline: float
) -> tuple[list[Resource], str | None] | int:
    """What to watch (and the Dynamo CRDs' version), or the exit code when there is nothing to do."""
    version: str | None = None
    optional: list[Resource] = []
    with anyio.move_on_after(deadline - anyio.current_time()) as discovering:
        try:
            version = await _discover(client, options, log)
        except NotAnApiServer as strange:
            log(str(strange), "error")
            return exitcodes.UNAVAILABLE
        except _Unreached as unreached:
            log(str(unreached), "error")
            return exitcodes.UNREACHABLE
        for resource in map(Resource.of, backends.watched()):
            try:
                if await served(client, resource, options.watch.request_timeout):
                    optional.append(resource)
            except ApiError as error:  # Pods are still diagnosed; only what the object itself says is missed
                log(f"not watching {resource.kind}s: {error}", "warning")
    if discovering.cancelled_caught:  # the first answer still on its way (a request never answered is unreachable)
        log(f"timed out: {client.server} did not answer in time", "error")
        return exitcodes.TIMEOUT
    resources: list[Resource] = [PODS, DEPLOYMENTS]
    if version is None:
        if spec.needs_dynamo is not None:
            log(
                f"the Dynamo CRDs (nvidia.com DynamoGraphDeployment, DynamoComponentDeployment) are not served by "
                f"{client.server}: there is {spec.needs_dynamo}",
                "error",
            )
            return exitcodes.UNAVAILABLE
        log("the Dynamo CRDs are not served: watching Pods and Deployments only", "warning")
    else:
        components, graphs = dynamo_resources(version)
        if options.selector is not None:  # `-l`: the API server sends the graphs that match alone
            graphs = dataclasses.replace(graphs, label_selector=options.selector)
        resources += (components, graphs)
    # e.g. LeaderWorkerSet-backed components: how many groups each wants, and its own Failed condition
    return resources + optional, version


def _scopes(client: KubeClient, options: LiveOptions) -> tuple[list[str | None], str]:
    """The namespaces to watch (None: all), and how to say it."""
    scopes: list[str | None] = (
        [None] if options.all_namespaces else list(options.namespaces or [client.default_namespace])
    )
    kept = options.namespace_filter
    given = scopes
    if kept is not None and kept.shard is not None and scopes != [None]:  # a fixed list: watch ours alone
        shard = kept.shard
        scopes = [scope for scope in scopes if scope is not None and shard.owns(scope)]
    where = "all namespaces" if options.all_namespaces else "namespace " + ", ".join(str(s) for s in scopes)
    if kept is not None:
        if not scopes:
            where = f"no namespace (of namespace {', '.join(str(s) for s in given)}, none is this shard's)"
        where += f", keeping those of {kept.describe()}"
    return scopes, where


class _Wiring:
    """One live command's sources and sinks around the pipeline, as its `CommandSpec` says."""

    def __init__(
        self,
        client: KubeClient,
        options: LiveOptions,
        spec: CommandSpec,
        out: BinaryIO,
        log: Logger,
        life: _Lifecycle,
        metrics: Metrics | None,
    ) -> None:
        self.client, self.options, self.spec, self.out, self.log = client, options, spec, out, log
        self.life, self.metrics = life, metrics
        self.recorder = Recorder(options.record) if options.record else None
        self.reader: LogReader | None = None
        if options.log_lines > 0 and spec.reads_logs:
            self.reader = LogReader(
                # a kubelet that does not answer must not hold a CI wait's verdict back: 5 s at most per read
                client,
                options.log_lines,
                timeout=min(5.0, options.watch.request_timeout),
                log=lambda m: log(m, "warning"),
            )
        self.send_events, self.receive_events = anyio.create_memory_object_stream[Events](BUFFER)
        self.crash_reader: CrashOutputReader | None = None
        if options.read_causes and spec.explains:
            self.crash_reader = CrashOutputReader(
                client,
                self._send_crash_outputs,
                log=log,
                tap=self.recorder.write if self.recorder is not None else None,
            )
        self.patcher: StatusPatcher | None = None
        self.started = time.monotonic()

    def start_sinks(
        self, tg: TaskGroup, judge: GraphWaiter | GraphTable | None
    ) -> list[ObjectSendStream[list[Output]]]:
        """Start the command's sinks in `tg`; the streams that feed them."""
        sinks: list[ObjectSendStream[list[Output]]] = []

        def sink() -> MemoryObjectReceiveStream[list[Output]]:
            send, receive = anyio.create_memory_object_stream[list[Output]](BUFFER)
            sinks.append(send)
            return receive

        options = self.options
        if self.spec.prints_changes and (self.recorder is None or options.record != "-"):
            formats: dict[str, Format] = {"json": "json", "yaml": "yaml"}
            line_format = formats.get(options.output, "text")
            printer = change_printer(line_format)
            if self.reader is not None:  # tail: each crash with its container's last lines under it
                tg.start_soon(print_lines_with_logs, sink(), self.out, printer, self.reader, line_format)
            else:
                tg.start_soon(print_lines, sink(), self.out, printer)
        if self.spec.writes_status:
            self._start_writers(tg, sink)
        if judge is not None:
            tg.start_soon(judge.run, sink())
        if self.metrics is not None:
            tg.start_soon(metrics_sink, sink(), self.metrics)
        if self.crash_reader is not None:
            tg.start_soon(self.crash_reader.run)
            tg.start_soon(self._wanted_reads, sink(), tg)
        return sinks

    async def _wanted_reads(self, receive: MemoryObjectReceiveStream[list[Output]], tg: TaskGroup) -> None:
        """The crashes the pipeline asks about, to the reader; and, for `get`, its snapshot held back until
        the crashes it listed were read (at most SNAPSHOT_CAUSES_WAIT): the pipeline syncs again then, and
        the table prints at that second end of the list (`GraphTable.prints_at`)."""
        reader = self.crash_reader
        assert reader is not None
        settle = self.spec.judge == "get"
        async with receive:
            async for batch in receive:
                for item in batch:
                    if type(item) is ExplainWanted:
                        reader.want(
                            Wanted(
                                item.namespace,
                                item.pod,
                                item.uid,
                                item.container,
                                item.finished_at,
                                item.restarts,
                                item.exit_code,
                                item.reason,
                            )
                        )
                    elif type(item) is Listed and settle:
                        settle = False
                        tg.start_soon(self._sync_when_read, reader)

    async def _sync_when_read(self, reader: CrashOutputReader) -> None:
        with anyio.move_on_after(SNAPSHOT_CAUSES_WAIT):
            await reader.settled()
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self.send_events.send([Synced(now_rfc3339())])

    async def _send_crash_outputs(self, outputs: list[CrashOutput]) -> None:
        """Into the events the pipeline reads, as long as the watches run (after, it would read none)."""
        batch: list[WatchEvent | ReducedPod | CrashOutput | BadRecord] = [*outputs]
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self.send_events.send(batch)

    def _start_writers(self, tg: TaskGroup, sink: Callable[[], MemoryObjectReceiveStream[list[Output]]]) -> None:
        """The status patcher and, with --events, the Event recorder; a gained lease decides again."""
        options, life = self.options, self.life
        patcher = self.patcher = StatusPatcher(self.client, options.patch, self.log, is_leader=life.is_leader)
        life.unfinished = patcher.unfinished
        tg.start_soon(patcher.run, sink())

        async def resync() -> None:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                await self.send_events.send([Synced(now_rfc3339())])

        def replan() -> None:
            # before the first list ends there is nothing to decide again: the sync decides it all
            if life.synced:
                tg.start_soon(resync)

        life.replan = replan
        if options.events is not None:  # Events: a stream, a queue and a pace of their own
            events = EventRecorder(self.client, options.events, self.log, is_leader=life.is_leader)
            if self.metrics is not None:
                self.metrics.count_events(events.stats)
            tg.start_soon(events.run, sink())

    async def watch(self, resources: list[Resource], scopes: list[str | None], deadline: float) -> None:
        """List and watch until stopped (or `wait` runs out of time); then close the events' stream, so
        the stages drain and end."""
        options, kept = self.options, self.options.namespace_filter
        recorder = self.recorder
        reflectors = [
            Reflector(
                self.client,
                resource,
                scope,
                self.send_events.send,  # type: ignore[arg-type]
                options.watch,
                self.log,
                tap=recorder.write if recorder is not None else None,
                keep=kept.keeps if kept is not None else None,
            )
            for resource in resources
            for scope in scopes
        ]
        selection = None
        if kept is not None and kept.selector is not None:
            selection = SelectedNamespaces(self.client, kept, options.watch, self.log)
            selection.reflectors = reflectors
        if self.metrics is not None:
            self.metrics.count(reflectors, self.patcher.stats if self.patcher is not None else None)
        listed = self._on_listed(reflectors, selection)
        try:
            await self._run_watches(reflectors, selection, listed, deadline)
        finally:  # what the reader would hand on now, no pipeline reads
            if self.crash_reader is not None:
                self.crash_reader.stop()

    async def _run_watches(
        self,
        reflectors: list[Reflector],
        selection: SelectedNamespaces | None,
        listed: Callable[[], Awaitable[None]],
        deadline: float,
    ) -> None:
        async with self.send_events, anyio.create_task_group() as watches:
            watches.cancel_scope.deadline = deadline
            self.life.stop_watches = watches.cancel_scope.cancel
            if selection is not None:  # which namespaces match, before any object is listed
                selected = anyio.Event()

                async def namespaces_listed() -> None:
                    selected.set()

                watches.start_soon(selection.run, namespaces_listed)
                await selected.wait()
            for reflector in reflectors:
                watches.start_soon(reflector.run, listed)
            watches.start_soon(_tick, self.send_events)
            if self.spec.judge == "get" or (self.spec.judge == "wait" and self.options.timeout == 0):
                watches.start_soon(self._give_up_unreachable)
            if not reflectors:  # every namespace given is another shard's: idle, ready, until stopped
                await listed()
                watches.start_soon(anyio.sleep_forever)

    async def _give_up_unreachable(self) -> None:
        """`get` and `wait --timeout 0` look once: a server that stops answering on the way is waited for one
        request timeout, then the watches stop and the command says it could not reach it."""
        line = await self.client.reach.down_for(self.options.watch.request_timeout)
        self.log(f"{line}: giving up", "error")
        if self.life.stop_watches is not None:
            self.life.stop_watches()

    def _on_listed(
        self, reflectors: list[Reflector], selection: SelectedNamespaces | None
    ) -> Callable[[], Awaitable[None]]:
        """What each watch calls once it has listed: the last one marks the command synced."""
        pending = max(1, len(reflectors))

        async def listed() -> None:
            nonlocal pending
            pending -= 1
            if pending:
                return
            self.life.synced = True
            # from now on false while a reflector is out of sync (two failed requests in a row:
            # stream.sources.reflector): /readyz says not ready, the webhook answers with no change
            watched = [*reflectors, *([selection.reflector] if selection is not None else [])]
            self.life.in_sync = lambda: all(r.in_sync for r in watched)
            if self.metrics is not None:
                self.metrics.synced.set_function(lambda: float(self.life.in_sync()))
            count = sum(len(r.known) for r in reflectors)
            self.log(f"synced in {time.monotonic() - self.started:.2f}s: {count} objects")
            if self.spec.decides_at_sync:  # statuses or readiness to decide
                await self.send_events.send([Synced(now_rfc3339())])

        return listed

    def close_recorder(self) -> None:
        if self.recorder is not None:
            self.recorder.close(now_rfc3339())
            self.log(f"recorded {self.recorder.count} events to {self.options.record}")


def _judged(code: int, judge: GraphWaiter | GraphTable | None, unreachable: bool = False) -> int:
    """The exit code: the watches' own, else what `wait` or `get` decided (`get` stopped before its one
    list, with the server gone: unreachable)."""
    if code == exitcodes.OK and isinstance(judge, GraphWaiter) and judge.result is not None:
        return WAIT_CODES[judge.result]
    if code == exitcodes.OK and isinstance(judge, GraphTable):
        if judge.missing is None and unreachable:
            return exitcodes.UNREACHABLE
        if judge.missing:
            return exitcodes.NOT_FOUND
    return code


async def _tick(send: ObjectSendStream[Events]) -> None:
    """The live clock: time passes in the pipeline as events, so its core reads no clock of its own."""
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
        while True:
            await anyio.sleep(TICK)
            await send.send([Tick(now_rfc3339())])


def _judge(
    options: LiveOptions,
    spec: CommandSpec,
    scopes: list[str | None],
    where: str,
    out: BinaryIO,
    log: Logger,
    life: _Lifecycle,
    reader: LogReader | None = None,
    reads_causes: bool = False,
) -> GraphWaiter | GraphTable | None:
    """The sink that decides `wait`'s exit or prints `get`'s snapshot; it stops the watches when done."""

    def stop() -> None:
        if life.stop_watches is not None:
            life.stop_watches()

    targets = None
    if options.graphs is not None:
        namespace = scopes[0] or ""  # the CLI allows names with one namespace only
        targets = [(namespace, name) for name in options.graphs]
    if spec.judge == "wait":
        once = options.timeout == 0
        scope = where + (f", labelled {options.selector}" if options.selector else "")
        return GraphWaiter(
            targets,
            options.output,
            out,
            log,
            stop,
            scope,
            once,
            logs=reader,
            reach=life.unreachable,
            started=life.started,
        )
    if spec.judge == "get":
        view = options.output if options.output in ("wide", "json", "yaml", "name") else "table"
        # with causes read, the pipeline syncs again once the crashes listed were read (_Wiring._wanted_reads)
        prints_at = 2 if reads_causes else 1
        return GraphTable(
            targets,
            view,
            options.all_namespaces,
            out,
            log,
            stop,
            logs=reader,
            prints_at=prints_at,
            headers=options.headers,
        )
    return None


async def _signals(life: _Lifecycle, grace: float, log: Logger) -> None:
    """SIGTERM stops the watcher cleanly (exit 0); SIGINT too, with 130 as a shell expects."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            code = exitcodes.OK if signum == signal.SIGTERM else exitcodes.INTERRUPTED
            if life.stop_watches is None:  # the watches have not started: nothing to finish
                raise _Stop(code)
            life.code, life.stopping = code, True
            life.stop_watches()
            log(
                f"{signal.Signals(signum).name}: stopping; finishing what was received "
                f"(at most {grace:g}s, a second signal stops at once)"
            )
            break
        with anyio.move_on_after(grace):
            async for _ in signals:
                raise _Stop(life.code)
        unfinished = life.unfinished()
        log(
            f"stopped after the {grace:g}s grace period"
            + (f" with {unfinished} status write{'s' * (unfinished != 1)} unfinished" if unfinished else "")
        )
        raise _Stop(life.code)


def run_live(options: LiveOptions) -> int:
    return anyio.run(live, options, sys.stdout.buffer, sys.stderr)
