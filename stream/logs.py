"""Reading recorded watch-event logs, whatever their format, as batches of events and bad records.

Formats are told apart by content, so users need not say what they have: JSON lines (the API server's
watch stream, or `crashwatch record`), kubectl's pretty-printed objects back to back, a List document,
YAML (one or several documents), any of them gzip-compressed, and `-` for standard input. Each record is
decoded by `stream.decode`, the same code the live watch uses.
"""

from __future__ import annotations

import gzip
import io
import mmap
import sys
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, cast

import msgspec
import yaml

from stream.decode import Decoded, RecordProblem, decode_event, decode_json, from_value
from stream.events import BadRecord, WatchEvent

BATCH = 256
CUT_AT_END = "record is cut short (the log ends before it closes)"
LogItem = WatchEvent | BadRecord


class LogUnreadable(Exception):
    """A log that cannot be opened or read at all (missing, a folder, no permission)."""


@dataclass
class LogSource:
    """One LOG argument, opened. `name` is how messages refer to it."""

    name: str
    stream: IO[bytes]
    yaml: bool

    def close(self) -> None:
        if self.stream is not sys.stdin.buffer:
            self.stream.close()


def open_log(path: str, stdin: IO[bytes] | None = None) -> LogSource:
    """Open a log and detect compression; raise LogUnreadable with a one-line reason."""
    name = "<stdin>" if path == "-" else path
    try:
        raw: IO[bytes] = (stdin or sys.stdin.buffer) if path == "-" else open(path, "rb")  # noqa: SIM115
    except IsADirectoryError:
        raise LogUnreadable(f"{name}: is a directory, not a log") from None
    except OSError as exc:
        raise LogUnreadable(f"{name}: cannot open: {exc.strerror or exc}") from None
    buffered = raw if hasattr(raw, "peek") else _Buffered(raw)
    try:
        head = buffered.peek(2)[:2]  # type: ignore[attr-defined]
    except OSError as exc:
        raise LogUnreadable(f"{name}: cannot read: {exc.strerror or exc}") from None
    stream: IO[bytes] = buffered
    if head == b"\x1f\x8b":
        stream = gzip.GzipFile(fileobj=buffered, mode="rb")  # type: ignore[assignment]
    base = name[:-3] if name.endswith(".gz") else name
    is_yaml = base.endswith((".yaml", ".yml"))
    if not is_yaml and not base.endswith((".json", ".jsonl", ".ndjson", ".log")):
        is_yaml = _looks_like_yaml(stream)
    return LogSource(name=name, stream=stream, yaml=is_yaml)


def _Buffered(raw: IO[bytes]) -> IO[bytes]:
    return io.BufferedReader(cast(Any, raw))


def _looks_like_yaml(stream: IO[bytes]) -> bool:
    """Sniff a log with no telling name: JSON starts with `{` or `[`, anything else is read as YAML."""
    try:
        head = stream.peek(4096)  # type: ignore[attr-defined]
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile):
        return False
    stripped = head.lstrip()
    return bool(stripped) and stripped[:1] not in (b"{", b"[")


def read_log(source: LogSource, live: bool = False) -> Iterator[list[LogItem]]:
    """Yield batches of events and bad records, in the log's order.

    `live` (a pipe that someone is still writing) hands over every record as soon as its line is
    complete; otherwise the log is read in large chunks and its records handed over in batches.
    """
    if source.yaml:
        yield from _batched(_read_yaml(source), 1 if live else BATCH)
    else:
        yield from _read_json(source, live)


def _batched(items: Iterable[LogItem], size: int) -> Iterator[list[LogItem]]:
    batch: list[LogItem] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


CHUNK = 1 << 22


