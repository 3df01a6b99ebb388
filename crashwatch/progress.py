"""The progress line of a long replay, on a terminal: on a line of its own, never in an output line.

It is redrawn at most once a second, in place (`\\r`, the line cleared first), and cleared before
anything else is written to the terminal: a verdict line on stdout (`Cleared` wraps stdout) or a message
on stderr. Where a log's size is known (a regular file, compressed or not: its bytes read so far), it
says how far the replay is, as a percentage, and at what rate; from a pipe, the records and the rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO, TextIO

from sinks.text import printable

# how far the replay is in the log being read: (bytes read, the log's size), None when not known
Where = Callable[[], tuple[int, int] | None]


@dataclass
class Progress:
    err: TextIO
    enabled: bool
    logs: int = 1
    records: int = 0
    started: float = field(default_factory=time.monotonic)
    shown: float = field(default_factory=time.monotonic)
    drawn: bool = False
    _names: list[str] = field(default_factory=list)

    def add(self, name: str, count: int, where: Where) -> None:
        self.records += count
        if not self.enabled:
            return
        if not self._names or self._names[-1] != name:
            self._names.append(name)
        now = time.monotonic()
        if now - self.shown < 1.0:
            return
        self.shown = now
        self.err.write("\r\033[K" + self.line(name, where(), now - self.started))
        self.err.flush()
        self.drawn = True

    def line(self, name: str, position: tuple[int, int] | None, elapsed: float) -> str:
        """`crashwatch: replaying LOG (2 of 3): 42% of 1.2 GB, 30,180 records (41,000/s)`."""
        which = f" ({len(self._names)} of {self.logs})" if self.logs > 1 else ""
        rate = f" ({self.records / elapsed:,.0f}/s)" if elapsed > 0 else ""
        head = f"crashwatch: replaying {printable(name, 200)}{which}: "
        if position is not None and position[1] > 0:
            done, size = position
            return f"{head}{min(100, done * 100 // size)}% of {_bytes(size)}, {self.records:,} records{rate}"
        return f"{head}{self.records:,} records{rate}"

    def clear(self) -> None:
        if self.drawn:
            self.err.write("\r\033[K")
            self.err.flush()
            self.drawn = False


def _bytes(size: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


class Cleared:
    """Standard output that clears the progress line before each write: when both go to one terminal,
    a verdict line must start on a line of its own."""

    def __init__(self, out: BinaryIO, progress: Progress) -> None:
        self.out, self.progress = out, progress

    def write(self, data: bytes) -> int:
        self.progress.clear()
        return self.out.write(data)

    def flush(self) -> None:
        self.out.flush()
