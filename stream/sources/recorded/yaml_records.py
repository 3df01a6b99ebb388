"""The records of a YAML log: its documents, cut at their `---` lines, a List too large to hold whole read
item by item, and the stray lines before its first document (a kubectl warning).

YAML is read apart from JSON because it is cut differently (by documents, not by lines or braces), so a
broken document is one bad record and reading goes on at the next `---`; each piece is held within the
limit before PyYAML sees it. Lines come from lines.py; a document is parsed and decoded by
`stream.model.decode`, the code the live watch uses.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from typing import Any

import yaml

from stream.model.decode import RecordProblem, clip, decode_item, decode_json, yaml_documents
from stream.model.events import BadRecord
from stream.sources.recorded.bad_records import LogItem, binary_problem, emit, io_problem, too_large
from stream.sources.recorded.limits import SNIFF
from stream.sources.recorded.lines import Binary, Oversized, log_lines
from stream.sources.recorded.sniffing import line_format
from stream.sources.recorded.source import LogSource

_DOCUMENT_START = re.compile(rb"---(?:[ \t\r]|$)")


class Stray(bytes):
    """Lines before a YAML log's first document that tell nothing of it (a kubectl warning)."""


class YamlItem(bytes):
    """One item of a YAML List too large to hold whole (`kubectl get pods -A -o yaml`), as a document of
    its own: its text, or, when `size` is set, none (it is longer than the limit)."""

    position: int  # its index in the List
    kind: str  # the List's kind, "" when it was not seen before its items
    first: bool  # the List's first item: the List is a document
    size: int


_ITEMS_KEY = re.compile(rb"items[ \t]*:[ \t]*(?:#.*)?$")
_YAML_LIST_KIND = re.compile(rb"""kind[ \t]*:[ \t]*["']?([A-Za-z0-9]+)["']?[ \t]*(?:#.*)?$""")


class _YamlItems:
    """The items of a YAML List's `items:` sequence, one at a time, each held alone within the limit.

    An item starts at a `- ` at the indent of the first (kubectl writes them at column 0, under `items:`)
    and runs to the next one; a line less indented, or as indented but no `- `, ends the sequence (the
    List's `kind:` and `metadata:` that kubectl writes after it). Each item is given back as YAML of its
    own, its lines moved left by the `- ` and its indent."""

    def __init__(self, limit: int, kind: str) -> None:
        self.limit = limit
        self.kind = kind
        self.indent: int | None = None
        self.held: list[bytes] | None = None
        self.size = 0
        self.start = 0
        self.skipping = False
        self.count = 0
        self.done = False

    def feed(self, line: Any, lineno: int) -> list[tuple[int, YamlItem]]:
        if self.done:
            return []
        oversized = type(line) is Oversized
        data = b"" if oversized else bytes(line)
        stripped = data.strip()
        if not oversized and (not stripped or stripped[:1] == b"#"):
            if self.held is not None:
                self._add(data[(self.indent or 0) + 2 :], len(data))
            return []
        here = 0 if oversized else len(data) - len(data.lstrip(b" "))
        starts = not oversized and (data[here : here + 2] == b"- " or data[here:].rstrip() == b"-")
        if self.indent is None:
            if not starts:
                self.done = True  # `items: []`, or no sequence: nothing to read item by item
                return []
            self.indent = here
        if oversized or here > self.indent:
            if self.held is not None:
                self._add(b"" if oversized else data[self.indent + 2 :], line.size if oversized else len(data))
            return []
        out = self.finish()
        if here == self.indent and starts:
            self.count += 1
            self.held, self.size, self.start, self.skipping = [], 0, lineno, False
            self._add(data[here + 2 :], len(data))
        else:
            self.done = True
        return out

    def _add(self, data: bytes, size: int) -> None:
        held = self.held
        assert held is not None
        self.size += size + 1
        if self.skipping:
            return
        if self.size > self.limit:
            held.clear()
            self.skipping = True
        else:
            held.append(data)

    def finish(self) -> list[tuple[int, YamlItem]]:
        """The item under way is complete (the next one starts, the sequence or the document ends)."""
        if self.held is None:
            return []
        item = YamlItem(b"" if self.skipping else b"\n".join(self.held))
        item.position, item.kind, item.first = self.count - 1, self.kind, self.count == 1
        item.size = self.size if self.skipping else 0
        self.held = None
        return [(self.start, item)]


