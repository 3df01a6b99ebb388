"""The `crashwatch` command line: parses arguments, runs a command, maps the outcome to an exit code.

Usage errors exit 2 (argparse's convention); every other failure is one line on stderr, never a
traceback. Commands and their exit codes are documented in docs/cli.md.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import signal
import sys
import threading
import typing
from collections.abc import Sequence
from typing import TYPE_CHECKING

from crashwatch import __version__, exitcodes
from crashwatch.errors import leaves
from stream.model.times import DurationError, parse_duration

if TYPE_CHECKING:
    from crashwatch.leader import LeaderSettings
    from crashwatch.stderr_log import StderrLogger
    from pipeline.diagnoses import Settings
    from sinks.admission import AdmissionSettings

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

  # a snapshot of a large cluster (read item by item), a manifest without a namespace
  kubectl get pods,deployments -A -o yaml | crashwatch replay -
  crashwatch replay -n dynamo vllm-agg.yaml

formats (detected from the content, never the name): JSON lines of watch events, kubectl's
pretty-printed --output-watch-events output, a List (kubectl get ... -o json), an array of
events (jq -s), YAML (with comments, anchors and merge keys), any of them
compressed with gzip, bzip2 or xz, in UTF-8, UTF-16 or UTF-32; '-' reads standard input.

exit codes: 0 ok, 2 usage error, 65 bad records were skipped (or --strict stopped at one),
66 a log cannot be opened or read, 74 standard output cannot be written (a full disk),
141 standard output was closed.
"""


RUN_EXAMPLES = """\
examples:
  # watch every namespace, write DCD/DGD status, print verdict changes as JSON lines
  crashwatch run -A -o json

  # one namespace, through a given kubeconfig and context
  crashwatch run -n dynamo --kubeconfig ~/.kube/prod --context prod-east

  # one of several replicas: only the holder of the Lease crashwatch/crashwatch writes status
  crashwatch run -A --leader-elect --leader-election-namespace crashwatch

  # no Kubernetes Events; stderr as JSON lines for a log collector
  crashwatch run -A --events=false --log-format json

what it writes (docs/status.md): DCD Available=False/ContainerCrashLooping with the finding, DGD
state failed with Ready reason component_crash_looping, and on both the kstatus condition Stalled=True
(Helm 4, Flux and kpt then fail fast); all cleared when no crash loop remains. The other diagnoses (an
image that cannot be pulled, a config error, an unschedulable Pod, an exit-0 restart loop, an OOM kill)
set Stalled=True with a reason naming each, after their graces; --failed-state all fails the DGD for them
too. Kubernetes Events on the DCD and DGD: Warning ComponentCrashLooping (one series per crash loop, its
count climbing with the restarts) and Normal CrashLoopRecovered (SpecReplaced when a spec change replaced
the crash-looping Pods), and a Warning in each other diagnosis's
words (ComponentImagePullFailing ...) with Normal ComponentRecovered.
Statuses are decided once every resource has been listed; a status that already says the verdict
is not written again. Needs get/list/watch on pods, deployments and the Dynamo CRDs, and
get/patch on their status subresources, create/patch on events.k8s.io events, and get on pods and
pods/log for why a container crashed (--read-causes).

exit codes: 0 stopped by SIGTERM, 2 usage error, 68 the API server did not answer the first request
(refused, no such host, an untrusted certificate, no answer within --request-timeout; once it has
answered, an outage is retried and said on stderr), 69 the Dynamo CRDs are not served, 77 credentials
refused (401) or not allowed to list/watch (403), 78 no usable kubeconfig, --http-address or
--admission-address, 130 stopped by Ctrl-C.
"""

TAIL_EXAMPLES = """\
examples:
  crashwatch tail -A                      # every namespace, text
  crashwatch tail -n dynamo -o json | jq 'select(.kind == "graph")'

Read-only: needs get/list/watch alone. Lines are those of `crashwatch replay`, stamped with the time
each event arrived (UTC, milliseconds).

exit codes: 0 stopped by SIGTERM, 2 usage error, 68 the API server did not answer the first request,
77 credentials refused or not allowed to list/watch, 78 no usable kubeconfig or --http-address, 130
stopped by Ctrl-C.
"""

RECORD_EXAMPLES = """\
examples:
  crashwatch record -A -o session.jsonl       # keep every event, print verdict changes as tail does
  crashwatch replay session.jsonl             # later: the same verdict changes, the same times

Each event is one JSON line with the time it arrived, flushed as it comes: a killed recorder loses
at most the line it was writing.

exit codes: as for tail; 73 the record file cannot be created.
"""


WAIT_EXAMPLES = """\
examples:
  # in CI, after `helm install` or `kubectl apply`: ready, or fail the moment a component crash-loops
  crashwatch wait dgd/llm -n dynamo --timeout 15m

  # every graph of a namespace, with a machine-readable result; or those labelled team=llm
  crashwatch wait --all -n dynamo -o json
  crashwatch wait -l team=llm -n dynamo --timeout 10m

  # as a kubectl plugin
  kubectl crashwatch wait dgd/llm

It diagnoses the graphs' Pods itself (no watcher needs to run in the cluster; get/list/watch rights are
enough) and also reads a failure already written to their status (Stalled=True, state failed). Progress
goes to stderr, one line whenever a graph's standing changes; the result to stdout.

exit codes: 0 every graph is successful at its current generation and none crash-loops, 1 a graph
failed (a component crash-loops or shows another diagnosis past its grace, or its status says failed),
3 a named graph does not exist, 124 --timeout ran out (stdout says what it still waits for), 68 the API
server cannot be reached: it did not answer the first request, or it was gone when --timeout ran out
(result unreachable; an outage in between is retried), 2 usage error, 69 the Dynamo CRDs are not served,
77 credentials refused or not allowed to list/watch, 78 no usable kubeconfig, 130 Ctrl-C.
"""

