"""Decoding one record (a watch event, a List, or a bare object) into `WatchEvent`s.

Live watch lines, JSON-lines logs, kubectl's pretty-printed output and YAML documents all end here, so a
record means the same thing wherever it came from. The fast path is one typed msgspec pass over a watch
event whose object kind we know; anything else takes a slower, generic path that classifies the record,
skips kinds crashwatch does not read, reads `null` as an absent field (as the API server and Go clients
do), and explains what is wrong with a bad one. A YAML document is first turned into the JSON record it
stands for (`yaml_documents`), within a bound on its size once aliases are expanded.

Messages quote the input only in short pieces: a record may be megabytes long.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import msgspec
import yaml

from stream.model import kinds
from stream.model.crash_record import CRASH_OUTPUT, crash_output_of
from stream.model.events import CrashOutput, WatchEvent
from stream.model.objects import KINDS, KubeObject, Pod, Status, own_labels


class RecordProblem(Exception):
    """Raised for a record that cannot be read; the message says what is wrong, without the place.

    `cut` marks a record that ends before it closes (what a killed writer leaves)."""

    def __init__(self, message: str, cut: bool = False) -> None:
        super().__init__(message)
        self.cut = cut


_event_decoder = msgspec.json.Decoder(WatchEvent)
# The typed decode on its own, as the live watch uses it: raises msgspec's errors.
decode_event = _event_decoder.decode
_object_decoder = msgspec.json.Decoder(KubeObject)


class _Nameless(msgspec.ValidationError):
    """An object that would be diagnosed under an empty name or namespace: the slow path says which."""


_decode = _event_decoder.decode


def read_event(data: Any) -> WatchEvent:
    """The fast path of a log reader: one typed decode, and the event's object must be named. A Pod's
    label text is a view into `data` (see PodMeta): a caller that holds the event longer than `data`
    would live gives it a copy (`own_labels`).

    Raises one of `FAST_ERRORS` for anything else; `decode_json` then classifies the record and says
    what is wrong with it."""
    event = _decode(data)
    obj = event.object
    if type(obj) is Status:  # it has no name
        return event
    meta = obj.metadata
    if (meta.name and meta.namespace) or event.type == "BOOKMARK" or event.type == "ERROR":
        return event
    raise _Nameless


# What the fast path raises for a record it cannot take (msgspec follows Python's recursion limit).
FAST_ERRORS = (msgspec.ValidationError, msgspec.DecodeError, RecursionError)


class _ListEnvelope(msgspec.Struct):
    kind: str
    items: list[msgspec.Raw]


_list_decoder = msgspec.json.Decoder(_ListEnvelope)

# A decoded record: the events it holds (a crashed run's output is one: stream.model.crash_record), and
# the problems of any List items that could not be read.
Decoded = tuple[list[WatchEvent | CrashOutput], list[str]]

TOO_DEEP = "nested too deeply to read"


def decode_json(data: bytes, namespace: str = "") -> Decoded:
    """Decode one JSON record. Raises RecordProblem when the whole record is unusable.

    `namespace` is where a manifest's object without `metadata.namespace` (a bare object, a List item)
    goes, as `kubectl apply -f` puts it (`default`, or `-n`); empty, such an object is a bad record. A
    watch event always names its object's namespace: one that does not is a bad record either way."""
    try:
        return _decode_json(data, namespace)
    except RecursionError:
        raise RecordProblem(TOO_DEEP) from None


def _decode_json(data: bytes, namespace: str) -> Decoded:
    nulls = False
    try:
        event = _event_decoder.decode(data)
    except msgspec.ValidationError as exc:
        nulls = "got `null`" in str(exc)  # then it is a watch event, not a List
    except msgspec.DecodeError as exc:
        raise _json_problem(exc, data) from None
    else:
        problem = unnamed(event)
        if problem is not None:
            raise RecordProblem(problem)
        return [event], []
    envelope = None
    if not nulls:
        with contextlib.suppress(msgspec.ValidationError, msgspec.DecodeError):
            envelope = _list_decoder.decode(data)
    if envelope is not None and envelope.kind.endswith("List"):
        return _list_items_json(envelope, namespace)
    try:
        value = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise _json_problem(exc, data) from None
    return from_value(value, namespace)


