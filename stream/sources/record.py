"""The recorder: every event a live watch receives, with its arrival time, as a log `replay` reads.

One JSON line per event, written and flushed as it arrives, so a recorder that is killed loses at most
the line it was writing (which `replay` then reports as cut short). List items become ADDED (or, after a
relist, the DELETED/MODIFIED/ADDED events the reflector derived), so a replay of the record goes through
exactly the events the live stages saw. Time passes in a replay as the records' times: the last record,
written at close, is a BOOKMARK that carries only the time the recording ended, so a crash-looping Pod's
recovery window that ended live after the last event ends in the replay too.
"""

from __future__ import annotations

import contextlib
import os
import sys

# a record that says only what time it is: a BOOKMARK, which replay's filter leaves out after its time passed
_CLOCK = b'{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{}},"time":"%s"}'


class Recorder:
    def __init__(self, path: str) -> None:
        """`-` is standard output; anything else is created (or truncated)."""
        if path == "-":
            self._fd = sys.stdout.fileno()
            self._own = False
        else:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            self._own = True
        self.count = 0

    def write(self, record: bytes) -> None:
        data = record + b"\n"
        view = memoryview(data)
        while view:  # one write per event; a short write (a full pipe) goes on where it stopped
            written = os.write(self._fd, view)
            view = view[written:]
        self.count += 1

    def close(self, time: str | None = None) -> None:
        """`time`: when the recording ended, written as a last, time-only record."""
        if time is not None:
            with contextlib.suppress(OSError):  # a closed pipe: nothing more can be told anyway
                self.write(_CLOCK % time.encode())
                self.count -= 1  # not an event
        if self._own:
            os.close(self._fd)
