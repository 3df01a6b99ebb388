"""bench/scale.py: its exactly-once check tells a lost and a repeated report, and `--quick` runs end to end
(crashwatch alone, no peer: the Go build is the benchmark's business, not the test suite's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.scale import Loop, exactly_once  # noqa: E402


def test_exactly_once_tells_lost_and_repeated() -> None:
    a, b = ("team-0", "graph-0-worker-1"), ("team-0", "graph-0-worker-2")
    record = [("start", Loop(a, 30)), ("start", Loop(b, 50)), ("end", Loop(a, 30))]
    good_writes = [(a, "True"), (b, "True"), (a, "False")]
    good_lines = [(a, True), (b, True), (a, False)]
    assert exactly_once(record, good_writes, good_lines) == (3, 0, 0)
    # b's write lost, a's end written twice; the lines say the same
    writes = [(a, "True"), (a, "False"), (a, "False")]
    lines = [(a, True), (a, False), (a, False)]
    checked, lost, repeated = exactly_once(record, writes, lines)
    assert (checked, lost, repeated) == (3, 2, 2)
    # a verdict nobody asked for is a repeat too
    assert exactly_once(record, [*good_writes, (b, "False")], good_lines) == (3, 0, 1)


def test_quick_run_reports_every_crash_loop_once() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.scale", "--quick", "--only", "crashwatch", "--pods", "1000", "--duration", "5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    figures = result["crashwatch"]
    assert figures["checked"] > 0
    assert (figures["lost"], figures["repeated"]) == (0, 0)
    assert 0 < figures["ready"] <= figures["complete"]
    assert figures["events"] > 0 and figures["peak_rss"] > 0