def unnamed(event: WatchEvent) -> str | None:
    """Why an event cannot be diagnosed: its object has no name or namespace (None when it is fine).

    Every kind crashwatch reads is namespaced; BOOKMARK and ERROR events carry no named object."""
    obj = event.object
    if isinstance(obj, Status) or event.type in ("BOOKMARK", "ERROR"):
        return None
    meta = obj.metadata
    kind = type(obj).__struct_config__.tag
    if not meta.name:
        return f"{kind} without metadata.name"
    if not meta.namespace:
        return f"{kind} {_short(meta.name)} without metadata.namespace"
    return None


def in_namespace(event: WatchEvent, namespace: str) -> WatchEvent:
    """A manifest's object without a namespace, put in `namespace` (as kubectl does; none when empty)."""
    obj = event.object
    if namespace and not isinstance(obj, Status) and obj.metadata.name and not obj.metadata.namespace:
        obj.metadata.namespace = namespace
    return event


def decode_item(data: bytes, index: int, list_kind: str, namespace: str = "") -> Decoded:
    """One item of a List read item by item (one too large to hold whole): as `decode_json` reads it
    within its List. `list_kind` is empty while the List's kind is not known yet (it may come after its
    items): an item without a kind of its own is then a problem."""
    try:
        return _list_items_json(_ListEnvelope(list_kind, [msgspec.Raw(data)]), namespace, index)
    except msgspec.DecodeError as exc:
        return [], [f"item {index}: {_json_problem(exc, data)}"]
    except RecursionError:
        return [], [f"item {index}: {TOO_DEEP}"]


def _list_items_json(envelope: _ListEnvelope, namespace: str = "", first: int = 0) -> Decoded:
    events: list[WatchEvent | CrashOutput] = []
    problems: list[str] = []
    for index, raw in enumerate(envelope.items, first):
        try:
            event = in_namespace(WatchEvent(type="ADDED", object=_object_decoder.decode(raw)), namespace)
            if type(event.object) is Pod:
                own_labels(event.object)
        except msgspec.ValidationError:
            _take_item(msgspec.json.decode(raw), index, envelope.kind, events, problems, namespace)
            continue
        problem = unnamed(event)
        if problem is not None:
            problems.append(f"item {index}: {problem}")
        else:
            events.append(event)
    return events, problems


def _take_item(
    item: Any,
    index: int,
    list_kind: str,
    events: list[WatchEvent | CrashOutput],
    problems: list[str],
    namespace: str = "",
) -> None:
    """One List item: an event for a kind we read, nothing for another kind, or a problem."""
    try:
        event = _list_item(item, list_kind, namespace)
    except RecordProblem as exc:
        problems.append(f"item {index}: {exc}")
        return
    if event is not None:
        events.append(event)


def from_value(value: Any, namespace: str = "") -> Decoded:
    """Classify an already parsed record (generic JSON) and convert it to typed events (`namespace`: see
    decode_json)."""
    if isinstance(value, list) and any(isinstance(item, dict) for item in value):
        return _records(value, namespace)  # records in an array (`jq -c -s .` of a watch log)
    if not isinstance(value, dict):
        raise RecordProblem(f"not an object but {_type_name(value)}")
    _drop_top_nulls(value)
    if value.get("type") == CRASH_OUTPUT:
        try:
            return [crash_output_of(value)], []
        except ValueError as exc:
            raise RecordProblem(clip(str(exc))) from None
    if "type" in value or "object" in value:
        return [*_watch_event(value)], []
    kind = value.get("kind")
    items = value.get("items")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list):
        events: list[WatchEvent | CrashOutput] = []
        problems: list[str] = []
        for index, item in enumerate(items):
            _take_item(item, index, kind, events, problems, namespace)
        return events, problems
    if kind == "Status":
        raise RecordProblem(_api_error(value))
    if isinstance(kind, str) and isinstance(value.get("metadata"), dict):
        if not _reads(kind):
            return [], []  # a kind crashwatch does not read, as in a watch event
        return [*_convert({"type": "ADDED", "object": value}, namespace)], []
    raise RecordProblem("not a watch event (no `type` and `object`), a List or a Kubernetes object")


