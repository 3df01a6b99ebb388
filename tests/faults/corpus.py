"""A corpus of hostile and broken logs, made at test time (tests/faults/test_hostile_logs.py runs it).

Each case is a log that breaks something (a record far too long, a billion laughs, a stray first line,
damaged compression, UTF-16, nulls, nameless objects ...), the good records it holds (as a clean JSON-lines
log, whose verdicts the broken one must give too), the bad records replay must report (one pattern per
stderr line, in order), and how much more memory than the clean replay it may take. Logs are written into
a folder the test gives, one case at a time, and are at most a few hundred MB, mostly zeros or one
repeated byte that compress to nothing; a record too long to be written to disk is fed through a pipe.
"""

from __future__ import annotations

import bz2
import copy
import dataclasses
import gzip
import json
import lzma
import random
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cli import EXAMPLES

GOOD_LOG = EXAMPLES / "rollout-recovers.jsonl"
GOOD: list[bytes] = GOOD_LOG.read_bytes().splitlines()
EVENTS: list[dict[str, Any]] = [json.loads(line) for line in GOOD]
MiB = 1 << 20
SMALL = ("--max-record-size", "1Mi")  # so that a record "too long" need not be huge


def jsonl(lines: list[bytes]) -> bytes:
    return b"".join(line + b"\n" for line in lines)


def pretty(events: list[dict[str, Any]]) -> bytes:
    """kubectl's --output-watch-events -o json: indented objects back to back, braces at column 0."""
    return "".join(json.dumps(event, indent=4) + "\n" for event in events).encode()


def yaml_log(events: list[dict[str, Any]]) -> bytes:
    return "".join("---\n" + yaml.safe_dump(event, sort_keys=False) for event in events).encode()


def event(**obj: Any) -> bytes:
    return json.dumps({"type": "ADDED", "object": obj}).encode()


def huge_record(size: int) -> Iterator[bytes]:
    """A watch event `size` bytes long that would read fine (a long annotation), in pieces."""
    head = b'{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"big","namespace":"dynamo","annotations":{"a":"'
    tail = b'"}}}}'
    yield head
    left = size - len(head) - len(tail)
    while left > 0:
        piece = min(left, 4 * MiB)
        yield b"x" * piece
        left -= piece
    yield tail


Feed = Callable[[], Iterator[bytes]]


@dataclass
class Log:
    """A case's log: a file, or (`feed`) bytes written into replay's stdin through a pipe."""

    path: Path | None = None
    feed: Feed | None = None


@dataclass
class Case:
    name: str
    make: Callable[[Path], Log]
    problems: list[str] = field(default_factory=list)  # regexes, one per bad record's stderr line
    clean: list[bytes] | None = field(default_factory=lambda: GOOD)  # its good records, as JSON lines
    args: tuple[str, ...] = ()
    stdin: bool = False  # the file is given as `replay -` with stdin redirected from it
    exit: int | None = None  # default: 65 when there are problems, else 0
    rss_mb: int = 40  # how much more than the clean replay's peak RSS it may take
    stderr: str | None = None  # the whole of stderr, when it is no list of bad records

    @property
    def exit_code(self) -> int:
        if self.exit is not None:
            return self.exit
        return 65 if self.problems else 0


def _file(name: str, data: bytes | Callable[[], bytes | Iterator[bytes]]) -> Callable[[Path], Log]:
    def make(folder: Path) -> Log:
        path = folder / name
        content = data() if callable(data) else data
        with path.open("wb") as f:
            if isinstance(content, bytes):
                f.write(content)
            else:
                for piece in content:
                    f.write(piece)
        return Log(path=path)

    return make


def _pipe(feed: Feed) -> Callable[[Path], Log]:
    return lambda folder: Log(feed=feed)


def _gzip_stream(pieces: Iterator[bytes]) -> bytes:
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)
    return b"".join([*(compressor.compress(piece) for piece in pieces), compressor.flush()])


def _with(at: int, *extra: bytes) -> list[bytes]:
    return [*GOOD[:at], *extra, *GOOD[at:]]


