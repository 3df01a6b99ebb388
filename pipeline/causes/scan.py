"""Reads a crashed run's output line by line and finds the root cause of the crash.

The output of an inference worker is the interleaved output of several processes (vLLM's API server,
engine core and workers, tensor-parallel ranks), each line behind prefixes: a process tag
(`(EngineCore_DP0 pid=17374)`, `[rank1]:`), a timestamp, a log level with its logger (`ERROR 09-28
15:47:24 [core.py:718]`, `[TRT-LLM] [E]`, `2024-06-17T13:18:29Z ERROR text_generation_launcher:`).
The scanner strips those, follows each process's Python tracebacks (a chain's exceptions in the order
printed, the cause first), and keeps, of every line an entry of the catalog matches, the one that wins:

1. A warning never classifies (`NCCL WARN`, `WARNING ...`, a Python `UserWarning`, INFO lines): the
   program said it went on. It may only sharpen an error of a class it explains (catalog `sharpens`).
2. A lighter cause (NCCL, weight 1) is chosen only when no heavier one shows as an error: NCCL errors
   are as often the echo of another rank's death as a cause.
3. Then an exception of a traceback beats an error line (a log line at error level, an exception or
   `Error:` line outside a traceback), which beats a line with no level at all.
4. Between equals, the first wins: a chain prints its root cause first, and in a cascade the first
   error is the cause of the others. Wrappers such as vLLM's "Engine core initialization failed. See
   root cause above" match no entry, so they are never chosen.
5. A line saying the server serves drops what was found before it (it did not stop the server), and
   makes a start-up cause found after it not certain (an OOM under load may not recur).

Memory is bounded whatever the output: the scanner holds the winning line, one line per sharpening
class, a little state for at most MAX_STREAMS processes and at most MEMO_ENTRIES shapes (below); lines
longer than MAX_LINE are cut.

Speed: nearly every line of an output is noise that changes nothing, and most noise repeats a few templates
whose lines differ only in their digits (times, pids, counters). What the scanner needs of a line (its
prefixes, level, body, and whether it can matter at all) does not depend on which digits it holds: no prefix
pattern names a digit, and the catalog's texts that do are looked for with their digits made zeros too, which
can only find more. So a line's *shape* is worked out once per template (the line with every digit made
`0`) and remembered; a line whose shape says it cannot matter, in a process outside any traceback, costs a
dictionary look-up. `Scanner(fast=False)` reads every line the long way: the reference the tests compare.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pipeline.causes import catalog
from pipeline.causes.cause import UNKNOWN, Cause

MAX_LINE = 4096  # characters of a line read; a longer one is cut, and so is the `line` reported
MAX_STREAMS = 64  # processes whose traceback state is kept (the oldest is dropped past it)
MAX_MESSAGE = 12  # lines of an exception's message after its first
MEMO_ENTRIES = 256  # shapes remembered (all are forgotten when it is full)
MEMO_LINE = 512  # bytes (UTF-8) of the longest line whose shape is remembered

WARNING, PLAIN, ERROR, TRACEBACK = 0, 1, 2, 3  # how loudly a line says it is an error (rule 3)

_LEVELS = "CRITICAL|FATAL|ERROR|WARNING|WARN|INFO|DEBUG|TRACE"
# One prefix of a line; a line carries several, stripped in turn.
_PREFIX = re.compile(
    r"\((?P<proc>[A-Za-z_][\w.-]*(?:,? [\w.-]+=[^()\s,]*)+)\)\s+"  # (EngineCore_DP0 pid=17374), (Worker pid=1, ip=x)
    r"|\[(?P<rank>rank\d+|\d+,\d+)\](?:<std(?:out|err)>)?:\s?"  # [rank0]:, mpirun's [1,0]<stderr>:
    r"|(?P<compose>[\w.-]+) +\| "  # docker compose's service column
    r"|\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?(?: (?:[TDPE]P|CP)\d+)*\]?\s+"  # ISO time
    r"|\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\]\s*"  # TensorRT-LLM's time
    r"|\[TRT-LLM\]\s*(?:\[RANK \d+\]\s*)?\[(?P<trt>[EWIDV])\] ?"
    r"|\[TensorRT-LLM\](?:\[RANK \d+\])?\[(?P<trt2>ERROR|WARNING|INFO|DEBUG|VERBOSE)\] ?"
    r"|(?P<vllm>" + _LEVELS + r") \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? (?:\[[^\]]*\]|[\w.-]+:\d+\]) ?"  # vLLM
    r"|\[?(?P<glog>[EWIF])\d{3,4} \d\d:\d\d:\d\d\.\d+(?: +\d+)? [\w.-]+:\d+\] ?"  # glog, c10's [W423 ...]
    r"|-\s(?:[\w.]+\s-\s)?(?P<dash>" + _LEVELS + r")\s-\s"  # Python's `time - name - LEVEL - msg`
    r"|(?P<word>" + _LEVELS + r")(?::(?:[\w.]*:)?\s*|\s+(?:[\w:.-]+(?:\{[^}]*\})?: )*)"  # tracing, logging
)
_LEVEL_OF = {
    "CRITICAL": ERROR,
    "FATAL": ERROR,
    "ERROR": ERROR,
    "E": ERROR,
    "F": ERROR,
    "WARNING": WARNING,
    "WARN": WARNING,
    "W": WARNING,
}  # every other level (INFO, DEBUG, ...) is information: a warning's rank (rule 1)
_JSON_LEVEL = re.compile(r'"(?:level|severity|levelname)"\s*:\s*"(\w+)"', re.IGNORECASE)
_NO_DIGITS = str.maketrans("", "", "0123456789")
_RELAYS = "dynamo_run::subprocess"  # dynamo-run relays its engine's output, each line at DEBUG
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_PYTHON_WARNING = re.compile(r"(?:\S+:\d+: )?\w*Warning: ")  # warnings.warn's `file.py:12: UserWarning: ...`
_EXCEPTION = re.compile(
    r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure|Fault)(?::|$)"
    r"|Error: |terminate called after throwing|Fatal Python error"
)
_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)
_FRAME = re.compile(r'\s*(?:> )?File "[^"]*", line \d+')
# What Python prints before a traceback that did not end the process: an exception of another thread than
# the main one (it may still be the cause, when nothing else is), one ignored (in a __del__), one at exit.
_HEADINGS = {
    "Exception in thread ": PLAIN,
    "Exception ignored in": WARNING,
    "Error in atexit._run_exitfuncs": WARNING,
}

_HEADING_TEXTS = tuple(_HEADINGS)

_IDLE, _FRAMES, _MESSAGE, _CHAINED_STATE = range(4)
_OUTSIDE = -1  # what _traced says of a line outside any traceback

# What a line's shape says it does when its process is outside any traceback: nothing; keep it as NCCL's last
# WARN; nothing unless an NCCL WARN waits for its trail; or ask for the long way (it may change the cause)
_QUIET, _WARN, _TRAIL, _LONG, _UNKNOWN = range(5)
_ZEROS = bytes.maketrans(b"0123456789", b"0000000000")
_Shape = list[Any]  # proc's span (start, end), header, level, where the body starts, what it does


def _zeros(text: str) -> str:
    return text.encode("utf-8", "surrogatepass").translate(_ZEROS).decode("utf-8", "surrogatepass")  # any text


def _for(engine: str | None, patterns: Iterable[catalog.Pattern]) -> tuple[catalog.Pattern, ...]:
    return tuple(p for p in patterns if engine is None or engine in p.engines)


class _Tables:
    """What a scanner reads with, for one engine (or all): built once, shared by every scanner."""

    __slots__ = ("entries", "fatal_warnings", "flat", "gate", "serving", "sharp", "zero_gate")

    def __init__(self, engine: str | None) -> None:
        self.entries = tuple(
            (entry, tuple((p, entry.weight if p.weight is None else p.weight) for p in _for(engine, entry.patterns)))
            for entry in catalog.CATALOG
        )
        patterns = [p for _, patterns in self.entries for p, _ in patterns]
        self.flat = tuple(
            (entry, p.needles, p.regex, weight) for entry, patterns in self.entries for p, weight in patterns
        )
        self.gate = catalog.gate(patterns)
        self.serving = _for(engine, catalog.SERVING)
        self.fatal_warnings = _for(engine, catalog.FATAL_WARNINGS)
        # for shapes: the needles with their digits made zeros (a line made so holds them if it held them)
        self.zero_gate = catalog.gate(
            catalog.Pattern(p.regex, tuple(map(_zeros, p.needles)), p.engines, p.weight) for p in patterns
        )
        self.sharp = tuple(
            _zeros(n) for entry, patterns in self.entries if entry.sharpens for p, _ in patterns for n in p.needles
        )


_TABLES: dict[str | None, _Tables] = {}


def _tables(engine: str | None) -> _Tables:
    tables = _TABLES.get(engine)
    if tables is None:
        tables = _TABLES[engine] = _Tables(engine)
    return tables


class _Stream:
    """One process's place in its tracebacks."""

    __slots__ = ("blanks", "exception", "header", "heading", "lines", "state", "tier")

    def __init__(self) -> None:
        self.state = _IDLE
        self.heading = TRACEBACK  # the highest tier of the traceback that comes next (_HEADINGS)
        self.header = ""  # the log prefix the traceback came under, digits left out: its lines repeat it
        self.tier = TRACEBACK
        self.exception = 0  # which exception a message line belongs to
        self.lines = 0
        self.blanks = 0


