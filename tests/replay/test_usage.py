"""Usage errors of replay: absurd or conflicting flags are refused with exit 2, before any work, in one
line; and the output forms."""

from __future__ import annotations

import json

import pytest
import yaml
from cli import EXAMPLES, run


def test_an_absurd_number_of_jobs_is_a_usage_error() -> None:
    result = run("replay", "-j", "100000", str(EXAMPLES / "rollout-recovers.jsonl"))
    assert result.returncode == 2 and b"at most 1024" in result.stderr


def test_more_jobs_than_cpus_still_replays_the_same() -> None:
    expected = (EXAMPLES / "rollout-recovers.expected.txt").read_text()
    assert run("replay", "-j", "64", str(EXAMPLES / "rollout-recovers.jsonl")).stdout.decode() == expected


def test_patches_with_an_output_format_is_a_usage_error() -> None:
    result = run("replay", "--patches", "-o", "text", str(EXAMPLES / "rollout-recovers.jsonl"))
    assert result.returncode == 2 and b"--patches" in result.stderr and result.stdout == b""


@pytest.mark.parametrize(
    "args,error",
    [
        (["-o", "xml", "x.jsonl"], "argument -o/--output: invalid choice: 'xml' (choose from "),
        (["-j", "0", "x.jsonl"], "argument -j/--jobs: must be at least 1, not 0"),
        (["-j", "-1", "x.jsonl"], "argument -j/--jobs: must be at least 1, not -1"),
        ([], "the following arguments are required: LOG"),
        (["--strictly", "x.jsonl"], "unknown flag: --strictly"),
        (["--stri", "x.jsonl"], "unknown flag: --stri"),  # no flag is taken by a prefix of its name
    ],
)
def test_a_usage_error_is_its_line_and_where_the_help_is(args: list[str], error: str) -> None:
    """kubectl's habit: the error, then where to read more; never a screen of usage before the one line."""
    result = run("replay", *args)
    assert result.returncode == 2 and result.stdout == b""
    line, see = result.stderr.decode().splitlines()
    assert line.startswith(f"crashwatch replay: error: {error}") and see == "see 'crashwatch replay --help'"


def test_the_line_formats_hold_the_same_changes_as_yaml_documents() -> None:
    log = str(EXAMPLES / "two-failing-components.json")
    as_json = [json.loads(line) for line in run("replay", "-o", "json", log).stdout.splitlines()]
    as_yaml = list(yaml.safe_load_all(run("replay", "-o", "yaml", log).stdout))
    assert as_yaml == as_json and len(as_json) > 2
