"""`crashwatch explain`: why a container crashed, read from the output it left (`kubectl logs --previous`).

The output is read in chunks and handed to the cause scanner (pipeline.causes) line by line, so memory
stays bounded whatever its size: a line longer than the scanner reads (scan.MAX_LINE characters) is cut
as it arrives, never held whole. Bytes are decoded as UTF-8, an invalid sequence replaced (a crashed
program may leave a cut multi-byte character); gzip is read as it comes. Data with a NUL byte near its
start is no program's text output and is refused, as replay refuses it.
"""

from __future__ import annotations

import codecs
import gzip
import sys
import zlib
from collections.abc import Iterator
from typing import IO, Literal, cast

import msgspec

from crashwatch import exitcodes
from crashwatch.stderr_log import StderrLogger
from pipeline.causes import Cause, Scanner
from pipeline.causes.scan import MAX_LINE
from sinks.text import printable, value

CHUNK = 1 << 16
SNIFF = CHUNK  # a NUL byte within the first bytes read makes the input binary data

Output = Literal["text", "json", "yaml"]


class Unreadable(Exception):
    """The input cannot be opened or read (EX_NOINPUT), in one line that names it."""


class Binary(Exception):
    """The input is binary data, not a program's output (EX_DATAERR)."""


def run_explain(path: str, output: Output, engine: str | None, log: StderrLogger) -> int:
    name = "<stdin>" if path == "-" else path
    try:
        cause = explain(path, engine)
    except Unreadable as exc:
        log.fatal(str(exc), exitcodes.NOINPUT)
        return exitcodes.NOINPUT
    except Binary as exc:
        log.fatal(f"{name}:1: {exc}", exitcodes.DATAERR)
        return exitcodes.DATAERR
    text = json_object(cause) if output == "json" else yaml_object(cause) if output == "yaml" else text_lines(cause)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        log.fatal(f"cannot write to standard output: {exc.strerror or exc}", exitcodes.IOERR)
        return exitcodes.IOERR
    return exitcodes.OK


def explain(path: str, engine: str | None = None) -> Cause:
    """The cause of the crash whose output is in `path` ('-': standard input)."""
    scanner = Scanner(engine)
    name = "<stdin>" if path == "-" else path
    with _open(path, name) as raw:
        try:
            for line in read_lines(_decompressed(raw), name):
                scanner.feed(line)
        except (OSError, EOFError, zlib.error) as exc:
            raise Unreadable(f"{name}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    return scanner.result()


def read_lines(stream: IO[bytes], name: str) -> Iterator[str]:
    """The lines of a byte stream, without their line endings, each cut to MAX_LINE characters as it is read."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    line: list[str] = []  # the line being read, MAX_LINE characters at most
    size = 0
    started = False  # whether the line being read has begun (a last line without its newline counts)
    offset = 0
    while True:
        chunk = stream.read(CHUNK)
        nul = chunk.find(b"\0", 0, max(SNIFF - offset, 0))
        if nul >= 0:
            raise Binary(f"binary data (a NUL byte at byte {offset + nul:,}), not a program's output: not read further")
        offset += len(chunk)
        text = decoder.decode(chunk, final=not chunk)
        parts = text.split("\n")
        for part in parts[:-1]:
            if size < MAX_LINE:
                line.append(part[: MAX_LINE - size])
            yield "".join(line)
            line, size, started = [], 0, False
        last = parts[-1]
        if last:
            started = True
            if size < MAX_LINE:
                line.append(last[: MAX_LINE - size])
                size += len(line[-1])
        if not chunk:
            break
    if started:
        yield "".join(line)


def json_object(cause: Cause) -> str:
    """`{"class", "certain", "line", "line_number", "hint", "fields"}` on one line, fields as an object."""
    return msgspec.json.encode(_document(cause)).decode() + "\n"


def yaml_object(cause: Cause) -> str:
    """The JSON object's keys as one YAML document, in its order."""
    return msgspec.yaml.encode(_document(cause)).decode()


def _document(cause: Cause) -> dict[str, object]:
    return {
        "class": cause.kind,
        "certain": cause.certain,
        "line": cause.line,
        "line_number": cause.line_number,
        "hint": cause.hint,
        "fields": dict(cause.fields),
    }


def text_lines(cause: Cause) -> str:
    """For people: what status would say, the line it was read from (made printable), the hint, the fields."""
    line = "-" if cause.line_number is None else f"{cause.line_number}: {printable(cause.line or '')}"
    fields = " ".join(f"{name}={value(text)}" for name, text in cause.fields) or "-"
    return (
        f"class: {cause.kind}\n"
        f"cause: {cause.words()}\n"
        f"certain: {'yes' if cause.certain else 'no'}\n"
        f"line: {line}\n"
        f"hint: {cause.hint}\n"
        f"fields: {fields}\n"
    )


def _open(path: str, name: str) -> IO[bytes]:
    if path == "-":
        if sys.stdin is None:
            raise Unreadable(f"{name}: cannot read: standard input is closed")
        try:
            return open(sys.stdin.fileno(), "rb", closefd=False)
        except (OSError, ValueError) as exc:
            raise Unreadable(f"{name}: cannot read: {exc}") from None
    try:
        return open(path, "rb")
    except IsADirectoryError:
        raise Unreadable(f"{name}: is a directory, not a container's output") from None
    except OSError as exc:
        raise Unreadable(f"{name}: cannot open: {exc.strerror or exc}") from None


def _decompressed(raw: IO[bytes]) -> IO[bytes]:
    """The stream itself, or its gzip content (a log kept compressed), told by its first two bytes."""
    peek = getattr(raw, "peek", None)
    if peek is not None and bytes(peek(2)[:2]) == b"\x1f\x8b":
        return cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb"))
    return raw
