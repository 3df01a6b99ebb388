"""How every layer says something on stderr: a message, how much it matters, and the object it is about.

The reflector, the sinks and the CLI all say things (a retry, a write, a lost lease). They are handed one
`Logger` and call it with the message alone, or with a level and the object too; how it is written (the
historic text line, or one JSON object per line) and which levels are shown is decided once, by the CLI
(crashwatch/stderr_log.py). A plain `Callable[[str], None]` still works wherever a Logger is taken: `logger()`
wraps it, and it is given the message of every level but debug, without the level and object (so tests
and library callers may pass `list.append`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

Level = Literal["error", "warning", "info", "debug"]
LEVELS: tuple[Level, ...] = ("error", "warning", "info", "debug")  # most to least important


class About(NamedTuple):
    """The object a message is about, as `kubectl get KIND -n NAMESPACE NAME` would name it."""

    kind: str
    namespace: str
    name: str


class Logger:
    """Says one message; this base says nothing. Callable with the message alone, like a plain function."""

    def __call__(self, message: str, level: Level = "info", about: About | None = None) -> None:
        pass


class _Plain(Logger):
    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say

    def __call__(self, message: str, level: Level = "info", about: About | None = None) -> None:
        if level != "debug":  # what the default level, info, shows
            self.say(message)


def logger(log: Callable[[str], None] | None) -> Logger:
    """`log` as a Logger: itself when it is one, else a wrapper that hands on the message alone."""
    if isinstance(log, Logger):
        return log
    return _Plain(log) if log is not None else Logger()
