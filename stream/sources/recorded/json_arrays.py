"""Cutting a pretty-printed JSON array into its elements, one at a time (`Elements`): the records of
`jq -s .` of a watch log, or the items of a List too large to hold whole.

It is apart from json_records.py so that the rules of an array's layout (the elements' indent, `},` and
`]` lines) are in one place: no element is held with another, and a cut or bad element is one bad record
at its own line. Deciding what an element is (a record, or a List's item) and decoding it is left to
json_records.py.
"""

from __future__ import annotations

from typing import Any

from stream.sources.recorded.lines import Oversized

_CLOSERS = (b"]", b"],")
Element = tuple[int, int, "bytes | Oversized | str"]  # its first line, its index, its text (or why it has none)


def indent_of(line: bytes) -> bytes:
    """The blanks a line starts with."""
    return line[: len(line) - len(line.lstrip(b" \t"))]


class Elements:
    """The elements of a pretty-printed JSON array, one at a time, each held alone within the limit: the
    records of `jq -s .` of a watch log, or the items of a List too large to hold whole.

    An element starts on a line of its own at the indent of the first one: a `{` line, which runs to the
    line at that indent that closes it (`}` or `},`), or a whole value on its line. A `]` line less
    indented than the elements ends the array; so does any other line less indented (the array is then
    cut short, and the line is not taken: it is read afresh)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.indent: bytes | None = None
        self.held: list[bytes] | None = None
        self.size = 0
        self.start = 0
        self.skipping = False
        self.count = 0

    def feed(self, line: Any, lineno: int) -> tuple[list[Element], bool, bool]:
        """The elements this line completes, whether the array has ended, and whether the line was taken.
        A line inside an element (nearly every line) is taken here; one between elements in `_between`."""
        out: list[Element] = []
        held = self.held
        if held is not None:
            oversized = type(line) is Oversized
            data = bytes(line)  # (an Oversized line is empty)
            indent = self.indent
            assert indent is not None
            if data.startswith(indent) and data[len(indent) :].rstrip() in (b"}", b"},"):
                text = Oversized(self.size) if self.skipping else b"\n".join([*held, b"}"])
                out.append((self.start, self.count - 1, text))
                self.held = None
                return out, False, True
            deeper = data.startswith(indent) and data[len(indent) : len(indent) + 1] in (b" ", b"\t")
            if oversized or deeper or not data.strip():
                self.size += (line.size if oversized else len(data)) + 1
                if self.size <= self.limit:  # (never again once past it: the size only grows)
                    held.append(data)
                else:
                    self.held, self.skipping = [], True
                return out, False, True
            if not self.skipping:
                out.append((self.start, self.count - 1, f"line {lineno} does not continue it"))
            self.held = None
        return self._between(line, lineno, out)

    def _between(self, line: Any, lineno: int, out: list[Element]) -> tuple[list[Element], bool, bool]:
        """A line outside an element: one that starts the next (its first line, or a whole value on its
        line), a blank one, or the end of the array. The first element sets the indent of them all."""
        if type(line) is Oversized:
            self.count += 1
            out.append((lineno, self.count - 1, line))
            return out, False, True
        data = bytes(line)
        stripped = data.strip()
        if not stripped:
            return out, False, True
        here = indent_of(data)
        indent = self.indent
        if stripped in _CLOSERS and (indent is None or len(here) <= len(indent)):
            return out, True, True
        if indent is None:
            self.indent = here
        elif len(here) < len(indent):
            return out, True, False
        self.count += 1
        if stripped == b"{":
            self.held, self.size, self.start, self.skipping = [stripped], len(data) + 1, lineno, False
        else:
            out.append((lineno, self.count - 1, stripped[:-1] if stripped.endswith(b",") else stripped))
        return out, False, True

    def end(self) -> list[Element]:
        """The log ends inside the array: an element still open is cut short."""
        if self.held is None or self.skipping:
            return []
        self.held = None
        return [(self.start, self.count - 1, "the log ends before it closes")]
