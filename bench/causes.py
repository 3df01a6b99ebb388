"""Benchmark of the cause classifier (issue 32): classification time per MiB of a crashed run's output.

    python -m bench.causes                      # a 64 MiB output: a real crash log of the corpus after engine noise
    python -m bench.causes --quick              # 1 MiB: checks the benchmark itself still works
    python -m bench.causes --before DIR         # also times the scanner of an older tree DIR (holding pipeline/)

The output is what a worker that loaded for a long time prints (vLLM's and SGLang's progress, metrics and
access lines, NCCL INFO, warnings that mention memory and NCCL), with a real crash log of
tests/data/crashlogs at its end, so the scanner reads every line before the cause, as it must. In one run,
on the same text, it measures:

- the scanner in this process (`pipeline.causes.classify` over the lines, split as `explain` splits them),
  the fast way (the default) and the long way (`fast=False`, every line's prefixes, traceback and gate);
- the peer: a plain `for line in text.splitlines()` loop with one regular expression search per line, the
  least any line-by-line reader does; the ratio to it survives the machine's drift;
- the baseline: the same loop searching every pattern of the catalog in every line, as a scanner without
  the needles' gate would (what the gate saves);
- the installed `crashwatch explain` on the file (reading, decoding and all), with its peak RSS;
- the real crash logs of the corpus: each file classified on its own (a classify per crash, as the live
  watcher does), about 1 MiB of them, and all of them one after the other as one output (`--corpus-size` MiB);
- with `--before DIR`, the scanner of DIR (e.g. an older commit's tree) on the same texts, in a process of its
  own.

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
from typing import Any

from pipeline.causes import UNKNOWN, Cause, classify
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


# Times a scanner found on another path (an older tree) on the same texts, in a process of its own so that its
# `pipeline` package is the one imported. It checks that it is: were the tree to hold none, the editable install's
# finder would supply this tree's, and the "before" would time the scanner of now.
BEFORE = """
import json, pathlib, sys, time
sys.path.insert(0, sys.argv[1])
import pipeline.causes
from pipeline.causes import classify
where = pathlib.Path(pipeline.causes.__file__).resolve()
if not where.is_relative_to(pathlib.Path(sys.argv[1]).resolve()):
    sys.exit(f"imported {where}, not the tree's own pipeline.causes")
text = pathlib.Path(sys.argv[2]).read_bytes().decode("utf-8", errors="replace")
corpus = json.loads(pathlib.Path(sys.argv[3]).read_text())
repeat, rounds = int(sys.argv[4]), int(sys.argv[5])
whole, files = [], []
for _ in range(repeat):
    started = time.perf_counter()
    cause = classify(text.split("\\n"))
    whole.append(time.perf_counter() - started)
    started = time.perf_counter()
    for _ in range(rounds):
        for each in corpus["files"]:
            classify(each.split("\\n"))
    files.append(time.perf_counter() - started)
started = time.perf_counter()
classify(corpus["joined"].split("\\n"))
joined = time.perf_counter() - started
print(json.dumps({"whole": min(whole), "files": min(files), "joined": joined, "class": cause.kind,
                  "line_number": cause.line_number}))
