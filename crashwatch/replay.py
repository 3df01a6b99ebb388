"""`crashwatch replay`: recorded logs through the same stages and sinks as the live watcher.

Logs are read in a daemon thread, so a pipe on stdin hands over each record as it arrives while the
stages keep running, and a read blocked on a quiet pipe never keeps the process from exiting; a regular
file (standard input redirected from one included) is read in batches. Bad records are reported on
stderr as they are met; the replay goes on (or, with --strict, drains what came before and stops) and
the exit code says so.
"""

from __future__ import annotations

import datetime
import mmap
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from queue import Empty, Full, Queue
from typing import IO, BinaryIO, TextIO, cast

import anyio
import anyio.to_thread
from anyio.abc import ObjectSendStream

from crashwatch import exitcodes
from crashwatch.parallel import AUTO_MIN_BYTES, RANGE_BYTES, Item, ParallelDecoder, parallel_available, usable_cpus
from crashwatch.stages import Events, pipeline_stage
from pipeline.filter import PodObservation
from pipeline.groups import DEFAULT_WINDOW
from pipeline.outputs import Output
from pipeline.pipeline import Pipeline
from sinks.stdout import Format, change_printer, patch_printer, print_lines
from sinks.text import printable
from stream.events import BadRecord, WatchEvent
from stream.logs import MAX_RECORD, LogSource, LogUnreadable, is_json_lines, map_file, open_log, read_log

BUFFER = 16


@dataclass
class ReplayOptions:
    logs: Sequence[str]
    output: Format = "text"
    patches: bool = False
    strict: bool = False
    progress: bool | None = None  # None: when stderr is a terminal
    jobs: int | None = None  # decoding processes for large JSON-lines files; None: one per CPU, when it pays
    range_bytes: int = RANGE_BYTES  # how much of a log a worker decodes at a time
    group_window: float = DEFAULT_WINDOW  # seconds between LeaderWorkerSet group recreations that make a loop
    max_record_size: int = MAX_RECORD  # a longer record is one bad record, skipped without being held


@dataclass
class _Progress:
    """A one-line counter on stderr for long replays, redrawn at most once a second."""

    err: TextIO
    enabled: bool
    events: int = 0
    shown: float = field(default_factory=time.monotonic)
    drawn: bool = False

    def add(self, name: str, count: int) -> None:
        self.events += count
        if self.enabled and time.monotonic() - self.shown >= 1.0:
            self.shown = time.monotonic()
            self.err.write(f"\rcrashwatch: replaying {printable(name)}: {self.events:,} events")
            self.err.flush()
            self.drawn = True

    def clear(self) -> None:
        if self.drawn:
            self.err.write("\r\033[K")
            self.err.flush()


@dataclass
class _Outcome:
    bad: int = 0
    stopped: bool = False


def _parallel_mapping(source: LogSource, jobs: int, explicit: bool) -> mmap.mmap | None:
    """The log's mapping when worker processes should decode it: a plain JSON-lines file, more than one
    job, and (unless --jobs was given) big enough to repay starting them."""
    if jobs < 2 or source.yaml or not parallel_available():
        return None
    mapped = map_file(source)
    if mapped is None:
        return None
    if (explicit or len(mapped) - source.offset >= AUTO_MIN_BYTES) and is_json_lines(mapped, source.offset):
        return mapped
    mapped.close()
    return None


_DONE = object()


def _reader(sources: Sequence[LogSource], queue: Queue[object], stop: threading.Event) -> None:
    """Runs in a daemon thread: a read blocked on a quiet pipe must never keep the process alive."""

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                queue.put(item, timeout=0.1)
                return True
            except Full:
                continue
        return False

    try:
        for source in sources:
            try:
                for batch in read_log(source, live=source.live):
                    if not put((source, batch)):
                        return
            finally:
                source.close()
    except BaseException as exc:  # handed to the event loop, which reports it
        put(exc)
        return
    put(_DONE)


