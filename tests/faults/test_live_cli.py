"""The live commands' exit codes and messages, run as users run them, against the fake API server."""

from __future__ import annotations

import json
import signal
import socket
import time
import urllib.error
from pathlib import Path

import pytest
from cli import run
from fakeapi import Fault, ServedFake, crashing, pod
from watcher import Watcher, http_get


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_a_signal_stops_it_cleanly(fake: ServedFake, tmp_path: Path, sig: int, code: int) -> None:
    config = fake.api.kubeconfig(tmp_path)
    with Watcher("tail", "--kubeconfig", str(config)) as w:
        w.wait_synced()
        fake.do(fake.api.put, "pods", crashing("p-0"))
        w.wait_line("CRASH-LOOPING")
        assert w.stop(sig) == code
    assert "Traceback" not in w.stderr()


def put_graph(fake: ServedFake) -> None:
    """DGD g and its DCD g-worker, as the operator leaves them while the Pods start."""
    starting = {"type": "Ready", "status": "False", "reason": "some_resources_are_not_ready", "message": "starting"}
    labels = {"nvidia.com/dynamo-graph-deployment-name": "g", "nvidia.com/dynamo-component": "worker"}
    fake.do(
        fake.api.put,
        "dynamographdeployments",
        {
            "kind": "DynamoGraphDeployment",
            "apiVersion": "nvidia.com/v1beta1",
            "metadata": {"name": "g", "namespace": "ns"},
            "status": {"state": "pending", "conditions": [starting]},
        },
    )
    fake.do(
        fake.api.put,
        "dynamocomponentdeployments",
        {
            "kind": "DynamoComponentDeployment",
            "apiVersion": "nvidia.com/v1beta1",
            "metadata": {"name": "g-worker", "namespace": "ns", "labels": labels},
            "status": {"conditions": [{**starting, "type": "Available", "reason": "DeploymentNotReady"}]},
        },
    )


def statuses(fake: ServedFake) -> tuple[str, str]:
    """The DGD's state and the DCD's Available reason, as the fake holds them."""
    dgd = fake.api.objects["dynamographdeployments"][("ns", "g")]["status"]
    dcd = fake.api.objects["dynamocomponentdeployments"][("ns", "g-worker")]["status"]
    return dgd["state"], next(c["reason"] for c in dcd["conditions"] if c["type"] == "Available")


def status_writes(fake: ServedFake, plural: str = "") -> int:
    """PATCHes of a status (an Event's series is PATCHed too: not counted)."""
    return sum(r.method == "PATCH" and f"/{plural}" in r.path and r.path.endswith("/status") for r in fake.api.requests)


def test_sigterm_finishes_the_status_writes_under_way(fake: ServedFake, tmp_path: Path) -> None:
    put_graph(fake)
    fake.do(fake.api.fault, "patch", Fault("delay", seconds=2))  # the first status write is slow to answer
    with Watcher("run", "--kubeconfig", str(fake.api.kubeconfig(tmp_path))) as w:
        w.wait_synced()
        fake.do(fake.api.put, "pods", crashing("p-0"))
        w.wait_for(lambda: status_writes(fake, "dynamocomponentdeployments") == 1, what="a DCD write")
        assert w.stop(signal.SIGTERM) == 0
    assert statuses(fake) == ("failed", "ContainerCrashLooping")
    assert "SIGTERM: stopping; finishing what was received" in w.stderr()
    assert "Traceback" not in w.stderr()