def _records(values: list[Any], namespace: str) -> Decoded:
    events: list[WatchEvent | CrashOutput] = []
    problems: list[str] = []
    for index, value in enumerate(values):
        if isinstance(value, list):
            problems.append(f"item {index}: not an object but an array")
            continue
        try:
            found, item_problems = from_value(value, namespace)
        except RecordProblem as exc:
            problems.append(f"item {index}: {exc}")
            continue
        events.extend(found)
        problems.extend(f"item {index}: {problem}" for problem in item_problems)
    return events, problems


def _drop_top_nulls(value: dict[str, Any]) -> None:
    nulls = [key for key, field in value.items() if field is None]
    for key in nulls:
        del value[key]


def _drop_nulls(value: Any) -> None:
    """Remove every null field of a parsed record, in place: Kubernetes reads `null` as an absent field.

    Iterative, so that a record nested as deeply as the parser allowed cannot overflow the stack."""
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is dict:
            nulls = [key for key, field in item.items() if field is None]
            for key in nulls:
                del item[key]
            stack.extend(field for field in item.values() if type(field) is dict or type(field) is list)
        elif type(item) is list:
            stack.extend(field for field in item if type(field) is dict or type(field) is list)


def _api_error(status: dict[str, Any]) -> str:
    code, reason, message = status.get("code"), status.get("reason"), status.get("message")
    said = ": ".join(clip(part, 200) for part in (reason, message) if isinstance(part, str) and part)
    if isinstance(code, int) and not isinstance(code, bool):
        said = f"{code} {said}" if said else str(code)
    return f"an error from the API server, not watch events ({said or 'no message'})"


def _watch_event(value: dict[str, Any]) -> list[WatchEvent]:
    for key in ("type", "object"):
        if key not in value:
            raise RecordProblem(f"watch event lacks `{key}`")
    obj = value["object"]
    if not isinstance(obj, dict):
        raise RecordProblem(f"`object` is {_type_name(obj)}, not an object")
    kind = obj.get("kind")
    if not isinstance(kind, str):
        raise RecordProblem("`object` lacks a string `kind`")
    if not _reads(kind):
        _check_type(value.get("type"))
        return []
    return _convert(value)


def _list_item(item: Any, list_kind: str, namespace: str = "") -> WatchEvent | None:
    if not isinstance(item, dict):
        raise RecordProblem(f"not an object but {_type_name(item)}")
    _drop_top_nulls(item)
    kind = item.get("kind")
    if kind is None and not list_kind:
        raise RecordProblem("no `kind`, and the List's own kind comes after its items")
    if kind is None and list_kind != "List":
        kind = list_kind[: -len("List")]
        item = {**item, "kind": kind}
    if not _reads(kind):
        return None
    return _convert({"type": "ADDED", "object": item}, namespace)[0]


_NULL_AT = re.compile(r"got `null` - at `\$((?:\.\w+|\[\d+\])+)(\[\.\.\.\])?`$")
_STEP = re.compile(r"\.(\w+)|\[(\d+)\]")
_MAX_NULLS = 64


_SPEC_AS_TEXT = ("Pod", "DynamoGraphDeployment")  # kinds whose spec the typed decoder keeps as JSON text


def _reads(kind: object) -> bool:
    """Whether crashwatch reads objects of this kind: its own, or a backend's (stream.model.kinds)."""
    return kind in KINDS or (type(kind) is str and kinds.is_registered(kind))


