"""The records of a JSON log: JSON lines, kubectl's pretty-printed records, arrays of records and Lists,
in one pass that needs no mode.

JSON lines take a tight path here (one typed decode per line, the speed of a replay); anything else goes
to `JsonRecords`, which also reads the lines that worker processes (stream/sources/parallel.py) leave to
the main process, so a log reads alike in one process or several. Lines come from lines.py; the elements of an array
are cut by json_arrays.py; a record is decoded by `stream.model.decode`, the code the live watch uses.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from stream.model.decode import FAST_ERRORS, RecordProblem, decode_item, decode_json, read_event
from stream.model.events import BadRecord
from stream.sources.recorded.bad_records import CUT_AT_END, LogItem, binary_problem, emit, io_problem, too_large
from stream.sources.recorded.json_arrays import Element, Elements, indent_of
from stream.sources.recorded.limits import BATCH
from stream.sources.recorded.lines import Binary, Oversized, log_lines
from stream.sources.recorded.source import DEFAULT_NAMESPACE, LogSource

_LIST_KIND = re.compile(rb"""\s*"kind"\s*:\s*"([^"]*)"\s*,?\s*$""")


class JsonRecords:
    """The records of a JSON log, line by line, in one pass that needs no mode.

    A line that is a record on its own is one (the fast path: one typed decode); a line that is just `{`
    opens a pretty-printed record, which runs to the next line that starts with `}`. Inside such a record
    every line is indented, so a line that starts anything else at column 0 (`{`, a warning) means the
    record was cut short: it is reported and that line is read afresh. So one cut or stray line never
    swallows the records around it, and JSON lines and kubectl's output read alike, even mixed.
    """

    def __init__(
        self, name: str, limit: int, damage: Callable[[], str | None] = lambda: None, namespace: str = DEFAULT_NAMESPACE
    ) -> None:
        self.name = name
        self.limit = limit
        self.namespace = namespace
        self.damage = damage
        self.pending: list[bytes] | None = None  # the lines of an open pretty-printed record
        self.size = 0
        self.start = 0
        self.skipping = False  # the open record is longer than the limit: reported, its lines dropped
        self.damage_told = False
        self.array: Elements | None = None  # a pretty-printed array is open (`jq -s .`, or a List's items)
        self.array_start = 0
        self.list_kind: str | None = None  # the array is the items of a List too large to hold (its kind, or "")
        self.tail = False  # after such a List's items: its last keys, up to its closing `}`

    @property
    def open(self) -> bool:
        """Whether a record, an array or a List is open: then no line is a record on its own."""
        return self.pending is not None or self.array is not None or self.tail

    def read(self, line: Any, lineno: int, last: bool) -> list[LogItem]:
        """A line's events and bad records (the fast path first, unless a record is open)."""
        if not self.open:
            try:
                return [read_event(line)]
            except FAST_ERRORS:
                pass
        return self.line(line, lineno, last)

    def line(self, line: Any, lineno: int, last: bool) -> list[LogItem]:
        """A line the fast path did not take (or was not tried on, inside a pretty-printed record)."""
        if type(line) is Binary:  # the log's last line: it stops there
            cut = self._cut(f"binary data follows at line {lineno}") if self.pending is not None else []
            return [*cut, *self._end_array(), BadRecord(f"{self.name}:{lineno}", binary_problem(None))]
        if self.array is not None:
            return self._in_array(line, lineno, last)
        if self.tail:
            if bytes(line[:1]) == b"}":
                self.tail = False
            return []
        if self.pending is not None:
            return self._continue(line, lineno, last)
        if type(line) is Oversized:
            return [BadRecord(f"{self.name}:{lineno}", too_large(line.size, self.limit))]
        data = bytes(line)
        stripped = data.strip()
        if not stripped:
            return []
        if stripped == b"{" and data[:1] == b"{":
            self.pending, self.size, self.start, self.skipping = [data], len(data), lineno, False
            return []
        if stripped == b"[" and data[:1] == b"[":  # a pretty-printed array of records: one at a time
            self.array, self.array_start, self.list_kind = Elements(self.limit), lineno, None
            return []
        return self._decode(data, f"{self.name}:{lineno}", last)

    def _in_array(self, line: Any, lineno: int, last: bool) -> list[LogItem]:
        array = self.array
        assert array is not None
        elements, done, taken = array.feed(line, lineno)
        items = self._elements(elements)
        if done:
            self.array = None
            if self.list_kind is not None:  # the List's last keys follow, up to its `}`
                self.tail = True
            if not taken:
                what = "List's items" if self.list_kind is not None else "array"
                items.append(BadRecord(f"{self.name}:{self.array_start}", f"the {what} is cut short (line {lineno})"))
                self.tail = False
                items.extend(self.line(line, lineno, last))
        return items

    def _elements(self, elements: list[Element]) -> list[LogItem]:
        items: list[LogItem] = []
        listing = self.list_kind
        for start, index, text in elements:
            where = f"{self.name}:{start}" if listing is None else f"{self.name}:{self.array_start}"
            if isinstance(text, str):
                problem = f"record is cut short ({text})"
                items.append(BadRecord(where, problem if listing is None else f"item {index}: {problem}"))
            elif type(text) is Oversized:
                problem = too_large(text.size, self.limit)
                items.append(BadRecord(where, problem if listing is None else f"item {index}: {problem}"))
            elif listing is None:
                items.extend(self._decode(text, where, False))
            else:
                items.extend(emit(decode_item(text, index, listing, self.namespace), where))
        return items

    def _end_array(self) -> list[LogItem]:
        if self.array is None:
            self.tail = False
            return []
        items = self._elements(self.array.end())
        listing = self.list_kind is not None
        problem = "the List's items are cut short (the log ends before they close)" if listing else (
            "the array is cut short (the log ends before it closes)"
        )
        items.append(BadRecord(f"{self.name}:{self.array_start}", problem))
        self.array, self.tail = None, False
        return items

    def _as_list(self, line: Any, lineno: int) -> list[LogItem] | None:
        """The open record has grown past the limit: when it is a List, read its items one by one from
        here on (those held so far first), each within the limit, instead of skipping it whole."""
        pending = self.pending
        assert pending is not None
        keys = indent_of(pending[1]) if len(pending) > 1 else b""
        opening = keys + b'"items": ['
        found = next((i for i, held in enumerate(pending) if held.rstrip() == opening), None)
        if not keys or found is None:
            return None
        kind = next((m.group(1) for held in pending[:found] if (m := _LIST_KIND.match(held))), b"")
        self.pending, self.skipping = None, False
        self.array, self.array_start, self.list_kind = Elements(self.limit), self.start, kind.decode(errors="replace")
        items: list[LogItem] = []
        for offset, held in enumerate(pending[found + 1 :], found + 1):
            items.extend(self._in_array(held, self.start + offset, False))
        items.extend(self.line(line, lineno, False))
        return items

    def cut(self, lineno: int) -> list[LogItem]:
        """A record starts at `lineno` (the fast path read it): an open pretty-printed record is cut short."""
        if self.pending is None:
            return []
        return self._cut(f"a new one starts at line {lineno} before it closes")

    def _cut(self, why: str) -> list[LogItem]:
        told = self.skipping
        self.pending, self.skipping = None, False
        return [] if told else [BadRecord(f"{self.name}:{self.start}", f"record is cut short ({why})")]

    def _continue(self, line: Any, lineno: int, last: bool) -> list[LogItem]:
        pending = self.pending
        assert pending is not None
        if type(line) is Oversized:
            listed = None if self.skipping else self._as_list(line, lineno)
            return self._too_large() if listed is None else listed
        first = bytes(line[:1])
        if first == b"}":
            told = self.skipping
            self.pending, self.skipping = None, False
            if told:
                return []
            size = self.size + len(line)
            if size > self.limit:
                return [BadRecord(f"{self.name}:{self.start}", too_large(size, self.limit))]
            return self._decode(b"\n".join([*pending, bytes(line)]), f"{self.name}:{self.start}", last)
        if first == b"{":
            return [*self._cut(f"a new one starts at line {lineno} before it closes"), *self.line(line, lineno, last)]
        if first not in (b"", b" ", b"\t", b"\r"):
            return [*self._cut(f"line {lineno} does not continue it"), *self.line(line, lineno, last)]
        if not self.skipping:
            self.size += len(line) + 1
            if self.size > self.limit:
                listed = self._as_list(line, lineno)
                return self._too_large() if listed is None else listed
            pending.append(bytes(line))
        return []

    def _too_large(self) -> list[LogItem]:
        if self.skipping:
            return []
        self.skipping = True
        self.pending = []  # nothing of it is held any longer
        return [BadRecord(f"{self.name}:{self.start}", too_large(None, self.limit))]

    def _decode(self, data: bytes, where: str, last: bool) -> list[LogItem]:
        try:
            decoded = decode_json(data, self.namespace)
        except RecordProblem as exc:
            if last and exc.cut:
                # a final line with no newline that does not close is what a killed writer leaves, or
                # what damaged compressed data ends with: one message says which
                return [BadRecord(where, self._end_problem())]
            return [BadRecord(where, str(exc))]
        return emit(decoded, where)

    def _end_problem(self) -> str:
        damage = self.damage()
        if damage is None:
            return CUT_AT_END
        self.damage_told = True
        return f"cannot read further: {damage}"

    def end(self, lineno: int) -> list[LogItem]:
        """The log has ended after `lineno` lines: a record still open is cut short, and damage is told."""
        items: list[LogItem] = self._end_array()
        if self.pending is not None and not self.skipping:
            items.append(BadRecord(f"{self.name}:{self.start}", self._end_problem()))
        self.pending = None
        damage = self.damage()
        if damage is not None and not self.damage_told:
            items.append(BadRecord(f"{self.name}:{lineno + 1}", f"cannot read further: {damage}"))
            self.damage_told = True
        return items


