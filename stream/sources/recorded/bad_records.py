"""What a log's readers hand on (an event, a crashed run's output, or a bad record), and the words of the
bad records they share.

Every format says "too long", "binary data", "cut short at the end" and "cannot read further" the same
way, in one line, so these words live in one place; when to say them is left to each reader.
"""

from __future__ import annotations

from stream.model.decode import Decoded
from stream.model.events import BadRecord, CrashOutput, WatchEvent

LogItem = WatchEvent | CrashOutput | BadRecord
CUT_AT_END = "record is cut short (the log ends before it closes)"


def size_text(size: int) -> str:
    """A byte count as kubectl writes a quantity, when it is a round one (16Mi), else in bytes."""
    for unit, shift in (("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return f"{size:,} bytes"


def too_large(size: int | None, limit: int, what: str = "record") -> str:
    """The message for a record longer than the limit (of `size` bytes, when that is known)."""
    length = "longer than" if size is None else f"{size:,} bytes, more than"
    return f"{what} is {length} the limit of {size_text(limit)} (--max-record-size): skipped"


def binary_problem(offset: int | None) -> str:
    """The message for binary data: where it starts, when that is known (a log's first line)."""
    at = "" if offset is None else f" at byte {offset:,}"
    return f"binary data (a NUL byte{at}), not a text log of watch events or objects: not read further"


def emit(decoded: Decoded, where: str) -> list[LogItem]:
    """A record's events, then its problems as bad records at its place."""
    events, problems = decoded
    items: list[LogItem] = list(events)
    items.extend(BadRecord(where, problem) for problem in problems)
    return items


def io_problem(exc: BaseException) -> str:
    """A read error in a few words (the system's own, when it has them)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