def typed_event(value: dict[str, Any]) -> WatchEvent:
    """A parsed watch event as the typed decoder would have read it from JSON. Raises msgspec's
    ValidationError. A Pod's labels and spec, and a DGD's spec, stay JSON text (`PodMeta`, `Pod`,
    `DynamoGraphDeployment`), so they are written back as such."""
    obj = value.get("object")
    kind = obj.get("kind") if type(obj) is dict else None
    if type(kind) is str and kind not in KINDS and kinds.is_registered(kind):
        return kinds.convert(value)
    meta = obj.get("metadata") if type(obj) is dict and kind == "Pod" else None
    if type(meta) is dict and "labels" in meta and type(meta["labels"]) is not msgspec.Raw:
        with contextlib.suppress(TypeError, ValueError):  # left as it is: the conversion then says what is wrong
            meta["labels"] = msgspec.Raw(msgspec.json.encode(meta["labels"]))
    if kind in _SPEC_AS_TEXT and type(obj) is dict and "spec" in obj and type(obj["spec"]) is not msgspec.Raw:
        with contextlib.suppress(TypeError, ValueError):  # the spec stays text too (stream.model.objects.Pod, the DGD)
            obj["spec"] = msgspec.Raw(msgspec.json.encode(obj["spec"]))
    return msgspec.convert(value, WatchEvent)


def _convert(value: dict[str, Any], namespace: str = "") -> list[WatchEvent]:
    """The typed event of a parsed record. A null where a field is read is dropped (the path msgspec names
    says which; a walk over a whole 10 KB Pod would cost thirty times its typed decode), and converted
    again; only what is still wrong after that is a problem."""
    dropped_all = False
    for _ in range(_MAX_NULLS):
        try:
            event = typed_event(value)
            break
        except msgspec.ValidationError as exc:
            message = str(exc)
            if _drop_null_at(value, message):
                continue
            if "got `null`" in message and not dropped_all:  # a null map value, or too many nulls
                _drop_nulls(value)
                dropped_all = True
                continue
            raise RecordProblem(f"wrong field: {clip(message)}") from None
    else:
        _drop_nulls(value)
        try:
            event = typed_event(value)
        except msgspec.ValidationError as exc:
            raise RecordProblem(f"wrong field: {clip(str(exc))}") from None
    problem = unnamed(in_namespace(event, namespace))
    if problem is not None:
        raise RecordProblem(problem)
    return [event]


def _drop_null_at(value: Any, message: str) -> bool:
    """Drop the null field a ValidationError names (`... got `null` - at `$.object.status.conditions``)."""
    found = _NULL_AT.search(message)
    if found is None:
        return False
    steps = _STEP.findall(found.group(1))
    if found.group(2):  # a map's value (labels: {a: null}): its null values go
        steps.append(("", ""))
    node = value
    for key, index in steps[:-1]:
        if key and isinstance(node, dict):
            node = node.get(key)
        elif index and isinstance(node, list) and int(index) < len(node):
            node = node[int(index)]
        else:
            return False
    key = steps[-1][0]
    if not key and not steps[-1][1] and isinstance(node, dict):
        _drop_top_nulls(node)
        return True
    if key and isinstance(node, dict) and key in node and node[key] is None:
        del node[key]
        return True
    return False  # a null item of an array stays what it is: a wrong field


def _check_type(event_type: Any) -> None:
    if event_type not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"):
        raise RecordProblem(f"unknown event type {_short(event_type)}")


