"""Replaying a large JSON-lines log with its decoding spread over worker processes.

Decoding ~10 KB Pods is most of a replay's work, and it holds no state: each worker process maps the log,
decodes byte ranges of whole lines with the serial reader's decoder, and reduces each Pod event to the
view the filter compares (`pipeline.views.pod_view`), which it sends back as a compact msgpack array
(~450 bytes instead of ~10 KB). The main process hands those views, in log order, to the one event filter;
every other line (other kinds, blank, bad or cut-short records) it reads itself from its own mapping
through the serial reader's per-line code, so messages and line numbers are the same either way.

Only plain, uncompressed JSON-lines files take this path; pipes, gzip, YAML and kubectl's pretty output
are read serially. Workers are forked before any thread exists in the replay (the pool is made once,
before the first wait), so the fork is safe.
"""

from __future__ import annotations

import mmap
import multiprocessing
import os
from collections import deque
from collections.abc import AsyncGenerator
from concurrent.futures import Future, ProcessPoolExecutor

import anyio.to_thread
import msgspec

from pipeline.filter import PodObservation
from pipeline.views import pod_view
from stream.decode import decode_event
from stream.events import BadRecord, WatchEvent
from stream.logs import LogSource, line_ranges, range_lines, read_line
from stream.objects import Pod

RANGE_BYTES = 4 << 20  # about 430 realistic Pod events: a few milliseconds of a worker's time
AUTO_MIN_BYTES = 32 << 20  # below this, starting workers costs more than it saves
Item = WatchEvent | PodObservation | BadRecord


class _RawLine(msgspec.Struct, array_like=True, gc=False):
    """A line the worker leaves to the main process: its number in the range, its bytes, and how many
    of the range's observations come before it."""

    line: int
    start: int
    end: int
    before: int


class _RangeResult(msgspec.Struct, array_like=True, gc=False):
    lines: int
    observations: list[PodObservation]
    raw: list[_RawLine]


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(_RangeResult).decode


class LogChanged(Exception):
    """The log was modified while workers were reading it."""


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# --- in the worker processes --------------------------------------------------------------------------

_mapping: tuple[str, tuple[int, int, int], mmap.mmap] | None = None


def _map(path: str, identity: tuple[int, int, int]) -> mmap.mmap:
    global _mapping
    if _mapping is not None and _mapping[:2] == (path, identity):
        return _mapping[2]
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if (st.st_dev, st.st_ino, st.st_size) != identity:
            raise LogChanged(f"{path}: changed while being read")
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if _mapping is not None:
        _mapping[2].close()
    _mapping = (path, identity, mapped)
    return mapped


def _decode_range(path: str, identity: tuple[int, int, int], start: int, end: int) -> bytes:
    data = _map(path, identity)
    view = memoryview(data)
    observations: list[PodObservation] = []
    raw: list[_RawLine] = []
    lines = 0
    try:
        for line_start, line_end in range_lines(data, start, end):
            lines += 1
            try:
                event = decode_event(view[line_start:line_end])
            except (msgspec.ValidationError, msgspec.DecodeError):
                raw.append(_RawLine(lines, line_start, line_end, len(observations)))
                continue
            obj = event.object
            if type(obj) is Pod:
                observations.append(PodObservation(event.type, pod_view(obj), event.time))
            else:
                raw.append(_RawLine(lines, line_start, line_end, len(observations)))
    finally:
        view.release()
    # decoded: drop these pages from this process's resident set (the page cache keeps them)
    aligned = start - start % mmap.PAGESIZE
    if hasattr(data, "madvise"):
        data.madvise(mmap.MADV_DONTNEED, aligned, end - aligned)
    return _encode(_RangeResult(lines, observations, raw))


# --- in the replaying process ---------------------------------------------------------------------------


class ParallelDecoder:
    """A pool of decoding workers for one replay; `read` yields a log's items in order, in batches."""

    def __init__(self, jobs: int, range_bytes: int = RANGE_BYTES) -> None:
        self.jobs = jobs
        self.range_bytes = range_bytes
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> ParallelDecoder:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            methods = multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
            self._pool = ProcessPoolExecutor(self.jobs, mp_context=context)
        return self._pool

    async def read(self, source: LogSource, mapped: mmap.mmap) -> AsyncGenerator[list[Item], None]:
        path = source.stream.name
        st = os.fstat(source.stream.fileno())
        identity = (st.st_dev, st.st_ino, st.st_size)
        size = len(mapped)
        cut_at_end = size > 0 and mapped[size - 1 : size] != b"\n"
        ranges = iter(line_ranges(mapped, max(self.jobs * 4, size // self.range_bytes), self.range_bytes // 64))
        pool = self._executor()
        pending: deque[Future[bytes]] = deque()

        def submit() -> None:
            span = next(ranges, None)
            if span is not None:
                pending.append(pool.submit(_decode_range, path, identity, *span))

        for _ in range(self.jobs * 3):
            submit()
        base = 0
        try:
            while pending:
                future = pending.popleft()
                result = _decode(await anyio.to_thread.run_sync(future.result, abandon_on_cancel=True))
                submit()
                observations = result.observations
                if not result.raw:
                    base += result.lines
                    yield observations  # type: ignore[misc]
                    continue
                items: list[Item] = []
                taken = 0
                for raw in result.raw:
                    items += observations[taken : raw.before]
                    taken = raw.before
                    cut = cut_at_end and raw.end == size
                    items += read_line(mapped[raw.start : raw.end], f"{source.name}:{base + raw.line}", cut)
                items += observations[taken:]
                base += result.lines
                yield items
        finally:
            for future in pending:
                future.cancel()
