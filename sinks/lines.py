"""The line formats that scripts parse: verdict changes as text, JSON lines or YAML documents, status
patches as JSON, and the graphs as `wait` and `get` report them.

These are public contracts (see docs/cli.md); field order is fixed by the Structs below.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from pipeline.causes import Cause
from pipeline.findings import CERTAIN_CRASH, OOM_KILLED, RESTART_LOOP, UNSCHEDULABLE, Finding
from pipeline.outputs import ComponentChange, GraphChange, GraphReadiness, StatusWanted
from sinks.text import printable, value


class ComponentLine(msgspec.Struct):
    kind: Literal["component"]
    time: str | None
    namespace: str
    graph: str
    component: str
    dcd: str | None
    crash_looping: bool
    pod: str | None
    container: str | None
    restarts: int | None
    exit_code: int | None
    message: str


class DiagnosisLine(ComponentLine):
    """A component with a diagnosis beside the crash loop (crash_looping is false): the component line's
    keys, then which diagnosis, the reason kubelet or the scheduler gave, its message, and for an OOM
    kill the container's memory limit."""

    diagnosis: str
    reason: str
    detail: str
    memory_limit: str | None


WORDS = {
    "certain_crash": "CRASHED",
    "oom_killed": "OOM-KILLED",
    "restart_loop": "RESTART-LOOPING",
    "image_pull_failing": "IMAGE-PULL-FAILING",
    "config_error": "CONFIG-ERROR",
    "unschedulable": "UNSCHEDULABLE",
}


class GraphLine(msgspec.Struct):
    kind: Literal["graph"]
    time: str | None
    namespace: str
    graph: str
    failed: bool
    reason: str | None
    components: tuple[str, ...]
    message: str


class PatchLine(msgspec.Struct):
    apiVersion: str
    kind: str
    namespace: str
    name: str
    patch: dict[str, object]


_encoder = msgspec.json.Encoder()


def json_line(change: ComponentChange | GraphChange) -> bytes:
    return _encoder.encode(_change_line(change)) + b"\n"


def yaml_line(change: ComponentChange | GraphChange) -> bytes:
    """A verdict change as one YAML document of a stream (`---` first, as `kubectl get -w -o yaml`): the
    JSON line's keys, in its order."""
    return b"---\n" + yaml_document(_change_line(change))


def _change_line(change: ComponentChange | GraphChange) -> ComponentLine | GraphLine | dict[str, object]:
    if isinstance(change, ComponentChange):
        line: ComponentLine | GraphLine | dict[str, object] = component_line(change)
    else:
        line = GraphLine(
            kind="graph",
            time=change.time,
            namespace=change.namespace,
            graph=change.graph,
            failed=change.failed,
            reason=change.reason,
            components=change.components,
            message=change.message,
        )
    return line


class CauseEntry(msgspec.Struct):
    """Why the container crashed, as JSON lines say it (what `crashwatch explain -o json` says, but the
    line, which stays with the container's output)."""

    cls: str = msgspec.field(name="class")
    certain: bool
    words: str
    hint: str
    fields: dict[str, str]


def cause_entry(cause: Cause) -> CauseEntry:
    return CauseEntry(cause.kind, cause.certain, cause.words(), cause.hint, dict(cause.fields))


def component_line(change: ComponentChange) -> ComponentLine | dict[str, object]:
    """The component's JSON line: its keys, then a diagnosis's, or a backend's own fields (a LeaderWorkerSet
    group loop's lws, group and recreations; the finding's other fields are then its last failure's), and
    last, where its output said why, the cause."""
    line = _component_line(change)
    finding = change.finding
    if finding is None or finding.cause is None:
        return line
    fields = line if isinstance(line, dict) else msgspec.structs.asdict(line)
    return fields | {"cause": cause_entry(finding.cause)}


