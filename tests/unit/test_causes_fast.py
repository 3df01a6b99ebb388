"""The scanner's fast way gives the answers of the long way, and of the scanner before it had one.

`Scanner(fast=True)` (the default) remembers each line's shape by its text with digits made zeros and passes
over lines whose shape says they cannot matter; `fast=False` reads every line the long way. Three checks:

- every corpus file, and every corpus file with engine noise (and lines that do matter: serving lines, NCCL
  WARNs and their trails, warnings, chain markers, lines of the same processes) woven in, gives exactly the
  answer recorded in tests/data/causes-answers.json (class, certain, line, line number, fields, hint), which
  was written once by the scanner as it was before the fast way (commit fb3020d) and is never rewritten by a
  test: any change of an answer fails here;
- the same inputs give the same answer the fast way and the long way;
- hypothesis mixes corpus lines, noise and lines whose digits it changes (so that lines of one shape differ
  where digits matter: `[Errno 28]`, an NCCL trail's `-> 0` or `-> 2`) and compares the two ways.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.causes import Cause, Scanner, classify
from pipeline.causes.scan import MEMO_ENTRIES, MEMO_LINE

DATA = Path(__file__).resolve().parent.parent / "data"
CORPUS = DATA / "crashlogs"
ANSWERS = DATA / "causes-answers.json"

# What a worker prints while it loads and serves: none of it names a cause (bench.causes's noise, and more)
QUIET = (
    "(APIServer pid=1) INFO 07-01 02:{m:02d}:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: {a}.0 "
    "tokens/s, Avg generation throughput: {b}.4 tokens/s, Running: {c} reqs, Waiting: 0 reqs, GPU KV cache usage: "
    "{d}.1%, Prefix cache hit rate: 41.7%",
    '(APIServer pid=1) INFO:     10.0.{c}.{d}:{a} - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "Loading safetensors checkpoint shards: {d:3d}% Completed | {c}/61 [00:{s:02d}<00:{m:02d},  1.21s/it]",
    "Loading safetensors checkpoint shards:  {d}%|\u2588\u2588\u258c      | {c}/61 [00:{s:02d}<00:{m:02d}]",
    "[2025-03-01 10:{m:02d}:{s:02d} TP{c}] Decode batch. #running-req: {a}, #token: {b}, token usage: 0.{d:02d}, "
    "gen throughput (token/s): {a}.87, #queue-req: 0",
    "node{c}:{a}:{b} [{c}] NCCL INFO Channel {d:02d}/24 : 0[{c}] -> 1[{c}] via P2P/CUMEM/read",
    "(Worker pid={a}) WARNING 07-01 02:{m:02d}:{s:02d} [utils.py:{b}] CUDA graph memory estimate is {d}.3 GiB; "
    "lower --max-num-seqs if the engine runs out of memory",
    "(EngineCore_DP0 pid=316) DEBUG 07-01 02:{m:02d}:{s:02d} [core.py:{b}] EngineCore loop active: {a} steps",
    "[07/08/2025-19:{m:02d}:{s:02d}] [TRT-LLM] [I] Executor iteration {a}: {b} requests in flight",
    "2024-06-17T13:{m:02d}:{s:02d}.371622Z  INFO text_generation_router::server: router/src/server.rs:{b}: "
    "Warming up model",
    "I1128 16:{m:02d}:{s:02d}.479096 {a} backend_model.cc:{b}] loaded model in {c} ms",
    "",
)
# Lines that may change an answer: they go the long way, or change what the next lines mean
LOUD = (
    "node{c}:{a}:{b} [{c}] NCCL WARN Connect to 10.0.0.{d}<{a}> failed : Connection refused, retrying",
    "node{c}:{a}:{b} [{c}] NCCL INFO misc/socket.cc:{b} -> {e}",
    "(APIServer pid=1) INFO:     Application startup complete.",
    "(EngineCore_DP0 pid=17374) INFO 09-28 15:47:{s:02d} [core.py:{b}] still loading",
    "(EngineCore_DP0 pid=17374) ERROR 09-28 15:47:{s:02d} [core.py:718] ",
    "[rank{e}]: some output of rank {e}",
    "WARNING 09-28 15:47:{s:02d} [worker.py:1] CUDA out of memory while profiling; retrying",
    "/opt/x/torch/cuda/__init__.py:{b}: UserWarning: Not enough free disk space to download the file",
    "The above exception was the direct cause of the following exception:",
    "Exception in thread Thread-{e} (_report_usage_worker):",
    "OSError: [Errno {e}{e}] something failed",
    "\x1b[31mERROR\x1b[0m 09-28 15:47:{s:02d} [core.py:1] lost worker {a}",
)


def noise(rng: random.Random, templates: tuple[str, ...]) -> str:
    values = {k: rng.randrange(100) for k in "abcdms"} | {"e": rng.randrange(10)}
    return rng.choice(templates).format(**values)


def woven(lines: list[str], seed: int, templates: tuple[str, ...]) -> list[str]:
    """The lines in order, with 0 to 3 noise lines before each and after the last."""
    rng = random.Random(seed)
    out: list[str] = []
    for line in [*lines, None]:
        out += [noise(rng, templates) for _ in range(rng.randrange(4))]
        if line is not None:
            out.append(line)
    return out


def read_lines(name: str) -> list[str]:
    text = (CORPUS / name).read_bytes().decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def inputs() -> dict[str, list[str]]:
    """Every input whose answer the fixture holds, by name."""
    cases: dict[str, list[str]] = {}
    for path in sorted(CORPUS.glob("*.log")):
        lines = read_lines(path.name)
        cases[path.name] = lines
        for seed in range(3):
            cases[f"{path.name}+quiet{seed}"] = woven(lines, seed, QUIET)
            cases[f"{path.name}+loud{seed}"] = woven(lines, 100 + seed, QUIET + LOUD)
    return cases


INPUTS = inputs()
RECORDED: dict[str, dict[str, object]] = json.loads(ANSWERS.read_text(encoding="utf-8"))


def answer(cause: Cause) -> dict[str, object]:
    encoded: dict[str, object] = json.loads(msgspec.json.encode(cause))
    return encoded


def test_the_fixture_holds_every_input_and_varied_answers() -> None:
    assert set(RECORDED) == set(INPUTS)
    kinds = {str(recorded["class"]) for recorded in RECORDED.values()}
    assert len(kinds) >= 10  # the corpus's classes, not one answer for all


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_each_input_gives_the_recorded_answer_both_ways(name: str) -> None:
    lines = INPUTS[name]
    fast = classify(lines)
    assert answer(fast) == RECORDED[name]
    assert classify(lines, fast=False) == fast


def test_one_scanner_fed_everything_gives_the_same_answer_both_ways() -> None:
    """Shapes remembered across many outputs (and forgotten when there are too many) change nothing."""
    lines = [line for name in sorted(INPUTS) for line in INPUTS[name]]
    assert len({line for line in lines if len(line) <= MEMO_LINE}) > MEMO_ENTRIES
    fast, slow = Scanner(), Scanner(fast=False)
    for number, line in enumerate(lines):
        fast.feed(line)
        slow.feed(line)
        if number % 97 == 0:
            assert fast.result() == slow.result()
    assert fast.result() == slow.result()


def test_lines_of_one_shape_that_differ_in_digits_are_read_for_what_they_say() -> None:
    warn = "node5:240:240 [6] misc/socket.cc:533 NCCL WARN socketPollConnect: Connect to 10.0.0.4<56849> returned 113"
    clean = "node5:240:240 [6] NCCL INFO misc/socket.cc:570 -> 0"
    trail = "node5:240:240 [6] NCCL INFO misc/socket.cc:570 -> 2"
    for way in (True, False):
        assert classify([warn, clean, clean], fast=way).kind == "unknown"
        assert classify([warn, clean, trail], fast=way).line_number == 1
        errno = classify(["OSError: [Errno 13] x", "OSError: [Errno 28] No space left on device"], fast=way)
        assert (errno.kind, errno.line_number) == ("disk_full", 2)


DIGITS = st.text("0123456789", min_size=1, max_size=3)
TRACEBACK = ("Traceback (most recent call last):", '  File "/x/vllm/worker.py", line 12, in load')
HEADINGS = ("Exception in thread Thread-3 (_report_usage_worker):", "Exception ignored in: <function f at 0x7f>")


@st.composite
def mixed(draw: st.DrawFn) -> list[str]:
    """Runs of corpus lines (tracebacks stay whole), single noise lines, some lines with their digits changed."""
    names = sorted(path.name for path in CORPUS.glob("*.log"))
    rng = random.Random(draw(st.integers(0, 2**32)))
    lines: list[str] = []
    for _ in range(draw(st.integers(1, 40))):
        pick = draw(st.integers(0, 9))
        if pick == 3:  # what Python prints before a traceback that may not have ended the process
            exception = draw(st.sampled_from([line for name in names for line in read_lines(name) if "Error" in line]))
            lines += [draw(st.sampled_from(HEADINGS)), *TRACEBACK, exception]
        elif pick < 3:
            run = read_lines(draw(st.sampled_from(names)))
            start = draw(st.integers(0, len(run) - 1))
            lines += run[start : start + draw(st.integers(1, 12))]
        else:
            lines.append(noise(rng, QUIET + LOUD))
        if pick == 9:
            lines[-1] = "".join(draw(DIGITS) if char.isdigit() else char for char in lines[-1])
    return lines


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=mixed(), engine=st.sampled_from([None, "vllm", "sglang", "trtllm", "dynamo", "tgi"]))
def test_the_fast_way_gives_the_long_ways_answer(lines: list[str], engine: str | None) -> None:
    fast, slow = Scanner(engine), Scanner(engine, fast=False)
    for line in lines:
        fast.feed(line)
        slow.feed(line)
        assert fast.result() == slow.result()
