"""A log as every reader takes it (`LogSource`): its name for messages, its content as UTF-8, and the plain
file behind it when there is one.

It stands apart from opening.py so that the readers of lines and records can take a log without knowing
how it was opened; how to read it is theirs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import IO

from stream.sources.recorded.layers import Damageable
from stream.sources.recorded.limits import MAX_RECORD

DEFAULT_NAMESPACE = "default"  # where a manifest's object without a namespace goes, as with kubectl


@dataclass
class LogSource:
    """One LOG argument, opened. `name` is how messages refer to it; `stream` gives its content (already
    decompressed and in UTF-8); `file` is the plain regular file behind it, when there is one and
    `stream` reads it unchanged from `offset` on, so it can be mapped and handed to worker processes,
    which open it again by `path`."""

    name: str
    stream: IO[bytes]
    yaml: bool
    max_record: int = MAX_RECORD
    namespace: str = DEFAULT_NAMESPACE  # for a manifest's objects that name none (a bare object, a List item)
    live: bool = False
    file: IO[bytes] | None = None
    path: str = ""
    offset: int = 0
    layers: list[Damageable] = field(default_factory=list)
    closing: list[IO[bytes]] = field(default_factory=list)
    binary: str | None = None  # what says, from its first line, that it is no text at all (then it is not read)

    def damage(self) -> str | None:
        """What stopped the content early (truncated or corrupt compressed data, broken UTF-16), if anything."""
        for layer in self.layers:
            if layer.damage is not None:
                return layer.damage
        return None

    def close(self) -> None:
        for stream in self.closing:
            stream.close()