def _component_line(change: ComponentChange) -> ComponentLine | dict[str, object]:
    finding = change.finding
    pod = finding.pod if finding else None
    container = finding.container if finding else None
    restarts = finding.restarts if finding else None
    exit_code = finding.exit_code if finding else None
    if finding is not None and finding.text:  # a group loop: a container's restarts say nothing of it
        restarts = None
        if not finding.container:  # a held loop whose words name no container
            pod = container = exit_code = None
    line = ComponentLine(
        kind="component",
        time=change.time,
        namespace=change.namespace,
        graph=change.graph,
        component=change.component,
        dcd=change.dcd,
        crash_looping=finding is not None,
        pod=pod,
        container=container,
        restarts=restarts,
        exit_code=exit_code,
        message=change.message,
    )
    if finding is not None and finding.diagnosis:
        fields = msgspec.structs.asdict(line)
        fields["crash_looping"] = False
        if not finding.container:  # an unschedulable Pod: no container, nothing restarted
            fields["container"] = fields["restarts"] = fields["exit_code"] = None
        return DiagnosisLine(
            **fields,
            diagnosis=finding.diagnosis,
            reason=finding.reason,
            detail=finding.detail,
            memory_limit=finding.memory_limit or None,
        )
    if finding is None or not finding.part:
        return line
    return msgspec.structs.asdict(line) | dict(finding.part)


def text_line(change: ComponentChange | GraphChange) -> bytes:
    """One line, whatever the names in it hold (sinks.text)."""
    return printable(_text_line(change)).encode() + b"\n"


def _text_line(change: ComponentChange | GraphChange) -> str:
    """The line's fields; every one that comes from the input is a `value` (quoted when it must be)."""
    when = value(change.time) if change.time else "-"
    if isinstance(change, ComponentChange):
        where = value(f"{change.namespace}/{change.graph}/{change.component}")
        finding = change.finding
        if finding is None:
            text = f"{when}  {where}  RECOVERED"
        elif finding.diagnosis:
            text = f"{when}  {where}  {WORDS.get(finding.diagnosis, 'FAILING')}  {_diagnosis_fields(finding)}"
            text += _cause_field(finding)
        elif finding.text and not finding.part:  # a loop whose words are all there is to say (from a status)
            text = f"{when}  {where}  CRASH-LOOPING  {value(finding.text)}"
        elif finding.part:  # a backend's own loop (a LeaderWorkerSet group's recreations)
            text = (
                f"{when}  {where}  CRASH-LOOPING  {_part_fields(finding)} pod={value(finding.pod)} "
                f"container={value(finding.container)} exit={finding.exit_code}"
            )
        else:
            text = (
                f"{when}  {where}  CRASH-LOOPING  pod={value(finding.pod)} container={value(finding.container)} "
                f"restarts={finding.restarts} exit={finding.exit_code}{_cause_field(finding)}"
            )
    else:
        where = value(f"{change.namespace}/{change.graph}")
        if change.failed:
            parts = [
                f"{value(name)} ({_counts(finding)})"
                for name, finding in zip(change.components, change.findings, strict=True)
            ]
            text = f"{when}  {where}  FAILED  {change.reason}: {', '.join(parts)}"
        else:
            text = f"{when}  {where}  RECOVERED"
    return text


def _diagnosis_fields(finding: Finding) -> str:
    """A diagnosis's key=value fields on a text line; the scheduler's message last (which resource is short)."""
    if finding.diagnosis == UNSCHEDULABLE:
        return f"pod={value(finding.pod)}" + (f" message={value(finding.detail)}" if finding.detail else "")
    fields = f"pod={value(finding.pod)} container={value(finding.container)} restarts={finding.restarts}"
    if finding.diagnosis == OOM_KILLED:
        return f"{fields} exit={finding.exit_code} reason=OOMKilled limit={value(finding.memory_limit or 'none')}"
    if finding.diagnosis == RESTART_LOOP or finding.diagnosis == CERTAIN_CRASH:
        return f"{fields} exit={finding.exit_code}"
    return f"{fields} reason={value(finding.reason)}"


def _cause_field(finding: Finding) -> str:
    return f" cause={finding.cause.kind}" if finding.cause is not None else ""


def _counts(finding: Finding) -> str:
    """What climbs while it crash-loops: a container's restarts, or a group's recreations; for another
    diagnosis, the reason kubelet or the scheduler gave; and why it crashed, where its output said."""
    return _climbing(finding) + _cause_field(finding)


def _climbing(finding: Finding) -> str:
    if finding.diagnosis:
        if finding.diagnosis == OOM_KILLED:
            return f"restarts={finding.restarts} OOMKilled limit={value(finding.memory_limit or 'none')}"
        if finding.diagnosis == RESTART_LOOP or finding.diagnosis == CERTAIN_CRASH:
            return f"restarts={finding.restarts} exit={finding.exit_code}"
        return value(finding.reason)
    if finding.part:  # what climbs is the backend's last field
        name, count = finding.part[-1]
        return f"{name}={_field(count)} exit={finding.exit_code}"
    if finding.text:
        return "group recreation loop"
    return f"restarts={finding.restarts} exit={finding.exit_code}"


