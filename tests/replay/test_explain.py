"""`crashwatch explain` as users and scripts run it: on every real crash log of the corpus, on standard
input, compressed, and on input it must refuse (a missing file, a directory, binary data) with one line
and its exit code."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pytest
from cli import run

from crashwatch import cli
from pipeline.causes.catalog import ENGINES
from pipeline.causes.scan import MAX_LINE

CORPUS = Path(__file__).resolve().parent.parent / "data" / "crashlogs"
with open(CORPUS / "SOURCES", newline="", encoding="utf-8") as sources:
    CASES = list(csv.DictReader(sources, delimiter="\t"))
KEYS = ["class", "certain", "line", "line_number", "hint", "fields"]
OOM = (
    b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    b"79.15 GiB of which 1.50 GiB is free.\n"
)


def explained(*args: str, stdin: bytes | None = None) -> dict[str, object]:
    result = run("explain", "-o", "json", *args, stdin=stdin)
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    lines = result.stdout.decode().splitlines()
    assert len(lines) == 1
    found = json.loads(lines[0])
    assert list(found) == KEYS
    return found


@pytest.mark.parametrize("case", CASES, ids=[case["file"] for case in CASES])
def test_every_corpus_log_gets_its_class(case: dict[str, str]) -> None:
    found = explained(str(CORPUS / case["file"]))
    assert found["class"] == case["class"]
    if case["class"] == "unknown":
        assert (found["line"], found["line_number"], found["fields"]) == (None, None, {})
    else:
        number = found["line_number"]
        assert isinstance(number, int)
        text = (CORPUS / case["file"]).read_bytes().decode("utf-8", errors="replace").split("\n")
        assert found["line"] == text[number - 1].removesuffix("\r")[:MAX_LINE]


def test_text_output_says_the_class_the_line_and_the_hint() -> None:
    result = run("explain", str(CORPUS / "vllm-gpu_oom-1.log"))
    assert result.returncode == 0
    lines = result.stdout.decode().splitlines()
    assert [line.split(":", 1)[0] for line in lines] == ["class", "cause", "certain", "line", "hint", "fields"]
    assert lines[0] == "class: gpu_oom"
    assert lines[1] == "cause: CUDA out of memory loading the model (3.22 GiB free of 4.0 GiB)"
    assert lines[2] == "certain: yes"
    assert lines[3].startswith("line: 7: (EngineCore_DP0 pid=17374) ERROR")
    assert lines[5] == 'fields: free="3.22 GiB" total="4.0 GiB"'


def test_standard_input_with_a_dash_or_no_file() -> None:
    data = (CORPUS / "tgi-port_in_use-1.log").read_bytes()
    assert explained("-", stdin=data) == explained(stdin=data) == explained(str(CORPUS / "tgi-port_in_use-1.log"))


def test_a_gzip_log_reads_as_its_content(tmp_path: Path) -> None:
    plain = CORPUS / "sglang-shm_exhausted-decoy-1.log"
    packed = tmp_path / "out.log.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert explained(str(packed)) == explained(str(plain))


def test_an_empty_output_is_unknown(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    found = explained(str(empty))
    assert (found["class"], found["line"], found["line_number"], found["certain"]) == ("unknown", None, None, False)
    assert run("explain", str(empty)).stdout.decode().startswith("class: unknown\n")


def test_invalid_utf8_is_replaced_and_a_last_line_without_newline_counts(tmp_path: Path) -> None:
    log = tmp_path / "cut.log"
    log.write_bytes(b"INFO loading \xe2\x82\nINFO more\r\n" + OOM.rstrip(b"\n") + b" \xff")
    found = explained(str(log))
    assert found["line_number"] == 3
    assert found["line"] == OOM.decode().rstrip("\n") + " \ufffd"


def test_a_line_longer_than_the_bound_is_cut(tmp_path: Path) -> None:
    log = tmp_path / "long.log"
    log.write_bytes(b"x" * 5_000_000 + b"\n" + OOM.rstrip(b"\n") + b" " + b"y" * 3_000_000 + b"\n")
    found = explained(str(log))
    assert found["line_number"] == 2
    assert isinstance(found["line"], str)
    assert len(found["line"]) == MAX_LINE


def test_a_missing_file_is_one_line_and_exit_66(tmp_path: Path) -> None:
    result = run("explain", str(tmp_path / "nope.log"))
    assert result.returncode == 66
    assert result.stdout == b""
    assert result.stderr.decode() == f"crashwatch: {tmp_path / 'nope.log'}: cannot open: No such file or directory\n"


def test_a_directory_is_one_line_and_exit_66(tmp_path: Path) -> None:
    result = run("explain", str(tmp_path))
    assert result.returncode == 66
    assert result.stderr.decode() == f"crashwatch: {tmp_path}: is a directory, not a container's output\n"


def test_binary_data_is_one_line_and_exit_65(tmp_path: Path) -> None:
    binary = tmp_path / "core"
    binary.write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 1000)
    result = run("explain", str(binary))
    assert result.returncode == 65
    assert result.stdout == b""
    assert result.stderr.decode() == (
        f"crashwatch: {binary}:1: binary data (a NUL byte at byte 7), not a program's output: not read further\n"
    )


def test_a_damaged_gzip_log_is_one_line_and_exit_66(tmp_path: Path) -> None:
    packed = tmp_path / "cut.gz"
    packed.write_bytes(gzip.compress((CORPUS / "vllm-gpu_oom-1.log").read_bytes() * 50)[:300])
    result = run("explain", str(packed))
    assert result.returncode == 66
    assert len(result.stderr.decode().splitlines()) == 1
    assert result.stderr.decode().startswith(f"crashwatch: {packed}: cannot read: ")


def test_json_errors_under_log_format_json(tmp_path: Path) -> None:
    result = run("explain", "--log-format", "json", str(tmp_path / "nope.log"))
    assert result.returncode == 66
    error = json.loads(result.stderr)
    assert (error["level"], error["exit_code"]) == ("error", 66)


@pytest.mark.parametrize("args", [["-o", "xml"], ["--engine", "llamacpp"], ["a.log", "b.log"]])
def test_usage_errors_exit_2(args: list[str]) -> None:
    assert run("explain", *args).returncode == 2


def test_the_engines_offered_are_the_catalogs() -> None:
    explain = cli.build_parser()._subparsers._group_actions[0].choices["explain"]  # type: ignore[union-attr]
    engine = next(action for action in explain._actions if action.dest == "engine")
    assert set(engine.choices or ()) == ENGINES
