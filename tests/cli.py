"""Running the installed `crashwatch` command, as users and scripts do.

A child is started as a terminal's foreground command is: SIGINT and SIGTERM at their default
disposition and unblocked, whatever pytest inherited. (A background job of a non-interactive shell, which
is how CI often runs the suite, starts with SIGINT ignored, and an ignored disposition survives exec: the
child's Python would then install no KeyboardInterrupt handler, and a test of Ctrl-C would test nothing.)
A test that signals a child waits, through /proc, for the state the signal must meet (a handler
installed, a thread blocked), never for a fixed time.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT)


def crashwatch_command() -> list[str]:
    script = Path(sys.executable).parent / "crashwatch"
    return [str(script)] if script.exists() else [sys.executable, "-m", "crashwatch"]


def as_from_a_terminal() -> None:
    """preexec_fn: the signals a terminal sends, at their defaults and unblocked, as a shell's foreground
    command has them (SIGPIPE and the like Popen restores on its own)."""
    for signum in TERMINAL_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, TERMINAL_SIGNALS)


def with_sigint_ignored() -> None:
    """preexec_fn: as a background job of a script starts (`crashwatch ... &` in `sh -c`): SIGINT ignored."""
    as_from_a_terminal()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def popen(
    args: list[str], preexec: Callable[[], None] = as_from_a_terminal, **kwargs: Any
) -> subprocess.Popen[bytes]:
    """subprocess.Popen, with the child's signals as a terminal's foreground command has them."""
    return subprocess.Popen(args, preexec_fn=preexec, **kwargs)  # (it only sets signal dispositions)


def run(*args: str, stdin: bytes | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*crashwatch_command(), *args],
        input=stdin,
        capture_output=True,
        cwd=cwd,
        timeout=120,
        check=False,
        preexec_fn=as_from_a_terminal,
    )


def proc_status(pid: int, task: int | None = None) -> dict[str, str]:
    """/proc/PID/status (or one thread's, /proc/PID/task/TID/status) as a dict; empty once it is gone."""
    path = f"/proc/{pid}/status" if task is None else f"/proc/{pid}/task/{task}/status"
    try:
        text = Path(path).read_text()
    except OSError:
        return {}
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler installed for the signal (SigCgt)."""
    mask = proc_status(pid).get("SigCgt", "0").strip()
    return bool(int(mask, 16) >> (signum - 1) & 1)


def until(predicate: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Poll until the predicate holds (the deadline only ends a test that would hang)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout} s")
        time.sleep(0.01)


def until_catching(process: subprocess.Popen[bytes], signum: int, timeout: float = 60) -> None:
    """Until the child has installed a handler for the signal: a signal sent before would find none."""

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"the child exited ({process.returncode}) before catching {signum}")
        return catches(process.pid, signum)

    until(ready, f"a handler for signal {signum} in {process.pid}", timeout)


def wchan(pid: int, task: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/task/{task}/wchan").read_text()
    return ""


def switches(pid: int, task: int) -> int:
    """How often the thread has gone to sleep of its own accord (woken, then waiting again)."""
    return int(proc_status(pid, task).get("voluntary_ctxt_switches", "0"))
