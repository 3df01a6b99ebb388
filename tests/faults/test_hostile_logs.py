"""Hostile and broken logs (the corpus of tests/faults/corpus.py), and hostile descriptors and signals.

Each corpus case is replayed as a user would (the installed command, in a child process): its exit code,
one stderr line per bad record (then the count), the verdicts of its good records (those a replay of the
good records alone prints), and its peak RSS, read from the kernel for that child alone (os.wait4), within
a bound above the clean replay's. Children run with a 3 GB address-space limit, so a replay that would
hold a billion laughs fails fast instead of taking the machine's memory.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from builders import crashing, healthy, labels
from cli import (
    EXAMPLES,
    as_from_a_terminal,
    crashwatch_command,
    popen,
    switches,
    until,
    until_catching,
    wchan,
    with_sigint_ignored,
)

sys.path.insert(0, str(Path(__file__).parent))  # the corpus lives next to this file
from corpus import CASES, GOOD, Case, jsonl

ADDRESS_SPACE = 3 << 30
LONGEST_LINE = 600  # a message quotes the input in short pieces


@dataclass
class Run:
    code: int
    stdout: bytes
    stderr: bytes
    rss_mb: float


def replay(
    *args: str, stdin: Path | None = None, feed: Iterator[bytes] | None = None, folder: Path, timeout: float = 120
) -> Run:
    """`crashwatch replay ARGS` in a child process; its peak RSS from os.wait4."""
    out_path, err_path = folder / ".stdout", folder / ".stderr"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        stdin_file = stdin.open("rb") if stdin is not None else None
        read_end = write_end = None
        if feed is not None:
            read_end, write_end = os.pipe()
        try:
            proc = subprocess.Popen(
                [*crashwatch_command(), "replay", "--summary", "none", *args],  # (the summary: test_summary.py)
                stdin=stdin_file
                if stdin_file is not None
                else (read_end if read_end is not None else subprocess.DEVNULL),
                stdout=out,
                stderr=err,
            )
        finally:
            if stdin_file is not None:
                stdin_file.close()
            if read_end is not None:
                os.close(read_end)
        if hasattr(resource, "prlimit"):
            resource.prlimit(proc.pid, resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
        writer = None
        if feed is not None:
            assert write_end is not None
            writer = threading.Thread(target=_write_all, args=(write_end, feed), daemon=True)
            writer.start()
        status, usage = _wait(proc, timeout)
        if writer is not None:
            writer.join(timeout=10)
    run = Run(os.waitstatus_to_exitcode(status), out_path.read_bytes(), err_path.read_bytes(), usage.ru_maxrss / 1024)
    out_path.unlink()
    err_path.unlink()
    return run


def _write_all(fd: int, feed: Iterator[bytes]) -> None:
    try:
        for piece in feed:
            view = memoryview(piece)
            while view:
                view = view[os.write(fd, view) :]
    except OSError:  # the replay stopped reading
        pass
    finally:
        os.close(fd)


def _wait(proc: subprocess.Popen[bytes], timeout: float) -> tuple[int, resource.struct_rusage]:
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
            return status, usage
        if time.monotonic() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            pytest.fail(f"replay took more than {timeout} s")
        time.sleep(0.01)


_clean_runs: dict[tuple[bytes, tuple[str, ...]], Run] = {}


def clean_replay(case: Case, folder: Path) -> Run:
    """The replay of the case's good records alone, with the same flags: what the case must print."""
    content = jsonl(case.clean or [])
    key = (content, case.args)
    if key not in _clean_runs:
        path = folder / "clean.jsonl"
        path.write_bytes(content)
        run = replay(*case.args, str(path), folder=folder)
        assert (run.code, run.stderr) == (0, b""), run.stderr
        _clean_runs[key] = run
        path.unlink()
    return _clean_runs[key]


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    """Where a case's log is made; removed as soon as the case is done (the logs are large)."""
    made = tmp_path / "corpus"
    made.mkdir()
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_hostile_log(case: Case, folder: Path) -> None:
    clean = clean_replay(case, folder)
    log = case.make(folder)
    args = list(case.args)
    if log.feed is not None:
        run = replay(*args, "-", feed=log.feed(), folder=folder)
    elif case.stdin:
        run = replay(*args, "-", stdin=log.path, folder=folder)
    else:
        run = replay(*args, str(log.path), folder=folder)
    err = run.stderr.decode(errors="replace")
    assert "Traceback" not in err and "internal error" not in err, err[-2000:]
    assert run.code == case.exit_code, err[-2000:]
    lines = err.splitlines()
    assert all(len(line) <= LONGEST_LINE for line in lines), max(lines, key=len)[:2000]
    if case.stderr is not None:
        assert err == case.stderr.format(path=log.path)
    else:
        expected = len(case.problems)
        counted = [f"crashwatch: {expected} bad record{'s' if expected != 1 else ''} skipped"] if expected else []
        assert len(lines) == expected + len(counted), err[-3000:]
        for line, pattern in zip(lines, case.problems, strict=False):
            assert line.startswith("crashwatch: ") and re.search(pattern, line), (pattern, line)
        assert lines[expected:] == counted
    assert run.stdout == (clean.stdout if case.clean is not None else b""), run.stdout.decode()[-2000:]
    assert run.rss_mb <= clean.rss_mb + case.rss_mb, (
        f"peak RSS {run.rss_mb:.0f} MB, the clean replay's {clean.rss_mb:.0f} MB"
    )