def read_json(source: LogSource, live: bool) -> Iterator[list[LogItem]]:
    """JSON lines, or pretty-printed values whose top-level braces stand at column 0 (see JsonRecords).

    JSON lines take a tight path (one typed decode per line); anything unusual goes to JsonRecords.line,
    which classifies the record and explains a bad one.
    """
    size = 1 if live else BATCH
    name = source.name
    records = JsonRecords(name, source.max_record, source.damage, source.namespace)
    out: list[LogItem] = []
    lineno = 0
    fast = read_event
    record_open = False  # a pretty-printed record is open: its lines skip the fast path
    try:
        for lines, unterminated in log_lines(source, live):
            last_line = lines[-1] if unterminated else None
            for line in lines:
                lineno += 1
                if not record_open:
                    try:
                        out.append(fast(line))
                        if len(out) >= size:
                            yield out
                            out = []
                        continue
                    except FAST_ERRORS:
                        pass
                out.extend(records.line(line, lineno, line is last_line))
                record_open = records.open
                if len(out) >= size:
                    yield out
                    out = []
    except OSError as exc:
        out.append(BadRecord(f"{name}:{lineno + 1}", f"cannot read further: {io_problem(exc)}"))
    else:
        out.extend(records.end(lineno))
    if out:
        yield out
