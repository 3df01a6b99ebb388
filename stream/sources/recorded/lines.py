"""A log's content cut into lines: mapped from a plain file, read in chunks from a stream, or line by line
from a live pipe, and byte ranges of whole lines for worker processes.

Every reader of records reads lines, and the bound on a line is kept here once: no line longer
than the limit is ever held (it is handed on as `Oversized`, its size alone), a long line is never copied
again and again, and a line of binary data that may never end stops the read (`Binary`). What the lines
say is left to the readers of JSON and YAML.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from typing import IO, Any

from stream.sources.recorded.limits import CHUNK, MAX_RECORD
from stream.sources.recorded.source import LogSource


class Binary(bytes):
    """In place of a line being skipped (longer than the limit) once it shows a NUL byte: binary data,
    which may never end (`/dev/zero`), so reading the log stops there."""


class Oversized(bytes):
    """A line longer than the limit, in place of its content (never read into memory): `size` bytes, or
    at least that many when it runs to the end of the log."""

    size: int

    def __new__(cls, size: int) -> Oversized:
        line = super().__new__(cls)
        line.size = size
        return line


Lines = Iterator[tuple[list[Any], bool]]


def log_lines(source: LogSource, live: bool) -> Lines:
    """Lists of lines (bytes or memoryviews, or `Oversized`), without their newlines; the flag marks a
    last line that had none.

    A plain file is mapped and its lines handed out as memoryview slices of the mapping: msgspec decodes
    from a buffer, so a 10 KB Pod line is never copied. Other streams are read 4 MB at a time (a line
    that spans chunks is joined once, when its end comes); a live pipe line by line, so that nothing
    waits for a chunk to fill. No line longer than the limit is ever held.
    """
    limit = source.max_record
    if live:
        return _live_lines(source.stream, limit)
    mapped = map_file(source)
    if mapped is not None:
        return _mapped_lines(mapped, source.offset, limit)
    return _chunked_lines(source.stream, limit)


def _live_lines(stream: IO[bytes], limit: int) -> Lines:
    while line := stream.readline(limit + 1):
        if line.endswith(b"\n"):
            yield [line[:-1]], False
        elif len(line) <= limit:
            yield [line], True  # the end of the log, without a newline
        else:
            skipped = len(line)
            if b"\x00" in line:
                yield [Binary()], True
                return
            while more := stream.readline(CHUNK):
                if more.endswith(b"\n"):
                    yield [Oversized(skipped + len(more) - 1)], False
                    break
                if b"\x00" in more:
                    yield [Binary()], True
                    return
                skipped += len(more)
            else:
                yield [Oversized(skipped)], True
                return


def _chunked_lines(stream: IO[bytes], limit: int) -> Lines:
    held: list[bytes] = []  # the pieces of a line that spans chunks: joined once, when it ends
    size = 0
    skipping = False  # the line being read is longer than the limit: nothing of it is held
    while chunk := stream.read(CHUNK):
        lines: list[Any] = []
        position = 0
        if held or skipping:
            end = chunk.find(b"\n")
            if end < 0:
                if (skipping or size + len(chunk) > limit) and b"\x00" in chunk:
                    yield [Binary()], True  # a line of binary data, which may never end
                    return
                size += len(chunk)
                if not skipping and size > limit:
                    held, skipping = [], True
                elif not skipping:
                    held.append(chunk)
                continue
            size += end
            if skipping or size > limit:
                lines.append(Oversized(size))
            else:
                held.append(chunk[:end])
                lines.append(b"".join(held))
            held, size, skipping, position = [], 0, False, end + 1
        view = memoryview(chunk)
        find = chunk.find
        while (end := find(b"\n", position)) >= 0:
            lines.append(view[position:end] if end - position <= limit else Oversized(end - position))
            position = end + 1
        if position < len(chunk):
            size = len(chunk) - position
            if size > limit:
                skipping = True
            else:
                held = [chunk[position:]]
        if lines:
            yield lines, False
    if skipping:
        yield [Oversized(size)], True
    elif held:
        yield [b"".join(held)], True


def map_file(source: LogSource) -> mmap.mmap | None:
    """A plain file, mapped: its lines are then decoded straight from the page cache, with no copy."""
    if source.file is None:
        return None
    try:
        mapped = mmap.mmap(source.file.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # empty, or not mappable: read it instead
        return None
    if len(mapped) <= source.offset:
        mapped.close()
        return None
    return mapped


_WINDOW = 1 << 22


def line_end(mapped: mmap.mmap, start: int, stop: int, limit: int) -> tuple[int, bool]:
    """Where the line that starts at `start` ends (its newline, or `stop`), and whether it is longer than
    `limit`. The scan of a long line goes 4 MB at a time and drops the pages it has passed from this
    process's resident set, so a gigabyte on one line costs no gigabyte of memory."""
    end = mapped.find(b"\n", start, min(stop, start + limit + 1))
    if end >= 0:
        return end, False
    if stop - start <= limit:
        return stop, False
    position = start + limit + 1
    while position < stop:
        window = min(stop, position + _WINDOW)
        end = mapped.find(b"\n", position, window)
        _release(mapped, start, window if end < 0 else end)
        if end >= 0:
            return end, True
        position = window
    return stop, True


def _release(mapped: mmap.mmap, start: int, end: int) -> None:
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    last = end - end % mmap.PAGESIZE
    if last > first and hasattr(mapped, "madvise"):
        mapped.madvise(mmap.MADV_DONTNEED, first, last - first)


def _mapped_lines(mapped: mmap.mmap, start: int, limit: int) -> Lines:
    view = memoryview(mapped)
    find = mapped.find
    size = len(mapped)
    position = start
    released = start - start % mmap.PAGESIZE
    while position < size:
        stop = min(position + CHUNK, size)
        lines: list[Any] = []
        last = False
        while position < stop:
            end = find(b"\n", position, position + limit + 1)
            if end < 0:
                end, oversized = line_end(mapped, position, size, limit)
                last = end == size
                lines.append(Oversized(end - position) if oversized else bytes(view[position:end]))
            else:
                lines.append(view[position:end])
            position = end + 1
        if lines:
            yield lines, last
            # those lines are decoded now: drop their pages from this mapping, so a replay of a large
            # log does not hold the whole file in its resident set (the page cache keeps them anyway)
            upto = min(position, size)
            upto -= upto % mmap.PAGESIZE
            if upto > released and hasattr(mapped, "madvise"):
                mapped.madvise(mmap.MADV_DONTNEED, released, upto - released)
                released = upto


def line_ranges(
    data: mmap.mmap, parts: int, smallest: int, start: int = 0, limit: int = MAX_RECORD
) -> list[tuple[int, int]]:
    """Byte ranges that cover `data` from `start` in about `parts` pieces of at least `smallest` bytes,
    each ending just after a newline (the last one at the end): lines never straddle two ranges."""
    size = len(data)
    step = max(smallest, -(-(size - start) // max(parts, 1)))
    ranges: list[tuple[int, int]] = []
    while start < size:
        from_ = min(start + step, size) - 1
        cut, _ = line_end(data, from_, size, limit)
        end = min(cut + 1, size)
        ranges.append((start, end))
        start = end
    return ranges
