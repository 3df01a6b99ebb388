"""`crashwatch replay`: recorded logs through the same stages and sinks as the live watcher.

Logs are read in a daemon thread, so a pipe on stdin hands over each record as it arrives while the
stages keep running, and a read blocked on a quiet pipe never keeps the process from exiting; a regular
file (standard input redirected from one included) is read in batches. Bad records are reported on
stderr as they are met; the replay goes on (or, with --strict, drains what came before and stops) and
the exit code says so. The standard descriptors may be anything: closed (stdin: the log cannot be read;
stdout: a broken pipe; stderr: messages are lost, never sent elsewhere), or a full disk (EX_IOERR).
"""

from __future__ import annotations

import errno
import mmap
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from functools import partial
from queue import Empty, Full, Queue
from types import FrameType
from typing import IO, Any, BinaryIO, TextIO, cast

import anyio
import anyio.to_thread
from anyio.abc import ObjectSendStream

from crashwatch import exitcodes
from crashwatch.errors import leaves
from crashwatch.stages import Events, pipeline_stage
from crashwatch.stderr_log import LogFormat, StderrLogger
from pipeline.backends.registry import claimers
from pipeline.diagnoses import Settings
from pipeline.filter import Rejected
from pipeline.holds import DEFAULT_RECOVERY_WINDOW
from pipeline.outputs import Output
from pipeline.pipeline import Pipeline
from pipeline.views import encode_view
from sinks.stdout import Format, change_printer, patch_printer, print_lines
from sinks.text import printable
from stream.model.events import BadRecord
from stream.model.messages import Level
from stream.model.times import now_seconds
from stream.sources.parallel import AUTO_MIN_BYTES, RANGE_BYTES, Item, ParallelDecoder, parallel_available, usable_cpus
from stream.sources.recorded import (
    DEFAULT_NAMESPACE,
    MAX_RECORD,
    LogItem,
    LogSource,
    LogUnreadable,
    is_json_lines,
    map_file,
    open_log,
    read_log,
)

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
    tunables: dict[str, float] = field(default_factory=dict)  # the backends' (pipeline.backends), by name
    recovery_window: float = DEFAULT_RECOVERY_WINDOW  # seconds Ready before a crash-looping Pod recovers
    diagnoses: Settings = field(default_factory=Settings)  # graces and --failed-state (pipeline.diagnoses)
    max_record_size: int = MAX_RECORD  # a longer record is one bad record, skipped without being held
    namespace: str = DEFAULT_NAMESPACE  # a manifest's objects that name no namespace are read into this one
    log_format: LogFormat = "text"  # stderr (crashwatch.stderr_log); the progress line is drawn for text only
    log_level: Level = "info"


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
    batch: list[Item] | list[LogItem],
    send: ObjectSendStream[Events],
    outcome: _Outcome,
    progress: _Progress,
) -> bool:
    """Pass a batch on, its bad records where they are (the pipeline stage reports them, in order with
    what the pipeline cannot read); False once --strict said stop."""
    if outcome.stopped:
        return False
    if batch:
        progress.add(source.name, len(batch))
        await send.send(batch)  # type: ignore[arg-type]
    return True


async def _read_logs(
    sources: Sequence[LogSource],
    send: ObjectSendStream[Events],
    log: StderrLogger,
    options: ReplayOptions,
    outcome: _Outcome,
    progress: _Progress,
) -> None:
    if not any(source.live for source in sources):
        # regular files never block for long: read them in the loop, with no thread to share the GIL with;
        # large JSON-lines files are decoded by worker processes
        jobs = min(options.jobs or usable_cpus(), usable_cpus())  # more processes than CPUs only wait their turn
        async with send:
            with ParallelDecoder(jobs, partial(encode_view, claimers=claimers()), options.range_bytes) as parallel:
                for source in sources:
                    try:
                        mapped = _parallel_mapping(source, jobs, explicit=options.jobs is not None)
                        if mapped is not None:
                            with mapped:
                                async with aclosing(parallel.read(source, mapped)) as read:
                                    async for items in read:
                                        if not await _deliver(source, items, send, outcome, progress):
                                            return
                            continue
                        for batch in read_log(source):
                            if not await _deliver(source, batch, send, outcome, progress):
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
                source, batch = cast(tuple[LogSource, list[LogItem]], item)
                if not await _deliver(source, batch, send, outcome, progress):
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
    log = StderrLogger(err, options.log_format, options.log_level)
    sources: list[LogSource] = []
    try:
        for path in options.logs:
            sources.append(open_log(path, stdin=stdin, max_record=options.max_record_size, namespace=options.namespace))
    except LogUnreadable as exc:
        for source in sources:
            source.close()
        log.fatal(str(exc), exitcodes.NOINPUT)
        return exitcodes.NOINPUT
    draw = err.isatty() if options.progress is None else options.progress
    progress = _Progress(err, draw and options.log_format == "text")
    outcome = _Outcome()
    render = patch_printer if options.patches else change_printer(options.output)
    send_events, receive_events = anyio.create_memory_object_stream[Events](BUFFER)
    send_out, receive_out = anyio.create_memory_object_stream[list[Output]](BUFFER)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_read_logs, sources, send_events, log, options, outcome, progress)
        pipeline = Pipeline(
            clock=clock,
            tunables=options.tunables,
            strict=options.strict,
            recovery_window=options.recovery_window,
            diagnoses=options.diagnoses,
        )

        def report(problem: BadRecord | Rejected) -> bool:
            # with --strict, the reader (ahead of the pipeline) stops at its next batch
            outcome.bad += 1
            progress.clear()
            log(str(problem) if isinstance(problem, BadRecord) else f"{problem} (event skipped)", "warning")
            outcome.stopped = options.strict
            return not options.strict

        tg.start_soon(pipeline_stage, receive_events, [send_out], pipeline, report)
        tg.start_soon(print_lines, receive_out, out, render)
    progress.clear()
    if outcome.stopped:
        log.fatal("stopped at the first bad record (--strict)", exitcodes.DATAERR)
        return exitcodes.DATAERR
    if outcome.bad:
        plural = "record" if outcome.bad == 1 else "records"
        log.fatal(f"{outcome.bad} bad {plural} skipped", exitcodes.DATAERR)
        return exitcodes.DATAERR
    return exitcodes.OK


