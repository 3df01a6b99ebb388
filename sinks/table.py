"""The sink of `crashwatch get`: one snapshot of the graphs, as a table like `kubectl get` prints (with or
without its header row), as JSON or YAML, or as the graphs' names (`-o name`).

It waits for the end of the first list (`Listed`; or of the second, when the crashed runs' outputs are read
for their causes first: crashwatch.live), prints what the pipeline says of every graph then, and asks for
the watches to stop: a snapshot, not a stream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import BinaryIO, Literal

import msgspec
from anyio.abc import ObjectReceiveStream

from pipeline.outputs import GraphReadiness, Listed, Output
from pipeline.views import GraphKey
from sinks.crashed_output import LogReader, crashed, text_block
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

View = Literal["table", "wide", "json", "yaml", "name"]


class GraphList(msgspec.Struct):
    items: tuple[GraphEntry, ...]
    missing: tuple[str, ...]


def verdict_word(graph: GraphReadiness) -> str:
    if graph.crash_looping:
        return failing_word(graph)
    return graph.verdict


def render_table(graphs: Sequence[GraphReadiness], namespaces: bool, wide: bool, headers: bool = True) -> str:
    """Columns padded to their widest cell, two spaces apart, as kubectl does (its `--no-headers`: the
    columns as wide as the cells alone, no header row)."""
    header = ["NAME", "STATE", "VERDICT", "READY", "CRASH-LOOPING"]
    if wide:
        header.append("MESSAGE")
    if namespaces:
        header.insert(0, "NAMESPACE")
    rows = [header] if headers else []
    for graph in graphs:
        row = [
            graph.graph,
            graph.state or "<none>",
            verdict_word(graph),
            f"{graph.components_ready}/{graph.components}",
            crash_looping_summary(graph, wide) or "<none>",
        ]
        if wide:
            row.append(graph.message if graph.verdict != "ready" else "")
        if namespaces:
            row.insert(0, graph.namespace)
        rows.append([printable(cell) for cell in row])
    widths = [max((len(row[i]) for row in rows), default=0) for i in range(len(header))]
    lines = ("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)
    return "".join(line + "\n" for line in lines)


class GraphTable:
    def __init__(
        self,
        targets: Sequence[GraphKey] | None,
        output: View | str,
        namespaces: bool,
        out: BinaryIO,
        log: Callable[[str], None],
        stop: Callable[[], None],
        logs: LogReader | None = None,
        prints_at: int = 1,
        headers: bool = True,
    ) -> None:
        """`targets` None shows every graph in scope; `namespaces` adds the NAMESPACE column (`-A`); `logs`
        (with `-o wide`) adds the crashed containers' last lines under the table; `prints_at` is the end of
        the list (`Listed`) to print at: the second when the pipeline syncs again once the outputs of the
        crashes listed were read, for their causes; `headers` False leaves out its header row."""
        self.logs = logs
        self.prints_at = prints_at
        self.headers = headers
        self.targets = targets
        self.output = output
        self.namespaces = namespaces
        self.out = out
        self.log = log
        self.stop = stop
        self.missing: list[GraphKey] | None = None  # set once printed
        self._graphs: dict[GraphKey, GraphReadiness] = {}

    async def run(self, receive: ObjectReceiveStream[list[Output]]) -> None:
        async with receive:
            async for batch in receive:
                if self.missing is not None:
                    continue
                for item in batch:
                    if isinstance(item, GraphReadiness):
                        self._graphs[(item.namespace, item.graph)] = item
                    elif isinstance(item, Listed):
                        self.prints_at -= 1
                        if self.prints_at > 0:
                            continue
                        shown = self._print()
                        if self.output == "wide" and self.logs is not None:
                            await self._last_lines(shown)
                        self.stop()
                        break

    async def _last_lines(self, graphs: list[GraphReadiness]) -> None:
        blocks = b""
        for graph in graphs:
            for looping in graph.crash_looping:
                finding = looping.finding
                if self.logs is not None and crashed(finding):
                    read = await self.logs.read(graph.namespace, finding.pod, finding.container)
                    if read is not None:
                        blocks += text_block(read)
        if blocks:
            self.out.write(b"\n" + blocks)
            self.out.flush()

    def _print(self) -> list[GraphReadiness]:
        found = {name: graph for name, graph in self._graphs.items() if graph.found}
        names = list(self.targets) if self.targets is not None else sorted(found)
        self.missing = [name for name in names if name not in found]
        for namespace, name in self.missing:
            self.log(f"dgd/{name} not found in namespace {namespace}")
        graphs = [found[name] for name in names if name in found]
        if self.output in ("json", "yaml"):
            document = GraphList(
                items=tuple(graph_entry(g) for g in graphs), missing=tuple(f"{ns}/{n}" for ns, n in self.missing)
            )
            self.out.write(json_document(document) if self.output == "json" else yaml_document(document))
        elif self.output == "name":
            self.out.write("".join(f"{GRAPH_RESOURCE}/{graph.graph}\n" for graph in graphs).encode())
        elif graphs:
            table = render_table(graphs, self.namespaces, self.output == "wide", self.headers)
            self.out.write(table.encode())
        elif self.targets is None:
            self.log("no DynamoGraphDeployment found")
        self.out.flush()
        return graphs