# --- memory bounded by design ----------------------------------------------------------------------------

HUGE_FILE = 96 * MiB  # on disk, as a plain (mapped) file
HUGE_STREAM = 256 * MiB  # through a pipe or gzip: never on disk uncompressed
_TOO_LONG = r"record is [\d,]+ bytes, more than the limit of 1Mi \(--max-record-size\): skipped"


def _huge_file() -> Iterator[bytes]:
    yield jsonl(GOOD[:12])
    yield from huge_record(HUGE_FILE)
    yield b"\n" + jsonl(GOOD[12:])


def _huge_stream() -> Iterator[bytes]:
    yield jsonl(GOOD[:12])
    yield from huge_record(HUGE_STREAM)
    yield b"\n" + jsonl(GOOD[12:])


def _unclosed_pretty() -> bytes:
    """kubectl output whose fourth record runs on for 2 MiB of indented lines."""
    text = pretty(EVENTS).decode().splitlines(keepends=True)
    starts = [n for n, line in enumerate(text) if line == "{\n"]
    filler = '    "x": "' + "y" * 1000 + '",\n'
    return ("".join(text[: starts[3] + 1]) + filler * 2100 + "".join(text[starts[3] + 1 :])).encode()


def _big_yaml_document() -> bytes:
    docs = yaml_log(EVENTS).decode().split("---\n")
    big = "---\ntype: ADDED\nobject:\n  kind: Service\n  data:\n" + "".join(f"  - {'z' * 1000}\n" for _ in range(2100))
    return ("---\n".join(docs[:5]) + big + "---\n" + "---\n".join(docs[5:])).encode()


_LAUGHS = "".join(f"  l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]\n" for n in range(1, 10))


def _billion_laughs(shape: str) -> bytes:
    """The "billion laughs": nine anchors of nine aliases each, 370 bytes that stand for 9**9 strings."""
    laughs = '---\nx:\n  l0: &l0 "lol"\n' + _LAUGHS
    if shape == "type":  # quoted in the message for an unknown event type
        laughs += "type: *l9\nobject: {kind: Service, metadata: {name: s}}\n"
    else:  # converted into a Pod's labels
        laughs += "type: ADDED\nobject: {kind: Pod, metadata: {name: p, namespace: dynamo, labels: {a: *l9}}}\n"
    docs = yaml_log(EVENTS).decode().split("---\n")
    return ("---\n".join(docs[:7]) + laughs + "---\n" + "---\n".join(docs[7:])).encode()


def _deep_json() -> bytes:
    return jsonl(_with(5, b'{"type":"ADDED","object":' + b"[" * 100_000 + b"]" * 100_000 + b"}"))


def _deep_yaml() -> bytes:
    docs = yaml_log(EVENTS).decode().split("---\n")
    deep = "---\ntype: ADDED\nobject: " + "[" * 100_000 + "]" * 100_000 + "\n"
    return ("---\n".join(docs[:5]) + deep + "---\n" + "---\n".join(docs[5:])).encode()


