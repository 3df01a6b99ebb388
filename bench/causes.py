"""Benchmark of the cause classifier (issue 32): classification time per MiB of a crashed run's output.

    python -m bench.causes            # a 64 MiB output: a real crash log of the corpus after engine noise
    python -m bench.causes --quick    # 1 MiB: checks the benchmark itself still works

The output is what a worker that loaded for a long time prints (vLLM's and SGLang's progress, metrics and
access lines, NCCL INFO, warnings that mention memory and NCCL), with a real crash log of
tests/data/crashlogs at its end, so the scanner reads every line before the cause, as it must. In one run,
on the same text, it measures:

- the scanner in this process (`pipeline.causes.classify` over the lines, split as `explain` splits them);
- the peer: a plain `for line in text.splitlines()` loop with one regular expression search per line, the
  least any line-by-line reader does; the ratio to it survives the machine's drift;
- the baseline: the same loop searching every pattern of the catalog in every line, as a scanner without
  the needles' gate would (what the gate saves);
- the installed `crashwatch explain` on the file (reading, decoding and all), with its peak RSS.

It checks that each finds the log's class and line; it reports, it does not judge (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import random
import re
import subprocess
import sys
import time
from pathlib import Path

from pipeline.causes import classify
from pipeline.causes.catalog import CATALOG

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "crashlogs"
CACHE = ROOT / ".cache" / "bench"
CASE = "vllm-gpu_oom-decoy-1.log"  # a V1 worker's traceback, with an NCCL warning after the cause
MIB = 1 << 20

NOISE = (
    "(APIServer pid=1) INFO 07-01 02:{m:02d}:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: {a}.0 "
    "tokens/s, Avg generation throughput: {b}.4 tokens/s, Running: {c} reqs, Waiting: 0 reqs, GPU KV cache usage: "
    "{d}.1%, Prefix cache hit rate: 41.7%",
    '(APIServer pid=1) INFO:     10.0.{c}.{d}:{a} - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "Loading safetensors checkpoint shards: {d:3d}% Completed | {c}/61 [00:{s:02d}<00:{m:02d},  1.21s/it]",
    "[2025-03-01 10:{m:02d}:{s:02d} TP{c}] Decode batch. #running-req: {a}, #token: {b}, token usage: 0.{d:02d}, "
    "gen throughput (token/s): {a}.87, #queue-req: 0",
    "node{c}:{a}:{b} [{c}] NCCL INFO Channel {d:02d}/24 : 0[{c}] -> 1[{c}] via P2P/CUMEM/read",
    "(Worker pid={a}) WARNING 07-01 02:{m:02d}:{s:02d} [utils.py:{b}] CUDA graph memory estimate is {d}.3 GiB; "
    "lower --max-num-seqs if the engine runs out of memory",
    "node{c}:{a}:{b} [{c}] NCCL WARN Connect to 10.0.0.{d}<{a}> failed : Connection refused, retrying",
    "(EngineCore_DP0 pid=316) DEBUG 07-01 02:{m:02d}:{s:02d} [core.py:{b}] EngineCore loop active: {a} steps, "
    "{c} requests, {d} finished",
)


def make_output(path: Path, size: int, seed: int = 32) -> tuple[int, str]:
    """`size` bytes of noise, then the case's log; returns the line number of its cause and its class."""
    case = next(row for row in _sources() if row["file"] == CASE)
    crash = (CORPUS / CASE).read_text(encoding="utf-8")
    rng = random.Random(seed)
    lines = 0
    written = 0
    with open(path, "w", encoding="utf-8") as out:
        batch: list[str] = []
        while written < size:
            values = {k: rng.randrange(100) for k in "abcdms"}
            line = rng.choice(NOISE).format(**values)
            batch.append(line)
            written += len(line) + 1
            if len(batch) == 4096:
                out.write("\n".join(batch) + "\n")
                lines += len(batch)
                batch.clear()
        out.write("\n".join(batch) + "\n" if batch else "")
        lines += len(batch)
        out.write(crash)
    return lines + int(case["line_number"]), case["class"]


def _sources() -> list[dict[str, str]]:
    with open(CORPUS / "SOURCES", newline="", encoding="utf-8") as sources:
        return list(csv.DictReader(sources, delimiter="\t"))


# Runs a command and says its wall time and peak RSS on stderr. A small process of its own starts it: a child
# forked straight from this one, which holds the whole output, would count this one's pages in its peak RSS.
MEASURE = """
import json, resource, subprocess, sys, time
started = time.perf_counter()
subprocess.run(sys.argv[1:], check=True)
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "maxrss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}),
      file=sys.stderr)
"""


def crashwatch() -> str:
    return str(Path(sys.executable).parent / "crashwatch")


def run(size_mib: int, repeat: int) -> dict[str, object]:
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"causes-{size_mib}mib.log"
    number, kind = make_output(path, size_mib * MIB)
    mib = path.stat().st_size / MIB
    text = path.read_bytes().decode("utf-8", errors="replace")
    peer = re.compile(r"CUDA out of memory")
    every = [p.regex for entry in CATALOG for p in entry.patterns]
    ours, theirs, naive, cli = [], [], [], []
    rss = 0.0
    for _ in range(repeat):
        started = time.perf_counter()
        lines = text.split("\n")
        cause = classify(lines)
        ours.append(time.perf_counter() - started)
        del lines
        assert (cause.kind, cause.line_number) == (kind, number), (cause.kind, cause.line_number)

        started = time.perf_counter()
        for line in text.splitlines():
            peer.search(line)
        theirs.append(time.perf_counter() - started)

        started = time.perf_counter()
        for line in text.splitlines():
            for regex in every:
                regex.search(line)
        naive.append(time.perf_counter() - started)

        done = subprocess.run(
            [sys.executable, "-c", MEASURE, crashwatch(), "explain", "-o", "json", str(path)],
            capture_output=True,
            check=True,
        )
        measured = json.loads(done.stderr)
        cli.append(measured["seconds"])
        rss = max(rss, measured["maxrss_kib"] / 1024)
        found = json.loads(done.stdout)
        assert (found["class"], found["line_number"]) == (kind, number), found
    best_ours, best_peer, best_cli = min(ours), min(theirs), min(cli)
    return {
        "output_mib": round(mib, 1),
        "cause_line": number,
        "class": kind,
        "scanner_s_per_mib": round(best_ours / mib, 4),
        "peer_s_per_mib": round(best_peer / mib, 4),
        "ratio_to_peer": round(best_ours / best_peer, 1),
        "baseline_s_per_mib": round(min(naive) / mib, 4),
        "ratio_to_baseline": round(best_ours / min(naive), 2),
        "explain_s_per_mib": round(best_cli / mib, 4),
        "explain_peak_rss_mib": round(rss, 1),
        "runs": repeat,
        "python": platform.python_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 MiB, one run")
    parser.add_argument("--size", type=int, default=64, metavar="MIB", help="the output's size (default: 64)")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best of each is kept (default: 3)")
    args = parser.parse_args()
    result = run(1, 1) if args.quick else run(args.size, args.repeat)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
