"""The sink of `crashwatch wait`: weighs what the pipeline says of each graph into one result for CI.

It decides nothing about a graph itself (pipeline.readiness does); it only weighs the named graphs
together: the first failure ends the wait, all ready ends it, a name not found once everything was
listed ends it, and input that ends with none of these is a timeout, or, when the API server cannot be
reached then, unreachable: a CI job tells a wrong context or a cluster gone from a slow graph (the CLI
maps each to its exit code). It prints one progress line on stderr whenever what it waits for changes,
so a CI log shows where the time went, and the result on stdout, as text, as one JSON or YAML document,
or as the names of the graphs the result is about (`-o name`, as kubectl prints them).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import BinaryIO, Literal

import msgspec
from anyio.abc import ObjectReceiveStream

from pipeline.outputs import GraphReadiness, Listed, Output
from pipeline.views import GraphKey
from sinks.crashed_output import LastLines, LogReader, crashed, text_block
from sinks.lines import (
    GRAPH_RESOURCE,
    GraphEntry,
    crash_looping_summary,
    failing_word,
    graph_entry,
    json_document,
    yaml_document,
)
from sinks.text import printable

Result = Literal["ready", "failed", "not_found", "timeout", "unreachable"]
WaitOutput = Literal["text", "json", "yaml", "name"]


class WaitResult(msgspec.Struct, omit_defaults=True):
    result: Result
    elapsed_seconds: float
    graphs: tuple[GraphEntry, ...]
    missing: tuple[str, ...]  # "namespace/name" of named graphs that do not exist
    # on failure, the crashed containers' last lines (sinks.crashed_output); left out when there are none
    last_lines: tuple[LastLines, ...] = ()
    error: str | None = None  # unreachable: why, in the line stderr says it; left out otherwise


def describe(graph: GraphReadiness) -> str:
    """One line of where a graph stands: its verdict, state, components and why."""
    if not graph.found:
        return "not found"
    if graph.crash_looping:
        return f"{failing_word(graph)}: {crash_looping_summary(graph)}"
    state = graph.state or "no state yet"
    counts = f", components ready {graph.components_ready}/{graph.components}" if graph.components else ""
    why = f" ({graph.message})" if graph.message and graph.verdict != "ready" else ""
    stale = "" if graph.current else " (status behind the spec)"
    return f"{state}{stale}{counts}{why}"


class GraphWaiter:
    def __init__(
        self,
        targets: Sequence[GraphKey] | None,
        output: WaitOutput | str,
        out: BinaryIO,
        log: Callable[[str], None],
        stop: Callable[[], None],
        scope: str = "",
        once: bool = False,
        logs: LogReader | None = None,
        reach: Callable[[], str | None] = lambda: None,
        started: float | None = None,
    ) -> None:
        """`targets` None waits for every graph in scope (`--all`); `stop` ends the watches once decided;
        `once` gives up after the first look (`--timeout 0`); `reach` says why the API server cannot be
        reached now (None while it answers), asked when the input ends undecided; `started` is when the
        command started (time.monotonic), from which the elapsed time counts (default: now)."""
        self.once = once
        self.reach = reach
        self.error: str | None = None
        self.logs = logs
        self._decided: tuple[Result, list[GraphKey], list[GraphKey]] | None = None
        self.targets = list(targets) if targets is not None else None
        self.output = output
        self.out = out
        self.log = log
        self.stop = stop
        self.scope = scope
        self.result: Result | None = None
        self.graphs: dict[GraphKey, GraphReadiness] = {}
        self._shown: dict[GraphKey, str] = {}
        self._listed = False
        self._started = time.monotonic() if started is None else started

    async def run(self, receive: ObjectReceiveStream[list[Output]]) -> None:
        async with receive:
            async for batch in receive:
                if self.result is not None:
                    continue  # decided: drain what is still on its way
                for item in batch:
                    if isinstance(item, GraphReadiness):
                        self._see(item)
                    elif isinstance(item, Listed):
                        self._listed = True
                if self._listed:
                    self._decide()
                    if self.result is None and self.once:
                        self._finish("timeout", self._waited_for(), [])
                    await self._say()
        if self.result is None:
            self.error = self.reach()
            self._finish("unreachable" if self.error else "timeout", self._waited_for(), [])
            if self.error:
                self.log(f"{self.error}: giving up")
        await self._say()

    async def give_up(self, result: Literal["timeout", "unreachable"]) -> None:
        """The result of a wait that never got to list (the first contact failed, or the time ran out)."""
        self.error = self.reach() if result == "unreachable" else None
        self._finish(result, self._waited_for(), [])
        await self._say()

    def _waited_for(self) -> list[GraphKey]:
        return self.targets if self.targets is not None else sorted(self.graphs)

    def _see(self, graph: GraphReadiness) -> None:
        name = (graph.namespace, graph.graph)
        if graph.found:
            self.graphs[name] = graph
        else:
            self.graphs.pop(name, None)
        if self.targets is not None and name not in self.targets:
            return
        line = describe(graph)
        if self._shown.get(name) != line:
            self._shown[name] = line
            self.log(f"[{self._elapsed():6.1f}s] {name[0]}/{name[1]}: {line}")

    def _decide(self) -> None:
        names = self._waited_for()
        missing = [name for name in names if name not in self.graphs]
        if missing:  # the first decision comes right after the list: a name missing then does not exist
            for namespace, name in missing:
                self.log(f"dgd/{name} not found in namespace {namespace}")
            self._finish("not_found", names, missing)
            return
        if not names:
            self.log(f"no DynamoGraphDeployment found in {self.scope}")
            self._finish("not_found", names, [])
            return
        graphs = [self.graphs[name] for name in names]
        if any(graph.verdict == "failed" for graph in graphs):
            self._finish("failed", names, [])
        elif all(graph.verdict == "ready" for graph in graphs):
            self._finish("ready", names, [])

    def _finish(self, result: Result, names: list[GraphKey], missing: list[GraphKey]) -> None:
        self.result = result
        self._decided = (result, names, missing)

    async def _say(self) -> None:
        """The result on stdout (with the crashed containers' last lines on failure), then stop."""
        if self._decided is None:
            return
        result, names, missing = self._decided
        self._decided = None
        graphs = [self.graphs[name] for name in names if name in self.graphs]
        last = await self._last_lines(graphs) if result == "failed" else []
        if self.output in ("json", "yaml"):
            document = WaitResult(
                result=result,
                elapsed_seconds=round(self._elapsed(), 3),
                graphs=tuple(graph_entry(graph) for graph in graphs),
                missing=tuple(f"{ns}/{name}" for ns, name in missing),
                last_lines=tuple(last),
                error=self.error,
            )
            self.out.write(json_document(document) if self.output == "json" else yaml_document(document))
        elif self.output == "name":
            self.out.write("".join(f"{GRAPH_RESOURCE}/{g.graph}\n" for g in graphs if _about(g, result)).encode())
        else:
            lines = self._text_lines(result, graphs, names, missing)
            self.out.write("".join(printable(line) + "\n" for line in lines).encode())
            self.out.write(b"".join(text_block(read) for read in last))
        self.out.flush()
        self.stop()

    def _text_lines(
        self, result: Result, graphs: list[GraphReadiness], names: list[GraphKey], missing: list[GraphKey]
    ) -> list[str]:
        """The result as text: a line a graph (under a failed one, why), then those missing or unseen."""
        lines = [line for graph in graphs for line in (_result_line(graph, result), *_why(graph))]
        lines += [f"{ns}/{name}  NOT-FOUND" for ns, name in missing]
        if result in ("timeout", "unreachable"):  # graphs named but never seen: where they stand is not known
            unseen = "UNREACHABLE" if result == "unreachable" else "STILL-WAITING  not listed yet"
            lines += [f"{ns}/{name}  {unseen}" for ns, name in names if (ns, name) not in self.graphs]
        return lines

    async def _last_lines(self, graphs: list[GraphReadiness]) -> list[LastLines]:
        """The crashed containers' last lines, for a failure (none without a reader)."""
        last: list[LastLines] = []
        for graph in graphs if self.logs is not None else []:
            for looping in graph.crash_looping:
                finding = looping.finding
                if self.logs is not None and crashed(finding):
                    read = await self.logs.read(graph.namespace, finding.pod, finding.container)
                    if read is not None:
                        last.append(read)
        return last

    def _elapsed(self) -> float:
        return time.monotonic() - self._started


def _why(graph: GraphReadiness) -> list[str]:
    """Under a failed graph's line, first thing, why each failing component's container crashed, where its
    output said, and what fixes it."""
    lines = []
    for looping in graph.crash_looping:
        cause = looping.finding.cause
        if cause is not None and graph.verdict == "failed":
            lines.append(f"  why: {looping.component}: {cause.words()} ({cause.kind})")
            lines.append(f"  fix: {cause.hint}")
    return lines


def _about(graph: GraphReadiness, result: Result) -> bool:
    """Whether `-o name` names the graph: those the result is about (every graph when ready, the failed
    ones on failure, those not ready yet when the time ran out or the server went away)."""
    if result == "failed":
        return graph.verdict == "failed"
    if result in ("timeout", "unreachable"):
        return graph.verdict != "ready"
    return True


def _result_line(graph: GraphReadiness, result: Result) -> str:
    where = f"{graph.namespace}/{graph.graph}"
    if graph.verdict == "failed":
        return f"{where}  FAILED  {graph.reason}: {graph.message}"
    if graph.verdict == "ready":
        return f"{where}  READY  {graph.state} at generation {graph.generation}"
    still = "STILL-WAITING" if result in ("timeout", "unreachable") else "WAITING"
    return f"{where}  {still}  {describe(graph)}"