"""


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


def corpus_texts(size_mib: int) -> tuple[list[str], str]:
    """The corpus's files, and all of them one after the other, again and again, to `size_mib` MiB."""
    files = [(CORPUS / row["file"]).read_bytes().decode("utf-8", errors="replace") for row in _sources()]
    each = "".join(text if text.endswith("\n") else text + "\n" for text in files)
    return files, each * max(1, size_mib * MIB // len(each.encode()))


def timed(text: str, repeat: int, fast: bool) -> tuple[float, Cause]:
    best, cause = float("inf"), UNKNOWN
    for _ in range(repeat):
        started = time.perf_counter()
        lines = text.split("\n")
        cause = classify(lines, fast=fast)
        best = min(best, time.perf_counter() - started)
        del lines
    return best, cause


def per_file(files: list[str], rounds: int, repeat: int, fast: bool) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(rounds):
            for text in files:
                classify(text.split("\n"), fast=fast)
        best = min(best, time.perf_counter() - started)
    return best


def explain(path: Path, kind: str, number: int, repeat: int) -> tuple[float, float]:
    """`crashwatch explain` on the file: its best wall time and its peak RSS in MiB."""
    seconds, rss = [], 0.0
    for _ in range(repeat):
        done = subprocess.run(
            [sys.executable, "-c", MEASURE, crashwatch(), "explain", "-o", "json", str(path)],
            capture_output=True,
            check=True,
        )
        measured = json.loads(done.stderr)
        seconds.append(measured["seconds"])
        rss = max(rss, measured["maxrss_kib"] / 1024)
        found = json.loads(done.stdout)
        assert (found["class"], found["line_number"]) == (kind, number), found
    return min(seconds), rss


def before(tree: Path, path: Path, files: list[str], joined: str, rounds: int, repeat: int) -> dict[str, Any]:
    corpus = CACHE / "causes-corpus.json"
    corpus.write_text(json.dumps({"files": files, "joined": joined}), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", BEFORE, str(tree.resolve()), str(path), str(corpus), str(repeat), str(rounds)],
        capture_output=True,
        cwd=tree,
    )
    if done.returncode != 0:
        last = (done.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[-1]
        sys.exit(f"bench.causes: the scanner of {tree} failed (exit {done.returncode}): {last}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def run(size_mib: int, repeat: int, corpus_mib: int, tree: Path | None) -> dict[str, object]:
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"causes-{size_mib}mib.log"
    number, kind = make_output(path, size_mib * MIB)
    mib = path.stat().st_size / MIB
    text = path.read_bytes().decode("utf-8", errors="replace")
    files, joined = corpus_texts(corpus_mib)
    files_mib = sum(len(f.encode()) for f in files) / MIB
    joined_mib = len(joined.encode()) / MIB
    rounds = max(1, int(1 / files_mib))  # about 1 MiB of separate outputs
    peer = re.compile(r"CUDA out of memory")
    every = [p.regex for entry in CATALOG for p in entry.patterns]
    fast, cause = timed(text, repeat, True)
    assert (cause.kind, cause.line_number) == (kind, number), cause
    long, cause = timed(text, repeat, False)
    assert (cause.kind, cause.line_number) == (kind, number), cause
    theirs, naive = [], []
    for _ in range(repeat):
        started = time.perf_counter()
        for line in text.splitlines():
            peer.search(line)
        theirs.append(time.perf_counter() - started)
        started = time.perf_counter()
        for line in text.splitlines():
            for regex in every:
                regex.search(line)
        naive.append(time.perf_counter() - started)
    best_peer = min(theirs)
    cli, rss = explain(path, kind, number, repeat)
    files_fast = per_file(files, rounds, repeat, True)
    files_long = per_file(files, rounds, repeat, False)
    joined_fast, _ = timed(joined, 1, True)
    joined_long, _ = timed(joined, 1, False)
    result: dict[str, object] = {
        "output_mib": round(mib, 1),
        "cause_line": number,
        "class": kind,
        "scanner_s_per_mib": round(fast / mib, 4),
        "scanner_512kib_ms": round(fast / mib * 512, 1),
        "long_way_s_per_mib": round(long / mib, 4),
        "peer_s_per_mib": round(best_peer / mib, 4),
        "ratio_to_peer": round(fast / best_peer, 1),
        "long_way_ratio_to_peer": round(long / best_peer, 1),
        "baseline_s_per_mib": round(min(naive) / mib, 4),
        "ratio_to_baseline": round(fast / min(naive), 3),
        "explain_s_per_mib": round(cli / mib, 4),
        "explain_peak_rss_mib": round(rss, 1),
        "corpus_files_ms_per_output": round(files_fast / rounds / len(files) * 1000, 3),
        "corpus_files_s_per_mib": round(files_fast / (rounds * files_mib), 4),
        "corpus_files_long_way_s_per_mib": round(files_long / (rounds * files_mib), 4),
        "corpus_joined_mib": round(joined_mib, 1),
        "corpus_joined_s_per_mib": round(joined_fast / joined_mib, 4),
        "corpus_joined_long_way_s_per_mib": round(joined_long / joined_mib, 4),
        "runs": repeat,
        "python": platform.python_version(),
    }
    if tree is not None:
        old = before(tree, path, files, joined, rounds, repeat)
        assert (old["class"], old["line_number"]) == (kind, number), old
        result |= {
            "before_s_per_mib": round(old["whole"] / mib, 4),
            "before_ratio_to_peer": round(old["whole"] / best_peer, 1),
            "speedup": round(old["whole"] / fast, 1),
            "before_corpus_files_s_per_mib": round(old["files"] / (rounds * files_mib), 4),
            "corpus_files_speedup": round(old["files"] / files_fast, 1),
            "before_corpus_joined_s_per_mib": round(old["joined"] / joined_mib, 4),
            "corpus_joined_speedup": round(old["joined"] / joined_fast, 2),
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 MiB, one run")
    parser.add_argument("--size", type=int, default=64, metavar="MIB", help="the output's size (default: 64)")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best of each is kept (default: 3)")
    parser.add_argument(
        "--corpus-size", type=int, default=16, metavar="MIB", help="the corpus one after the other (default: 16)"
    )
    parser.add_argument("--before", type=Path, metavar="DIR", help="also time the scanner of this tree")
    args = parser.parse_args()
    if args.before is not None and not (args.before / "pipeline" / "causes" / "__init__.py").is_file():
        parser.error(f"--before {args.before}: no pipeline/causes/__init__.py under it")
    quick = args.quick
    result = run(1, 1, 1, args.before) if quick else run(args.size, args.repeat, args.corpus_size, args.before)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
