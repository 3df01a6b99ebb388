"""bench/causes.py: `--quick` runs end to end, and the scanner, the installed `explain` and the output it makes
agree on the class and the line of the crash at its end (no timing goals: those are the benchmark's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_finds_the_crash_after_the_noise() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.causes", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["class"] == "gpu_oom"
    assert result["cause_line"] > 5_000  # the cause sits after thousands of lines of noise
    for key in ("scanner_s_per_mib", "peer_s_per_mib", "baseline_s_per_mib", "explain_s_per_mib"):
        assert result[key] > 0