# --- descriptors and signals ---------------------------------------------------------------------------------

GOOD_LOG = EXAMPLES / "rollout-recovers.jsonl"
TIME_BACK = b"time goes back from 2026-11-20T10:04:00Z to 2026-11-20T10:00:00Z"
EXPECTED = (EXAMPLES / "rollout-recovers.expected.txt").read_bytes()


def _shell(command: str, folder: Path) -> subprocess.CompletedProcess[bytes]:
    """A replay with its descriptors set up by the shell (closed ones included)."""
    crashwatch = " ".join(crashwatch_command())
    return subprocess.run(
        ["bash", "-c", command.replace("CRASHWATCH", crashwatch)],
        capture_output=True,
        cwd=folder,
        timeout=120,
        check=False,
    )


def _big_log(path: Path, copies: int) -> bytes:
    """The example's Pods under new names, `copies` times over (copies x 24 events): a log of any size,
    whose verdicts many lines say. Its time goes back at each copy's start, which a replay says once
    (`TIME_BACK`)."""
    text = GOOD_LOG.read_text()
    path.write_text("".join(text.replace("llm", f"g{n}") for n in range(copies)))
    return path.read_bytes()


@pytest.mark.parametrize("jobs", [[], ["-j", "1"], ["-j", "2"]], ids=["default", "j1", "j2"])
def test_stdin_redirected_from_a_file_says_what_the_file_says(folder: Path, jobs: list[str]) -> None:
    log = folder / "big.jsonl"
    _big_log(log, 2200)  # 36 MB: above the size at which worker processes start by default
    assert log.stat().st_size > 32 << 20
    from_file = replay(*jobs, "--summary", "none", "-o", "json", str(log), folder=folder)
    from_stdin = replay(*jobs, "--summary", "none", "-o", "json", "-", stdin=log, folder=folder)
    assert from_file.code == 0 and from_file.stdout.count(b"\n") == 2200 * 8
    assert (from_stdin.code, from_stdin.stdout) == (0, from_file.stdout)
    (said,) = from_stdin.stderr.splitlines()
    assert TIME_BACK in said and from_file.stderr == said.replace(b"<stdin>", str(log).encode()) + b"\n"


def test_stdin_from_a_file_read_in_part_already(folder: Path) -> None:
    """Standard input starts where the shell left it, not at the file's beginning."""
    log = folder / "log.jsonl"
    log.write_bytes(b"garbage that was read already\n" + GOOD_LOG.read_bytes())
    result = _shell(f"(read -r line; CRASHWATCH replay --summary none -j 2 -) < {log}", folder)
    assert (result.returncode, result.stdout, result.stderr) == (0, EXPECTED, b"")


def test_a_closed_stdin_is_exit_66(folder: Path) -> None:
    result = _shell("CRASHWATCH replay - <&-", folder)
    assert (result.returncode, result.stdout) == (66, b"")
    assert result.stderr == b"crashwatch: <stdin>: cannot read: standard input is closed\n"


def test_a_closed_stdout_is_a_broken_pipe(folder: Path) -> None:
    result = _shell(f"CRASHWATCH replay {GOOD_LOG} >&-", folder)
    assert (result.returncode, result.stderr) == (141, b"")


def test_a_closed_stderr_never_sends_a_message_to_stdout(folder: Path) -> None:
    bad = folder / "bad.jsonl"
    bad.write_bytes(b"not json\n" + GOOD_LOG.read_bytes())
    for command, code in ((f"CRASHWATCH replay {bad} 2>&-", 65), ("CRASHWATCH replay missing.jsonl 2>&-", 66)):
        result = _shell(command, folder)
        assert result.returncode == code
        assert result.stdout == (EXPECTED if code == 65 else b"")