def _lines(stream: IO[bytes], live: bool) -> Iterator[tuple[list[Any], bool]]:
    """Lists of lines (bytes or memoryviews), without their newlines; the flag marks a last line that had none.

    A file is read 4 MB at a time and its lines are handed out as memoryview slices of the chunk: msgspec
    decodes from a buffer, so a 10 KB Pod line is never copied. A live pipe is read line by line so that
    nothing waits for a chunk to fill.
    """
    if live:
        for line in stream:
            if line.endswith(b"\n"):
                yield [line[:-1]], False
            else:
                yield [line], True
        return
    mapped = map_file(stream)
    if mapped is not None:
        yield from _mapped_lines(mapped)
        return
    rest = b""
    while chunk := stream.read(CHUNK):
        buffer = rest + chunk if rest else chunk
        view = memoryview(buffer)
        find = buffer.find
        lines: list[Any] = []
        position = 0
        while (end := find(b"\n", position)) >= 0:
            lines.append(view[position:end])
            position = end + 1
        rest = buffer[position:]
        if lines:
            yield lines, False
    if rest:
        yield [rest], True


def map_file(stream: IO[bytes]) -> mmap.mmap | None:
    """A plain file, mapped: its lines are then decoded straight from the page cache, with no copy."""
    if not isinstance(stream, io.BufferedReader) or not isinstance(stream.raw, io.FileIO):
        return None
    try:
        return mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # empty, or not mappable: read it instead
        return None


def _mapped_lines(mapped: mmap.mmap) -> Iterator[tuple[list[Any], bool]]:
    view = memoryview(mapped)
    find = mapped.find
    size = len(mapped)
    position = released = 0
    while position < size:
        stop = min(position + CHUNK, size)
        lines: list[Any] = []
        while position < stop and (end := find(b"\n", position)) >= 0:
            lines.append(view[position:end])
            position = end + 1
        if lines:
            yield lines, False
            # those lines are decoded now: drop their pages from this mapping, so a replay of a large
            # log does not hold the whole file in its resident set (the page cache keeps them anyway)
            upto = position - position % mmap.PAGESIZE
            if upto > released and hasattr(mapped, "madvise"):
                mapped.madvise(mmap.MADV_DONTNEED, released, upto - released)
                released = upto
        if position < size and find(b"\n", position) < 0:
            yield [bytes(view[position:])], True
            return


def _emit(decoded: Decoded, where: str) -> Iterator[LogItem]:
    events, problems = decoded
    yield from events
    for problem in problems:
        yield BadRecord(where, problem)


def _read_json(source: LogSource, live: bool) -> Iterator[list[LogItem]]:
    """JSON lines, or pretty-printed values whose top-level braces stand at column 0.

    The first record settles the mode: if it is complete on its line, every line is a record, so one cut
    line cannot swallow the rest; otherwise a record runs from a `{` at column 0 to the next `}` there.
    JSON lines take a tight path (one typed decode per line); anything unusual falls back to
    `stream.decode`, which classifies the record and explains a bad one.
    """
    size = 1 if live else BATCH
    name = source.name
    out: list[LogItem] = []
    lineno = 0
    pending: list[bytes] = []
    start = 0
    one_per_line: bool | None = None
    fast = decode_event
    try:
        for lines, unterminated in _lines(source.stream, live):
            for line in lines:
                lineno += 1
                if one_per_line:
                    try:
                        out.append(fast(line))
                    except (msgspec.ValidationError, msgspec.DecodeError):
                        out.extend(explain_line(line, f"{name}:{lineno}", cut=unterminated and line is lines[-1]))
                    if len(out) >= size:
                        yield out
                        out = []
                    continue
                line = bytes(line)
                if pending:
                    if line[:1] == b"}":
                        pending.append(line)
                        out.extend(_decode_at(b"\n".join(pending), f"{name}:{start}"))
                        pending = []
                    elif line[:1] == b"{":
                        problem = f"record is cut short (a new one starts at line {lineno} before it closes)"
                        out.append(BadRecord(f"{name}:{start}", problem))
                        pending, start = [line], lineno
                    else:
                        pending.append(line)
                elif not line or line.isspace():
                    continue
                elif one_per_line is False:
                    if line.rstrip() == b"{":
                        pending, start = [line], lineno
                    else:
                        out.extend(_decode_at(line, f"{name}:{lineno}"))
                else:
                    try:
                        decoded = decode_json(line)
                    except RecordProblem as exc:
                        if line[:1] == b"{" and "cut short" in str(exc) and not unterminated:
                            one_per_line = False
                            pending, start = [line], lineno
                            continue
                        one_per_line = True
                        out.append(BadRecord(f"{name}:{lineno}", CUT_AT_END if unterminated else str(exc)))
                        continue
                    one_per_line = True
                    out.extend(_emit(decoded, f"{name}:{lineno}"))
                if len(out) >= size:
                    yield out
                    out = []
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        out.append(BadRecord(f"{name}:{lineno + 1}", f"cannot read further: {_io_problem(exc)}"))
    else:
        if pending:
            out.append(BadRecord(f"{name}:{start}", CUT_AT_END))
    if out:
        yield out