def _yaml_list(held: list[bytes], start: int, limit: int) -> tuple[_YamlItems, list[tuple[int, YamlItem]]] | None:
    """A YAML document grown past the limit: when it is a List, the reader of its items, and the items
    among the lines held so far (the document's first line is `start`)."""
    found = next((i for i, line in enumerate(held) if _ITEMS_KEY.match(line)), None)
    if found is None:
        return None
    kind = next((m.group(1) for line in held[:found] if (m := _YAML_LIST_KIND.match(line))), b"")
    items = _YamlItems(limit, kind.decode())
    out: list[tuple[int, YamlItem]] = []
    for offset, line in enumerate(held[found + 1 :], found + 1):
        out.extend(items.feed(line, start + offset))
    return items, out


Piece = tuple[int, bytes | Oversized | Stray | Binary | YamlItem]  # a piece of a YAML log and its first line


class _StrayLines:
    """The lines before a YAML log's first line that says YAML (`---`, `- `, a key of a Kubernetes object or
    watch event): from the first that is no comment, blank or directive on, they are stray (a warning kubectl
    wrote into the log), kept only as far as needed to quote them."""

    __slots__ = ("said", "start", "text")

    def __init__(self) -> None:
        self.said = False  # a line that says YAML was met: no line is stray from there on
        self.start = 0  # the first stray line
        self.text = b""

    def take(self, data: bytes, lineno: int) -> bool:
        """Whether this line, before any that says YAML, is stray (then it is no part of a document)."""
        if self.start or data.lstrip()[:1] not in (b"", b"#", b"%"):
            self.start = self.start or lineno
            if len(self.text) < SNIFF:
                self.text += data[:SNIFF] + b"\n"
            return True
        return False

    def unsaid(self) -> Iterator[Piece]:
        """The log ended with no line that says YAML: what came is one stray piece (if anything did)."""
        if self.start and not self.said:
            yield self.start, Stray(self.text)


def _piece(held: list[bytes], size: int, skipping: bool) -> bytes | Oversized:
    """A document complete: its text, or how long it was when it was too long to hold."""
    return Oversized(size) if skipping else b"\n".join(held)


def _starts_document(line: Any) -> bool:
    """A `---` line (no YAML content may begin a line with it)."""
    return type(line) is not Oversized and line[:3] == b"---" and _DOCUMENT_START.match(bytes(line)) is not None


def _left_open(
    items: _YamlItems | None, start: int, held: list[bytes], size: int, skipping: bool, content: bool
) -> Iterator[Piece]:
    """Where the log stops: the List item under way, or the document (when it has content)."""
    if items is not None:
        yield from items.finish()
    elif content:
        yield start, _piece(held, size, skipping)


def _past_the_limit(
    held: list[bytes], start: int, limit: int, line: Any, lineno: int
) -> Generator[Piece, None, tuple[_YamlItems | None, bool]]:
    """A document grown past the limit with this line: a List is read item by item from here on (its items
    among the lines held so far come now); anything else is skipped to its end, never held. What reads
    the List's items, if any, and whether the document is skipped."""
    listed = _yaml_list(held, start, limit)
    if listed is None:
        return None, True
    items, found = listed
    yield from found
    yield from items.feed(line, lineno)
    return items, False


