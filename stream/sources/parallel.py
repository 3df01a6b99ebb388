"""Reading a large JSON-lines log with its decoding spread over worker processes.

Decoding ~10 KB Pods is most of a replay's work, and it holds no state: each worker process maps the log,
decodes byte ranges of whole lines with the serial reader's decoder, and reduces each Pod event with the
`reduce` function it was given (the caller's: the pipeline's view of a Pod, msgpack-encoded, ~480 bytes
instead of ~10 KB). The main process yields those `ReducedPod`s in log order; every other line (other
kinds, blank, bad or cut-short records) it reads itself from its own mapping through the serial reader's
per-line code, so messages and line numbers are the same either way. Whether a reduced Pod changes
anything is not decided here: the pipeline's filter compares it with the last one it passed on.

Only plain, uncompressed JSON-lines files take this path; pipes, gzip, YAML and kubectl's pretty output
are read serially. Workers are forked once per replay, from the event loop's thread while no other
thread runs, and talk to it over socket pairs that the loop itself waits on.
"""

from __future__ import annotations

import mmap
import multiprocessing
import multiprocessing.process
import os
import signal
import socket
import struct
from collections.abc import AsyncGenerator, Callable

import anyio
import msgspec

from stream.model.decode import FAST_ERRORS, read_event
from stream.model.events import BadRecord, CrashOutput, ReducedPod, WatchEvent, pod_key
from stream.model.objects import Pod
from stream.sources.recorded import JsonRecords, LogSource, Oversized, line_end, line_ranges

RANGE_BYTES = 4 << 20  # about 430 realistic Pod events: a few milliseconds of a worker's time
AUTO_MIN_BYTES = 32 << 20  # below this, starting workers costs more than it saves
Item = WatchEvent | ReducedPod | CrashOutput | BadRecord  # a crash's output: a line the main process reads
# A Pod to the encoded form the consumer of ReducedPod decodes; a ValueError leaves the Pod's line to the
# main process, which reads it as the serial reader does (its consumer then says what is wrong with it)
Reduce = Callable[[Pod], bytes]


class _RawLine(msgspec.Struct, array_like=True, gc=False):
    """A line the worker leaves to the main process: its number in the range, its bytes, and how many
    of the range's Pod lines come before it."""

    line: int
    start: int
    end: int
    before: int


class _RangeResult(msgspec.Struct, array_like=True, gc=False):
    lines: int
    pods: list[ReducedPod]
    raw: list[_RawLine]


_encode = msgspec.msgpack.Encoder().encode
_decode_range_result = msgspec.msgpack.Decoder(_RangeResult).decode


class LogChanged(Exception):
    """The log was modified while workers were reading it."""


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# --- in the worker processes --------------------------------------------------------------------------

_mapping: tuple[str, tuple[int, int], int, mmap.mmap] | None = None


def _map(path: str, identity: tuple[int, int], size: int) -> mmap.mmap:
    """The log mapped as far as the replay saw it (a log still being appended to is read up to there)."""
    global _mapping
    if _mapping is not None and _mapping[:3] == (path, identity, size):
        return _mapping[3]
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if (st.st_dev, st.st_ino) != identity or st.st_size < size:
            raise LogChanged(f"{path}: changed while being read")
        mapped = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    if _mapping is not None:
        _mapping[3].close()
    _mapping = (path, identity, size, mapped)
    return mapped