def wall_clock() -> str:
    """Transition times for patches planned from events that carry no time of their own."""
    return now_seconds()


class OutputFailed(Exception):
    """Standard output cannot be written: a full disk, an I/O error (EX_IOERR)."""


class _Interrupted(Exception):
    """Ctrl-C came twice during a write: the line under way is finished, and the replay ends at once.
    (An Exception, not KeyboardInterrupt: raised in a task, that would escape the event loop half-run.)"""


class _Output:
    """Standard output for the verdict lines, written straight to its descriptor, whole lines only.

    A closed stdout is a broken pipe; a write that fails for another reason (a full disk) is
    OutputFailed, never an internal error. Ctrl-C never cuts a line: the first one stops the replay
    after the write under way (asyncio's runner cancels the main task), and a second one that comes
    while a write is blocked on a full pipe takes effect at the end of the line being written; only a
    third stops at once.
    """

    def __init__(self, stream: BinaryIO | None) -> None:
        self.fd: int | None = None
        if stream is not None:
            try:
                stream.flush()
                self.fd = stream.fileno()
            except (OSError, ValueError):
                self.fd = None

    def write(self, data: bytes) -> int:
        if self.fd is None:
            raise BrokenPipeError(errno.EPIPE, "standard output is closed")
        view = memoryview(data)
        interrupted = False
        previous: Any = None

        def on_sigint(signum: int, frame: FrameType | None) -> None:
            nonlocal interrupted
            if interrupted:
                raise KeyboardInterrupt
            if callable(previous):
                try:
                    previous(signum, frame)
                except KeyboardInterrupt:
                    interrupted = True
            elif previous != signal.SIG_IGN:
                interrupted = True

        main = threading.current_thread() is threading.main_thread()
        if main:
            previous = signal.signal(signal.SIGINT, on_sigint)
        try:
            written = 0
            while written < len(view):
                written += self._write_some(view[written:])
                if interrupted:
                    end = data.find(b"\n", written - 1) if written else -1
                    end = len(data) if end < 0 else end + 1
                    while written < end:
                        written += self._write_some(view[written:end])
                    raise _Interrupted
        finally:
            if main:
                signal.signal(signal.SIGINT, previous)
        return len(data)

    def _write_some(self, view: memoryview) -> int:
        assert self.fd is not None
        try:
            return os.write(self.fd, view)
        except BrokenPipeError:
            raise
        except BlockingIOError:  # a non-blocking stdout that is full: wait until it takes more
            select.select([], [self.fd], [])
            return 0
        except OSError as exc:
            if exc.errno == errno.EBADF:  # closed, or open for reading only
                raise BrokenPipeError(errno.EPIPE, "standard output is closed") from None
            raise OutputFailed(exc.strerror or str(exc)) from None

    def flush(self) -> None:
        pass


class _Errors:
    """Standard error for messages: when it is closed or cannot be written, they are lost (there is
    nowhere else to say them), never written anywhere else."""

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        if self.stream is not None:
            try:
                self.stream.write(text)
            except (OSError, ValueError):
                self.stream = None
        return len(text)

    def flush(self) -> None:
        if self.stream is not None:
            try:
                self.stream.flush()
            except (OSError, ValueError):
                self.stream = None

    def isatty(self) -> bool:
        try:
            return self.stream is not None and self.stream.isatty()
        except (OSError, ValueError):
            return False


def _hold_closed_descriptors() -> None:
    """A standard descriptor the process started without is given /dev/null, so that no file opened
    later lands on it: a log opened as descriptor 1 must never receive output, nor one opened as 2
    messages. (Python has already set sys.stdin, sys.stdout or sys.stderr to None for it.)"""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                held = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            except OSError:
                continue
            if held != fd:
                os.dup2(held, fd)
                os.close(held)


def _discard_stdout() -> None:
    """After a failed write, point stdout at /dev/null: what is still buffered must not be written (or
    fail again) when the interpreter exits."""
    if sys.stdout is None:
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def run_replay(options: ReplayOptions) -> int:
    _hold_closed_descriptors()
    out = _Output(sys.stdout.buffer if sys.stdout is not None else None)
    err = _Errors(sys.stderr)
    try:
        return anyio.run(replay, options, cast(BinaryIO, out), cast(TextIO, err), None, wall_clock)
    except Exception as exc:
        found = list(leaves(exc))
        if any(isinstance(leaf, _Interrupted) for leaf in found):
            return exitcodes.INTERRUPTED
        if any(isinstance(leaf, BrokenPipeError) for leaf in found):
            _discard_stdout()
            return exitcodes.SIGPIPE
        failed = next((leaf for leaf in found if isinstance(leaf, OutputFailed)), None)
        if failed is None:
            raise
        StderrLogger(cast(TextIO, err), options.log_format).fatal(
            f"cannot write to standard output: {failed}", exitcodes.IOERR
        )
        _discard_stdout()
        return exitcodes.IOERR