class _Found:
    """A line an entry matched, and what the scanner knew when it read it."""

    __slots__ = ("entry", "exception", "fields", "line", "number", "served", "tier", "weight")

    def __init__(
        self, entry: catalog.Entry, weight: int, tier: int, number: int, line: str, exception: int, served: bool
    ) -> None:
        self.entry = entry
        self.weight = weight
        self.tier = tier
        self.number = number
        self.line = line
        self.exception = exception
        self.served = served
        self.fields: dict[str, str] = {}

    def beats(self, other: _Found) -> bool:
        return (self.weight, self.tier) > (other.weight, other.tier)


class Scanner:
    """Feed a run's output in order, line by line; `result()` at any time gives the cause so far.

    `engine` (one of catalog.ENGINES), when known, leaves out the messages of other engines."""

    def __init__(self, engine: str | None = None, *, fast: bool = True) -> None:
        if engine is not None and engine not in catalog.ENGINES:
            raise ValueError(f"unknown engine {engine!r} (one of {', '.join(sorted(catalog.ENGINES))})")
        tables = self._tables = _tables(engine)
        self._entries = tables.entries
        self._gate = tables.gate
        self._serving = tables.serving
        self._fatal_warnings = tables.fatal_warnings
        self._shapes: dict[bytes, _Shape] | None = {} if fast else None
        self._number = 0
        self._exceptions = 0
        self._served = False
        self._streams: dict[str, _Stream] = {}
        self._best: _Found | None = None
        self._sharpeners: dict[str, _Found] = {}
        self._nccl_warn: tuple[int, str, str] | None = None  # NCCL's last WARN, until its trail shows

    def feed(self, line: str) -> None:
        self._number += 1
        line = line[:MAX_LINE]
        if line.endswith("\n"):
            line = line[:-1]
        if line.endswith("\r"):
            line = line[:-1]
        shapes = self._shapes
        if shapes is None or "\x1b" in line:
            self._long(line)
            return
        try:
            key = line.encode().translate(_ZEROS)
        except UnicodeEncodeError:  # a lone surrogate
            key = b""
        if not 0 < len(key) <= MEMO_LINE:
            self._long(line)
            return
        shape = shapes.get(key)
        if shape is None:  # the first line of its shape (most lines of a crash's own text are): the long way
            start, end, header, level, at, _ = self._learn(key)
            self._read(line, line, self._stream(line[start:end]), header, level, line[at:])
            return
        start, end, header, level, at, does = shape
        proc = line[start:end] if end else ""
        stream = self._streams.get(proc)
        if stream is None:
            stream = self._stream(proc)
        if does != _LONG and stream.state == _IDLE and stream.heading == TRACEBACK:
            if does == _UNKNOWN:
                text = key.decode()
                does = shape[5] = self._does(text, level, text[at:])
                if does == _LONG:
                    self._read(line, line, stream, header, level, line[at:])
                    return
            if does == _QUIET:
                return
            if does == _WARN:
                self._nccl_warn = (self._number, line, line[at:])
                return
            if self._nccl_warn is None or catalog.NCCL_TRAIL.search(line, at) is None:  # _TRAIL
                return
        self._read(line, line, stream, header, level, line[at:])

    def _long(self, line: str) -> None:
        text = _ANSI.sub("", line) if "\x1b" in line else line
        start, end, header, level, at = _shape(text)
        self._read(line, text, self._stream(text[start:end]), header, level, text[at:])

    def _learn(self, key: bytes) -> _Shape:
        """The shape of the lines that read as `key` with their digits made zeros, remembered."""
        start, end, header, level, at = _shape(key.decode())
        shape: _Shape = [start, end, header, level, at, _UNKNOWN]  # what it does: worked out when first needed
        shapes = self._shapes
        assert shapes is not None
        if len(shapes) >= MEMO_ENTRIES:
            shapes.clear()
        shapes[key] = shape
        return shape

    def _does(self, text: str, level: int | None, body: str) -> int:
        """What a line does, read as `feed` reads it, when its process is outside any traceback (idle, under no
        heading); `text` has its digits made zeros: _LONG whenever it may change anything."""
        stripped = body.strip()
        if stripped.endswith(_TRACEBACK):
            return _LONG
        if stripped.startswith(_CHAINED):
            return _QUIET  # a marker outside a chain
        if _FRAME.match(body) or stripped.startswith(_HEADING_TEXTS):
            return _LONG
        tier = _tier(level, body)
        if tier < ERROR and any(p.search(text) for p in self._serving):
            return _LONG
        does = _QUIET
        if tier == WARNING:
            if any(p.search(body) for p in self._fatal_warnings):
                tier = PLAIN
            elif catalog.NCCL_WARN in body:
                return _WARN
            elif "NCCL INFO" in body:
                does = _TRAIL
        if tier == WARNING:  # only a sharpening class can come of it
            return _LONG if any(needle in body for needle in self._tables.sharp) else does
        return _LONG if self._tables.zero_gate.search(body) else does

    def _read(self, line: str, text: str, stream: _Stream, header: str, level: int | None, body: str) -> None:
        """The long way: follow the stream's traceback, then weigh the line."""
        tier = self._traced(stream, header, level, body)
        if tier is None:
            return
        exception = stream.exception
        if tier == _OUTSIDE:
            stream.state, exception = _IDLE, 0
            tier = _tier(level, body)
            if tier < ERROR and self._serves(text):
                return
            if tier == WARNING:
                if any(p.search(body) for p in self._fatal_warnings):
                    tier = PLAIN
                elif self._nccl(line, body):
                    return
        self._match(self._number, line, body, tier, exception)

    def result(self) -> Cause:
        found = self._best
        if found is None:
            return UNKNOWN
        for sharpener in self._sharpeners.values():
            if found.entry.kind in sharpener.entry.sharpens:
                found = sharpener
                break
        entry = found.entry
        certain = entry.certain == "always" or (entry.certain == "startup" and not found.served)
        fields = dict(found.fields)
        if entry.tidy is not None:
            entry.tidy(fields)
        return Cause(entry.kind, certain, found.line, found.number, entry.hint, tuple(fields.items()))

    def held(self) -> int:
        """Characters and objects held, whatever was fed: the bound the tests check."""
        found = [self._best, *self._sharpeners.values()]
        lines = sum(len(f.line) + sum(len(k) + len(v) for k, v in f.fields.items()) for f in found if f)
        lines += 2 * len(self._nccl_warn[1]) if self._nccl_warn else 0
        streams = sum(len(name) + len(s.header) + 1 for name, s in self._streams.items())
        shapes = sum(len(key) + len(shape[2]) + 6 for key, shape in (self._shapes or {}).items())
        return lines + streams + shapes

    def _stream(self, proc: str) -> _Stream:
        stream = self._streams.get(proc)
        if stream is None:
            if len(self._streams) >= MAX_STREAMS:
                del self._streams[next(iter(self._streams))]
            stream = self._streams[proc] = _Stream()
        return stream

    def _traced(self, stream: _Stream, header: str, level: int | None, body: str) -> int | None:
        """Follow the stream's tracebacks: the traceback's tier (TRACEBACK, or lower for one logged as a warning
        or printed under a heading) for a line of an exception's message, None for a line that says nothing
        (a frame, a marker), _OUTSIDE for a line outside any traceback, whose tier the caller decides."""
        stripped = body.strip()
        if stripped.endswith(_TRACEBACK):  # SGLang: `[... TP0] Scheduler hit an exception: Traceback (most ...`
            if stream.state != _CHAINED_STATE:  # a new chain: an informational traceback never classifies
                stream.tier = min(TRACEBACK if level is None or level == ERROR else WARNING, stream.heading)
            # a traceback that starts a line has its log prefix repeated on each line (vLLM's); one after a
            # message (SGLang's "Scheduler hit an exception: Traceback ...") goes on in lines of its own
            own = header if stripped.startswith(_TRACEBACK) else ""
            stream.state, stream.header, stream.heading = _FRAMES, own, TRACEBACK
            return None
        if stripped.startswith(_CHAINED):
            if stream.state != _IDLE:
                stream.state = _CHAINED_STATE
            return None
        if stream.state == _IDLE:
            if _FRAME.match(body):  # a traceback whose head was cut off
                stream.state, stream.header = _FRAMES, header
                stream.tier = TRACEBACK if level is None or level == ERROR else WARNING
                return None
            stream.heading = TRACEBACK
            if stripped.startswith(_HEADING_TEXTS):
                stream.heading = next(tier for text, tier in _HEADINGS.items() if stripped.startswith(text))
            return _OUTSIDE
        if stream.state == _CHAINED_STATE:
            return None if not stripped else _OUTSIDE
        if header != stream.header:  # another log record: the traceback ended
            return _OUTSIDE
        if stream.state == _FRAMES:
            return self._frame(stream, body, stripped)
        return _message(stream, body, stripped)

    def _frame(self, stream: _Stream, body: str, stripped: str) -> int | None:
        """A line among a traceback's frames: a frame, its source line, or the exception that ends them."""
        if not stripped or body[0].isspace() or _FRAME.match(body) or stripped == "...":
            return None
        self._exceptions += 1
        stream.state, stream.exception, stream.lines, stream.blanks = _MESSAGE, self._exceptions, 0, 0
        return stream.tier

    def _serves(self, text: str) -> bool:
        for pattern in self._serving:
            if pattern.search(text):
                self._served = True
                self._best = None  # it came up after those: they did not stop it (rule 5)
                self._sharpeners.clear()
                return True
        return False

    def _nccl(self, line: str, body: str) -> bool:
        """Keep NCCL's last WARN; when the trail of an error it unwinds follows, read the WARN as an error."""
        if catalog.NCCL_WARN in body:
            self._nccl_warn = (self._number, line, body)
            return True
        if self._nccl_warn is None or "NCCL INFO" not in body or catalog.NCCL_TRAIL.search(body) is None:
            return False
        number, warned, warning = self._nccl_warn
        self._nccl_warn = None
        if not self._match(number, warned, warning, PLAIN, 0):
            nccl = catalog.BY_KIND["nccl_failure"]
            self._found(nccl, nccl.weight, None, number, warned, warning, PLAIN, 0)
        return True

    def _match(self, number: int, line: str, body: str, tier: int, exception: int) -> bool:
        if self._gate.search(body) is None:
            return False
        for entry, needles, regex, weight in self._tables.flat:  # Pattern.search, without a call per pattern
            for needle in needles:
                if needle in body:
                    found = regex.search(body)
                    if found is not None:
                        self._found(entry, weight, found, number, line, body, tier, exception)
                        return True
                    break
        return False

    def _found(
        self,
        entry: catalog.Entry,
        weight: int,
        match: re.Match[str] | None,
        number: int,
        line: str,
        body: str,
        tier: int,
        exception: int,
    ) -> None:
        best = self._best
        if exception and best is not None and best.exception == exception and best.entry is entry:
            _extract(best.fields, match, entry, body)  # the same exception's message says more
            best.weight = max(best.weight, weight)
            return
        found = _Found(entry, weight, tier, number, line, exception, self._served)
        if entry.sharpens and entry.kind not in self._sharpeners:
            _extract(found.fields, match, entry, body)
            self._sharpeners[entry.kind] = found
        if tier == WARNING or (best is not None and not found.beats(best)):
            return
        if best is not None and best.entry is entry and best.weight < weight:
            best.weight, best.tier = weight, max(best.tier, tier)  # confirmed: the first line stays the one used
            _extract(best.fields, match, entry, body)
            return
        if not found.fields:
            _extract(found.fields, match, entry, body)
        self._best = found


