"""The `crashwatch` command line: parses arguments, runs a command, maps the outcome to an exit code.

Usage errors exit 2 (argparse's convention); every other failure is one line on stderr, never a
traceback. Commands and their exit codes are documented in docs/cli.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence

from crashwatch import __version__, exitcodes

REPLAY_EXAMPLES = """\
examples:
  # which components of the bundled example crash-loop, and when they recover
  crashwatch replay examples/rollout-recovers.jsonl

  # the same as JSON lines, for scripts
  crashwatch replay -o json examples/rollout-recovers.jsonl

  # the DCD/DGD status patches the live watcher would send
  crashwatch replay --patches examples/two-failing-components.json

  # kubectl output piped in, several logs in order, compressed logs
  kubectl get pods -A --watch --output-watch-events -o json | crashwatch replay -
  crashwatch replay day1.jsonl.gz day2.jsonl.gz

formats (detected from the content): JSON lines of watch events, kubectl's pretty-printed
--output-watch-events output, a List (kubectl get ... -o json), YAML (.yaml/.yml), any of them
gzip-compressed; '-' reads standard input.

exit codes: 0 ok, 2 usage error, 65 bad records were skipped (or --strict stopped at one),
66 a log cannot be opened or read.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crashwatch",
        description="Tell a crash loop from a slow start in NVIDIA Dynamo graphs on Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"crashwatch {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    replay = commands.add_parser(
        "replay",
        help="diagnose crash loops in recorded watch-event logs",
        description="Replay recorded watch-event logs and print every change of a component's or graph's verdict.",
        epilog=REPLAY_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    replay.add_argument("logs", nargs="+", metavar="LOG", help="a log file, or '-' for standard input")
    replay.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text",
        help="line format of verdict changes (default: text)",
    )
    replay.add_argument(
        "--patches",
        action="store_true",
        help="print the DCD/DGD status patches the live watcher would send (JSON lines) instead of verdict changes",
    )
    replay.add_argument("--strict", action="store_true", help="stop at the first bad record")
    replay.add_argument(
        "-j",
        "--jobs",
        type=_positive_int,
        default=None,
        metavar="N",
        help="decode plain JSON-lines logs in N processes (default: one per CPU, for logs of 32 MB or more; "
        "1: no worker processes)",
    )
    replay.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        default=None,
        help="never draw a progress line on stderr",
    )
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "replay":
            from crashwatch.replay import ReplayOptions, run_replay

            if args.logs.count("-") > 1:
                parser.error("'-' (standard input) can be given once")
            return run_replay(
                ReplayOptions(
                    logs=args.logs,
                    output=args.output,
                    patches=args.patches,
                    strict=args.strict,
                    progress=args.progress,
                    jobs=args.jobs,
                )
            )
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug or a closed stdout: one line, never a traceback
        leaves = list(_leaves(exc))
        if any(isinstance(leaf, BrokenPipeError) for leaf in leaves):
            _silence_stdout()
            return exitcodes.SIGPIPE
        leaf = leaves[0]
        print(f"crashwatch: internal error: {type(leaf).__name__}: {leaf}", file=sys.stderr)
        return exitcodes.SOFTWARE
    parser.error(f"unknown command {args.command}")
    return exitcodes.USAGE


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions inside (nested) exception groups, as task groups raise them."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def _silence_stdout() -> None:
    """After EPIPE, point stdout at /dev/null so the interpreter's final flush does not complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