def read_line(line: bytes | memoryview, where: str, cut: bool) -> Iterator[LogItem]:
    """One line of a JSON-lines log, as `_read_json` reads it: the fast path, else `explain_line`."""
    try:
        return iter((decode_event(line),))
    except (msgspec.ValidationError, msgspec.DecodeError):
        return explain_line(line, where, cut)


def explain_line(line: bytes | memoryview, where: str, cut: bool) -> Iterator[LogItem]:
    """A line of a JSON-lines log that the fast path refused: nothing if blank, else its events or why not.

    `cut` marks the log's last line when it has no newline (what a killed recorder leaves).
    """
    data = bytes(line)
    if not data or data.isspace():
        return iter(())
    return _decode_at(data, where, last=cut)


def is_json_lines(data: mmap.mmap | bytes) -> bool:
    """Whether a log's first record is complete on its line: then `_read_json` reads it as JSON lines."""
    start = 0
    size = len(data)
    while start < size:
        stop = data.find(b"\n", start)
        if stop < 0:
            return False  # a single line without newline: the plain reader decides what it is
        line = data[start:stop]
        if line and not line.isspace():
            try:
                decode_json(line)
            except RecordProblem:
                return False
            return True
        start = stop + 1
    return False


def line_ranges(data: mmap.mmap | bytes, parts: int, smallest: int) -> list[tuple[int, int]]:
    """Byte ranges that cover `data` in about `parts` pieces of at least `smallest` bytes, each ending
    just after a newline (the last one at the end): lines never straddle two ranges."""
    size = len(data)
    step = max(smallest, -(-size // max(parts, 1)))
    ranges: list[tuple[int, int]] = []
    start = 0
    while start < size:
        cut = data.find(b"\n", min(start + step, size) - 1)
        end = size if cut < 0 else cut + 1
        ranges.append((start, end))
        start = end
    return ranges


def _decode_at(data: bytes, where: str, last: bool = False) -> Iterator[LogItem]:
    try:
        decoded = decode_json(data)
    except RecordProblem as exc:
        # a final line with no newline that does not parse is what a killed recorder leaves
        yield BadRecord(where, CUT_AT_END if last else str(exc))
        return
    yield from _emit(decoded, where)


class _Loader(yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader):  # type: ignore[misc]
    """Safe YAML that keeps timestamps as the strings the API server sent."""


def _timestamp_as_text(loader: yaml.BaseLoader, node: yaml.Node) -> Any:
    return loader.construct_scalar(node)  # type: ignore[arg-type]


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_as_text)


def _read_yaml(source: LogSource) -> Iterator[LogItem]:
    document = 0
    try:
        for document, value in enumerate(yaml.load_all(source.stream, Loader=_Loader), 1):
            if value is None:
                continue
            where = f"{source.name}: document {document}"
            try:
                decoded = from_value(value)
            except RecordProblem as exc:
                yield BadRecord(where, str(exc))
                continue
            yield from _emit(decoded, where)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        place = f"{source.name}:{mark.line + 1}" if mark is not None else f"{source.name}: document {document + 1}"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        yield BadRecord(place, f"not valid YAML ({problem}); the rest of this file is skipped")
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        yield BadRecord(f"{source.name}: document {document + 1}", f"cannot read further: {_io_problem(exc)}")


def _io_problem(exc: BaseException) -> str:
    if isinstance(exc, EOFError):
        return "compressed data ends early (truncated gzip)"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
