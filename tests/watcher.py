"""A live `crashwatch` command (run, tail, record) as a subprocess, its output lines collected as they come."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO

from cli import crashwatch_command, popen, until_catching

# The stand-in kubelet (tests/kube.py) makes a crash-looping Pod Ready in place; a real one is Ready for a
# moment between crashes too, which the recovery window (default 1m30s) is there to hold through. These
# tests see that recovery after one second of Ready, through the live clock, unless a test names a window.
STAND_IN_RECOVERY_WINDOW = "1s"
LIVE_COMMANDS = ("run", "tail", "record", "wait", "get")


class Watcher:
    def __init__(self, *args: str, command: list[str] | None = None) -> None:
        """`command`: what runs crashwatch's command line (by default the installed `crashwatch`)."""
        if args and args[0] in LIVE_COMMANDS and "--recovery-window" not in args:
            args = (*args, "--recovery-window", STAND_IN_RECOVERY_WINDOW)
        self.args = args
        self.out: list[str] = []
        self.err: list[str] = []
        self._lock = threading.Lock()
        self.process = popen(
            [*(command or crashwatch_command()), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        self._pumps = [
            threading.Thread(target=self._pump, args=(stream, lines), daemon=True)
            for stream, lines in ((self.process.stdout, self.out), (self.process.stderr, self.err))
        ]
        for pump in self._pumps:
            pump.start()

    def _pump(self, stream: IO[bytes] | None, lines: list[str]) -> None:
        assert stream is not None
        for raw in stream:
            with self._lock:
                lines.append(raw.decode().rstrip("\n"))

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 30, what: str = "a condition") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            if self.process.poll() is not None:
                time.sleep(0.2)  # let the pumps finish
                if predicate():
                    return
                raise AssertionError(f"crashwatch exited with {self.process.returncode}; stderr:\n" + self.stderr())
            time.sleep(0.05)
        raise AssertionError(f"{what} not seen in {timeout}s; stdout:\n{self.stdout()}\nstderr:\n{self.stderr()}")

    def wait_synced(self, timeout: float = 30) -> None:
        self.wait_for(lambda: any("synced in" in line for line in self.snapshot(self.err)), timeout, "synced")

    def wait_line(self, text: str, timeout: float = 30, count: int = 1) -> None:
        self.wait_for(lambda: sum(text in line for line in self.snapshot(self.out)) >= count, timeout, repr(text))

    def snapshot(self, lines: list[str]) -> list[str]:
        with self._lock:
            return list(lines)

    def stdout(self) -> str:
        return "\n".join(self.snapshot(self.out))

    def stderr(self) -> str:
        return "\n".join(self.snapshot(self.err))

    def served_at(self) -> str:
        """The URL of its /healthz, /readyz and /metrics (--http-address), as it says on stderr."""
        pattern = re.compile(r"serving /healthz, /readyz and /metrics at (\S+)")
        self.wait_for(lambda: pattern.search(self.stderr()) is not None, what="the HTTP endpoints")
        return pattern.search(self.stderr()).group(1)  # type: ignore[union-attr]

    def writes(self) -> list[str]:
        """The status writes it reported on stderr."""
        return [line for line in self.snapshot(self.err) if line.startswith("crashwatch: wrote ")]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        if self.process.poll() is None:
            self.send_signal(sig)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pump in self._pumps:  # the pipes reach their end once the process is gone
            pump.join(timeout=5)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        return self.process.returncode

    def send_signal(self, sig: int) -> None:
        """Send a signal once the command has its handler for it (sent before, it would find none and
        kill the process): the state the signal must meet, waited for, never a sleep."""
        with contextlib.suppress(AssertionError):  # it exited meanwhile: then there is nothing to stop
            until_catching(self.process, sig)
        if self.process.poll() is None:
            self.process.send_signal(sig)

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def kubeconfig_args(kubeconfig: Path, *extra: str) -> tuple[str, ...]:
    return ("--kubeconfig", str(kubeconfig), *extra)


def http_get(url: str) -> tuple[int, str]:
    """Status and body, error statuses included."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