MEMORY = [
    Case("a record too long, in a plain file", _file("log.jsonl", _huge_file), [rf":13: {_TOO_LONG}"], args=SMALL),
    Case("a record too long, through a pipe", _pipe(_huge_stream), [rf"<stdin>:13: {_TOO_LONG}"], args=SMALL),
    Case(
        "a record too long, gzip-compressed",
        _file("log.jsonl.gz", lambda: _gzip_stream(_huge_stream())),
        [rf":13: {_TOO_LONG}"],
        args=SMALL,
    ),
    Case(
        "a record too long, on stdin from a file, by worker processes",
        _file("log.jsonl", _huge_file),
        [rf"<stdin>:13: {_TOO_LONG}"],
        args=(*SMALL, "-j", "2"),
        stdin=True,
    ),
    Case(
        "a pretty-printed record too long",
        _file("kubectl.json", _unclosed_pretty),
        [r":\d+: record is longer than the limit of 1Mi \(--max-record-size\): skipped"],
        clean=[*GOOD[:3], *GOOD[4:]],
        args=SMALL,
    ),
    Case(
        "a YAML document too long",
        _file("log.yaml", _big_yaml_document),
        [r": document 5: document is [\d,]+ bytes, more than the limit of 1Mi \(--max-record-size\): skipped"],
        args=SMALL,
    ),
    Case(
        "a billion laughs quoted in a message",
        _file("laughs.yaml", lambda: _billion_laughs("type")),
        [r": document 7: document is too large once its aliases are expanded \(more than 2,097,152 bytes\)"],
        args=SMALL,
    ),
    Case(
        "a billion laughs in a Pod's labels, at the default limit",
        _file("laughs.yaml", lambda: _billion_laughs("labels")),
        [r": document 7: document is too large once its aliases are expanded \(more than 33,554,432 bytes\)"],
        rss_mb=120,
    ),
    Case("JSON nested 100,000 deep", _file("deep.jsonl", _deep_json), [r":6: nested too deeply to read"]),
    Case(
        "YAML nested 100,000 deep",
        _file("deep.yaml", _deep_yaml),
        [r":\d+: not valid YAML \(exceeded maximum nesting depth\); skipped up to the next `---`"],
    ),
    Case(
        "a 10 MB event type is quoted in a few words",
        _file("type.jsonl", lambda: jsonl(_with(3, b'{"type":"' + b"A" * 10_000_000 + b'","object":{"kind":"Pod"}}'))),
        [r":4: wrong field: Invalid enum value 'AAAA.*characters left out.* - at `\$\.type`"],
    ),
    Case(
        "a 10 MB event type of a kind not read",
        _file(
            "type.jsonl", lambda: jsonl(_with(3, b'{"type":"' + b"B" * 10_000_000 + b'","object":{"kind":"Service"}}'))
        ),
        [r":4: unknown event type 'BBBB.*\(9,999,920 more characters\)"],
    ),
]


# --- one bad record costs one record ---------------------------------------------------------------------

WARNING = b"Warning: v1 ComponentStatus is deprecated in v1.19+"
KLOG = b"W1203 12:00:00.000000   12345 warnings.go:70] the server could not find the requested resource"
NOT_JSON = r"not valid JSON \(JSON is malformed: invalid character \(byte 0\)\)"
BOM = b"\xef\xbb\xbf"


def _filler(count: int) -> list[bytes]:
    """Events of a Pod crashwatch does not diagnose, each with 3 KB of noise that does not compress."""
    noise = random.Random(7)
    return [
        event(
            kind="Pod",
            metadata={"name": f"other-{n}", "namespace": "x", "annotations": {"a": noise.randbytes(1536).hex()}},
        )
        for n in range(count)
    ]