def classify(lines: Iterable[str], engine: str | None = None, *, fast: bool = True) -> Cause:
    """The cause of a whole output at once."""
    scanner = Scanner(engine, fast=fast)
    for line in lines:
        scanner.feed(line)
    return scanner.result()


def _message(stream: _Stream, body: str, stripped: str) -> int | None:
    """A line after an exception's: its message may run over several (huggingface_hub's hold a blank one)."""
    if _FRAME.match(body):
        stream.state = _FRAMES
        return None
    if not stripped:
        stream.blanks += 1
        if stream.blanks > 1:
            stream.state = _IDLE
        return None
    stream.lines += 1
    return _OUTSIDE if stream.lines > MAX_MESSAGE else stream.tier


def _shape(text: str) -> tuple[int, int, str, int | None, int]:
    """Where a line's process tag is (start, end), its log prefix without its digits (what the lines of one
    record share, whatever their times), its level (None: none said, or a relay's) and where what follows
    starts. It is the same for any two lines that differ only in their digits (no prefix names a digit)."""
    if text.startswith("{"):
        record = _JSON_LEVEL.search(text)
        return 0, 0, "", _LEVEL_OF.get(record.group(1).upper(), WARNING) if record else None, 0
    start = end = 0
    header: list[str] = []
    level: int | None = None
    position = 0
    for _ in range(8):
        prefix = _PREFIX.match(text, position)
        if prefix is None or prefix.end() == position:
            break
        group = prefix.lastgroup  # each kind of prefix has one named group, or none (a time)
        if group in ("proc", "rank", "compose"):
            start, end = prefix.span(group)
        else:
            header.append(prefix.group())
            if group is not None and level is None:
                level = _LEVEL_OF.get(prefix.group(group), WARNING)
        position = prefix.end()
    said = "".join(header)
    if _RELAYS in said:
        level = None  # the level of the process relaying the line, not of the line
    if level is None and (
        text.find("NCCL WARN", position) >= 0
        or text.find("NCCL INFO", position) >= 0
        or _PYTHON_WARNING.match(text, position)
    ):
        level = WARNING
    return start, end, _no_digits(said), level, position


def _no_digits(text: str) -> str:
    """`text` without its ASCII digits (through bytes: str.translate is ten times slower)."""
    try:
        return text.encode().translate(None, b"0123456789").decode()
    except UnicodeEncodeError:  # a lone surrogate
        return text.translate(_NO_DIGITS)


def _tier(level: int | None, body: str) -> int:
    """How loudly a line outside a traceback says it is an error."""
    if level is not None:
        return ERROR if level == ERROR else WARNING
    return ERROR if _EXCEPTION.match(body.lstrip()) or "what(): " in body else PLAIN


def _extract(fields: dict[str, str], match: re.Match[str] | None, entry: catalog.Entry, body: str) -> None:
    """Add the fields a match and the entry's extractors find in a line, each only if it fits its type."""
    found = [match] if match is not None else []
    found += [m for m in (regex.search(body) for regex in entry.fields) if m is not None]
    for each in found:
        for name, value in each.groupdict().items():
            if value is not None and name not in fields and catalog.valid_field(name, value):
                fields[name] = value