GET_EXAMPLES = """\
examples:
  crashwatch get -n dynamo                # the graphs of a namespace, one row each
  crashwatch get -A -o wide               # every namespace, with the crash-looping Pods and containers
  crashwatch get dgd/llm -n dynamo -o json
  crashwatch get -A -l team=llm -o name   # kubectl's selector and output forms (-o yaml too)

Columns: NAME, STATE (as the DGD says), VERDICT (crashwatch's: ready, waiting, failed, crash-looping),
READY (DCDs available / DCDs), CRASH-LOOPING (components with restarts and exit code; -o wide adds the
Pod and container, and a MESSAGE column).

exit codes: 0 listed, 3 a named graph does not exist, and those of wait for a cluster that cannot be read
(68 the API server did not answer, at first or for --request-timeout on the way).
"""

EXPLAIN_EXAMPLES = """\
examples:
  # why the last run of a crash-looping container died
  kubectl logs --previous -n dynamo llm-worker-0 | crashwatch explain

  # a saved output, as one JSON object for scripts
  crashwatch explain -o json worker.log

It reads the whole output (gzip too), follows Python's chained tracebacks to the first cause, prefers an
error to the warnings before it, and names the line it used. Classes (docs/status.md#causes): gpu_oom,
kv_cache_insufficient, model_access_denied, model_not_found, bad_argument, unsupported_model,
gpu_unavailable, shm_exhausted, nccl_failure, dependency_unreachable, port_in_use, disk_full,
import_error, permission_denied, or unknown when none applies with confidence.

exit codes: 0 classified (unknown included), 2 usage error, 65 binary data, 66 the file cannot be opened
or read, 74 standard output cannot be written.
"""

COMPLETION_EXAMPLES = """\
examples:
  source <(crashwatch completion bash)                # bash, now; in ~/.bashrc for every shell
  source <(crashwatch completion zsh)                 # zsh, after compinit
  crashwatch completion fish | source                 # fish
  crashwatch completion fish > ~/.config/fish/completions/crashwatch.fish

Nothing is asked of the cluster while completing: graph names are not offered (dgd/ is).
"""

GRAPH_TYPES = ("dgd", "dynamographdeployment", "dynamographdeployments", "dynamographdeployment.nvidia.com")


def _cluster_options(parser: argparse.ArgumentParser, serve: bool = True) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        dest="namespaces",
        action="append",
        default=[],
        metavar="NS",
        help="watch this namespace (repeatable; default: the kubeconfig context's namespace)",
    )
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace")
    parser.add_argument(
        "--kubeconfig", metavar="PATH", help="kubeconfig file (default: $KUBECONFIG, in-cluster, then ~/.kube/config)"
    )
    parser.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    parser.add_argument(
        "--request-timeout",
        type=_positive_duration,
        default=30.0,
        metavar="DURATION",
        help="give up on a LIST or a status write after this long and retry; a server that has not answered "
        "the first request by then is unreachable: 30s, 1m, or seconds (default: 30s)",
    )
    parser.add_argument(
        "--watch-idle-timeout",
        type=_positive_duration,
        default=90.0,
        metavar="DURATION",
        help="a watch that sends nothing for this long is taken for stuck and resumed (default: 1m30s; the "
        "API server sends a bookmark about once a minute)",
    )
    parser.add_argument(
        "--max-record-size",
        type=_size,
        default=16 << 20,
        metavar="SIZE",
        help="a watch event longer than this ends its watch, which is resumed with backoff, instead of being "
        "held in memory: 64Mi, 1Gi, or bytes (default: 16Mi, well above the API server's largest object)",
    )
    _windows(parser)
    _log_options(parser)
    if not serve:
        return
    parser.add_argument(
        "--http-address",
        type=_address,
        metavar="[HOST]:PORT",
        help="serve /healthz, /readyz (200 once every watch has listed) and /metrics (Prometheus) there, e.g. "
        ":8080 on every interface or 127.0.0.1:8080; port 0 picks a free one (default: not served)",
    )
    parser.add_argument(
        "--grace-period",
        type=_non_negative_duration,
        default=10.0,
        metavar="DURATION",
        help="on SIGTERM or SIGINT, stop watching and spend at most this long printing and writing what was "
        "already received; a second signal stops at once (default: 10)",
    )