def test_a_full_disk_is_a_write_error(folder: Path) -> None:
    result = _shell(f"CRASHWATCH replay {GOOD_LOG} > /dev/full", folder)
    assert result.returncode == 74
    assert result.stderr == b"crashwatch: cannot write to standard output: No space left on device\n"


def test_a_failing_stderr_changes_nothing_else(folder: Path) -> None:
    bad = folder / "bad.jsonl"
    bad.write_bytes(b"not json\n" + GOOD_LOG.read_bytes())
    result = _shell(f"CRASHWATCH replay {bad} 2> /dev/full", folder)
    assert (result.returncode, result.stdout) == (65, EXPECTED)


def _until_blocked_writing(pid: int, timeout: float = 60) -> None:
    """Until the main thread (the one that writes the verdict lines, and takes signals) sleeps in a write
    to a full pipe, as the kernel says (/proc's wchan): the state the test needs, waited for, where a
    sleep would only hope the writer got there."""
    until(lambda: "pipe_write" in wchan(pid, pid), f"the main thread of {pid} blocked writing to a pipe", timeout)


def _ctrl_c(proc: subprocess.Popen[bytes]) -> None:
    """One press of Ctrl-C while the main thread is blocked on the full pipe, and until it has been
    taken: the kernel wakes the thread, the interpreter runs its handler and retries the write, so the
    thread sleeps in the pipe again, one voluntary context switch later. (Two signals sent before the
    first is taken would be one: the interpreter runs a handler once for any number pending.)"""
    _until_blocked_writing(proc.pid)
    before = switches(proc.pid, proc.pid)
    proc.send_signal(signal.SIGINT)
    until(
        lambda: switches(proc.pid, proc.pid) > before and "pipe_write" in wchan(proc.pid, proc.pid),
        "SIGINT taken, and the write blocked again",
    )