async def _deliver(
    source: LogSource,
    batch: list[Item] | list[WatchEvent | BadRecord],
    send: ObjectSendStream[Events],
    err: TextIO,
    strict: bool,
    outcome: _Outcome,
    progress: _Progress,
) -> bool:
    """Pass a batch's events on and report its bad records; False when --strict says stop."""
    events: list[WatchEvent | PodObservation] = []
    for entry in batch:
        if isinstance(entry, BadRecord):
            if events:
                await send.send(events)
                events = []
            outcome.bad += 1
            progress.clear()
            err.write(f"crashwatch: {printable(str(entry))}\n")
            err.flush()
            if strict:
                outcome.stopped = True
                return False
        else:
            events.append(entry)
    if events:
        progress.add(source.name, len(events))
        await send.send(events)
    return True


async def _read_logs(
    sources: Sequence[LogSource],
    send: ObjectSendStream[Events],
    err: TextIO,
    options: ReplayOptions,
    outcome: _Outcome,
    progress: _Progress,
) -> None:
    strict = options.strict
    if not any(source.live for source in sources):
        # regular files never block for long: read them in the loop, with no thread to share the GIL with;
        # large JSON-lines files are decoded by worker processes
        jobs = min(options.jobs or usable_cpus(), usable_cpus())  # more processes than CPUs only wait their turn
        async with send:
            with ParallelDecoder(jobs, options.range_bytes) as parallel:
                for source in sources:
                    try:
                        mapped = _parallel_mapping(source, jobs, explicit=options.jobs is not None)
                        if mapped is not None:
                            with mapped:
                                async with aclosing(parallel.read(source, mapped)) as read:
                                    async for items in read:
                                        if not await _deliver(source, items, send, err, strict, outcome, progress):
                                            return
                            continue
                        parallel.forget()
                        for batch in read_log(source):
                            if not await _deliver(source, batch, send, err, strict, outcome, progress):
                                return
                    finally:
                        source.close()
        return
    queue: Queue[object] = Queue(maxsize=BUFFER)
    stop = threading.Event()
    thread = threading.Thread(target=_reader, args=(sources, queue, stop), name="crashwatch-log-reader", daemon=True)
    thread.start()

    def take() -> object:
        try:
            return queue.get(timeout=0.1)
        except Empty:
            return None

    try:
        async with send:
            while True:
                item = await anyio.to_thread.run_sync(take)
                if item is None:
                    continue
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                source, batch = cast(tuple[LogSource, list[WatchEvent | BadRecord]], item)
                if not await _deliver(source, batch, send, err, strict, outcome, progress):
                    return
    finally:
        stop.set()


async def replay(
    options: ReplayOptions,
    out: BinaryIO,
    err: TextIO,
    stdin: IO[bytes] | None = None,
    clock: Callable[[], str] | None = None,
) -> int:
    sources: list[LogSource] = []
    try:
        for path in options.logs:
            sources.append(open_log(path, stdin=stdin, max_record=options.max_record_size))
    except LogUnreadable as exc:
        for source in sources:
            source.close()
        err.write(f"crashwatch: {printable(str(exc))}\n")
        return exitcodes.NOINPUT
    progress = _Progress(err, err.isatty() if options.progress is None else options.progress)
    outcome = _Outcome()
    render = patch_printer if options.patches else change_printer(options.output)
    send_events, receive_events = anyio.create_memory_object_stream[Events](BUFFER)
    send_out, receive_out = anyio.create_memory_object_stream[list[Output]](BUFFER)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_read_logs, sources, send_events, err, options, outcome, progress)
        pipeline = Pipeline(clock=clock, group_window=options.group_window)
        tg.start_soon(pipeline_stage, receive_events, [send_out], pipeline)
        tg.start_soon(print_lines, receive_out, out, render)
    progress.clear()
    if outcome.stopped:
        err.write("crashwatch: stopped at the first bad record (--strict)\n")
        return exitcodes.DATAERR
    if outcome.bad:
        plural = "record" if outcome.bad == 1 else "records"
        err.write(f"crashwatch: {outcome.bad} bad {plural} skipped\n")
        return exitcodes.DATAERR
    return exitcodes.OK


def wall_clock() -> str:
    """Transition times for patches planned from events that carry no time of their own."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_replay(options: ReplayOptions) -> int:
    return anyio.run(replay, options, sys.stdout.buffer, sys.stderr, None, wall_clock)