def _gzip_cut() -> tuple[bytes, list[bytes]]:
    """A gzip log cut in the middle of its compressed data, after the crash loop and 3 MB of other events,
    and the lines that come out whole before the cut."""
    lines = [*GOOD, *_filler(2000)]
    data = gzip.compress(jsonl(lines), mtime=0)
    cut = data[: len(data) // 2]
    whole = zlib.decompressobj(31).decompress(cut)
    return cut, whole.split(b"\n")[:-1]


def _pretty_cut_first() -> bytes:
    text = pretty(EVENTS)
    return b"\n".join(text.split(b"\n")[:9]) + b"\n" + text


def _mixed_pretty_and_lines() -> bytes:
    """JSON lines and kubectl's pretty output in one log (two recordings appended to one file)."""
    return jsonl(GOOD[:8]) + pretty(EVENTS[8:16]) + jsonl(GOOD[16:])


def _yaml_broken_document() -> bytes:
    docs = yaml_log(EVENTS).decode().split("---\n")
    docs[6] = docs[6].replace("metadata:", "metadata: [unclosed", 1)
    return "---\n".join(docs).encode()


ONE_COSTS_ONE = [
    Case(
        "a kubectl warning before JSON lines, on a pipe",
        _pipe(lambda: iter([WARNING + b"\n" + jsonl(GOOD)])),
        [rf"<stdin>:1: {NOT_JSON}"],
    ),
    Case(
        "a kubectl warning before JSON lines, on stdin from a file",
        _file("log", WARNING + b"\n" + jsonl(GOOD)),
        [rf"<stdin>:1: {NOT_JSON}"],
        stdin=True,
    ),
    Case(
        "a klog line before kubectl's pretty output", _file("log", KLOG + b"\n" + pretty(EVENTS)), [rf":1: {NOT_JSON}"]
    ),
    Case(
        "a kubectl warning before YAML",
        _file("log", WARNING + b"\n" + yaml_log(EVENTS)),
        [r":1: not YAML of watch events or objects \(a stray line\?\): 'Warning: v1 ComponentStatus"],
    ),
    Case(
        "a kubectl warning before one bare YAML document",
        _file("log", WARNING + b"\n" + yaml.safe_dump(EVENTS[0], sort_keys=False).encode()),
        [r":1: not YAML of watch events or objects \(a stray line\?\): 'Warning"],
        clean=GOOD[:1],
    ),
    Case("a UTF-8 byte order mark before JSON lines", _file("log", BOM + jsonl(GOOD)), stdin=True),
    Case("a UTF-8 byte order mark before kubectl's pretty output", _file("log.json", BOM + pretty(EVENTS))),
    Case("a UTF-8 byte order mark before YAML", _pipe(lambda: iter([BOM + yaml_log(EVENTS)]))),
    Case(
        "JSON lines whose first record is cut short",
        _file("log", jsonl([GOOD[0][:60], *GOOD[1:]])),
        [r":1: record is cut short \(truncated JSON\)"],
        clean=GOOD[1:],
    ),
    Case(
        "JSON lines whose first record lost its beginning (tail -c)",
        _file("log", jsonl([GOOD[0][-200:], *GOOD[1:]])),
        [r":1: not valid JSON"],
        clean=GOOD[1:],
    ),
    Case(
        "JSON lines whose first record is a lone `{`",
        _file("log", jsonl([b"{", *GOOD])),
        [r":1: record is cut short \(a new one starts at line 2 before it closes\)"],
    ),
    Case(
        "kubectl's pretty output whose first record is cut short",
        _file("kubectl.json", _pretty_cut_first),
        [r":1: record is cut short \(a new one starts at line 10 before it closes\)"],
    ),
    Case(
        "a stray line inside kubectl's pretty output",
        _file("kubectl.json", lambda: pretty(EVENTS[:5]) + b'    "kind": "Pod",\n' + KLOG + b"\n" + pretty(EVENTS[5:])),
        [r":\d+: not valid JSON", rf":\d+: {NOT_JSON}"],
    ),
    Case("JSON lines and pretty records in one log", _file("mixed.json", _mixed_pretty_and_lines)),
    Case(
        "a multi-document YAML log with one broken document",
        _file("log.yaml", _yaml_broken_document),
        [r":\d+: not valid YAML \(did not find expected ',' or '\]'\); skipped up to the next `---`"],
        clean=[*GOOD[:5], *GOOD[6:]],
    ),
    Case(
        "a truncated gzip log keeps what came before the damage",
        _file("log.jsonl.gz", lambda: _gzip_cut()[0]),
        [r":\d+: cannot read further: compressed data ends early \(truncated gzip\)"],
        clean=_gzip_cut()[1],
    ),
    Case(
        "a gzip log with trailing garbage",
        _file("log.jsonl.gz", lambda: gzip.compress(jsonl(GOOD)) + b"this is no gzip"),
        [r":25: cannot read further: compressed data is followed by something that is not gzip \(trailing garbage\)"],
    ),
    Case(
        "a gzip log that is only a header",
        _file("log.jsonl.gz", lambda: gzip.compress(jsonl(GOOD))[:10]),
        [r":1: cannot read further: compressed data ends early \(truncated gzip\)"],
        clean=None,
    ),
    Case(
        "gzip members back to back",
        _file("log.gz", lambda: gzip.compress(jsonl(GOOD[:9])) + gzip.compress(jsonl(GOOD[9:]))),
    ),
    Case("a bzip2 log", _file("log.bz2", lambda: bz2.compress(jsonl(GOOD)))),
    Case("an xz log", _file("log.xz", lambda: lzma.compress(jsonl(GOOD)))),
    Case(
        "a truncated xz log",
        _file("log.xz", lambda: lzma.compress(jsonl(GOOD))[:-20]),
        [r":25: cannot read further: compressed data ends early \(truncated xz\)"],
    ),
    Case(
        "a zstd log is named, not read",
        _file("log.zst", b"\x28\xb5\x2f\xfd\x04\x58" + b"\x00" * 40),
        exit=66,
        clean=None,
        stderr="crashwatch: {path}: compressed with zstd, which crashwatch does not read: decompress it first\n",
    ),
    Case("YAML in a file named .log", _file("events.log", yaml_log(EVENTS))),
    Case("JSON lines in a file named .yaml", _file("events.yaml", jsonl(GOOD))),
    Case("kubectl's pretty output in a file named .yml", _file("events.yml", pretty(EVENTS))),
]


# --- messages name the real problem ----------------------------------------------------------------------


def _nulls(event: dict[str, Any]) -> dict[str, Any]:
    """The same event with `null` wherever Kubernetes allows an absent field that is absent or empty."""
    event = copy.deepcopy(event)
    obj = event["object"]
    meta = obj["metadata"]
    for key in ("ownerReferences", "labels", "annotations", "finalizers"):
        if not meta.get(key):
            meta[key] = None
    status = obj.setdefault("status", {})
    for key in ("conditions", "containerStatuses", "initContainerStatuses"):
        if not status.get(key):
            status[key] = None
    selector = obj.get("spec", {}).get("selector")
    if isinstance(selector, dict) and not selector.get("matchExpressions"):
        selector["matchExpressions"] = None
    meta["deletionTimestamp"] = meta.get("deletionTimestamp")
    return event


def _with_label_null(event: dict[str, Any]) -> dict[str, Any]:
    event = copy.deepcopy(event)
    event["object"]["metadata"].setdefault("labels", {})["example.com/unset"] = None
    return event


def _nameless() -> bytes:
    labels = {"nvidia.com/dynamo-graph-deployment-name": "llm", "nvidia.com/dynamo-component": "VllmWorker"}
    crashing = {
        "containerStatuses": [
            {"name": "main", "restartCount": 9, "state": {"waiting": {}}, "lastState": {"terminated": {"exitCode": 1}}}
        ]
    }
    bad = [
        event(kind="Pod", metadata={"namespace": "dynamo", "labels": labels}, status=crashing),
        event(kind="Pod", metadata={"name": "p", "labels": labels}, status=crashing),
        event(kind="Pod", metadata={"name": "", "namespace": "dynamo", "labels": labels}, status=crashing),
        event(kind="DynamoGraphDeployment", metadata={"namespace": "dynamo"}),
        event(kind="DynamoComponentDeployment", metadata={"name": "x"}),
        event(kind="Deployment", metadata={"namespace": "dynamo"}),
        json.dumps({"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "9"}}}).encode(),
    ]
    return jsonl(_with(12, *bad))


MESSAGES = [
    Case("UTF-16 with a byte order mark (PowerShell's >)", _file("log.jsonl", jsonl(GOOD).decode().encode("utf-16"))),
    Case("UTF-16 big-endian without one", _file("log.jsonl", jsonl(GOOD).decode().encode("utf-16-be")), stdin=True),
    Case("UTF-32", _pipe(lambda: iter([pretty(EVENTS).decode().encode("utf-32")]))),
    Case(
        "a lone surrogate is not a cut record",
        _file(
            "log.jsonl",
            jsonl(_with(3, b'{"type":"ADDED","object":{"kind":"Pod","metadata":{"namespace":"n","name":"p\\ud800"}}}')),
        ),
        [r":4: not valid JSON \(a \\u escape is half a UTF-16 surrogate pair\)"],
    ),
    Case(
        "a wrong field on a complete last line without newline",
        _file(
            "log.jsonl",
            lambda: jsonl(GOOD) + event(kind="Pod", metadata={"name": "p", "namespace": "n"}, status={"phase": 5}),
        ),
        [r":25: wrong field: Expected `str`, got `int` - at `\$\.object\.status\.phase`"],
    ),
    Case(
        "a bare object of a kind not read",
        _file(
            "svc.json",
            lambda: json.dumps(
                {"kind": "Service", "apiVersion": "v1", "metadata": {"name": "s", "namespace": "n"}}, indent=4
            ).encode(),
        ),
        clean=None,
    ),
    Case(
        "events of kinds not read among JSON lines",
        _file("log.jsonl", jsonl(_with(4, event(kind="Service", metadata={"name": "s"}), event(kind="ConfigMap")))),
    ),
    Case(
        "a log that is only an API error",
        _file(
            "log.json",
            json.dumps(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": 'pods is forbidden: User "x" cannot list resource "pods"',
                    "reason": "Forbidden",
                    "code": 403,
                }
            ).encode(),
        ),
        [
            r":1: an error from the API server, not watch events "
            r"\(403 Forbidden: pods is forbidden: User \"x\" cannot list resource \"pods\"\)"
        ],
        clean=None,
    ),
    Case(
        "null where Kubernetes allows an absent field",
        _file("log.jsonl", lambda: jsonl([json.dumps(_nulls(e)).encode() for e in EVENTS])),
    ),
    Case("null in YAML", _file("log.yaml", lambda: yaml_log([_nulls(e) for e in EVENTS]))),
    Case(
        "null in a List's items",
        _file(
            "pods.json",
            lambda: json.dumps({"kind": "List", "items": [_nulls(e)["object"] for e in EVENTS[:9]]}).encode(),
        ),
        clean=[json.dumps({"type": "ADDED", "object": e["object"]}).encode() for e in EVENTS[:9]],
    ),
    Case(
        "null as a label's value, and as an array's item",
        _file(
            "log.jsonl",
            lambda: jsonl(
                [
                    *GOOD[:12],
                    json.dumps(_with_label_null(EVENTS[12])).encode(),
                    event(kind="Pod", metadata={"name": "q", "namespace": "n"}, status={"conditions": [None]}),
                    *GOOD[13:],
                ]
            ),
        ),
        [r":14: wrong field: Expected `object`, got `null` - at `\$\.object\.status\.conditions\[0\]`"],
    ),
    Case(
        "objects without a name or namespace",
        _file("log.jsonl", _nameless),
        [
            r":13: Pod without metadata\.name",
            r":14: Pod 'p' without metadata\.namespace",
            r":15: Pod without metadata\.name",
            r":16: DynamoGraphDeployment without metadata\.name",
            r":17: DynamoComponentDeployment 'x' without metadata\.namespace",
            r":18: Deployment without metadata\.name",
        ],
    ),
]


def _by_workers(case: Case) -> Case:
    """The same case decoded by worker processes (-j 2): they must say what the serial reader says."""
    return dataclasses.replace(case, name=f"{case.name}, by worker processes", args=(*case.args, "-j", "2"))


_PLAIN_JSON_LINES = {
    "a 10 MB event type is quoted in a few words",
    "JSON nested 100,000 deep",
    "JSON lines whose first record is a lone `{`",
    "JSON lines and pretty records in one log",
    "a lone surrogate is not a cut record",
    "a wrong field on a complete last line without newline",
    "null where Kubernetes allows an absent field",
    "objects without a name or namespace",
}
BY_WORKERS = [_by_workers(case) for case in [*MEMORY, *ONE_COSTS_ONE, *MESSAGES] if case.name in _PLAIN_JSON_LINES]
assert len(BY_WORKERS) == len(_PLAIN_JSON_LINES)

CASES = [*MEMORY, *ONE_COSTS_ONE, *MESSAGES, *BY_WORKERS]
