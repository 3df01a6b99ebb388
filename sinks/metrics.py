"""What a long-lived watcher tells Prometheus on `/metrics`: what it sees failing now, and how its watches
and status writes are doing.

The gauges of what is failing follow the verdict changes, as any other sink does: a count per graph, and
one series per diagnosed component that names the finding (so an alert can say it), gone when the verdict
clears, so that the series are as many as the components failing now. The counters are kept
where they are counted, as plain numbers on the reflectors and the patcher, and read when Prometheus
scrapes: neither needs a metrics library, and the hot path pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol

from anyio.abc import ObjectReceiveStream
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from pipeline.diagnoses import GRACED
from pipeline.findings import Finding
from pipeline.outputs import ComponentChange, GraphChange, Output
from pipeline.status import DCD_REASON_CRASH_LOOPING, DCD_REASONS
from stream.sources.resources import Resource

CONTENT_TYPE = CONTENT_TYPE_LATEST


class WatchCounts(Protocol):
    """What a reflector counts (stream.sources.reflector.Reflector)."""

    resource: Resource
    namespace: str | None  # None: all namespaces
    events: int
    lists: int
    watches: int
    errors: int


class WriteCounts(Protocol):
    """What the status patcher counts (sinks.status.PatchStats)."""

    writes: int
    conflicts: int
    retries: int
    unchanged: int
    failures: int
    delay_buckets: tuple[float, ...]  # upper bounds of the delay buckets, seconds
    delays: list[int]  # per bucket, then over the last
    delay_sum: float


class EventCounts(Protocol):
    """What the Event recorder counts (sinks.events.EventStats)."""

    created: int
    patched: int
    dropped: int
    refused: int
    failed: int
    not_leader: int


class AnswerCounts(Protocol):
    """What the admission webhook counts (sinks.admission.Answers)."""

    counts: dict[str, int]  # reviews by answer
    last: float | None  # the Unix time of the last review


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.crash_looping = Gauge(
            "crashwatch_crash_looping_components",
            "Components crash-looping now, per graph.",
            ["namespace", "graph"],
            registry=self.registry,
        )
        self.failed = Gauge(
            "crashwatch_failed_graphs",
            "Graphs failed now because a component crash-loops (or shows another diagnosis).",
            registry=self.registry,
        )
        self.diagnosed = Gauge(
            "crashwatch_component_diagnosed",
            "1 per component with a diagnosis now (crash loop or another cause it will never be Ready from), "
            "labelled with the finding: the DCD's Stalled reason, the Pod, the container and its exit code, and "
            "the cause its crashed output names (crashwatch explain's class; empty where none was read).",
            ["namespace", "graph", "component", "reason", "pod", "container", "exit_code", "cause"],
            registry=self.registry,
        )
        self.synced = Gauge(
            "crashwatch_synced",
            "1 once every watched resource has been listed (verdicts and statuses are decided from then on), "
            "and 0 again while one is out of sync: two requests of it in a row failed, until one succeeds.",
            registry=self.registry,
        )
        self._components: dict[tuple[str, str], set[str]] = {}
        self._diagnosed: dict[tuple[str, str, str], tuple[str, ...]] = {}  # component -> its series' labels
        self._failed: set[tuple[str, str]] = set()
        self._counts = _Counts()
        self.registry.register(self._counts)

    def lead(self, is_leader: Callable[[], bool]) -> None:
        """`run`: whether this process writes status now (always, without --leader-elect), read at each scrape."""
        leader = Gauge(
            "crashwatch_leader",
            "1 while this watcher writes status (it holds the lease, or runs without --leader-elect), else 0.",
            registry=self.registry,
        )
        leader.set_function(lambda: float(is_leader()))

    def count(self, watches: Iterable[WatchCounts], writes: WriteCounts | None) -> None:
        """Where the counters are read from at each scrape."""
        self._counts.watches = list(watches)
        self._counts.writes = writes

    def count_events(self, events: EventCounts) -> None:
        """`run` with Events on: where the Event counters are read from at each scrape."""
        self._counts.events = events

    def count_refusals(self, port: str, counts: dict[str, int]) -> None:
        """A port's refused requests by kind (sinks.bounded_http.Refusals), read at each scrape."""
        self._counts.refusals[port] = counts

    def count_answers(self, answers: AnswerCounts) -> None:
        """`run --admission-address`: where the webhook's answers are read from at each scrape."""
        self._counts.answers = answers

    def observe(self, outputs: Sequence[Output]) -> None:
        for output in outputs:
            if isinstance(output, ComponentChange):
                key = (output.namespace, output.graph)
                members = self._components.setdefault(key, set())
                if output.finding is not None and not output.finding.diagnosis:  # crash loops alone
                    members.add(output.component)
                else:
                    members.discard(output.component)
                if members:
                    self.crash_looping.labels(*key).set(len(members))
                else:
                    del self._components[key]
                    self.crash_looping.remove(*key)  # no series left behind for a graph that recovered
                self._diagnose(output)
            elif isinstance(output, GraphChange):
                if output.failed:
                    self._failed.add((output.namespace, output.graph))
                else:
                    self._failed.discard((output.namespace, output.graph))
                self.failed.set(len(self._failed))

    def _diagnose(self, change: ComponentChange) -> None:
        """The component's one series: replaced when its finding changes, removed when it clears."""
        component = (change.namespace, change.graph, change.component)
        labels = diagnosed_labels(component, change.finding) if change.finding is not None else None
        old = self._diagnosed.get(component)
        if old == labels:
            return
        if old is not None:
            self.diagnosed.remove(*old)
            del self._diagnosed[component]
        if labels is not None:
            self.diagnosed.labels(*labels).set(1)
            self._diagnosed[component] = labels

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def diagnosed_labels(component: tuple[str, str, str], finding: Finding) -> tuple[str, ...]:
    """crashwatch_component_diagnosed's labels for a finding. The restart count is left out: it grows at
    every restart and would make a new series each time. A waiting diagnosis (an image pull, a config
    error, an unschedulable Pod) has no exit code, and an unschedulable Pod no container: those labels are
    empty, which Prometheus reads as absent; so is the cause, until the crashed output names one."""
    exit_code = "" if finding.diagnosis in GRACED else str(finding.exit_code)
    reason = DCD_REASONS.get(finding.diagnosis, DCD_REASON_CRASH_LOOPING)
    cause = finding.cause.kind if finding.cause is not None else ""
    return (*component, reason, finding.pod, finding.container, exit_code, cause)


