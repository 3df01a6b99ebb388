"""/metrics as the real metrics module writes it (sinks.metrics.Metrics), parsed back into samples, and
turned into the input series of `promtool test rules`. The alert and dashboard tests take their series
from here or from a live watcher's /metrics, never from names written by hand: a renamed metric, label
or label value breaks them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from pipeline.findings import Finding
from pipeline.outputs import ComponentChange, GraphChange
from sinks.admission_trust import TrustGauge
from sinks.events import EventStats
from sinks.metrics import Metrics
from sinks.status import PatchStats
from stream.sources.resources import PODS

Labels = tuple[tuple[str, str], ...]

# a PromQL identifier that is one of crashwatch's metrics
METRIC = re.compile(r"\bcrashwatch_[a-zA-Z0-9_]+\b")


@dataclass
class WatchCounts:
    """What a reflector counts, as the metrics read it (sinks.metrics.WatchCounts)."""

    resource: Any
    namespace: str | None
    events: int = 0
    lists: int = 0
    watches: int = 0
    errors: int = 0


@dataclass
class Watcher:
    """A watcher's counters and verdicts, as `crashwatch run --leader-elect` keeps them, scraped through
    the real Metrics: every family `run` serves."""

    leader: bool = True
    synced: bool = True
    metrics: Metrics = field(default_factory=Metrics)
    writes: PatchStats = field(default_factory=PatchStats)
    events: EventStats = field(default_factory=EventStats)
    pods: WatchCounts = field(default_factory=lambda: WatchCounts(PODS, None, lists=1, watches=1))
    # --admission-configuration: whether the webhook's registration trusts what it serves (None: not checked)
    trusted: bool | None = None
    configuration: str = "crashwatch-crashwatch"

    def __post_init__(self) -> None:
        self.metrics.lead(lambda: self.leader)
        self.metrics.count([self.pods], self.writes)
        self.metrics.count_events(self.events)
        self.metrics.registry.register(TrustGauge(self.configuration, lambda: self.trusted))

    def diagnose(self, namespace: str, graph: str, component: str, finding: Finding | None) -> None:
        """A component's verdict alone: `finding` (a crash loop or another diagnosis), or None once it cleared."""
        self.metrics.observe([ComponentChange(None, namespace, graph, component, f"{graph}-{component}", finding, "")])

    def crash_loop(self, namespace: str, graph: str, component: str, crashing: bool = True) -> None:
        finding = Finding(f"{graph}-{component}-0", "main", 2, 1) if crashing else None
        self.metrics.observe(
            [
                ComponentChange(None, namespace, graph, component, f"{graph}-{component}", finding, ""),
                GraphChange(None, namespace, graph, crashing, "component_crash_looping" if crashing else None, (), ""),
            ]
        )

    def scrape(self) -> str:
        self.metrics.synced.set(1 if self.synced else 0)
        return self.metrics.exposition().decode()


def duration_seconds(duration: str) -> int:
    """A Prometheus duration of s, m and h (a rule's `for`), in seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"(\d+)([smh])", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(int(n) * units[u] for n, u in parts)


def samples(exposition: str) -> dict[tuple[str, Labels], float]:
    """Each sample of a scrape: (name, sorted labels) -> value."""
    found = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
    return found


def names(exposition: str) -> set[str]:
    return {name for name, _ in samples(exposition)}


def series_selector(name: str, labels: Labels) -> str:
    inside = ",".join(f'{k}="{v}"' for k, v in labels)
    return f"{name}{{{inside}}}"


Target = dict[str, str]  # the labels Prometheus gives a target (job, instance, pod, namespace)


def input_series(steps: Sequence[Sequence[tuple[Target, str]]]) -> list[dict[str, str]]:
    """promtool's input_series from scrapes, one step per evaluation interval: each step the scrapes of
    every target then, (target labels, exposition). A series that leaves a scrape gets a staleness marker,
    then is missing ('_'), as Prometheus records it; one never scraped yet is missing."""
    rows: list[dict[tuple[str, Labels], float]] = []
    for step in steps:
        row = {}
        for target, exposition in step:
            for (name, labels), value in samples(exposition).items():
                # honor_labels: the series' own labels win over the target's, and an empty one is no label
                merged = {**target, **{k: v for k, v in labels if v}}
                row[(name, tuple(sorted(merged.items())))] = value
        rows.append(row)
    out = []
    for key in sorted({key for row in rows for key in row}):
        values, seen = [], False
        for row in rows:
            if key in row:
                values.append(repr(row[key]))
                seen = True
            else:
                values.append("stale" if seen and values[-1] not in ("stale", "_") else "_")
        out.append({"series": series_selector(*key), "values": " ".join(values)})
    return out


RANGE = re.compile(r"\s*\{\{- range (.*?) \}\}(.*?)\s*\{\{- end \}\}", re.DOTALL)


def render_annotation(text: str, labels: dict[str, str], value: str = "", found: Sequence[dict[str, str]] = ()) -> str:
    """An annotation as Prometheus renders it, for the templates the rules use (checked here): `{{ $labels.NAME }}`,
    `{{ $value }}`, and one `{{- range QUERY }}...{{- end }}` over a query's result, rendered from `found`, the
    series the query must return in its order, each body's `{{ .Labels.NAME }}` substituted. promtool then
    checks the rendering against its own."""

    def one(body: str, row: dict[str, str]) -> str:
        return re.sub(r"\{\{ \.Labels\.(\w+) \}\}", lambda m: row[m.group(1)], body)

    def each(match: re.Match[str]) -> str:
        return "".join(one(match.group(2), row) for row in found)

    text = RANGE.sub(each, text)
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)
    text = text.replace("{{ $value }}", value)
    assert "{{" not in text, f"a template this rendering does not know: {text}"
    return text
