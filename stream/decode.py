"""Decoding one record (a watch event, a List, or a bare object) into `WatchEvent`s.

Live watch lines, JSON-lines logs, kubectl's pretty-printed output and YAML documents all end here, so a
record means the same thing wherever it came from. The fast path is one typed msgspec pass over a watch
event whose object kind we know; anything else takes a slower, generic path that classifies the record,
skips kinds crashwatch does not read, and explains what is wrong with a bad one.
"""

from __future__ import annotations

from typing import Any

import msgspec

from stream.events import WatchEvent
from stream.objects import KINDS, KubeObject


class RecordProblem(Exception):
    """Raised for a record that cannot be read; the message says what is wrong, without the place."""


_event_decoder = msgspec.json.Decoder(WatchEvent)
# The fast path on its own, for callers with many records: raises msgspec's errors, to be handed to
# `decode_json` for classification and an explanation.
decode_event = _event_decoder.decode
_object_decoder = msgspec.json.Decoder(KubeObject)


class _ListEnvelope(msgspec.Struct):
    kind: str
    items: list[msgspec.Raw]


_list_decoder = msgspec.json.Decoder(_ListEnvelope)

# A decoded record: the events it holds, and the problems of any List items that could not be read.
Decoded = tuple[list[WatchEvent], list[str]]


def decode_json(data: bytes) -> Decoded:
    """Decode one JSON record. Raises RecordProblem when the whole record is unusable."""
    try:
        return [_event_decoder.decode(data)], []
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError as exc:
        raise RecordProblem(_json_problem(exc)) from None
    try:
        envelope = _list_decoder.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError):
        envelope = None
    if envelope is not None and envelope.kind.endswith("List"):
        return _list_items_json(envelope)
    try:
        value = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise RecordProblem(_json_problem(exc)) from None
    return from_value(value)


def _list_items_json(envelope: _ListEnvelope) -> Decoded:
    events: list[WatchEvent] = []
    problems: list[str] = []
    for index, raw in enumerate(envelope.items):
        try:
            events.append(WatchEvent(type="ADDED", object=_object_decoder.decode(raw)))
            continue
        except msgspec.ValidationError:
            pass
        _take_item(msgspec.json.decode(raw), index, envelope.kind, events, problems)
    return events, problems


def _take_item(item: Any, index: int, list_kind: str, events: list[WatchEvent], problems: list[str]) -> None:
    """One List item: an event for a kind we read, nothing for another kind, or a problem."""
    try:
        event = _list_item(item, list_kind)
    except RecordProblem as exc:
        problems.append(f"item {index}: {exc}")
        return
    if event is not None:
        events.append(event)


def from_value(value: Any) -> Decoded:
    """Classify an already parsed record (generic JSON or YAML) and convert it to typed events."""
    if not isinstance(value, dict):
        raise RecordProblem(f"not an object but {_type_name(value)}")
    if "type" in value or "object" in value:
        return _watch_event(value), []
    kind = value.get("kind")
    items = value.get("items")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list):
        events: list[WatchEvent] = []
        problems: list[str] = []
        for index, item in enumerate(items):
            _take_item(item, index, kind, events, problems)
        return events, problems
    if isinstance(kind, str) and isinstance(value.get("metadata"), dict):
        return _convert({"type": "ADDED", "object": value}), []
    raise RecordProblem("not a watch event (no `type` and `object`), a List or a Kubernetes object")


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
    if kind not in KINDS:
        _check_type(value.get("type"))
        return []
    return _convert(value)


def _list_item(item: Any, list_kind: str) -> WatchEvent | None:
    if not isinstance(item, dict):
        raise RecordProblem(f"not an object but {_type_name(item)}")
    kind = item.get("kind")
    if kind is None and list_kind != "List":
        kind = list_kind[: -len("List")]
        item = {**item, "kind": kind}
    if kind not in KINDS:
        return None
    return _convert({"type": "ADDED", "object": item})[0]


def _convert(value: dict[str, Any]) -> list[WatchEvent]:
    try:
        return [msgspec.convert(value, WatchEvent)]
    except msgspec.ValidationError as exc:
        raise RecordProblem(f"wrong field: {exc}") from None


def _check_type(event_type: Any) -> None:
    if event_type not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"):
        raise RecordProblem(f"unknown event type {event_type!r}")


def _json_problem(exc: msgspec.DecodeError) -> str:
    text = str(exc)
    if "truncated" in text:
        return "record is cut short (truncated JSON)"
    return f"not valid JSON ({text})"


def _type_name(value: Any) -> str:
    names = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), type(value).__name__)