async def metrics_sink(receive: ObjectReceiveStream[list[Output]], metrics: Metrics) -> None:
    async with receive:
        async for batch in receive:
            metrics.observe(batch)


class _Counts(Collector):
    def __init__(self) -> None:
        self.watches: list[WatchCounts] = []
        self.writes: WriteCounts | None = None
        self.events: EventCounts | None = None
        self.refusals: dict[str, dict[str, int]] = {}
        self.answers: AnswerCounts | None = None

    def collect(self) -> Iterator[Metric]:
        labels = ["resource", "namespace"]
        families = {
            "events": CounterMetricFamily(
                "crashwatch_watch_events", "Watch events received (a relist's derived ones included).", labels=labels
            ),
            "lists": CounterMetricFamily(
                "crashwatch_lists", "Completed LISTs: the first, then one per 410 Gone.", labels=labels
            ),
            "watches": CounterMetricFamily("crashwatch_watches", "WATCH requests opened.", labels=labels),
            "errors": CounterMetricFamily(
                "crashwatch_watch_errors", "Failed LIST and WATCH requests, each retried.", labels=labels
            ),
        }
        for watch in self.watches:
            for name, family in families.items():
                family.add_metric([watch.resource.plural, watch.namespace or ""], getattr(watch, name))
        yield from families.values()
        if self.writes is not None:
            w = self.writes
            results = CounterMetricFamily(
                "crashwatch_status_writes",
                "Status writes by outcome: written, found already saying it, or given up.",
                labels=["result"],
            )
            results.add_metric(["written"], w.writes)
            results.add_metric(["unchanged"], w.unchanged)
            results.add_metric(["failed"], w.failures)
            yield results
            yield CounterMetricFamily(
                "crashwatch_status_write_conflicts", "Status writes refused with 409 Conflict.", value=w.conflicts
            )
            yield CounterMetricFamily(
                "crashwatch_status_write_retries", "Status writes retried after 429 or 5xx.", value=w.retries
            )
            cumulative, buckets = 0, []
            for bound, count in zip((*map(str, w.delay_buckets), "+Inf"), w.delays, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            yield HistogramMetricFamily(
                "crashwatch_status_write_delay_seconds",
                "From the watch event that decided a status to the write that landed it.",
                buckets=buckets,
                sum_value=w.delay_sum,
            )
        if self.events is not None:
            e = self.events
            written = CounterMetricFamily(
                "crashwatch_events_written",
                "Kubernetes Events written: created, or a series' count updated by PATCH.",
                labels=["request"],
            )
            written.add_metric(["create"], e.created)
            written.add_metric(["patch"], e.patched)
            yield written
            dropped = CounterMetricFamily(
                "crashwatch_events_dropped",
                "Kubernetes Events not written: the queue was full, the API server refused them (403, 404, 422), "
                "they failed on every try, or another replica leads.",
                labels=["reason"],
            )
            dropped.add_metric(["queue_full"], e.dropped)
            dropped.add_metric(["refused"], e.refused)
            dropped.add_metric(["failed"], e.failed)
            dropped.add_metric(["not_leader"], e.not_leader)
            yield dropped
        yield from self._served()

    def _served(self) -> Iterator[Metric]:
        """The ports' refusals and the webhook's answers."""
        if self.refusals:
            refused = CounterMetricFamily(
                "crashwatch_http_refused",
                "Requests and connections refused by a port of the watcher, by kind: too many connections, "
                "headers or body too slow or too large, TLS handshake failed (a caBundle that does not match), ...",
                labels=["port", "reason"],
            )
            for port, counts in self.refusals.items():
                for reason, count in sorted(counts.items()):
                    refused.add_metric([port, reason], count)
            yield refused
        if self.answers is not None:
            reviews = CounterMetricFamily(
                "crashwatch_admission_reviews",
                "AdmissionReviews answered, by answer: patched, unchanged, let through (a follower, watches out "
                "of sync, the generation not seen in time), not asked (no DCD or DGD status update).",
                labels=["answer"],
            )
            for answer, count in sorted(self.answers.counts.items()):
                reviews.add_metric([answer], count)
            yield reviews
            if self.answers.last is not None:
                yield GaugeMetricFamily(
                    "crashwatch_admission_last_review_timestamp_seconds",
                    "When the API server last called the admission webhook (Unix time).",
                    value=self.answers.last,
                )
