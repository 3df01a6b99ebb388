"""stderr for every command: the historic text line, or one JSON object per line (`--log-format json`),
and only messages at `--log-level` or above.

Text is what crashwatch always wrote (`crashwatch: MESSAGE`, made printable on one line), so scripts and
tests that read it see no change. JSON is for log collectors: `time` (RFC 3339, UTC, microseconds),
`level`, `msg`, and `object` ({kind, namespace, name}) when the message is about one. Everything that
reaches stderr goes through here, errors that end the program included (crashwatch.cli), so the format is
decided in one place. A stream that cannot be written any more (closed, a full disk) loses the message:
there is nowhere else to say it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Literal, TextIO

import msgspec

from sinks.text import printable
from stream.model.messages import LEVELS, About, Level, Logger
from stream.model.times import now_micro

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")


class _Object(msgspec.Struct):
    kind: str
    namespace: str
    name: str


class _Line(msgspec.Struct, omit_defaults=True):
    time: str
    level: str
    msg: str
    object: _Object | None = None
    exit_code: int | None = None


_encode = msgspec.json.Encoder().encode


class StderrLogger(Logger):
    def __init__(
        self,
        stream: TextIO | None,
        format: LogFormat = "text",
        level: Level = "info",
        clock: Callable[[], str] | None = None,
    ) -> None:
        self.stream = stream
        self.format = format
        self.shown = LEVELS.index(level)
        self.clock = clock or now_micro

    def enabled(self, level: Level) -> bool:
        return LEVELS.index(level) <= self.shown

    def __call__(self, message: str, level: Level = "info", about: About | None = None) -> None:
        if LEVELS.index(level) <= self.shown:
            self.write(self.line(message, level, about))

    def fatal(self, message: str, code: int) -> None:
        """The one line of an error that ends the program with exit `code`: shown at every level."""
        self.write(self.line(message, "error", None, code))

    def line(self, message: str, level: Level, about: About | None, code: int | None = None) -> str:
        if self.format == "text":
            return f"crashwatch: {printable(message)}\n"
        obj = _Object(*about) if about is not None else None
        return _encode(_Line(self.clock(), level, message, obj, code)).decode() + "\n"

    def write(self, text: str) -> None:
        if self.stream is None:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.stream = None


def stderr_logger(format: LogFormat = "text", level: Level = "info") -> StderrLogger:
    return StderrLogger(sys.stderr, format, level)