def _decode_range(
    path: str, identity: tuple[int, int], size: int, start: int, end: int, limit: int, reduce: Reduce
) -> bytes:
    """A range's Pod events, reduced, and where its other lines are. Only a line that
    starts with `{` is decoded here (any other may belong to a pretty-printed record, which the main
    process reads), and none longer than the limit."""
    data = _map(path, identity, size)
    view = memoryview(data)
    pods: list[ReducedPod] = []
    raw: list[_RawLine] = []
    lines = 0
    find = data.find
    line_start = start
    try:
        while line_start < end:
            stop = find(b"\n", line_start, min(end, line_start + limit + 1))
            if stop < 0:  # the log's last line, without a newline, or one longer than the limit
                stop, oversized = line_end(data, line_start, end, limit)
            else:
                oversized = False
            lines += 1
            event: WatchEvent | None = None
            if not oversized and data[line_start] == 0x7B:  # {
                try:
                    event = read_event(view[line_start:stop])
                except FAST_ERRORS:
                    event = None
            if event is not None and isinstance(event.object, Pod):
                pod = event.object
                try:
                    reduced = msgspec.Raw(reduce(pod))
                except ValueError:  # what the caller cannot reduce, the main process reads as a serial reader
                    pass
                else:
                    meta = pod.metadata
                    pods.append(ReducedPod(lines, pod_key(meta.namespace, meta.name), event.type, reduced, event.time))
                    line_start = stop + 1
                    continue
            raw.append(_RawLine(lines, line_start, stop, len(pods)))
            line_start = stop + 1
    finally:
        view.release()
    # decoded: drop these pages from this process's resident set (the page cache keeps them)
    aligned = start - start % mmap.PAGESIZE
    if hasattr(data, "madvise"):
        data.madvise(mmap.MADV_DONTNEED, aligned, end - aligned)
    return _encode(_RangeResult(lines, pods, raw))


# --- the worker processes' loop, and the pool that talks to them --------------------------------------


class _Task(msgspec.Struct, array_like=True):
    path: str
    identity: tuple[int, int]
    size: int
    start: int
    end: int
    limit: int


_HEADER = struct.Struct("<q")  # the length of the message that follows; negative: an error's text


def _serve(connection: socket.socket, inherited: list[socket.socket], reduce: Reduce) -> None:
    """A worker process: decode each range it is sent, until its socket closes.

    `inherited` are the replay's ends of the socket pairs, copied by the fork: closed at once, or no
    worker would ever see its own socket close.
    """
    for other in inherited:
        other.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the replaying process's to handle
    decode_task = msgspec.msgpack.Decoder(_Task).decode
    try:
        while True:
            header = _receive_exactly(connection, _HEADER.size)
            if header is None:
                return
            task = decode_task(_receive_exactly(connection, _HEADER.unpack(header)[0]) or b"")
            try:
                result = _decode_range(task.path, task.identity, task.size, task.start, task.end, task.limit, reduce)
            except Exception as exc:  # sent back and reported there, never a traceback here
                text = (str(exc) or type(exc).__name__).encode()
                connection.sendall(_HEADER.pack(-len(text)) + text)
                continue
            connection.sendall(_HEADER.pack(len(result)) + result)
    except (OSError, msgspec.DecodeError):  # the replay ended or went away
        return
    finally:
        connection.close()


