"""Usage errors of replay: absurd or conflicting flags are refused with exit 2, before any work."""

from __future__ import annotations

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