def _documents(source: LogSource, live: bool) -> Iterator[Piece]:
    """A YAML log cut at its `---` lines (which no YAML content may begin a line with): the text of each
    piece and the line it starts on. A piece longer than the limit is `Oversized` (and never held).
    Directives and comments before a `---` stay with the document it starts. Lines before the first
    line that says YAML (`---`, `- `, a key of a Kubernetes object or watch event) that are no comment
    are `Stray`: a warning kubectl wrote into the log is one bad record, not part of the first document.
    """
    limit = source.max_record
    held: list[bytes] = []
    size = 0
    start = 1
    content = False  # the piece has a line that is neither blank, a comment, nor a directive
    skipping = False
    said = False  # a line that says YAML was met
    stray = _StrayLines()
    lineno = 0
    items: _YamlItems | None = None  # a List too large to hold whole: read item by item
    for lines, _ in log_lines(source, live):
        for line in lines:
            lineno += 1
            if type(line) is Binary:  # the last line: what is held is all there is
                yield from _left_open(items, start, held, size, skipping, content)
                yield lineno, line
                return
            if items is not None:
                if not _starts_document(line):
                    yield from items.feed(line, lineno)
                    continue
                yield from items.finish()
                items, held, size, start, content, skipping = None, [], 0, lineno, False, False
            oversized = type(line) is Oversized
            data = bytes(line)  # (an Oversized line is empty)
            if not said:
                if oversized or line_format(data) is not None:  # JSON is YAML too (after comments)
                    said = stray.said = True
                    if stray.start:
                        yield stray.start, Stray(stray.text)
                        held, size, start = [], 0, lineno  # (only comments were held)
                elif stray.take(data, lineno):
                    continue
            if content and data[:3] == b"---" and _DOCUMENT_START.match(data):
                yield start, _piece(held, size, skipping)
                held, size, start, content, skipping = [], 0, lineno, False, False
            if oversized:
                size += line.size
                content = True
            else:
                size += len(data) + 1
                if data.lstrip()[:1] not in (b"", b"#", b"%"):
                    content = True
            if skipping:
                continue
            if oversized or size > limit:
                items, skipping = yield from _past_the_limit(held, start, limit, line, lineno)
                held = []
                continue
            held.append(data)
    yield from stray.unsaid()
    yield from _left_open(items, start, held, size, skipping, content or skipping)


def read_yaml(source: LogSource, live: bool) -> Iterator[LogItem]:
    name = source.name
    cap = 2 * source.max_record  # JSON is a little longer than the YAML it comes from
    number = 0
    lineno = 1
    try:
        for lineno, text in _documents(source, live):
            if type(text) is Oversized:
                number += 1
                yield BadRecord(f"{name}: document {number}", too_large(text.size, source.max_record, "document"))
                continue
            if type(text) is Binary:
                yield BadRecord(f"{name}:{lineno}", binary_problem(None))
                return
            if type(text) is YamlItem:
                number += text.first
                yield from _yaml_item(text, f"{name}: document {number}", source, cap)
                continue
            if type(text) is Stray:
                quoted = clip(repr(text.decode(errors="replace").splitlines()[0]), 120)
                yield BadRecord(f"{name}:{lineno}", f"not YAML of watch events or objects (a stray line?): {quoted}")
                continue
            try:
                for _, document in yaml_documents(text, cap):
                    number += 1
                    where = f"{name}: document {number}"
                    if isinstance(document, RecordProblem):
                        yield BadRecord(where, str(document))
                    elif document is not None:
                        try:
                            decoded = decode_json(document, source.namespace)
                        except RecordProblem as exc:
                            yield BadRecord(where, str(exc))
                            continue
                        yield from emit(decoded, where)
            except yaml.YAMLError as exc:
                number += 1
                mark = getattr(exc, "problem_mark", None)
                place = f"{name}:{lineno + mark.line}" if mark is not None else f"{name}: document {number}"
                problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
                yield BadRecord(place, f"not valid YAML ({clip(problem)}); skipped up to the next `---`")
    except OSError as exc:
        yield BadRecord(f"{name}: document {number + 1}", f"cannot read further: {io_problem(exc)}")
        return
    damage = source.damage()
    if damage is not None:
        yield BadRecord(f"{name}: document {number + 1}", f"cannot read further: {damage}")


def _yaml_item(item: YamlItem, where: str, source: LogSource, cap: int) -> Iterator[LogItem]:
    if item.size:
        yield BadRecord(where, f"item {item.position}: {too_large(item.size, source.max_record)}")
        return
    try:
        for _, document in yaml_documents(bytes(item), cap):
            if isinstance(document, RecordProblem):
                yield BadRecord(where, f"item {item.position}: {document}")
            elif document is not None:
                yield from emit(decode_item(document, item.position, item.kind, source.namespace), where)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        yield BadRecord(where, f"item {item.position}: not valid YAML ({clip(problem)})")
