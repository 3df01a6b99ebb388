"""Time as Kubernetes and kubectl write it: RFC 3339 times, MicroTimes, durations; one module for all of them.

Every layer reads and writes these, so they live at the bottom: the pure core turns an event's time into
seconds and a deadline back into a time (it never reads the clock: `now_*` are for the sources and sinks,
which stamp what they receive and write), the CLI reads durations as kubectl and Go write them.
"""

from __future__ import annotations

import datetime
import math
import re
import time

_DURATION = re.compile(r"((?:\d+(?:\.\d+)?(?:ms|s|m|h))+)")
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def seconds(text: str | None) -> float | None:
    """An RFC 3339 time as seconds since the epoch; None when absent or unreadable."""
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text).timestamp()  # "Z" is read since Python 3.11
    except ValueError:
        return None


def rfc3339(when: float) -> str:
    """Seconds since the epoch as an RFC 3339 UTC time, to the millisecond where it has a fraction."""
    moment = datetime.datetime.fromtimestamp(when, datetime.UTC)
    spec = "seconds" if moment.microsecond == 0 else "milliseconds"
    return moment.isoformat(timespec=spec).replace("+00:00", "Z")


def micro_time(wall: float) -> str:
    """A Unix time as a Kubernetes MicroTime (RFC 3339, UTC, microseconds)."""
    whole = int(wall)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((wall - whole) * 1e6):06d}Z"


def whole_seconds(text: str) -> str:
    """An RFC 3339 time cut to whole seconds, as metav1.Time holds it."""
    return text.partition(".")[0] + "Z" if "." in text else text


def now_rfc3339() -> str:
    """Now, UTC, to the millisecond: the arrival time live events and records carry as `time`."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def now_seconds() -> str:
    """Now, UTC, to the whole second, as metav1.Time writes it."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """Now as a Kubernetes MicroTime."""
    return micro_time(time.time())


def since(text: str) -> float | None:
    """Seconds from an RFC 3339 time to now (never negative); None when unreadable."""
    then = seconds(text)
    return None if then is None else max(0.0, time.time() - then)


class DurationError(ValueError):
    """A duration that is not one: the message says what was given and what is expected."""


def parse_duration(text: str) -> float:
    """A duration as kubectl and Go write it (`30s`, `10m`, `1h30m`, `500ms`), or plain seconds; 0 or more."""
    try:
        value = float(text)
    except ValueError:
        if _DURATION.fullmatch(text.strip()) is None:
            raise DurationError(f"not a duration (like 30s, 10m, 1h): {text!r}") from None
        value = sum(float(n) * _UNITS[u] for n, u in _PART.findall(text))
    if not value >= 0 or math.isinf(value):
        raise DurationError(f"must be 0 or more, not {text}")
    return value