@pytest.mark.parametrize("second_signal", [False, True])
def test_a_write_that_outlasts_the_grace_period_or_a_second_signal_is_left(
    fake: ServedFake, tmp_path: Path, second_signal: bool
) -> None:
    put_graph(fake)
    fake.do(fake.api.fault, "patch", Fault("delay", seconds=60), Fault("delay", seconds=60))
    grace = "60" if second_signal else "0.5"
    with Watcher("run", "--grace-period", grace, "--kubeconfig", str(fake.api.kubeconfig(tmp_path))) as w:
        w.wait_synced()
        fake.do(fake.api.put, "pods", crashing("p-0"))
        # the DCD's write under way; the DGD's waits behind it (DCDs first: docs/status.md)
        w.wait_for(lambda: status_writes(fake) == 1, what="the DCD write")
        w.send_signal(signal.SIGINT)
        w.wait_for(lambda: "SIGINT: stopping" in w.stderr(), what="the stop")
        if second_signal:
            w.send_signal(signal.SIGINT)
        assert w.process.wait(timeout=40) == 130  # before the writes' 60 s, or the 60 s grace period (room for load)
        if not second_signal:
            w.wait_for(lambda: "stopped after the 0.5s grace period with 2 status writes unfinished" in w.stderr())
    assert statuses(fake) == ("pending", "DeploymentNotReady")
    assert "Traceback" not in w.stderr()


def test_probes_and_metrics_follow_the_watcher(fake: ServedFake, tmp_path: Path) -> None:
    put_graph(fake)
    # the first list of Pods fails, to be retried in 3 s: the watcher is not ready until then
    fake.do(fake.api.fault, "list pods", Fault("status", status=503, headers={"Retry-After": "3"}))
    # the second status write (the DGD's: it goes once the DCD's has landed) is slow to answer
    fake.do(fake.api.fault, "patch", Fault("delay", seconds=0), Fault("delay", seconds=3))
    with Watcher("run", "--http-address", "127.0.0.1:0", "--kubeconfig", str(fake.api.kubeconfig(tmp_path))) as w:
        url = w.served_at()
        assert http_get(f"{url}/healthz") == (200, "ok\n")
        assert http_get(f"{url}/readyz") == (503, "not ready: not every watch has listed yet\n")
        w.wait_synced()
        assert http_get(f"{url}/readyz") == (200, "ok\n")
        fake.do(fake.api.put, "pods", crashing("p-0"))
        w.wait_line("CRASH-LOOPING")
        w.wait_for(lambda: status_writes(fake) == 2, what="the DCD and DGD writes")
        w.wait_for(lambda: len(w.writes()) == 1, what="the write that is not delayed, landed")
        status, metrics = http_get(f"{url}/metrics")
        assert status == 200
        assert 'crashwatch_crash_looping_components{graph="g",namespace="ns"} 1.0' in metrics
        assert "crashwatch_failed_graphs 1.0" in metrics and "crashwatch_synced 1.0" in metrics
        assert 'crashwatch_watch_errors_total{namespace="ns",resource="pods"} 1.0' in metrics
        assert 'crashwatch_lists_total{namespace="ns",resource="pods"} 1.0' in metrics
        assert "crashwatch_status_write_delay_seconds_count 1.0" in metrics  # the other is still delayed
        w.send_signal(signal.SIGTERM)  # one status write is still waiting for its answer
        w.wait_for(lambda: "SIGTERM: stopping" in w.stderr(), what="the stop")
        assert http_get(f"{url}/readyz") == (503, "not ready: stopping\n")
        assert w.process.wait(timeout=10) == 0
    with pytest.raises(urllib.error.URLError):
        http_get(f"{url}/healthz")  # and nothing listens there any more
    assert "Traceback" not in w.stderr()


def test_synced_and_readiness_drop_while_a_relist_keeps_failing_and_come_back_once_it_lists(
    fake: ServedFake, tmp_path: Path
) -> None:
    put_graph(fake)
    with Watcher("run", "--http-address", "127.0.0.1:0", "--kubeconfig", str(fake.api.kubeconfig(tmp_path))) as w:
        url = w.served_at()
        w.wait_synced()

        def synced() -> str:
            metrics = http_get(f"{url}/metrics")[1]
            (line,) = [line for line in metrics.splitlines() if line.startswith("crashwatch_synced ")]
            return line

        assert synced() == "crashwatch_synced 1.0"
        # the Pods' watch drops, its resume finds 410 Gone, and the relist is refused again and again
        busy = Fault("status", status=503, headers={"Retry-After": "1"})
        fake.do(fake.api.fault, "watch pods", Fault("gone"))
        fake.do(fake.api.fault, "list pods", busy, busy, busy, busy)
        fake.do(fake.api.disconnect)
        w.wait_for(lambda: synced() == "crashwatch_synced 0.0", what="crashwatch_synced 0 while the relist fails")
        # not ready while out of sync: a replica that may miss a recovery answers no webhook call either
        assert http_get(f"{url}/readyz") == (503, "not ready: a watch is out of sync (its last two requests failed)\n")
        assert "pods in namespace ns: out of sync until a LIST completes or a WATCH is answered" in w.stderr()
        w.wait_for(lambda: synced() == "crashwatch_synced 1.0", what="crashwatch_synced 1 once the relist lists")
        assert "pods in namespace ns: in sync again" in w.stderr()
        assert http_get(f"{url}/readyz") == (200, "ok\n")
        lists = len(fake.api.requests_of("GET", "pods", watch=False))
        assert lists == 6  # the first list, the relist's four refusals and the one that listed
        w.send_signal(signal.SIGTERM)
        assert w.process.wait(timeout=10) == 0
    assert "Traceback" not in w.stderr()


