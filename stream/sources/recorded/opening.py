"""Opening a log: a file or standard input, its compression and encoding undone, its format sniffed.

Every way a log cannot be opened or read at all is one `LogUnreadable` with a one-line reason here (the
exit code 66 of replay), so that readers only ever meet a log that opened. The layers that undo
compression and encodings are layers.py's, the telling of the format sniffing.py's, the reading of its
lines and records the other modules'.
"""

from __future__ import annotations

import io
import os
import stat
import sys
from typing import IO, Any, cast

from stream.sources.recorded.layers import Decompressed, Prefixed, Transcoded, compression_of, encoding_of
from stream.sources.recorded.limits import CHUNK, MAX_RECORD, SNIFF
from stream.sources.recorded.sniffing import binary_head, read_head, sniff_yaml
from stream.sources.recorded.source import DEFAULT_NAMESPACE, LogSource


class LogUnreadable(Exception):
    """A log that cannot be opened or read at all (missing, a folder, no permission, a closed stdin)."""


def _own_stdin() -> IO[bytes]:
    """Standard input as a reader of our own on the same descriptor: a daemon thread blocked in a read
    of it holds its lock, and Python aborts the process at exit when the lock it must take to close
    `sys.stdin` is held (a replay that stops early, on a closed stdout, while its reader still reads)."""
    try:
        return open(sys.stdin.fileno(), "rb", closefd=False)
    except (OSError, ValueError, io.UnsupportedOperation):  # not a descriptor (an embedding, a test's stand-in)
        return sys.stdin.buffer


def open_log(
    path: str, stdin: IO[bytes] | None = None, max_record: int = MAX_RECORD, namespace: str = DEFAULT_NAMESPACE
) -> LogSource:
    """Open a log, detect its compression, encoding and format; raise LogUnreadable with a one-line reason."""
    name = "<stdin>" if path == "-" else path
    closing: list[IO[bytes]] = []
    if path == "-":
        if stdin is None:
            if sys.stdin is None:  # started with its standard input closed
                raise LogUnreadable(f"{name}: cannot read: standard input is closed")
            stdin = _own_stdin()
            if stdin is not sys.stdin.buffer:
                closing.append(stdin)
        raw = stdin
    else:
        try:
            raw = open(path, "rb")  # noqa: SIM115
        except IsADirectoryError:
            raise LogUnreadable(f"{name}: is a directory, not a log") from None
        except OSError as exc:
            raise LogUnreadable(f"{name}: cannot open: {exc.strerror or exc}") from None
        closing.append(raw)
    try:
        source = _open(name, raw, closing, max_record)
        source.namespace = namespace
        return source
    except LogUnreadable:
        for stream in closing:
            stream.close()
        raise
    except OSError as exc:
        for stream in closing:
            stream.close()
        raise LogUnreadable(f"{name}: cannot read: {exc.strerror or exc}") from None


def _open(name: str, raw: IO[bytes], closing: list[IO[bytes]], max_record: int) -> LogSource:
    stream = raw if hasattr(raw, "peek") else io.BufferedReader(cast(Any, raw))
    source = LogSource(name=name, stream=stream, yaml=False, max_record=max_record, closing=closing)
    mode = _mode(stream)
    plain = mode is not None and stat.S_ISREG(mode)
    source.live = mode is not None and not plain  # a pipe, a terminal, a socket: records as they come
    head = _peek(stream, 6)
    compression = compression_of(head)
    if compression == "zstd":
        raise LogUnreadable(f"{name}: compressed with zstd, which crashwatch does not read: decompress it first")
    if compression is not None:
        layer = Decompressed(stream, compression)
        source.layers.append(layer)
        stream = io.BufferedReader(layer, CHUNK)
        plain = False
    head = _peek(stream, 4)
    encoding = encoding_of(head)
    skip = 0
    if encoding == "utf-8-sig":
        skip = 3
    elif encoding is not None:
        text = Transcoded(stream, encoding)
        source.layers.append(text)
        stream = io.BufferedReader(text, CHUNK)
        plain = False
    if plain:
        source.file = stream
        source.offset = stream.tell() + skip
        fd = stream.fileno()
        source.path = f"/dev/fd/{fd}" if name == "<stdin>" else name
        sniffed = os.pread(fd, SNIFF, source.offset)
        if skip:
            stream.read(skip)
    else:
        if skip:
            stream.read(skip)
        sniffed = read_head(stream)
        stream = io.BufferedReader(Prefixed(sniffed, stream))
    source.stream = stream
    source.yaml = sniff_yaml(sniffed, name)
    source.binary = binary_head(sniffed)
    return source


def _mode(stream: IO[bytes]) -> int | None:
    try:
        return os.fstat(stream.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return None


def _peek(stream: IO[bytes], size: int) -> bytes:
    return bytes(stream.peek(size)[:size])  # type: ignore[attr-defined]
