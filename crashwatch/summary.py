"""What a replay read and what it found, said once at its end: a run never ends in silence.

A replay that prints no verdict may have found a healthy graph, or nothing it could diagnose at all (an
empty file, a slow start, Pods without the Dynamo labels): the summary says which, in one or two lines
on stderr, or as the last line of stdout with `--summary json` for scripts. It is made from what the
replay already has: the records it handed on, the outputs it printed (the graphs that fail at the end
are those whose last verdict is FAILED) and the pipeline's store at the end (the graphs and components
it knows), so it costs nothing per event.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from pipeline.outputs import ComponentChange, GraphChange, Output
from pipeline.views import ComponentKey, GraphKey, ViewStore
from sinks.text import printable

SummaryFormat = Literal["text", "json", "none"]
SUMMARY_FORMATS: tuple[SummaryFormat, ...] = ("text", "json", "none")
LABELS = "nvidia.com/dynamo-graph-deployment-name and nvidia.com/dynamo-component"
KINDS = "Pods, Deployments, DCDs, DGDs, LeaderWorkerSets"
SHOWN = 5  # failing graphs named in the text line; the JSON line names them all


class Failing(msgspec.Struct):
    namespace: str
    graph: str
    reason: str | None
    components: list[str]


@dataclass
class Tally:
    """Counted as the replay goes: records handed on, Pod events read while nothing matched, and each
    graph's and component's last verdict."""

    records: int = 0
    pods_unmatched: int = 0  # Pod events read while the pipeline knew no Dynamo object (for the why)
    matched: bool = False
    graphs: dict[GraphKey, GraphChange] = field(default_factory=dict)
    components: set[ComponentKey] = field(default_factory=set)

    def see(self, output: Output) -> None:
        """An output on its way to the printer: the last verdict of its graph."""
        if type(output) is GraphChange:
            self.graphs[(output.namespace, output.graph)] = output
        elif type(output) is ComponentChange:
            self.components.add((output.namespace, output.graph, output.component))

    def known(self, store: ViewStore) -> bool:
        """Whether the pipeline knows a Dynamo object now (checked between batches: cheap)."""
        self.matched = self.matched or bool(store.pods or store.dgds or store.dcds)
        return self.matched


class Summary(msgspec.Struct, kw_only=True):
    """What a replay read and found: said in words (`text`), or as `--summary json`'s last line of stdout,
    this struct encoded (docs/cli.md says each key)."""

    kind: str = "summary"
    logs: list[str]
    records: int
    bad: int
    time_went_back: int
    graphs: int
    components: int
    failing: list[Failing]
    matched: bool
    why: str | None  # None: something matched

    def text(self) -> list[str]:
        """One or two lines for stderr (without the `crashwatch: ` every line gets)."""
        where = printable(self.logs[0]) if len(self.logs) == 1 else f"{len(self.logs)} logs"
        if self.why is not None:
            return [f"no Dynamo graph or labelled Pod in {where}: {self.why}"]
        read = f"read {self.records:,} {_plural(self.records, 'record')} from {where}"
        seen = f"{_plural(self.graphs, 'graph', True)}, {_plural(self.components, 'component', True)}"
        if not self.failing:
            return [f"{read}: {seen}; nothing fails at the end"]
        named = [
            f"{printable(f.namespace)}/{printable(f.graph)} ({', '.join(map(printable, f.components))})"
            for f in self.failing[:SHOWN]
        ]
        more = f" and {len(self.failing) - SHOWN} more" if len(self.failing) > SHOWN else ""
        count = _plural(len(self.failing), "graph", True)
        return [f"{read}: {seen}", f"{count} failing at the end: {', '.join(named)}{more}"]

    def json(self) -> bytes:
        return msgspec.json.encode(self) + b"\n"


def summarize(
    logs: Sequence[str], tally: Tally, store: ViewStore, bad: int, time_went_back: int, counted: int
) -> Summary:
    """`counted`: the records handed on (events and bad records alike)."""
    graphs: set[GraphKey] = set(tally.graphs) | {key[:2] for key in tally.components}
    components: set[ComponentKey] = set(tally.components)
    for view in store.pods.values():
        if view.component is not None:
            components.add(view.component)
    for dcd in store.dcds.values():
        if dcd.graph is not None and dcd.component is not None:
            components.add((dcd.namespace, dcd.graph, dcd.component))
    for dgd in store.dgds.values():
        graphs.add((dgd.namespace, dgd.name))
        components.update((dgd.namespace, dgd.name, name) for name, _ in dgd.components)
    graphs.update(key[:2] for key in components)
    failing = [
        Failing(change.namespace, change.graph, change.reason, list(change.components))
        for _, change in sorted(tally.graphs.items())
        if change.failed
    ]
    matched = tally.known(store) or bool(graphs)
    why = None if matched else _why(counted, bad, tally.pods_unmatched)
    return Summary(
        logs=list(logs),
        records=counted,
        bad=bad,
        time_went_back=time_went_back,
        graphs=len(graphs),
        components=len(components),
        failing=failing,
        matched=why is None,
        why=why,
    )


# what a log that is no watch log at all looks like, told from its first line that says something
_LOOKS = (
    (
        re.compile(rb"(NAMESPACE\s+)?NAME\s+(READY|STATUS|AGE|DATA|TYPE|DESIRED|CLUSTER-IP|UP-TO-DATE)\b"),
        "looks like kubectl table output: use -o json "
        "(kubectl get pods -A --watch --output-watch-events -o json | crashwatch replay -)",
    ),
    (
        re.compile(rb"Name:\s+\S+\s*\n(Namespace|Labels|Priority):"),
        "looks like kubectl describe output: use kubectl get -o json or -o yaml",
    ),
    (re.compile(rb"[a-z.]+(/[a-z0-9.-]+)+\n"), "looks like kubectl -o name output: use -o json"),
)


def looks_like(head: bytes) -> str | None:
    """What a log that gives bad records looks like, when it is a kubectl output of another form."""
    text = head.lstrip()
    for pattern, words in _LOOKS:
        if pattern.match(text):
            return words
    return None


def _why(records: int, bad: int, pods: int) -> str:
    if pods:
        return f"{_plural(pods, 'Pod event', True)}, none with the labels {LABELS}"
    if records == bad and bad:
        return f"{_plural(bad, 'bad record', True)} and nothing else"
    if not records:
        return f"no watch event or object of a kind replay reads ({KINDS})"
    return f"no Pod, DCD or DGD among its {_plural(records, 'record', True)}"


def _plural(count: int, word: str, number: bool = False) -> str:
    text = word if count == 1 else f"{word}s"
    return f"{count:,} {text}" if number else text
