"""bench/reach.py: `--quick` runs end to end, every case giving exit 68 for both crashwatch commands (the
benchmark refuses any other exit), and prints a row for each (no timing goals: those are the benchmark's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_times_every_case() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.reach", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [
        line.split("|")[1].strip() for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line
    ]
    assert rows == [
        "case",
        "connection refused",
        "name does not resolve",
        "certificate not trusted",
        "no answer (2s timeout)",
    ]