def _shard_options(parser: argparse.ArgumentParser) -> None:
    """run, tail and record: keep some namespaces only, to split a large cluster across watchers."""
    group = parser.add_argument_group(
        "sharding (run, tail and record; docs/running.md: when to shard)",
        "Each namespace belongs to one shard, FNV-1a (64 bits) of its name modulo --shard-count, so a graph and "
        "its DCDs, Deployments and Pods stay together. With -n, namespaces of other shards are not watched; "
        "otherwise every watch drops other shards' objects as they are decoded. With --leader-elect each shard "
        "leads on a Lease of its own: the --leader-election-id suffixed with -INDEX when --shard-count > 1.",
    )
    group.add_argument(
        "--shard-index", type=_whole, default=0, metavar="I", help="this watcher's shard, 0 to N-1 (default: 0)"
    )
    group.add_argument(
        "--shard-count", type=_whole, default=1, metavar="N", help="how many shards split the namespaces (default: 1)"
    )
    group.add_argument(
        "--namespace-selector",
        metavar="SELECTOR",
        help="keep only namespaces whose labels match this selector, kubectl's syntax (team=llm,tier!=dev, "
        "'env in (prod,staging)'); a namespace relabelled in or out is picked up or dropped as it happens. "
        "Needs list/watch on namespaces",
    )


def _namespace_filter(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Check the sharding flags (one clear line, exit 2) and keep the filter they make on `args`."""
    args.namespace_filter = None
    if not hasattr(args, "shard_count"):
        return
    from stream.model.shards import NamespaceFilter, SelectorError, Shard, parse_selector

    try:
        shard = Shard(args.shard_index, args.shard_count)
        selector = parse_selector(args.namespace_selector) if args.namespace_selector is not None else None
    except (ValueError, SelectorError) as exc:
        parser.error(f"--namespace-selector: {exc}" if isinstance(exc, SelectorError) else str(exc))
    if shard.count > 1 or selector is not None:
        args.namespace_filter = NamespaceFilter(shard if shard.count > 1 else None, selector)


def _leader_options(parser: argparse.ArgumentParser) -> None:
    """`run` only: leader election on a Lease, off unless asked for (docs/cli.md says why)."""
    group = parser.add_argument_group("leader election (several replicas; only the leader writes status and Events)")
    group.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="write status only while holding the Lease (default: off; k8s/watcher turns it on); every "
        "replica still watches and diagnoses",
    )
    group.add_argument(
        "--leader-election-id", default="crashwatch", metavar="NAME", help="the Lease's name (default: crashwatch)"
    )
    group.add_argument(
        "--leader-election-namespace",
        metavar="NS",
        help="the Lease's namespace (default: in a cluster the Pod's, else the kubeconfig context's)",
    )
    for flag, default, what in (
        ("lease-duration", 15.0, "how long the others wait, from the last renewal they saw, before taking over"),
        ("renew-deadline", 10.0, "the leader stops writing when it could not renew for this long"),
        ("retry-period", 2.0, "between renewals, and between a candidate's tries"),
    ):
        group.add_argument(
            f"--leader-elect-{flag}",
            type=_duration,
            default=default,
            metavar="DURATION",
            help=f"{what} (default: {default:g}s)",
        )


def _admission_options(parser: argparse.ArgumentParser) -> None:
    """`run` only: the status admission webhook (sinks.admission), off unless asked for."""
    group = parser.add_argument_group(
        "status admission webhook (docs/status.md: a fix shipped as a spec change, and the operator's first status)"
    )
    group.add_argument(
        "--admission-address",
        type=_address,
        metavar="[HOST]:PORT",
        help="serve the mutating webhook for DCD and DGD status writes there over HTTPS, at /admit-status; "
        "port 0 picks a free one (default: not served; needs --tls-cert-file and --tls-private-key-file)",
    )
    group.add_argument(
        "--tls-cert-file", metavar="FILE", help="the webhook's serving certificate (PEM), its chain after it"
    )
    group.add_argument("--tls-private-key-file", metavar="FILE", help="the private key of --tls-cert-file (PEM)")
    group.add_argument(
        "--tls-client-ca-file",
        metavar="FILE",
        help="accept only callers with a client certificate this CA (PEM) signed: the API server's, where its "
        "admission configuration gives it one (default: any caller). The three files are read again when they change",
    )
    group.add_argument(
        "--admission-wait",
        type=_duration,
        default=1.0,
        metavar="DURATION",
        help="how long an answer may wait for the watch to bring the generation being written, before the "
        "write is let through as it is (default: 1s; keep it under the webhook's timeoutSeconds)",
    )
    group.add_argument(
        "--admission-configuration",
        type=_object_name,
        metavar="NAME",
        help="the MutatingWebhookConfiguration that registers the webhook: read (get) at start, every minute "
        "and when the certificate changes, by the replica that answers, to say in a warning line and "
        "crashwatch_admission_trusted when its caBundle does not verify the certificate served, or it is missing "
        "(default: not checked)",
    )


def _admission_settings(parser: argparse.ArgumentParser, args: argparse.Namespace) -> AdmissionSettings | None:
    address = getattr(args, "admission_address", None)
    if address is None:
        tls = ("tls_cert_file", "tls_private_key_file", "tls_client_ca_file")
        if any(getattr(args, name, None) for name in tls):
            parser.error("--tls-cert-file, --tls-private-key-file and --tls-client-ca-file are for --admission-address")
        if getattr(args, "admission_configuration", None):
            parser.error("--admission-configuration is for --admission-address")
        return None
    if not args.tls_cert_file or not args.tls_private_key_file:
        parser.error("--admission-address needs --tls-cert-file and --tls-private-key-file")
    from sinks.admission import AdmissionSettings

    host, port = address
    return AdmissionSettings(
        host,
        port,
        args.tls_cert_file,
        args.tls_private_key_file,
        args.admission_wait,
        args.tls_client_ca_file,
        args.admission_configuration,
    )


def _leader_settings(parser: argparse.ArgumentParser, args: argparse.Namespace) -> LeaderSettings | None:
    """The LeaderSettings `run` asked for (None without --leader-elect); client-go's constraints hold."""
    if not getattr(args, "leader_elect", False):
        return None
    from crashwatch.leader import JITTER, LeaderSettings

    lease, renew = args.leader_elect_lease_duration, args.leader_elect_renew_deadline
    retry = args.leader_elect_retry_period
    if not lease > renew:
        parser.error("--leader-elect-lease-duration must be longer than --leader-elect-renew-deadline")
    if not renew > retry * (1 + JITTER) or retry <= 0:
        parser.error(
            f"--leader-elect-renew-deadline must be longer than {1 + JITTER:g} times --leader-elect-retry-period"
        )
    return LeaderSettings(
        # each shard fails over on its own
        name=args.leader_election_id + (f"-{args.shard_index}" if args.shard_count > 1 else ""),
        namespace=args.leader_election_namespace,
        lease_duration=lease,
        renew_deadline=renew,
        retry_period=retry,
        request_timeout=args.request_timeout,
    )


def _log_options(parser: argparse.ArgumentParser) -> None:
    """Every command: how stderr is written (crashwatch.stderr_log)."""
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="stderr as text lines, or one JSON object per line with time, level, msg and the object it is "
        "about (default: text)",
    )
    parser.add_argument(
        "--log-level",
        choices=("error", "warning", "info", "debug"),
        default="info",
        help="say only messages at this level or above on stderr (default: info)",
    )