def _part_fields(finding: Finding) -> str:
    return " ".join(f"{name}={_field(item)}" for name, item in finding.part)


def _field(item: str | int) -> str:
    return str(item) if type(item) is int else value(str(item))


def patch_line(wanted: StatusWanted) -> bytes:
    line = PatchLine(
        apiVersion=wanted.api_version,
        kind=wanted.kind,
        namespace=wanted.namespace,
        name=wanted.name,
        patch=wanted.patch(),
    )
    return _encoder.encode(line) + b"\n"


class CrashLoopingEntry(msgspec.Struct):
    component: str
    pod: str
    container: str
    restarts: int
    exit_code: int
    message: str


class DiagnosisEntry(CrashLoopingEntry):
    """A component with a diagnosis beside the crash loop: the entry's keys, then the diagnosis's."""

    diagnosis: str
    reason: str
    memory_limit: str | None


class GraphEntry(msgspec.Struct):
    namespace: str
    name: str
    found: bool
    state: str
    generation: int
    current: bool
    verdict: str
    reason: str
    message: str
    components_ready: int
    components: int
    not_ready: tuple[str, ...]
    crash_looping: tuple[CrashLoopingEntry | dict[str, object], ...]  # with its cause, where one was read


def graph_entry(graph: GraphReadiness) -> GraphEntry:
    return GraphEntry(
        namespace=graph.namespace,
        name=graph.graph,
        found=graph.found,
        state=graph.state,
        generation=graph.generation,
        current=graph.current,
        verdict=graph.verdict,
        reason=graph.reason,
        message=graph.message,
        components_ready=graph.components_ready,
        components=graph.components,
        not_ready=graph.not_ready,
        crash_looping=tuple(_entry(c.component, c.finding) for c in graph.crash_looping),
    )


def _entry(component: str, finding: Finding) -> CrashLoopingEntry | dict[str, object]:
    """A failing component's entry, and last, where its output said why, the cause."""
    entry = _plain_entry(component, finding)
    if finding.cause is None:
        return entry
    return msgspec.structs.asdict(entry) | {"cause": cause_entry(finding.cause)}


def _plain_entry(component: str, finding: Finding) -> CrashLoopingEntry:
    entry = CrashLoopingEntry(
        component=component,
        pod=finding.pod,
        container=finding.container,
        restarts=finding.restarts,
        exit_code=finding.exit_code,
        message=finding.describe(),
    )
    if not finding.diagnosis:
        return entry
    return DiagnosisEntry(
        **msgspec.structs.asdict(entry),
        diagnosis=finding.diagnosis,
        reason=finding.reason,
        memory_limit=finding.memory_limit or None,
    )


def json_document(document: object) -> bytes:
    return _encoder.encode(document) + b"\n"


def yaml_document(document: object) -> bytes:
    """A document as YAML, its keys in the order of its JSON form."""
    return msgspec.yaml.encode(document)


# how `kubectl get -o name` names a DynamoGraphDeployment, and so `get` and `wait` with `-o name`
GRAPH_RESOURCE = "dynamographdeployment.nvidia.com"


def failing_word(graph: GraphReadiness) -> str:
    """What a graph's failing components show: `crash-looping` (all crash loops), the one diagnosis
    they share (`image-pull-failing` ...), or `failing` for several."""
    kinds = {c.finding.diagnosis for c in graph.crash_looping}
    if len(kinds) != 1:
        return "failing"
    kind = kinds.pop()
    return WORDS[kind].lower() if kind in WORDS else "crash-looping"


def crash_looping_summary(graph: GraphReadiness, wide: bool = False) -> str:
    """`worker (restarts=3 exit=1)`, or with `wide` the Pod and container too; another diagnosis gives
    its reason (`worker (ImagePullBackOff)`)."""
    parts = []
    for c in graph.crash_looping:
        f = c.finding
        where = f"pod={f.pod} " + (f"container={f.container} " if f.container else "") if wide else ""
        parts.append(f"{c.component} ({where}{_counts(f)})")
    return ", ".join(parts)