# --- explaining a record msgspec refused ----------------------------------------------------------------

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_LONE_SURROGATE = re.compile(
    rb"(?<!\\)(?:\\\\)*\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def _json_problem(exc: msgspec.DecodeError, data: bytes) -> RecordProblem:
    text = str(exc)
    if "truncated" in text:
        if is_cut(data):
            return RecordProblem("record is cut short (truncated JSON)", cut=True)
        # msgspec says "truncated" for complete JSON it cannot end either: an unpaired \ud800 escape
        if _LONE_SURROGATE.search(data):
            return RecordProblem("not valid JSON (a \\u escape is half a UTF-16 surrogate pair)")
        return RecordProblem("not valid JSON (it ends where a value was expected)")
    return RecordProblem(f"not valid JSON ({clip(text)})")


def is_cut(data: bytes) -> bool:
    """Whether a JSON text ends before it closes: inside a string, or with an object or array still open."""
    rest = _STRING.sub(b"", data)
    if b'"' in rest:
        return True
    return rest.count(b"{") + rest.count(b"[") > rest.count(b"}") + rest.count(b"]") or not rest.strip()


def _type_name(value: Any) -> str:
    names = {list: "an array", dict: "an object", str: "a string", int: "a number", float: "a number"}
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return names.get(type(value), type(value).__name__)


def _short(value: Any, limit: int = 80) -> str:
    """A value from the input as a message may quote it: a string's first characters, else its type."""
    if isinstance(value, str):
        if len(value) > limit:
            return f"{value[:limit]!r}... ({len(value) - limit:,} more characters)"
        return repr(value)
    if isinstance(value, bool | int | float) or value is None:
        return repr(value)[:limit]
    return _type_name(value)  # never the repr of a container: it could be huge


def clip(text: str, limit: int = 300) -> str:
    """A message that may quote the input, cut in the middle (where the path it ends with survives)."""
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 2 // 3], text[-(limit // 3) :]
    return f"{head}... ({len(text) - len(head) - len(tail):,} characters left out) ...{tail}"


# --- YAML documents, as the JSON records they stand for ------------------------------------------------

_Loader = yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader
_resolver = yaml.resolver.Resolver()
_constructor = yaml.constructor.SafeConstructor()
_encode = msgspec.json.encode
_TAG = "tag:yaml.org,2002:"
_AS_TEXT = {_TAG + "str", _TAG + "timestamp", _TAG + "binary", _TAG + "merge", _TAG + "value"}
MAX_YAML_DEPTH = 512


class _Frame:
    __slots__ = ("anchor", "count", "is_map", "key_next", "merge_start", "merges", "start")

    def __init__(self, is_map: bool, start: int, anchor: str | None) -> None:
        self.is_map = is_map
        self.start = start
        self.anchor = anchor
        self.count = 0
        self.key_next = True
        self.merge_start = -1  # while the value of a `<<` key is being read: where it starts
        self.merges: list[Any] = []


class _YamlDocument:
    """One YAML document's events, written out as compact JSON with aliases expanded.

    The JSON (and what anchors keep for their aliases) may not grow beyond `cap` bytes, so a "billion
    laughs" document costs at most that much memory before it is refused."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.out = bytearray()
        self.stack: list[_Frame] = []
        self.anchors: dict[str, bytes] = {}
        self.kept = 0

    def _grown(self) -> None:
        if len(self.out) > self.cap:
            raise RecordProblem(f"document is too large once its aliases are expanded (more than {self.cap:,} bytes)")

    def event(self, event: yaml.Event) -> None:
        kind = type(event)
        stack = self.stack
        frame = stack[-1] if stack else None
        if frame is not None and frame.is_map and frame.key_next and kind is not yaml.MappingEndEvent:
            self._key(event, frame)
            return
        if kind is yaml.ScalarEvent:
            self._value(self._scalar(event), event.anchor)  # type: ignore[attr-defined]
        elif kind is yaml.AliasEvent:
            self._value(self._aliased(event.anchor), None)  # type: ignore[attr-defined]
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            is_map = kind is yaml.MappingStartEvent
            tag = event.tag  # type: ignore[attr-defined]
            if tag not in (None, "!", _TAG + ("map" if is_map else "seq")):
                raise RecordProblem(f"YAML tag {_short(tag)} is not read")
            if len(stack) >= MAX_YAML_DEPTH:
                raise RecordProblem(TOO_DEEP)
            self._separate(frame)
            stack.append(_Frame(is_map, len(self.out), event.anchor))  # type: ignore[attr-defined]
            self.out += b"{" if is_map else b"["
        elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            done = stack.pop()
            self.out += b"}" if done.is_map else b"]"
            if done.merges:
                self._merge(done)
            self._grown()
            if done.anchor is not None:
                self._keep(done.anchor, bytes(self.out[done.start :]))
            self._after(stack[-1] if stack else None)

    def _aliased(self, name: str) -> bytes:
        """What an alias stands for: the JSON its anchor kept (an alias is expanded, never referenced)."""
        kept = self.anchors.get(name)
        if kept is None:
            raise RecordProblem(f"alias *{_short(name)[1:-1]} names no anchor before it")
        return kept

    def _key(self, event: yaml.Event, frame: _Frame) -> None:
        if not isinstance(event, yaml.ScalarEvent):
            raise RecordProblem("a mapping key that is not a plain string is not read")
        value: str = event.value
        frame.key_next = False
        if value == "<<" and event.tag is None and event.implicit[0]:
            frame.merge_start = len(self.out)  # a merge key: its value is merged in when the mapping ends
            return
        if frame.count:
            self.out += b","
        frame.count += 1
        self.out += _encode(value)
        self.out += b":"
        self._grown()

    def _separate(self, frame: _Frame | None) -> None:
        if frame is not None and not frame.is_map:
            if frame.count:
                self.out += b","
            frame.count += 1

    def _value(self, data: bytes, anchor: str | None) -> None:
        self._separate(self.stack[-1] if self.stack else None)
        self.out += data
        self._grown()
        if anchor is not None:
            self._keep(anchor, data)
        self._after(self.stack[-1] if self.stack else None)

    def _after(self, frame: _Frame | None) -> None:
        """A value is complete: the mapping it belongs to waits for its next key."""
        if frame is None or not frame.is_map:
            return
        frame.key_next = True
        if frame.merge_start >= 0:
            merged = msgspec.json.decode(bytes(self.out[frame.merge_start :]))
            del self.out[frame.merge_start :]
            frame.merge_start = -1
            sources = merged if isinstance(merged, list) else [merged]
            if not all(isinstance(source, dict) for source in sources):
                raise RecordProblem("a merge key (<<) whose value is not a mapping")
            frame.merges.extend(sources)

    def _merge(self, frame: _Frame) -> None:
        """Merge keys: the mapping's own keys win, then the merged mappings in the order given."""
        merged: dict[str, Any] = {}
        for source in reversed(frame.merges):
            merged.update(source)
        own = bytes(self.out[frame.start + 1 : -1])
        inner = _encode(merged)[1:-1]
        self.out[frame.start :] = b"{" + inner + (b"," if inner and own else b"") + own + b"}"

    def _keep(self, anchor: str, data: bytes) -> None:
        self.kept += len(data)
        if self.kept > self.cap:
            raise RecordProblem(f"document is too large once its aliases are expanded (more than {self.cap:,} bytes)")
        self.anchors[anchor] = data

    def _scalar(self, event: Any) -> bytes:
        value: str = event.value
        tag = event.tag
        if tag is None or tag == "!":
            tag = _resolver.resolve(yaml.ScalarNode, value, event.implicit)  # type: ignore[no-untyped-call]
        if tag in _AS_TEXT:  # timestamps stay the strings the API server sent
            return _encode(value)
        if tag == _TAG + "null":
            return b"null"
        try:
            if tag == _TAG + "bool":
                return b"true" if _constructor.bool_values[value.lower()] else b"false"
            if tag == _TAG + "int":
                return _encode(_constructor.construct_yaml_int(yaml.ScalarNode(tag, value)))
            if tag == _TAG + "float":
                return _encode(_constructor.construct_yaml_float(yaml.ScalarNode(tag, value)))
        except (ValueError, KeyError):
            raise RecordProblem(f"{_short(value)} is not a valid {tag[len(_TAG) :]}") from None
        raise RecordProblem(f"YAML tag {_short(tag)} is not read")


def yaml_documents(text: bytes, cap: int) -> Iterator[tuple[int, bytes | RecordProblem | None]]:
    """The documents of a YAML text as JSON records: (the line a document starts on, counting from 0; its
    JSON, None for an empty document, or the problem that makes it unreadable). A text that stops being
    YAML raises yaml.YAMLError, whose `problem_mark` says where."""
    document: _YamlDocument | None = None
    problem: RecordProblem | None = None
    start = 0
    for event in yaml.parse(text, Loader=_Loader):
        kind = type(event)
        if kind is yaml.DocumentStartEvent:
            document, problem = _YamlDocument(cap), None
            start = event.start_mark.line if event.start_mark is not None else 0
        elif kind is yaml.DocumentEndEvent:
            if document is not None:
                yield start, problem or (bytes(document.out) if document.out != b"null" else None)
            document = None
        elif document is not None and problem is None:
            try:
                document.event(event)
            except RecordProblem as exc:
                problem = exc
                document.out = bytearray()  # what it held is no longer needed
