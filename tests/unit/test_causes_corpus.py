"""The cause classifier on real crash output: every case of tests/data/crashlogs (taken from public issue
threads, each with its source in SOURCES) must come out with its class and the line that states it."""

from __future__ import annotations

import collections
import csv
from pathlib import Path

import pytest

from pipeline.causes import classify
from pipeline.causes.catalog import KINDS
from pipeline.causes.scan import MAX_LINE

CORPUS = Path(__file__).resolve().parent.parent / "data" / "crashlogs"

# Cases whose class comes out right but not the line, with why; strict, so a fix shows.
LINE_MISSES = {
    "vllm-permission_denied-decoy-1.log": "the excerpt elides what shows the first PermissionError (/.config) came "
    "from a thread the engine survives; both errors read alike, and the first one wins",
}


def read_sources() -> list[dict[str, str]]:
    with open(CORPUS / "SOURCES", newline="", encoding="utf-8") as sources:
        return list(csv.DictReader(sources, delimiter="\t"))


def read_lines(name: str) -> list[str]:
    """The file's lines as `crashwatch explain` reads them: UTF-8 with replacement, split at newlines."""
    text = (CORPUS / name).read_bytes().decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


CASES = read_sources()


def test_the_corpus_is_large_enough_and_covers_each_class_twice() -> None:
    assert len(CASES) >= 40
    counts = collections.Counter(case["class"] for case in CASES)
    assert set(counts) <= set(KINDS), "a class no entry of the catalog knows"
    thin = {kind: n for kind, n in counts.items() if n < 2}
    assert not thin, f"classes with a single real example: {thin}"


def test_every_file_has_a_source_and_every_source_a_file() -> None:
    files = {path.name for path in CORPUS.glob("*.log")}
    assert files == {case["file"] for case in CASES}
    for case in CASES:
        assert case["source"].startswith("https://github.com/"), case["file"]


@pytest.mark.parametrize("case", CASES, ids=[case["file"] for case in CASES])
def test_the_class(case: dict[str, str]) -> None:
    cause = classify(read_lines(case["file"]))
    assert cause.kind == case["class"]


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(case, marks=pytest.mark.xfail(strict=True, reason=LINE_MISSES[case["file"]]))
        if case["file"] in LINE_MISSES
        else case
        for case in CASES
    ],
    ids=[case["file"] for case in CASES],
)
def test_the_line(case: dict[str, str]) -> None:
    lines = read_lines(case["file"])
    cause = classify(lines)
    if case["class"] == "unknown":
        assert (cause.line, cause.line_number) == (None, None)
        return
    number = int(case["line_number"])
    assert cause.line_number == number
    assert cause.line == lines[number - 1][:MAX_LINE]
