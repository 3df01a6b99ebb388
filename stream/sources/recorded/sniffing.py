"""Telling a log's format from its first lines: JSON or YAML, binary data, and whether it is JSON lines
(which worker processes can decode).

Formats are told by content, never by the file's name (but as a last resort), so users need not say what
they have. What is read to tell is at most SNIFF bytes, and no further than the first line that tells;
opening.py hands it on to the readers as if unread, and what each format then holds is its reader's.
"""

from __future__ import annotations

import mmap
import re
from typing import IO

import msgspec

from stream.sources.recorded.bad_records import binary_problem
from stream.sources.recorded.limits import SNIFF


def binary_head(head: bytes) -> str | None:
    """Why a log is binary data rather than text, from its first line that holds anything: a NUL byte,
    which no JSON or YAML text holds (`/dev/zero`, a disk image, a file of zeros a crash left)."""
    start = 0
    while start < len(head):
        end = head.find(b"\n", start)
        end = len(head) if end < 0 else end
        line = head[start:end]
        if line.strip():
            nul = line.find(b"\x00")
            return None if nul < 0 else binary_problem(start + nul)
        start = end + 1
    return None


def read_head(stream: IO[bytes]) -> bytes:
    """The first lines of a stream, up to the first that tells the format (or SNIFF bytes)."""
    head = b""
    while len(head) < SNIFF:
        line = stream.readline(SNIFF - len(head))
        if not line:
            break
        head += line
        if line_format(line) is not None:
            break
    return head


_YAML_KEY = re.compile(rb"""["']?(?:apiVersion|kind|metadata|type|object|items|spec|status|time)["']?[ \t]*:(?:\s|$)""")


# a merge key, or a key whose value is an anchor or an alias: only YAML has them (`<<: *base`, `x: &labels`)
_YAML_ONLY = re.compile(rb"""<<[ \t]*:(?:\s|$)|["']?[^\s:#"'{}\[\],&*!|>%@`][^:#]*?["']?[ \t]*:[ \t]+[&*]\S""")


def line_format(line: bytes) -> str | None:
    """What a line at the top of a log says of its format: "json", "yaml", or None (a warning, a comment)."""
    first = line[:1]
    if first in (b"{", b"[", b"}", b"]"):
        return "json"
    if line.startswith((b"---", b"%YAML", b"%TAG", b"- ")) or line.rstrip() == b"-" or _YAML_KEY.match(line):
        return "yaml"
    if (line[:2] == b"<<" or b"&" in line or b"*" in line) and _YAML_ONLY.match(line):
        return "yaml"
    return None


def sniff_yaml(head: bytes, name: str) -> bool:
    """Whether a log is YAML, from its first line that tells: JSON starts a line with a brace or a bracket,
    YAML with `---`, `- ` or a key a Kubernetes object or watch event has. Lines that tell nothing (a
    kubectl warning, a comment, a record cut at its start) are passed over; when none tells, a `.yaml`
    or `.yml` name does, and otherwise it is read as JSON.

    JSON after `#` comments is YAML (JSON has no comments; YAML, its superset, reads the rest as JSON,
    as kubectl does), unless that first line is a whole JSON value: then it is JSON lines, whose
    comment lines are bad records as any stray line."""
    start = 0
    commented = False
    while start < len(head):  # line by line, without splitting the whole head: the first line tells
        end = head.find(b"\n", start)
        end = len(head) if end < 0 else end
        line = head[start:end]
        said = line_format(line)
        if said == "json" and commented:
            return not _whole_json(line)
        if said is not None:
            return said == "yaml"
        commented = commented or line.lstrip()[:1] == b"#"
        start = end + 1
    base = name[: -len(".gz")] if name.endswith(".gz") else name
    return base.endswith((".yaml", ".yml"))


def _whole_json(line: bytes) -> bool:
    try:
        msgspec.json.decode(line)
    except msgspec.DecodeError:
        return False
    return True


def is_json_lines(data: mmap.mmap | bytes, start: int = 0) -> bool:
    """Whether a log looks like JSON lines (its first record is not a pretty-printed `{` line): then
    worker processes can decode it line by line. Only a matter of speed: the result is the same."""
    size = len(data)
    while start < size:
        stop = data.find(b"\n", start, start + SNIFF)
        if stop < 0:
            return True  # a first line longer than that: no pretty-printed record starts so
        line = data[start:stop].strip()
        if line:
            return line not in (b"{", b"[")
        start = stop + 1
    return False