def _events_options(parser: argparse.ArgumentParser) -> None:
    """`run` only: Kubernetes Events, on unless turned off (`--events=false` or `--no-events`)."""
    parser.add_argument(
        "--events",
        nargs="?",
        const=True,
        default=True,
        type=_bool,
        metavar="true|false",
        help="write Kubernetes Events (events.k8s.io/v1) on the DCDs and DGDs: Warning ComponentCrashLooping "
        "while a crash loop holds, Normal CrashLoopRecovered when it ends (default: true)",
    )
    parser.add_argument("--no-events", dest="events", action="store_false", help="the same as --events=false")
    parser.add_argument(
        "--event-logs",
        action="store_true",
        help="add the crashed container's last 10 lines (within the Event's 1KiB note) to a DCD's Warning Event; "
        "needs get on pods and pods/log (k8s/watcher grants it); logs never go into status "
        "(default: off)",
    )


def _bool(text: str) -> bool:
    """A boolean as kubectl's flags take it."""
    value = text.strip().lower()
    if value in ("true", "t", "1", "yes"):
        return True
    if value in ("false", "f", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"not true or false: {text!r}")


class _Parser(argparse.ArgumentParser):
    """argparse's parser as kubectl users expect it: a usage error is its one line and where the help is
    (one JSON object under --log-format json), never the whole usage before it; and a flag is taken only
    as written, never by a prefix of its name (`tail --watch 5` is no `--watch-idle-timeout 5`)."""

    json_errors = False

    def __init__(self, *args: typing.Any, **kwargs: typing.Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # the commands' parsers too: argparse makes them of this class
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> typing.NoReturn:
        if not _Parser.json_errors:
            self.exit(exitcodes.USAGE, f"{self.prog}: error: {message}\nsee '{self.prog} --help'\n")
        from crashwatch.stderr_log import stderr_logger

        stderr_logger("json").fatal(f"{self.prog}: error: {message}", exitcodes.USAGE)
        sys.exit(exitcodes.USAGE)


def _windows(parser: argparse.ArgumentParser) -> None:
    """The windows of time the core's rules read, the backends' own among them (each registers its
    tunables, pipeline.backends): all are about telling a loop from a recovery."""
    from pipeline.backends.registry import tunables

    parser.add_argument(
        "--recovery-window",
        type=_duration,
        default=90.0,
        metavar="DURATION",
        help="a crash-looping Pod stays crash-looping while its container runs again after a restart, until "
        "it has been Ready this long without a restart, or is replaced or deleted (default: 1m30s; 0: "
        "Ready is recovered at once, which flaps on containers that are Ready between crashes)",
    )
    for tunable in tunables():
        parser.add_argument(
            tunable.flag,
            type=_duration,
            default=tunable.default,
            dest=f"tunable_{tunable.name}",
            metavar="DURATION",
            help=tunable.help,
        )
    group = parser.add_argument_group(
        "diagnoses beside the crash loop (docs/status.md: why these defaults)",
        "A condition that may still resolve by itself is a diagnosis only once it has lasted its grace, "
        "counted from the object's own time (a Pod's start, a container's last stop, PodScheduled's "
        "lastTransitionTime).",
    )
    for flag, default, what in (
        (
            "image-pull-grace",
            "3m",
            "a container waiting with ErrImagePull or ImagePullBackOff (InvalidImageName "
            "and ErrImageNeverPull fail at once)",
        ),
        (
            "config-error-grace",
            "2m",
            "a container waiting with CreateContainerConfigError or CreateContainerError "
            "(a Secret or ConfigMap may be on its way)",
        ),
        (
            "unschedulable-grace",
            "15m",
            "a Pod whose PodScheduled is False with reason Unschedulable (a cluster "
            "autoscaler may bring a node: 15m is cluster-autoscaler's --max-node-provision-time)",
        ),
    ):
        group.add_argument(
            f"--{flag}",
            type=_duration,
            default=_duration(default),
            metavar="DURATION",
            help=f"how long {what} may last before it is a diagnosis (default: {default})",
        )
    group.add_argument(
        "--failed-state",
        choices=("crash-loop", "all"),
        default="crash-loop",
        help="what sets DGD state failed (and DCD Available=False): crash loops alone, as the Dynamo operator "
        "does, or every diagnosis; Stalled=True is set for every diagnosis either way (default: crash-loop)",
    )
    group.add_argument(
        "--fail-fast",
        nargs="?",
        const=True,
        default=True,
        type=_bool,
        metavar="true|false",
        help="fail a graph at a Pod's first crash when the crashed run's output names a cause a restart cannot "
        "cure (a gated model, a rejected flag: docs/status.md, \"Why it crashed\"); false: wait for the "
        "crash-loop rule, which names the cause then (default: true)",
    )


def _line_format(parser: argparse.ArgumentParser, *flags: str) -> None:
    parser.add_argument(
        *flags,
        dest="format",
        choices=("text", "json", "yaml"),
        default="text",
        help="line format of verdict changes: text, JSON lines, or a YAML document each (default: text)",
    )


def build_parser() -> argparse.ArgumentParser:
    # installed as `kubectl-crashwatch` too, so `kubectl crashwatch wait dgd/llm` works as a kubectl plugin
    plugin = os.path.basename(sys.argv[0]) == "kubectl-crashwatch"
    parser = _Parser(
        prog="kubectl crashwatch" if plugin else "crashwatch",
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
        choices=("text", "json", "yaml"),
        default=None,
        help="line format of verdict changes: text, JSON lines, or a YAML document each (default: text)",
    )
    replay.add_argument(
        "--patches",
        action="store_true",
        help="print the DCD/DGD status patches the live watcher would send (JSON lines) instead of verdict changes",
    )
    replay.add_argument("--strict", action="store_true", help="stop at the first bad record")
    replay.add_argument(
        "-n",
        "--namespace",
        type=_namespace_name,
        default="default",
        metavar="NS",
        help="the namespace of a manifest's objects that name none, as kubectl apply -n (default: default); "
        "objects that name one keep it",
    )
    _windows(replay)
    _log_options(replay)
    replay.add_argument(
        "-j",
        "--jobs",
        type=_jobs,
        default=None,
        metavar="N",
        help="decode plain JSON-lines logs in N processes, at most one per CPU (default: one per CPU, for logs "
        "of 32 MB or more; 1: no worker processes)",
    )
    replay.add_argument(
        "--max-record-size",
        type=_size,
        default=16 << 20,
        metavar="SIZE",
        help="a record (line, pretty-printed object, YAML document) longer than this is one bad record, "
        "skipped without being held in memory: 64Mi, 1Gi, 500k, or bytes (default: 16Mi)",
    )
    replay.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        default=None,
        help="never draw a progress line on stderr",
    )

    run = commands.add_parser(
        "run",
        help="watch the cluster and write DCD/DGD status while a component crash-loops",
        description="Watch Pods, Deployments and the Dynamo resources; print every verdict change and write "
        "the DCD and DGD status that reports it.",
        epilog=RUN_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _cluster_options(run)
    _line_format(run, "-o", "--output")
    run.add_argument(
        "--qps",
        type=_positive_float,
        default=50.0,
        help="status writes per second, sustained (default: 50); writes happen only when a verdict changes",
    )
    run.add_argument(
        "--burst", type=_positive_int, default=100, help="status writes allowed at once above --qps (default: 100)"
    )
    _shard_options(run)
    _read_causes(run)
    _events_options(run)
    _leader_options(run)
    _admission_options(run)

    tail = commands.add_parser(
        "tail",
        help="watch the cluster and print verdict changes (read-only)",
        description="Watch Pods, Deployments and the Dynamo resources and print every verdict change; writes nothing.",
        epilog=TAIL_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _cluster_options(tail)
    _line_format(tail, "-o", "--output")
    _log_lines(tail)
    _read_causes(tail)
    _shard_options(tail)

    record = commands.add_parser(
        "record",
        help="watch the cluster, keep every event in a log that replay reads, and print verdict changes",
        description="Watch as `tail` does, and write every event received, with its arrival time, to FILE.",
        epilog=RECORD_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _cluster_options(record)
    record.add_argument(
        "-o",
        "--output",
        dest="record",
        required=True,
        metavar="FILE",
        help="the log to write ('-': stdout, and then no verdict lines)",
    )
    _line_format(record, "--format")
    _read_causes(record)
    _shard_options(record)

    wait = commands.add_parser(
        "wait",
        help="wait until graphs are ready; fail as soon as one crash-loops (for CI)",
        description="Wait until every named DynamoGraphDeployment is successful at its current generation, and "
        "fail the moment one of its components crash-loops.",
        epilog=WAIT_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    wait.add_argument("graphs", nargs="*", metavar="dgd/NAME", help="the graphs to wait for (dgd/NAME or NAME)")
    wait.add_argument("--all", action="store_true", help="wait for every graph in the namespace(s)")
    wait.add_argument(
        "--timeout",
        type=_duration,
        default=300.0,
        metavar="DURATION",
        help="give up after this long, with exit 124: 30s, 10m, 1h30m; 0 decides from one list (default: 5m)",
    )
    _cluster_options(wait, serve=False)
    wait.add_argument(
        "-o",
        "--output",
        dest="format",
        choices=("text", "json", "yaml", "name"),
        default="text",
        help="the result as text, one JSON or YAML document, or the names of the graphs it is about (default: text)",
    )
    _selector(wait)
    _log_lines(wait)
    _read_causes(wait)

    get = commands.add_parser(
        "get",
        help="list the graphs once, diagnose them, and print a table",
        description="List the DynamoGraphDeployments, their DCDs and Pods once, and print each graph's state, "
        "crashwatch's verdict and its crash-looping components.",
        epilog=GET_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    get.add_argument("graphs", nargs="*", metavar="dgd/NAME", help="the graphs to show (default: every one)")
    get.add_argument(
        "-o",
        "--output",
        dest="format",
        choices=("wide", "json", "yaml", "name"),
        default=None,
        help="wide columns, JSON, YAML, or the graphs' names (default: the table)",
    )
    get.add_argument(
        "--no-headers", dest="headers", action="store_false", help="print the table without its header row"
    )
    _selector(get)
    _cluster_options(get, serve=False)
    _log_lines(get)
    _read_causes(get)

    explain = commands.add_parser(
        "explain",
        help="say why a container crashed, from the output it left (kubectl logs --previous)",
        description="Read a crashed container's output and print the cause of the crash: its class, whether it is "
        "certain at the first crash, the line it was read from, a hint for the fix and the fields it names.",
        epilog=EXPLAIN_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    explain.add_argument(
        "file", nargs="?", default="-", metavar="FILE", help="the output, or '-' for standard input (default: -)"
    )
    explain.add_argument(
        "-o",
        "--output",
        choices=("text", "json", "yaml"),
        default="text",
        help="text for people, or one JSON object or YAML document (default: text)",
    )
    explain.add_argument(
        "--engine",
        choices=("vllm", "sglang", "trtllm", "dynamo", "tgi"),
        help="the engine that printed it, when known: other engines' messages are left out (default: any)",
    )
    _log_options(explain)

    version = commands.add_parser(
        "version",
        help="print crashwatch's version",
        description="Print crashwatch's version (and Python's); the cluster is not asked.",
    )
    version.add_argument("-o", "--output", choices=("json", "yaml"), help="one JSON or YAML document")
    _log_options(version)
    completion = commands.add_parser(
        "completion",
        help="print a shell's completion script (bash, zsh or fish)",
        description="Print the completion script of a shell, for crashwatch and kubectl-crashwatch.",
        epilog=COMPLETION_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    completion.add_argument("shell", choices=("bash", "zsh", "fish"), metavar="SHELL", help="bash, zsh or fish")
    _log_options(completion)
    for sub in commands.choices.values():  # usage errors found after parsing name the command's help too
        sub.set_defaults(command_parser=sub)
    return parser


def _selector(parser: argparse.ArgumentParser) -> None:
    """wait, get: graphs by label, as kubectl's -l."""
    parser.add_argument(
        "-l",
        "--selector",
        metavar="SELECTOR",
        help="only the graphs whose labels match, kubectl's syntax (team=llm,tier!=dev, 'env in (prod,staging)'); "
        "instead of naming them",
    )


def _log_lines(parser: argparse.ArgumentParser) -> None:
    """tail, wait and get: the crashed container's last lines, read with the caller's credentials."""
    parser.add_argument(
        "--log-lines",
        type=_whole_or_zero,
        default=10,
        metavar="N",
        help="show the last N lines (at most 4KiB) of a crashed container's output under its verdict: tail "
        "under each new crash, wait on failure, get with -o wide; needs get on pods/log, else they are left out "
        "(default: 10; 0: none)",
    )


def _read_causes(parser: argparse.ArgumentParser) -> None:
    """run, tail, record, wait, get: each new crash's output read for its cause, on unless turned off."""
    parser.add_argument(
        "--read-causes",
        nargs="?",
        const=True,
        default=True,
        type=_bool,
        metavar="true|false",
        help="read the output of each new crash (at most 512KiB, its last 5000 lines; 2 reads at once, 1 a "
        "second) and name why it crashed; a cause a restart cannot cure fails the graph at the first crash "
        "(--fail-fast). Needs get on pods and pods/log, else said once and left out; record keeps each "
        "output read (default: true)",
    )


def _whole_or_zero(text: str) -> int:
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _tunables(args: argparse.Namespace) -> dict[str, float]:
    """The backends' tunables as given (pipeline.backends.registry)."""
    prefix = "tunable_"
    return {name.removeprefix(prefix): value for name, value in vars(args).items() if name.startswith(prefix)}


def _duration(text: str) -> float:
    """A duration as kubectl and Go write it (`30s`, `10m`, `1h30m`, `500ms`), or plain seconds."""
    try:
        return parse_duration(text)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_duration(text: str) -> float:
    value = _duration(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


def _non_negative_duration(text: str) -> float:
    value = _duration(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def _graph_names(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str] | None:
    """The DGD names given (`dgd/NAME`, kubectl's other spellings of the type, or NAME); None for every one."""
    given = [g for g in args.graphs if g.lower() not in GRAPH_TYPES]  # `get dgd` is `get`
    if not given:
        return None
    names = []
    for item in given:
        kind, slash, name = item.rpartition("/")
        if (slash and kind.lower() not in GRAPH_TYPES) or not name:
            parser.error(f"not a graph: {item!r} (write dgd/NAME)")
        names.append(name)
    if args.all_namespaces or len(args.namespaces) > 1:
        parser.error("named graphs are looked up in one namespace: give at most one -n, not -A")
    return names


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _positive_float(text: str) -> float:
    value = _number(text)
    if not value > 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


def _address(text: str) -> tuple[str | None, int]:
    """[HOST]:PORT as Go servers take it: no host is every interface; an IPv6 host in brackets."""
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"not [HOST]:PORT: {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host or None, int(port)


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


MAX_JOBS = 1024
_SIZE_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
MIN_RECORD_SIZE = 1 << 10
MAX_RECORD_SIZE = 1 << 40


def _size(text: str) -> int:
    """A size as kubectl writes a quantity (64Mi, 1Gi, 500k, 16M) or plain bytes."""
    found = re.fullmatch(r"(\d+)(k|M|G|Ki|Mi|Gi)?", text.strip())
    if found is None:
        raise argparse.ArgumentTypeError(f"not a size (like 64Mi, 1Gi, 500k, or bytes): {text!r}")
    value = int(found.group(1)) * _SIZE_UNITS[found.group(2) or ""]
    if not MIN_RECORD_SIZE <= value <= MAX_RECORD_SIZE:
        raise argparse.ArgumentTypeError(f"must be from 1Ki to 1Ti, not {text}")
    return value


_NAMESPACE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _namespace_name(text: str) -> str:
    """A namespace name as Kubernetes takes one (a DNS label)."""
    if _NAMESPACE_NAME.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(
            f"not a namespace name (lower-case letters, digits and '-', at most 63): {text!r}"
        )
    return text


_OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _object_name(text: str) -> str:
    """An object's name as Kubernetes takes most (a DNS subdomain): it goes into a request's path."""
    if len(text) > 253 or _OBJECT_NAME.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(
            f"not an object name (lower-case letters, digits, '-' and '.', at most 253): {text!r}"
        )
    return text


def _jobs(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_JOBS:
        raise argparse.ArgumentTypeError(f"at most {MAX_JOBS} (and no more than the CPUs are used), not {value}")
    return value


def take_sigint() -> None:
    """Take SIGINT even when started with it ignored, as a background job of a script is (`crashwatch
    replay log &` in `sh -c`): Python then installs no KeyboardInterrupt handler, and `kill -INT` (or a
    Ctrl-C meant for the whole script) would do nothing to `replay`, while the live commands, whose
    signal receiver overrides the inherited disposition, stop. kubectl (Go's signal.Notify) takes it too.
    A script whose Ctrl-C should leave a background crashwatch running starts it with `setsid`."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: Sequence[str] | None = None) -> int:
    take_sigint()
    code = _run(argv)
    # The answer is out: spare the interpreter's last collection over every object it made (two thirds of
    # a second for `wait`, whose exit is what a CI script waits on). Nothing is left to collect that
    # matters: files and sockets were closed by the commands themselves.
    gc.freeze()
    return code


def _run(argv: Sequence[str] | None) -> int:
    top = build_parser()
    _Parser.json_errors = _json_requested(sys.argv[1:] if argv is None else argv)
    args = _parse(top, argv)
    parser = args.command_parser  # the usage errors found below are the command's, and name its help
    from crashwatch.stderr_log import stderr_logger

    log = stderr_logger(args.log_format, args.log_level)
    try:
        if args.command == "replay":
            from crashwatch.replay import ReplayOptions, run_replay

            if args.logs.count("-") > 1:
                parser.error("'-' (standard input) can be given once")
            if args.patches and args.output is not None:
                parser.error("--patches prints status patches as JSON lines: it takes no -o/--output")
            return run_replay(
                ReplayOptions(
                    logs=args.logs,
                    output=args.output or "text",
                    patches=args.patches,
                    strict=args.strict,
                    progress=args.progress,
                    jobs=args.jobs,
                    tunables=_tunables(args),
                    recovery_window=args.recovery_window,
                    diagnoses=_diagnoses(args),
                    max_record_size=args.max_record_size,
                    namespace=args.namespace,
                    log_format=args.log_format,
                    log_level=args.log_level,
                )
            )
        if args.command in ("run", "tail", "record"):
            _namespace_filter(parser, args)
            leader = _leader_settings(parser, args)
            return _live(args, log, leader=leader, admission=_admission_settings(parser, args))
        if args.command == "explain":
            from crashwatch.explain import run_explain

            return run_explain(args.file, args.output, args.engine, log)
        if args.command in ("wait", "get"):
            names = _graph_names(parser, args)
            _check_selector(parser, args.selector, names)
            if args.command == "wait" and (names is None) != bool(args.all or args.selector):
                parser.error("name the graphs to wait for (dgd/NAME ...), or give --all or -l SELECTOR")
            return _live(args, log, names)
        if args.command == "version":
            return _version(args.output)
        if args.command == "completion":
            from crashwatch.completion import script

            sys.stdout.write(script(args.shell, top))
            sys.stdout.flush()
            return exitcodes.OK
    except KeyboardInterrupt:
        return exitcodes.INTERRUPTED
    except Exception as exc:  # a bug or a closed stdout: one line, never a traceback
        found = list(leaves(exc))
        if any(isinstance(leaf, BrokenPipeError) for leaf in found):
            _silence_stdout()
            return exitcodes.SIGPIPE
        leaf = found[0]
        log.fatal(f"internal error: {type(leaf).__name__}: {leaf}", exitcodes.SOFTWARE)
        return exitcodes.SOFTWARE
    parser.error(f"unknown command {args.command}")
    return exitcodes.USAGE


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments; one that no flag or argument takes is a usage error of the command it was given to."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        command = getattr(args, "command_parser", parser)
        flags = [arg for arg in extra if arg.startswith("-")]
        command.error(f"unknown flag: {flags[0]}" if flags else f"unexpected argument: {extra[0]!r}")
    return args


def _check_selector(parser: argparse.ArgumentParser, selector: str | None, names: list[str] | None) -> None:
    """-l: kubectl's selector syntax, and graphs chosen by it or by name, not both (as kubectl)."""
    if selector is None:
        return
    from stream.model.shards import SelectorError, parse_selector

    try:
        parse_selector(selector)
    except SelectorError as exc:
        parser.error(f"-l/--selector: {exc}")
    if names is not None:
        parser.error("name the graphs or select them with -l, not both")


def _version(output: str | None) -> int:
    """`crashwatch version`: as --version says it, or one document for scripts."""
    import platform

    if output is None:
        sys.stdout.write(f"crashwatch {__version__}\n")
        sys.stdout.flush()
        return exitcodes.OK
    from sinks.lines import json_document, yaml_document

    document = {"version": __version__, "python": platform.python_version()}
    sys.stdout.buffer.write(json_document(document) if output == "json" else yaml_document(document))
    sys.stdout.buffer.flush()
    return exitcodes.OK


def _live(
    args: argparse.Namespace,
    log: StderrLogger,
    graphs: list[str] | None = None,
    leader: LeaderSettings | None = None,
    admission: AdmissionSettings | None = None,
) -> int:
    from crashwatch.live import LiveOptions, run_live
    from sinks.crashed_output import DEFAULT_LINES
    from sinks.events import EventSettings
    from sinks.status import PatchSettings
    from stream.sources.reflector import WatchSettings

    watch = WatchSettings(
        request_timeout=args.request_timeout,
        idle_timeout=args.watch_idle_timeout,
        max_event_bytes=args.max_record_size,
    )
    patch = PatchSettings(request_timeout=args.request_timeout)
    if args.command == "run":
        patch.qps, patch.burst = args.qps, args.burst
    record = getattr(args, "record", None)
    if record is not None and record != "-":
        try:
            open(record, "wb").close()  # fail now, with one line, rather than after connecting
        except OSError as exc:
            log.fatal(f"{record}: cannot create: {exc.strerror or exc}", exitcodes.CANTCREAT)
            return exitcodes.CANTCREAT
    return run_live(
        LiveOptions(
            command=args.command,
            namespaces=args.namespaces,
            all_namespaces=args.all_namespaces,
            kubeconfig=args.kubeconfig,
            context=args.context,
            output=args.format or "table",
            record=record,
            grace_period=getattr(args, "grace_period", 0.0),
            http_address=getattr(args, "http_address", None),
            admission=admission,
            graphs=graphs,
            selector=getattr(args, "selector", None),
            headers=getattr(args, "headers", True),
            timeout=getattr(args, "timeout", None),
            tunables=_tunables(args),
            recovery_window=args.recovery_window,
            diagnoses=_diagnoses(args),
            log_lines=getattr(args, "log_lines", 0) if args.command != "get" or args.format == "wide" else 0,
            read_causes=getattr(args, "read_causes", False),
            watch=watch,
            patch=patch,
            leader=leader,
            namespace_filter=getattr(args, "namespace_filter", None),
            events=EventSettings(
                request_timeout=args.request_timeout, logs=DEFAULT_LINES if getattr(args, "event_logs", False) else 0
            )
            if getattr(args, "events", False)
            else None,
            log_format=args.log_format,
            log_level=args.log_level,
        )
    )


def _diagnoses(args: argparse.Namespace) -> Settings:
    from pipeline.diagnoses import Settings

    return Settings(
        image_pull_grace=args.image_pull_grace,
        config_error_grace=args.config_error_grace,
        unschedulable_grace=args.unschedulable_grace,
        failed_state=args.failed_state,
        fail_fast=args.fail_fast,
    )


def _json_requested(argv: Sequence[str]) -> bool:
    """Whether the command line asks for JSON on stderr, looked up before it is parsed (for usage errors)."""
    for index, arg in enumerate(argv):
        if arg == "--log-format=json" or (arg == "--log-format" and argv[index + 1 : index + 2] == ["json"]):
            return True
    return False


def _silence_stdout() -> None:
    """After EPIPE, point stdout at /dev/null so the interpreter's final flush does not complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
