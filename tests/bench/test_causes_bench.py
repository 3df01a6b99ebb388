"""bench/causes.py: `--quick` runs end to end, and the scanner, the installed `explain` and the output it makes
agree on the class and the line of the crash at its end, as does an older tree's scanner under `--before`
(no timing goals: those are the benchmark's)."""

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


def test_before_times_the_scanner_of_the_tree_named_and_refuses_a_tree_without_one(tmp_path: Path) -> None:
    """`--before` is given this tree itself (an older commit's would need the history, which a CI clone may
    lack): its scanner must be found there and give the same answer; a directory holding none is refused
    in one line before anything is timed."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.causes", "--quick", "--before", str(ROOT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    for key in ("before_s_per_mib", "before_corpus_files_s_per_mib", "before_corpus_joined_s_per_mib", "speedup"):
        assert result[key] > 0
    refused = subprocess.run(
        [sys.executable, "-m", "bench.causes", "--quick", "--before", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.splitlines()[-1].endswith(f"--before {tmp_path}: no pipeline/causes/__init__.py under it")