def _receive_exactly(connection: socket.socket, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


class WorkerFailed(Exception):
    """A decoding process failed or ended; the message says why."""


class _Workers:
    """Forked decoding processes, each on a socket pair: tasks go out in order and results come back in
    order, read by the event loop itself (no threads, no pickling)."""

    def __init__(self, jobs: int, reduce: Reduce) -> None:
        context = multiprocessing.get_context("fork")
        self.connections: list[socket.socket] = []
        self.processes: list[multiprocessing.process.BaseProcess] = []
        for _ in range(jobs):
            parent, child = socket.socketpair()
            self.connections.append(parent)
            process = context.Process(
                target=_serve, args=(child, self.connections, reduce), name="crashwatch-decoder", daemon=True
            )
            process.start()
            child.close()
            self.processes.append(process)

    def send(self, worker: int, task: _Task) -> None:
        payload = _encode(task)
        self.connections[worker].sendall(_HEADER.pack(len(payload)) + payload)

    async def receive(self, worker: int) -> bytearray:
        connection = self.connections[worker]
        (size,) = _HEADER.unpack(await self._receive(connection, _HEADER.size))
        if size < 0:
            raise WorkerFailed((await self._receive(connection, -size)).decode(errors="replace"))
        return await self._receive(connection, size)

    @staticmethod
    async def _receive(connection: socket.socket, size: int) -> bytearray:
        data = bytearray(size)
        view = memoryview(data)
        got = 0
        while got < size:
            await anyio.wait_readable(connection)
            count = connection.recv_into(view[got:])
            if not count:
                raise WorkerFailed("a decoding process ended unexpectedly")
            got += count
        return data

    def close(self) -> None:
        for connection in self.connections:
            connection.close()
        for process in self.processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()


# --- in the replaying process ---------------------------------------------------------------------------


def parallel_available() -> bool:
    """Workers are forked (they start at once and share what the replay has imported): not on Windows."""
    return "fork" in multiprocessing.get_all_start_methods()


class ParallelDecoder:
    """Decoding workers for one replay; `read` yields a log's items in order, in batches.

    The workers are forked (on first use) with `reduce`, so it need not be picklable."""

    def __init__(self, jobs: int, reduce: Reduce, range_bytes: int = RANGE_BYTES) -> None:
        self.jobs = jobs
        self.reduce = reduce
        self.range_bytes = range_bytes
        self.position = 0  # where the log being read is decoded up to, in bytes (for a progress line)
        self._workers: _Workers | None = None

    def __enter__(self) -> ParallelDecoder:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._workers is not None:
            self._workers.close()
            self._workers = None

    async def read(self, source: LogSource, mapped: mmap.mmap) -> AsyncGenerator[list[Item], None]:
        assert source.file is not None
        st = os.fstat(source.file.fileno())
        size = len(mapped)
        limit = source.max_record
        cut_at_end = size > 0 and mapped[size - 1 : size] != b"\n"
        parts = max(self.jobs * 4, size // self.range_bytes)
        spans = line_ranges(mapped, parts, self.range_bytes // 64, source.offset, limit)
        tasks = [_Task(source.path, (st.st_dev, st.st_ino), size, *span, limit) for span in spans]
        records = JsonRecords(source.name, limit, source.damage, source.namespace)
        if self._workers is None:  # no more workers than ranges to decode
            self.jobs = max(1, min(self.jobs, len(tasks)))
            self._workers = _Workers(self.jobs, self.reduce)
        workers = self._workers
        ahead = self.jobs * 3  # tasks queued per worker beyond the one it is decoding
        for index in range(min(ahead, len(tasks))):
            workers.send(index % self.jobs, tasks[index])
        base = 0
        done = False
        try:
            for index in range(len(tasks)):
                try:
                    data = await workers.receive(index % self.jobs)
                except WorkerFailed as exc:
                    yield [BadRecord(f"{source.name}:{base + 1}", f"cannot read further: {exc}")]
                    return
                result = _decode_range_result(data)
                if index + ahead < len(tasks):
                    workers.send((index + ahead) % self.jobs, tasks[index + ahead])
                self.position = tasks[index].end
                yield self._items(result, records, mapped, base, cut_at_end)
                base += result.lines
            done = True
            end = records.end(base)
            if end:
                yield list(end)
        finally:
            if not done:  # results still on their way must not be read as another log's
                workers.close()
                self._workers = None

    def _items(
        self, result: _RangeResult, records: JsonRecords, mapped: mmap.mmap, base: int, cut_at_end: bool
    ) -> list[Item]:
        """A range's items in log order: the reduced Pods, and the other lines, which go through the
        serial reader's JsonRecords, as they would in a serial read."""
        size = len(mapped)
        limit = records.limit
        pods = result.pods
        items: list[Item] = []
        taken = 0
        for raw in result.raw:
            self._pods(pods, taken, raw.before, items, records, base)
            taken = raw.before
            last = cut_at_end and raw.end == size
            length = raw.end - raw.start
            line = Oversized(length) if length > limit else mapped[raw.start : raw.end]
            items.extend(records.read(line, base + raw.line, last))
        self._pods(pods, taken, len(pods), items, records, base)
        return items

    @staticmethod
    def _pods(
        pods: list[ReducedPod], start: int, stop: int, items: list[Item], records: JsonRecords, base: int
    ) -> None:
        if start >= stop:
            return
        if records.pending is not None:  # a pretty-printed record was open: cut short
            items.extend(records.cut(base + pods[start].line))
        items.extend(pods[start:stop])