@pytest.mark.parametrize("started", ["from a terminal", "with SIGINT ignored"])
@pytest.mark.parametrize("source", ["file", "pipe"])
def test_ctrl_c_twice_writes_whole_lines_only(folder: Path, source: str, started: str) -> None:
    """Output blocked on a full pipe, then Ctrl-C twice: the line being written is finished, no other.

    Also when crashwatch starts with SIGINT ignored, as a background job of a script does (`crashwatch
    replay log &` in `sh -c`, then `kill -INT`): it takes SIGINT all the same, as kubectl does."""
    log = folder / "flip.jsonl"
    _big_log(log, 400)
    args = [*crashwatch_command(), "replay", "-o", "json"]
    preexec = as_from_a_terminal if started == "from a terminal" else with_sigint_ignored
    if source == "file":
        proc = popen([*args, str(log)], preexec, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    else:  # a pipe that is still being written: read by the reader thread, record by record
        cat = subprocess.Popen(["cat", str(log)], stdout=subprocess.PIPE)
        assert cat.stdout is not None
        proc = popen([*args, "-"], preexec, stdin=cat.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        cat.stdout.close()
    assert proc.stdout is not None
    first = os.read(proc.stdout.fileno(), 1000)  # it has started writing (and soon fills the pipe)
    until_catching(proc, signal.SIGINT)
    _ctrl_c(proc)  # two separate presses: the first stops the replay after this write...
    proc.send_signal(signal.SIGINT)  # ...the second, taken during it, ends it at the end of its line
    rest, err = proc.communicate(timeout=60)
    if source == "pipe":
        cat.wait(timeout=60)
    out = first + rest
    assert proc.returncode == 130, err.decode()
    assert [line for line in err.splitlines() if TIME_BACK not in line] == []
    assert out.endswith(b"\n")
    for line in out.splitlines():
        json.loads(line)


def test_the_record_size_flag_takes_kubectl_sizes(folder: Path) -> None:
    log = folder / "log.jsonl"
    log.write_bytes(
        jsonl(GOOD[:3])
        + b'{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"p","namespace":"n"},"x":"'
        + b"y" * 70_000
        + b'"}}\n'
    )
    for size, code in (("64Ki", 65), ("65536", 65), ("1Mi", 0), ("100k", 0), ("2M", 0)):
        run = replay("--max-record-size", size, str(log), folder=folder)
        assert run.code == code, (size, run.stderr)
    for bad in ("64MB", "-1", "1", "2Ti", "lots"):
        run = replay("--max-record-size", bad, str(log), folder=folder)
        assert run.code == 2 and b"--max-record-size" in run.stderr, bad


def _baseline_rss(folder: Path) -> float:
    """The peak RSS of a replay of the small example: what any replay costs here (ru_maxrss carries over
    the exec, so it includes this pytest process's own peak)."""
    return replay(str(GOOD_LOG), folder=folder).rss_mb


def _zeros() -> Iterator[bytes]:
    block = bytes(1 << 16)
    while True:
        yield block


@pytest.mark.parametrize("name", ["zero.jsonl", "zero.yaml", "zero.log"])
def test_endless_nul_bytes_are_binary_said_at_once(folder: Path, name: str) -> None:
    """/dev/zero behind a log's name: one line naming the file, exit 65, never a read that goes on for ever."""
    log = folder / name
    log.symlink_to("/dev/zero")
    run = replay(str(log), folder=folder, timeout=60)
    assert run.code == 65
    assert run.stderr.decode().splitlines() == [
        f"crashwatch: {log}:1: binary data (a NUL byte at byte 0), not a text log of watch events or objects: "
        "not read further",
        "crashwatch: 1 bad record skipped",
    ]
    assert run.stdout == b""


@pytest.mark.parametrize("form", ["jsonl", "yaml"])
def test_endless_nul_bytes_after_good_records_stop_the_read_there(folder: Path, form: str) -> None:
    """Good records on a pipe, then zeros for ever: their verdicts, then one line, and the read stops."""
    good = GOOD_LOG.read_bytes()
    if form == "yaml":
        good = b"".join(b"---\n" + json.dumps(json.loads(line)).encode() + b"\n" for line in good.splitlines())

    def feed() -> Iterator[bytes]:
        yield good
        yield from _zeros()

    run = replay("-", feed=feed(), folder=folder, timeout=60)
    assert run.code == 65, run.stderr
    assert run.stdout == EXPECTED
    (line, count) = run.stderr.decode().splitlines()
    assert line.startswith("crashwatch: <stdin>:") and "binary data (a NUL byte)" in line
    assert count == "crashwatch: 1 bad record skipped"
    assert run.rss_mb < _baseline_rss(folder) + 100  # the limit, 16Mi, is the most it may hold of them


def _big_list(path: Path, yaml_form: bool) -> None:
    """`kubectl get pods -A -o json` (or `-o yaml`) of a large cluster, as kubectl lays it out: one List
    of 5,000 Pods, about 50 MB, one crash-looping Pod in each thousand. Written item by item: this
    process's own peak RSS would count in the child's (ru_maxrss survives the exec)."""
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    with path.open("w") as out:
        out.write("apiVersion: v1\nitems:\n" if yaml_form else '{\n    "apiVersion": "v1",\n    "items": [\n')
        for n in range(5000):
            make = crashing if n % 1000 == 0 else healthy
            pod = make(f"p-{n:05d}", pod_labels=labels(component=f"c{n // 1000}"))
            pod["apiVersion"] = "v1"
            pod["metadata"]["annotations"] = {"pad": "x" * 9000}
            if yaml_form:
                out.write(yaml.dump([pod], Dumper=dumper, width=1 << 20))
            else:
                text = json.dumps(pod, indent=4).replace("\n", "\n        ")
                out.write(("        " if n == 0 else ",\n        ") + text)
        out.write('kind: List\nmetadata:\n  resourceVersion: ""\n' if yaml_form else "\n    ],\n")
        if not yaml_form:
            out.write('    "kind": "List",\n    "metadata": {\n        "resourceVersion": ""\n    }\n}\n')


@pytest.mark.parametrize("form", ["json", "yaml"])
def test_a_50_mb_list_is_diagnosed_item_by_item_within_bounded_memory(folder: Path, form: str) -> None:
    log = folder / f"pods.{form}"
    _big_list(log, form == "yaml")
    assert log.stat().st_size > 45 << 20
    run = replay(str(log), folder=folder)
    assert (run.code, run.stderr) == (0, b"")
    last = "-  ns/g/c4  CRASH-LOOPING  pod=p-04000 container=main restarts=2 exit=1"
    assert run.stdout.decode().splitlines()[-2] == last
    # the 16Mi limit held once, then one item at a time: never the list, nor its decoded objects
    assert run.rss_mb < _baseline_rss(folder) + 100, run.rss_mb
    smaller = replay("--max-record-size", "2Mi", str(log), folder=folder)
    assert (smaller.code, smaller.stdout) == (0, run.stdout)