def test_an_http_address_in_use_exits_78_naming_it(fake: ServedFake, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("tail", "--http-address", f"127.0.0.1:{port}", "--kubeconfig", str(fake.api.kubeconfig(tmp_path)))
    assert result.returncode == 78
    assert f"cannot listen on 127.0.0.1:{port} for --http-address".encode() in result.stderr
    assert result.stderr.count(b"\n") == 1


def test_the_admission_webhook_without_a_usable_certificate_or_port_exits_naming_it(
    fake: ServedFake, tmp_path: Path
) -> None:
    from operators import webhook_certs

    config = ("--kubeconfig", str(fake.api.kubeconfig(tmp_path)))
    # its flags without one another: a usage error
    result = run("run", "--admission-address", ":0", *config)
    assert result.returncode == 2 and b"--admission-address needs --tls-cert-file" in result.stderr
    result = run("run", "--tls-cert-file", "x", *config)
    assert result.returncode == 2 and b"are for --admission-address" in result.stderr
    # files that cannot be read, or a port in use: one line, exit 78, before anything is watched
    missing = str(tmp_path / "missing.crt")
    tls = ("--tls-cert-file", missing, "--tls-private-key-file", missing)
    result = run("run", "--admission-address", "127.0.0.1:0", *tls, *config)
    assert result.returncode == 78 and result.stderr.count(b"\n") == 1, result.stderr
    assert f"cannot use --tls-cert-file and --tls-private-key-file ({missing} and {missing})".encode() in result.stderr
    certs = webhook_certs(()).write(tmp_path / "certs")
    tls = ("--tls-cert-file", str(certs / "tls.crt"), "--tls-private-key-file", str(certs / "tls.key"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("run", "--admission-address", f"127.0.0.1:{port}", *tls, *config)
    assert result.returncode == 78 and result.stderr.count(b"\n") == 1, result.stderr
    assert f"cannot listen on 127.0.0.1:{port} for --admission-address".encode() in result.stderr
    assert fake.api.requests_of("GET", "pods", watch=False) == []


def test_run_checks_the_webhooks_registration_and_says_a_ca_bundle_that_does_not_sign_it(
    fake: ServedFake, tmp_path: Path
) -> None:
    """The wiring of --admission-configuration: the check's line on stderr and its gauge on /metrics
    (what it finds in each case: tests/faults/test_admission_trust.py)."""
    import base64

    from operators import webhook_certs

    certs = webhook_certs(()).write(tmp_path / "certs")
    other = webhook_certs(())  # the CA of another render
    config = {"url": "https://127.0.0.1:9443/admit-status", "caBundle": base64.b64encode(other.ca).decode()}
    hook = {"metadata": {"name": "cw"}, "webhooks": [{"name": "status.crashwatch.dev", "clientConfig": config}]}
    fake.do(fake.api.put, "mutatingwebhookconfigurations", hook)
    tls = ("--tls-cert-file", str(certs / "tls.crt"), "--tls-private-key-file", str(certs / "tls.key"))
    admission = ("--admission-address", "127.0.0.1:0", *tls, "--admission-configuration", "cw")
    config_args = ("--http-address", "127.0.0.1:0", "--kubeconfig", str(fake.api.kubeconfig(tmp_path)))
    with Watcher("run", *admission, *config_args) as w:
        w.wait_for(lambda: "cannot verify this webhook's certificate" in w.stderr(), what="the check's line")
        _, metrics = http_get(f"{w.served_at()}/metrics")
        assert 'crashwatch_admission_trusted{configuration="cw"} 0.0' in metrics
        assert w.stop() == 0
    assert "the caBundle of MutatingWebhookConfiguration cw (webhook status.crashwatch.dev) does not sign" in w.stderr()
    result = run("run", "--admission-configuration", "cw", "--kubeconfig", str(fake.api.kubeconfig(tmp_path)))
    assert result.returncode == 2 and b"--admission-configuration is for --admission-address" in result.stderr


def test_stopped_while_the_server_cannot_be_reached_any_more(tmp_path: Path) -> None:
    """A watcher that has listed outlives its API server (it retries, and says so once); a stop still stops it."""
    served = ServedFake()
    config = served.api.kubeconfig(tmp_path)
    with Watcher("tail", "--kubeconfig", str(config)) as w:
        w.wait_synced()
        served.stop()  # nothing listens there any more
        w.wait_for(lambda: "retrying until it answers" in w.stderr(), 60, "the outage said")
        assert w.stop() == 0
    assert w.stderr().count("cannot reach the API server") == 1, w.stderr()
    assert "Traceback" not in w.stderr()


def test_forbidden_exits_77_naming_what(fake: ServedFake, tmp_path: Path) -> None:
    fake.do(fake.api.fault, "list pods", Fault("status", status=403))
    result = run("tail", "-A", "--kubeconfig", str(fake.api.kubeconfig(tmp_path)))
    assert result.returncode == 77
    assert b"not allowed to list and watch pods in all namespaces" in result.stderr


def test_run_without_the_dynamo_crds_exits_69(fake: ServedFake, tmp_path: Path) -> None:
    fake.api.serve_dynamo = False
    result = run("run", "--kubeconfig", str(fake.api.kubeconfig(tmp_path)))
    assert result.returncode == 69
    assert b"the Dynamo CRDs" in result.stderr and b"there is no status to write" in result.stderr


def test_tail_without_the_dynamo_crds_watches_pods(fake: ServedFake, tmp_path: Path) -> None:
    fake.api.serve_dynamo = False
    with Watcher("tail", "--kubeconfig", str(fake.api.kubeconfig(tmp_path))) as w:
        w.wait_synced()
        fake.do(fake.api.put, "pods", crashing("p-0"))
        w.wait_line("FAILED")
    assert "watching Pods and Deployments only" in w.stderr()


@pytest.mark.parametrize(
    "args,message",
    [
        (["--kubeconfig", "/nonexistent/kubeconfig"], "no kubeconfig at /nonexistent/kubeconfig"),
        (["--context", "nope"], "no context named 'nope'"),
    ],
)
def test_configuration_problems_exit_78(fake: ServedFake, tmp_path: Path, args: list[str], message: str) -> None:
    if "--context" in args:
        args = ["--kubeconfig", str(fake.api.kubeconfig(tmp_path)), *args]
    result = run("tail", *args)
    assert result.returncode == 78
    assert message.encode() in result.stderr
    assert result.stderr.count(b"\n") == 1 and b"Traceback" not in result.stderr


def test_record_into_a_folder_that_does_not_exist_exits_73(fake: ServedFake, tmp_path: Path) -> None:
    result = run("record", "--kubeconfig", str(fake.api.kubeconfig(tmp_path)), "-o", str(tmp_path / "no" / "x"))
    assert result.returncode == 73
    assert b"cannot create" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["tail", "-n", "a", "-A"],
        ["record"],
        ["run", "--qps", "0"],
        ["tail", "--watch-idle-timeout", "x"],
        ["run", "--grace-period", "-1"],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    result = run(*args)
    assert result.returncode == 2
    error, see = result.stderr.decode().splitlines()  # its one line, and where the help is: no usage before it
    assert error.startswith(f"crashwatch {args[0]}: error: ") and see == f"see 'crashwatch {args[0]} --help'"


def test_an_endless_watch_line_is_bounded_said_and_a_sigterm_still_stops_it(fake: ServedFake, tmp_path: Path) -> None:
    """A server that streams one line for ever: the watch ends once the line passes the limit (said on
    stderr, retried with backoff), memory stays bounded, and a SIGTERM stops the command however the
    stream goes on, without waiting out its grace period."""
    fake.do(fake.api.fault, "watch pods", Fault("endless"), Fault("endless"), Fault("endless"))
    config = str(fake.api.kubeconfig(tmp_path))
    with Watcher("tail", "--grace-period", "60", "--max-record-size", "4Mi", "--kubeconfig", config) as w:
        w.wait_synced()
        fake.do(fake.api.put, "pods", crashing("p-0"))  # the watch has something to send: the endless line
        w.wait_for(lambda: "watch event longer than 4,194,304 bytes" in w.stderr(), timeout=60, what="the limit")
        rss = _rss_kib(w.process.pid)
        assert rss < 300 * 1024, f"{rss} KiB held"  # a line is never held whole, nor twice
        w.send_signal(signal.SIGTERM)
        # the stop ends the endless read itself: it never waits out the 60 s grace period (the bound
        # below only leaves a loaded machine its lag, it measures no speed)
        assert w.process.wait(timeout=40) == 0
        assert "stopped after the 60s grace period" not in w.stderr()
    assert "Traceback" not in w.stderr()
    assert fake.api.endless_bytes >= 4 << 20


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):  # the peak
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


# --- why it crashed, read live (stream.sources.crash_output) -------------------------------------------

CRASH_ENDED = "2026-11-20T10:01:00Z"
CORPUS = Path(__file__).resolve().parents[1] / "data" / "crashlogs"


def crashed_once(name: str = "p-0") -> dict[str, object]:
    """A worker Pod on a node whose container exited 1 once (terminated, not restarted yet): no crash loop."""
    container = {
        "name": "main",
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": CRASH_ENDED}},
    }
    ready = [{"type": "Ready", "status": "False"}]
    return {**pod(name, phase="Running", conditions=ready, containerStatuses=[container]), "spec": {"nodeName": "n"}}


def dgd_stalled(fake: ServedFake) -> str | None:
    status = fake.api.objects["dynamographdeployments"][("ns", "g")].get("status") or {}
    return next((c.get("reason") for c in status.get("conditions") or [] if c.get("type") == "Stalled"), None)


def crash_with_a_certain_cause(fake: ServedFake) -> None:
    """The first crash of a worker whose output (real vLLM output of a gated model) says a restart cannot cure it."""
    fake.do(fake.api.put_log, "ns", "p-0", "main", (CORPUS / "vllm-model_access_denied-1.log").read_bytes())
    fake.do(fake.api.put, "pods", crashed_once())


def test_run_and_record_name_the_cause_at_the_first_crash_and_the_record_replays_to_it(
    fake: ServedFake, tmp_path: Path
) -> None:
    put_graph(fake)
    config = str(fake.api.kubeconfig(tmp_path))
    record = tmp_path / "session.jsonl"
    with Watcher("run", "--kubeconfig", config) as w, Watcher("record", "-o", str(record), "--kubeconfig", config) as r:
        w.wait_synced()
        r.wait_synced()
        crash_with_a_certain_cause(fake)
        w.wait_line("CRASHED")
        r.wait_line("CRASHED")
        w.wait_for(lambda: dgd_stalled(fake) == "ComponentCrashedCertainCause", what="the DGD failed at once")
        assert r.stop(signal.SIGTERM) == 0
        assert w.stop(signal.SIGTERM) == 0
    (line,) = [line for line in w.snapshot(w.out) if "CRASHED" in line]
    assert "cause=model_access_denied" in line
    dgd = fake.api.objects["dynamographdeployments"][("ns", "g")]["status"]
    assert dgd["state"] == "failed"
    stalled = next(c for c in dgd["conditions"] if c["type"] == "Stalled")
    assert "meta-llama/Llama-3.1-8B-Instruct" in stalled["message"]
    # the record keeps the output the pipeline was fed, and a replay of it says what the record said live
    records = [json.loads(raw) for raw in record.read_bytes().splitlines()]
    assert [x["object"]["pod"] for x in records if x["type"] == "CRASH_OUTPUT"] == ["p-0"]
    recorded = [line for line in r.snapshot(r.out) if "CRASHED" in line]
    data = record.read_bytes()
    for args, stdin in (([str(record), "-j", "1"], None), ([str(record), "-j", "2"], None), (["-"], data)):
        lines = run("replay", *args, stdin=stdin)
        assert lines.returncode == 0, lines.stderr.decode()
        assert [x for x in lines.stdout.decode().splitlines() if "CRASHED" in x] == recorded
        patches = run("replay", "--patches", *args, stdin=stdin)
        assert b"ComponentCrashedCertainCause" in patches.stdout and b"ContainerCrashedCertainCause" in patches.stdout
    assert "Traceback" not in w.stderr() + r.stderr()


def test_without_rights_on_pods_log_it_says_so_once_and_reports_the_crash_loop_without_a_cause(
    fake: ServedFake, tmp_path: Path
) -> None:
    put_graph(fake)
    fake.do(fake.api.fault, "log", *[Fault("status", status=403)] * 10)
    with Watcher("run", "--kubeconfig", str(fake.api.kubeconfig(tmp_path))) as w:
        w.wait_synced()
        crash_with_a_certain_cause(fake)
        w.wait_for(lambda: "not allowed to read pods/log" in w.stderr(), what="the refusal")
        fake.do(fake.api.put, "pods", crashing("p-1"))  # a crash loop, reported as ever
        w.wait_line("CRASH-LOOPING")
        assert w.stop(signal.SIGTERM) == 0
    assert w.stderr().count("not allowed to read pods/log: causes are not read; everything else goes on") == 1
    assert sum(r.path.endswith("/log") for r in fake.api.requests) == 1
    assert "CRASHED" not in w.stdout()


def test_read_causes_false_reads_no_output(fake: ServedFake, tmp_path: Path) -> None:
    put_graph(fake)
    config = str(fake.api.kubeconfig(tmp_path))
    with Watcher("tail", "--read-causes=false", "--log-lines", "0", "--kubeconfig", config) as w:
        w.wait_synced()
        crash_with_a_certain_cause(fake)
        fake.do(fake.api.put, "pods", crashing("p-1"))
        w.wait_line("CRASH-LOOPING")
        assert w.stop(signal.SIGTERM) == 0
    assert not any("/pods/" in r.path for r in fake.api.requests if r.method == "GET" and "watch" not in r.query)
    assert "CRASHED" not in w.stdout()


def test_get_reads_the_causes_of_the_crashes_it_lists_before_its_snapshot(fake: ServedFake, tmp_path: Path) -> None:
    put_graph(fake)
    crash_with_a_certain_cause(fake)
    config = str(fake.api.kubeconfig(tmp_path))
    shown = run("get", "-o", "wide", "--kubeconfig", config)
    assert shown.returncode == 0, shown.stderr.decode()
    assert "gated" in shown.stdout.decode(), shown.stdout.decode()
    plain = run("get", "-o", "wide", "--read-causes=false", "--kubeconfig", config)
    assert "gated" not in plain.stdout.decode()


def test_a_stop_during_a_read_stops_within_the_grace_period(fake: ServedFake, tmp_path: Path) -> None:
    put_graph(fake)
    fake.do(fake.api.fault, "log", Fault("delay", seconds=120))
    with Watcher("run", "--grace-period", "5", "--kubeconfig", str(fake.api.kubeconfig(tmp_path))) as w:
        w.wait_synced()
        crash_with_a_certain_cause(fake)
        w.wait_for(lambda: fake.api.logs_in_flight == 1, what="a read under way")
        start = time.monotonic()
        assert w.stop(signal.SIGTERM) == 0
    assert time.monotonic() - start < 60  # the read is ended: not the server's 120 s
    assert "Traceback" not in w.stderr()
