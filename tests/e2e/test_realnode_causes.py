"""Why it crashed, on the real node (docs/status.md, "Why it crashed, live"): a worker's crashed run's output
read through the API server from a real kubelet, its cause named, and a graph failed at the first crash when
the cause is certain (tests/realnode.py).

Each case is a graph of one worker (`llm`, component `worker`) in a namespace of its own, side by side under
one `crashwatch run` and one `crashwatch record` (`--recovery-window 30s`, as in the other real-node tiers);
the worker prints a real crashed run's output from the corpus (tests/data/crashlogs, mounted from a ConfigMap)
and exits 1:

- gated: vLLM's 401 on the config of the gated meta-llama/Meta-Llama-3-8B-Instruct, by a worker with a
  readiness probe that does not pass (as the Dynamo operator probes every worker). The DGD reads `failed`,
  `Stalled=True` ComponentCrashedCertainCause naming the model (and no line of the output) while the worker's
  restart count is at most 1, the first crash; `crashwatch wait` and `helm install --wait` of the adopted
  graph, both started before the worker ran, exit on that verdict; kstatus reads Failed, Argo CD's check
  Degraded. The fix (a container that keeps running) clears it as a crash loop clears; `wait` then reads
  ready, kstatus Current, Argo CD Healthy and `helm upgrade --wait` succeeds.
- gated-ready: the same without a probe, Ready from each start to its crash: failed at a restart count of at
  most 1 too (a Ready Pod is not failed, so the verdict may wait for the second crash, a moment later).
- etcd: Dynamo's runtime failing to reach etcd, a cause that may pass on a retry: no version of the DGD is
  failed (nor Stalled) before the kubelet's write that makes the crash loop (restart count 2, down: the
  kubelet restarts it at once after its first crash and 10 s after its second, so 13-15 s after the first);
  then the crash-loop rule fails it, its words naming etcd, and `wait` exits 1 on the crash loop.
- slow: a readiness probe that passes only after 60 s: nothing is said or written, and `wait` returns ready.

The order of the Pod's and the DGD's versions is the API server's (their resourceVersions, etcd's revision
on this node's own control plane), from watches of the test's own that keep every version
(realnode.Versions), never a poll. A `replay` of the record (with its CRASH_OUTPUT records) says what the
record said live: the same first-crash verdict.
"""

from __future__ import annotations

import calendar
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import realnode
import yaml
from argocd import DCD, DGD, health
from cli import run
from dynamo import adopted_by_helm, conditions, dcds, dgds, make_graph
from kube import eventually
from realnode import (
    HelmRun,
    Version,
    Versions,
    WaitRun,
    container,
    crash_looping,
    crashed,
    make_worker,
    output_map,
    printing,
    restarts,
    spec,
)
from watcher import Watcher

pytestmark = pytest.mark.e2e

CORPUS = Path(__file__).resolve().parent.parent / "data" / "crashlogs"
GATED_LOG = CORPUS / "vllm-model_access_denied-2.log"  # vLLM 0.10.0: 401 on a gated model's config.json
GATED_MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"
ETCD_LOG = CORPUS / "dynamo-dependency_unreachable-1.log"  # Dynamo's runtime: etcd at localhost:2379 refused
ETCD_WORDS = "etcd is not reachable (localhost:2379)"
WINDOW = ("--recovery-window", "30s")
CHART = Path(__file__).resolve().parent / "charts" / "dynamo-graph"  # the graph's DGD alone (test_kstatus_helm)
RELEASE = "llm"
# gated: never Ready while it crashes (a readiness probe); gated-ready: Ready from each start to its crash
CASES = ("gated", "gated-ready", "etcd", "slow")
READY_AFTER = 60  # seconds: the slow start's readiness probe passes after this
TIMEOUT = 300  # seconds for a verdict the node makes within a minute when quiet
LOOP_TIMEOUT = 600  # ... for the crash loop, which waits on the kubelet's backoffs (minutes on a busy machine)


# --- the workers ------------------------------------------------------------------------------------------


def slow_start(image: str) -> dict[str, Any]:
    probe = {"exec": {"command": ["test", "-f", "/tmp/ready"]}, "periodSeconds": 2}
    return spec([container(image, f"(sleep {READY_AFTER}; touch /tmp/ready) & exec sleep 3600", readinessProbe=probe)])


# --- what the versions say --------------------------------------------------------------------------------


def statuses(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return list(pod.get("status", {}).get("containerStatuses", []))


def stalled(obj: dict[str, Any], status: str, reason: str | None = None) -> bool:
    condition = conditions(obj).get("Stalled", {})
    return condition.get("status") == status and reason in (None, condition.get("reason"))


def certain(dgd: dict[str, Any]) -> bool:
    return dgd.get("status", {}).get("state") == "failed" and stalled(dgd, "True", "ComponentCrashedCertainCause")


def looping(dgd: dict[str, Any]) -> bool:
    return dgd.get("status", {}).get("state") == "failed" and stalled(dgd, "True", "ComponentCrashLooping")


def failing(obj: dict[str, Any]) -> bool:
    return obj.get("status", {}).get("state") == "failed" or stalled(obj, "True")


# --- the session ------------------------------------------------------------------------------------------


@dataclass
class Session:
    names: dict[str, str]  # case -> namespace
    pods: Versions
    graphs: Versions  # DGDs
    components: Versions  # DCDs
    lines: list[dict[str, Any]] = field(default_factory=list)  # `run -o json`
    recorded: list[dict[str, Any]] = field(default_factory=list)  # `record --format json`'s own lines
    replayed: list[dict[str, Any]] = field(default_factory=list)  # `replay -o json` of the record
    outputs: list[dict[str, Any]] = field(default_factory=list)  # the record's CRASH_OUTPUT records
    waits: dict[str, WaitRun] = field(default_factory=dict)  # `crashwatch wait`, started before each worker
    install: HelmRun | None = None  # `helm install --wait` of the gated graph, started before its worker
    upgrade: HelmRun | None = None  # `helm upgrade --wait` once it is fixed and ready
    stalled_dgd: dict[str, Any] = field(default_factory=dict)  # the gated graph's first certain verdict
    stalled_dcd: dict[str, Any] = field(default_factory=dict)
    kstatus_failing: list[dict[str, str]] | None = None
    cleared_dgd: dict[str, Any] = field(default_factory=dict)  # after the fix, Stalled=False
    cleared_dcd: dict[str, Any] = field(default_factory=dict)
    fixed: tuple[int, dict[str, Any]] = (0, {})  # `wait` once the fixed graph is ready
    fixed_dgd: dict[str, Any] = field(default_factory=dict)
    fixed_dcd: dict[str, Any] = field(default_factory=dict)
    kstatus_fixed: list[dict[str, str]] | None = None

    def of(self, case: str, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [line for line in lines if line["namespace"] == self.names[case] and line["kind"] == "component"]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[realnode.Node]:
    yield from realnode.started(tmp_path_factory)


@pytest.fixture(scope="module")
def session(node: realnode.Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    kube, kubeconfig = node.kube(), node.plane.kubeconfig
    folder = tmp_path_factory.mktemp("realnode-causes")
    record = folder / "record.jsonl"
    tools = realnode.waiters()
    manifest: dict[str, Any] = {}
    if tools is not None:
        rendered = subprocess.run(
            [str(tools / "helm"), "template", RELEASE, str(CHART)], capture_output=True, text=True
        )
        assert rendered.returncode == 0, rendered.stderr
        (manifest,) = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    began = time.monotonic()
    names = {case: f"rc-{case}-{uuid.uuid4().hex[:6]}" for case in CASES}
    gated, etcd, slow = names["gated"], names["etcd"], names["slow"]
    all_ns = "/namespaces//"
    pods, graphs, components = realnode.watched(
        kube, "/api/v1/pods", dgds("").replace(all_ns, "/"), dcds("").replace(all_ns, "/")
    )
    s = Session(names, pods, graphs, components)
    helms: list[HelmRun] = []
    try:
        for namespace in names.values():
            kube.create(
                "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            )
        for case, log in (("gated", GATED_LOG), ("gated-ready", GATED_LOG), ("etcd", ETCD_LOG)):
            kube.create(f"/api/v1/namespaces/{names[case]}/configmaps", output_map(log.read_text()))
        scope = [arg for namespace in names.values() for arg in ("-n", namespace)]
        with (
            Watcher("run", *scope, "-o", "json", *WINDOW, "--kubeconfig", str(kubeconfig)) as runner,
            Watcher(
                "record", *scope, "-o", str(record), "--format", "json", *WINDOW, "--kubeconfig", str(kubeconfig)
            ) as rec,
        ):
            runner.wait_synced(60)
            rec.wait_synced(60)
            # the graphs first, and their waiters on them, then the workers: every waiter is waiting when
            # its worker first crashes
            for namespace in names.values():
                make_graph(kube, namespace, deployments=False)
            if tools is not None:  # Helm adopts the gated graph's DGD and waits on it (test_kstatus_helm.py says why)
                adopted_by_helm(kube, gated, manifest, RELEASE)
                install = ("install", RELEASE, str(CHART), "--wait", "--timeout", "10m")
                s.install = HelmRun(tools / "helm", kubeconfig, gated, folder / "helm", *install)
                helms.append(s.install)
            s.waits = {case: WaitRun(namespace, kubeconfig, "10m", *WINDOW) for case, namespace in names.items()}
            for case, waiter in s.waits.items():  # a busy machine takes seconds to start one
                assert waiter.synced.wait(120), f"wait on {case} never synced: {waiter.stderr}"
            make_worker(kube, gated, printing(node.busybox, probed=True))
            make_worker(kube, names["gated-ready"], printing(node.busybox))
            make_worker(kube, etcd, printing(node.busybox))
            make_worker(kube, slow, slow_start(node.busybox))

            # gated: failed at the first crash, and the waiters give up on it
            eventually(lambda: s.graphs.first(gated, certain), TIMEOUT, "the gated graph failed", step=0.5)
            first = s.graphs.first(gated, certain)
            assert first is not None
            s.stalled_dgd = first.obj
            dcd = s.components.first(gated, lambda d: stalled(d, "True", "ContainerCrashedCertainCause"))
            assert dcd is not None, s.components.snapshot(gated)
            s.stalled_dcd = dcd.obj
            if tools is not None:
                s.kstatus_failing = realnode.kstatus(tools, s.stalled_dgd, s.stalled_dcd)
            exits: list[WaitRun | HelmRun] = [s.waits["gated"], *helms]
            eventually(lambda: all(x.exited is not None for x in exits), TIMEOUT, "the gated graph's waiters", step=0.5)
            # the fix: the container keeps running
            fix = [container(node.busybox, "exec sleep 3600")]
            kube.merge_patch(
                f"/apis/apps/v1/namespaces/{gated}/deployments/llm-worker",
                {"spec": {"template": {"spec": {"containers": fix}}}},
            )

            def cleared() -> bool:
                dgd, dcd = kube.get(f"{dgds(gated)}/llm"), kube.get(f"{dcds(gated)}/llm-worker")
                if not (stalled(dgd, "False") and stalled(dcd, "False") and realnode.pod_ready(kube, gated)):
                    return False
                s.cleared_dgd, s.cleared_dcd = dgd, dcd
                return True

            eventually(cleared, TIMEOUT, "the fixed gated graph cleared and its new Pod Ready", step=0.5)
            realnode.play_the_operator(kube, gated)
            again = WaitRun(gated, kubeconfig, "2m", *WINDOW)
            eventually(lambda: again.exited is not None, 180, "wait on the fixed graph", step=0.5)
            s.fixed = again.result
            s.fixed_dgd, s.fixed_dcd = kube.get(f"{dgds(gated)}/llm"), kube.get(f"{dcds(gated)}/llm-worker")
            if tools is not None:
                s.kstatus_fixed = realnode.kstatus(tools, s.fixed_dgd, s.fixed_dcd)
                upgrade = ("upgrade", RELEASE, str(CHART), "--wait", "--timeout", "2m")
                s.upgrade = HelmRun(tools / "helm", kubeconfig, gated, folder / "helm", *upgrade)
                helms.append(s.upgrade)

            ready_between = names["gated-ready"]
            eventually(
                lambda: s.graphs.first(ready_between, certain), TIMEOUT, "the gated-ready graph failed", step=0.5
            )
            # etcd: failed only by the crash loop
            eventually(lambda: s.graphs.first(etcd, looping), LOOP_TIMEOUT, "the etcd graph's crash loop", step=0.5)
            # slow: Ready in the end; the operator (played) says so, and `wait` returns ready
            eventually(lambda: realnode.pod_ready(kube, slow), TIMEOUT, "the slow start Ready", step=0.5)
            realnode.play_the_operator(kube, slow)
            waiting: list[WaitRun | HelmRun] = [*s.waits.values(), *helms]
            eventually(lambda: all(x.exited is not None for x in waiting), TIMEOUT, "every waiter's exit", step=0.5)
            time.sleep(1)  # the last lines of run and record (they are not waited on otherwise)
            s.lines = [json.loads(line) for line in runner.snapshot(runner.out)]
            s.recorded = [json.loads(line) for line in rec.snapshot(rec.out)]
            (folder / "run.stderr").write_text(runner.stderr())
            (folder / "record.stderr").write_text(rec.stderr())
            for case, waiter in s.waits.items():  # what each said, for a failure's reader
                (folder / f"wait-{case}.stderr").write_text(waiter.stderr)
        assert runner.process.returncode == 0, runner.stderr()
        assert rec.process.returncode == 0, rec.stderr()
        assert "Traceback" not in runner.stderr() + rec.stderr()
    finally:
        for watch in (s.pods, s.graphs, s.components):
            watch.stop()
        stoppable: list[WaitRun | HelmRun] = [*s.waits.values(), *helms]
        for x in stoppable:
            x.stop()
    records = [json.loads(raw) for raw in record.read_text().splitlines()]
    s.outputs = [r["object"] for r in records if r["type"] == "CRASH_OUTPUT"]
    done = run("replay", "-o", "json", *WINDOW, str(record))
    assert done.returncode == 0, done.stderr.decode()
    s.replayed = [json.loads(line) for line in done.stdout.decode().splitlines()]
    print(f"\nreal-node causes shown in {time.monotonic() - began:.0f}s", file=sys.stderr)
    print(report(s), file=sys.stderr)
    for namespace in names.values():
        kube.delete(f"/api/v1/namespaces/{namespace}")
    yield s


def first_crash(s: Session, case: str) -> Version | None:
    return s.pods.first(s.names[case], crashed)


def report(s: Session) -> str:
    """When each verdict came, as the test's watches saw it: from the kubelet's first write of a crash."""
    rows = []
    for case, holds in (("gated", certain), ("gated-ready", certain), ("etcd", looping)):
        crash, verdict = first_crash(s, case), s.graphs.first(s.names[case], holds)
        loop = s.pods.first(s.names[case], crash_looping)
        if crash is None or verdict is None:
            rows.append(f"  {case}: (not seen)")
            continue
        since = f", the crash loop's write {verdict.arrived - loop.arrived:+.2f}s" if loop is not None else ""
        rows.append(
            f"  {case}: the first crash's write -> the DGD failed {verdict.arrived - crash.arrived:.2f}s{since}"
        )
    for case in ("gated", "gated-ready", "etcd"):
        read = sorted(o.get("restarts", 0) for o in s.outputs if o["namespace"] == s.names[case])
        rows.append(f"  {case}: the record read the output of the crashes at restart counts {read}")
    wait, install = s.waits["gated"], s.install
    verdict = s.graphs.first(s.names["gated"], certain)
    if verdict is not None and wait.exited is not None:
        rows.append(f"  gated: `wait` exited {wait.exited - verdict.arrived:+.2f}s after the DGD failed")
    if verdict is not None and install is not None and install.exited is not None:
        rows.append(f"  gated: `helm install --wait` exited {install.exited - verdict.arrived:+.2f}s after it")
    return "\n".join(rows)


def written_before(versions: list[Version], moment: Version) -> list[Version]:
    return [v for v in versions if v.revision < moment.revision]


def words(obj: dict[str, Any]) -> str:
    return str(conditions(obj).get("Stalled", {}).get("message", ""))


def no_raw_line(text: str, log: Path) -> None:
    """Not one line of the output (of some length: a word may be shared) is in `text`."""
    for line in log.read_text().splitlines():
        if len(line.strip()) >= 16:
            assert line.strip() not in text, (line, text)


# --- the gated model: failed at the first crash -------------------------------------------------------------


@pytest.mark.parametrize("case", ["gated", "gated-ready"])
def test_a_gated_model_fails_the_graph_at_its_first_crash_naming_the_model(session: Session, case: str) -> None:
    s, gated = session, session.names[case]
    verdict = s.graphs.first(gated, certain)
    crash = first_crash(s, case)
    assert verdict is not None and crash is not None and crash.revision < verdict.revision
    # the first crash: no version of the Pod written before the verdict had restarted more than once
    before = written_before(s.pods.snapshot(gated), verdict)
    assert max(restarts(v.obj) for v in before) <= 1, [(v.revision, restarts(v.obj)) for v in before]
    assert not any(crash_looping(v.obj) for v in before)
    # no earlier version of the DGD was failed
    assert not any(failing(v.obj) for v in written_before(s.graphs.snapshot(gated), verdict))
    stalled_dcd = s.components.first(gated, lambda d: stalled(d, "True", "ContainerCrashedCertainCause"))
    assert stalled_dcd is not None
    dgd, dcd = conditions(verdict.obj), conditions(stalled_dcd.obj)
    assert dgd["Ready"]["status"] == "False" and dgd["Ready"]["reason"] == "component_crashed_with_certain_cause", dgd
    assert dcd["Available"]["status"] == "False" and dcd["Available"]["reason"] == "ContainerCrashedCertainCause", dcd
    for message in (dgd["Stalled"]["message"], dcd["Stalled"]["message"], dcd["Available"]["message"]):
        assert GATED_MODEL in message and "a restart cannot cure" in message, message
        assert "crashed (exit code 1)" in message, message
        no_raw_line(message, GATED_LOG)
    # run said it, with the cause, at a restart count of at most 1
    said = s.of(case, s.lines)
    assert said and said[0].get("diagnosis") == "certain_crash", said
    assert said[0]["restarts"] <= 1 and said[0]["exit_code"] == 1, said[0]
    cause = said[0]["cause"]
    assert cause["class"] == "model_access_denied" and cause["certain"], cause
    assert cause["fields"]["model"] == GATED_MODEL, cause


def test_wait_and_helm_install_wait_exit_on_the_first_crash(session: Session) -> None:
    s = session
    code, result = s.waits["gated"].result
    assert code == 1 and result["result"] == "failed", (result, s.waits["gated"].stderr)
    (graph,) = result["graphs"]
    # the verdict of the first crash, not the crash loop's: wait's own (its Pod's finding, the DGD's Ready reason)
    # or, where the status run wrote came first, that status's (its Stalled reason and words)
    if graph["crash_looping"]:
        assert graph["reason"] == "component_crashed_with_certain_cause", graph
        (finding,) = graph["crash_looping"]
        assert finding["diagnosis"] == "certain_crash" and finding["restarts"] <= 1, finding
    else:
        assert graph["reason"] == "ComponentCrashedCertainCause", graph
    assert "crashed (exit code 1) with a cause a restart cannot cure" in graph["message"], graph
    assert GATED_MODEL in graph["message"], graph
    no_raw_line(json.dumps(result), GATED_LOG)
    if s.install is None:
        pytest.skip("helm is not to be had here (tests/waiters_bin.py says how)")
    output = s.install.output()
    assert s.install.process.returncode != 0, output
    # it gave up on crashwatch's first-crash word (kstatus's Failed, that Stalled message), not at its timeout
    assert f"DynamoGraphDeployment/{s.names['gated']}/llm not ready. status: Failed" in output, output
    assert conditions(s.stalled_dgd)["Stalled"]["message"] in output, output
    assert s.install.exited is not None and s.install.exited - s.install.started < TIMEOUT, output


def test_kstatus_and_argo_cd_read_the_first_crash_failed(session: Session) -> None:
    s = session
    for kind, obj in ((DGD, s.stalled_dgd), (DCD, s.stalled_dcd)):
        status, message = health(kind, obj)
        assert status == "Degraded" and GATED_MODEL in message, (kind, status, message)
    if s.kstatus_failing is None:
        pytest.skip("kstatus is not to be had here (tests/waiters_bin.py says how)")
    assert [v["status"] for v in s.kstatus_failing] == ["Failed", "Failed"], s.kstatus_failing


def test_the_fix_clears_it_as_a_crash_loop_clears(session: Session) -> None:
    s = session
    # the verdict it clears: the first crash's, or the crash loop's if the third crash came before the fix
    for obj, reasons in (
        (s.cleared_dgd, {"ComponentCrashedCertainCause": "Recovered", "ComponentCrashLooping": "NoCrashLoop"}),
        (s.cleared_dcd, {"ContainerCrashedCertainCause": "Recovered", "ContainerCrashLooping": "NoCrashLoop"}),
    ):
        was = [v.obj for v in (s.graphs if obj is s.cleared_dgd else s.components).snapshot(s.names["gated"])]
        last = [conditions(o)["Stalled"]["reason"] for o in was if stalled(o, "True")][-1]
        assert stalled(obj, "False", reasons[last]), (last, conditions(obj)["Stalled"])
    assert s.cleared_dgd["status"]["state"] != "failed", s.cleared_dgd["status"]
    code, result = s.fixed
    assert code == 0 and result["result"] == "ready", result
    assert health(DGD, s.fixed_dgd)[0] == "Healthy" and health(DCD, s.fixed_dcd)[0] == "Healthy"
    said = s.of("gated", s.lines)
    assert not said[-1]["crash_looping"] and said[-1]["pod"] is None, said
    if s.kstatus_fixed is None or s.upgrade is None:
        pytest.skip("helm and kstatus are not to be had here (tests/waiters_bin.py says how)")
    assert [v["status"] for v in s.kstatus_fixed] == ["Current", "Current"], s.kstatus_fixed
    assert s.upgrade.process.returncode == 0, s.upgrade.output()


# --- etcd unreachable: may pass on a retry, so named at the crash loop ---------------------------------------


def test_an_unreachable_etcd_is_not_failed_at_the_first_crash_and_is_named_at_the_crash_loop(session: Session) -> None:
    s, etcd = session, session.names["etcd"]
    loop = s.pods.first(etcd, crash_looping)
    verdict = s.graphs.first(etcd, looping)
    assert loop is not None and verdict is not None, s.pods.snapshot(etcd)
    assert loop.revision < verdict.revision
    # crashes before the loop, each read: their output was there to name the cause, and nothing failed
    crashes = [v for v in written_before(s.pods.snapshot(etcd), loop) if crashed(v.obj)]
    assert crashes, "no crash before the crash loop"
    read = [o for o in s.outputs if o["namespace"] == etcd and o.get("restarts", 0) < 2]
    assert read and "Failed to connect to etcd server" in read[0]["text"], read
    early = written_before(s.graphs.snapshot(etcd), loop)
    assert early and not any(failing(v.obj) for v in early), [v.obj.get("status") for v in early]
    assert not any(failing(v.obj) for v in written_before(s.components.snapshot(etcd), loop))
    # then the crash loop, its words naming etcd: at once where an earlier crash's output was read by then, else
    # once the looping crash's own output is (a read the Pod's next status write overtook is skipped)
    named = [v for v in s.graphs.snapshot(etcd) if looping(v.obj) and ETCD_WORDS in words(v.obj)]
    assert named, [words(v.obj) for v in s.graphs.snapshot(etcd)]
    dgd = conditions(named[0].obj)
    assert dgd["Ready"]["reason"] == "component_crash_looping", dgd
    for message in (dgd["Stalled"]["message"], dgd["Ready"]["message"]):
        assert ETCD_WORDS in message, message
        no_raw_line(message, ETCD_LOG)
    said = s.of("etcd", s.lines)
    assert said and said[0]["crash_looping"] and said[0]["restarts"] >= 2, said
    causes = [line["cause"] for line in said if "cause" in line]
    assert causes and causes[0]["class"] == "dependency_unreachable" and not causes[0]["certain"], said
    code, result = s.waits["etcd"].result
    assert code == 1 and result["result"] == "failed", result
    (graph,) = result["graphs"]
    assert graph["reason"] == "component_crash_looping", graph
    (finding,) = graph["crash_looping"]
    assert finding["restarts"] >= 2, finding


# --- a slow but healthy start ------------------------------------------------------------------------------


def stamp(text: str) -> int:
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))


def test_a_slow_but_healthy_start_trips_nothing(session: Session) -> None:
    s, slow = session, session.names["slow"]
    versions = s.pods.snapshot(slow)
    assert any(
        v.obj.get("status", {}).get("containerStatuses") and not statuses(v.obj)[0].get("ready") for v in versions
    ), "never seen running and not Ready"
    pod = versions[-1].obj
    ready = stamp(conditions(pod)["Ready"]["lastTransitionTime"]) - stamp(pod["metadata"]["creationTimestamp"])
    assert ready >= READY_AFTER, pod["status"]
    assert not any(failing(v.obj) for v in [*s.graphs.snapshot(slow), *s.components.snapshot(slow)])
    assert s.of("slow", s.lines) == []
    assert not [o for o in s.outputs if o["namespace"] == slow]
    code, result = s.waits["slow"].result
    assert code == 0 and result["result"] == "ready", result


# --- the record --------------------------------------------------------------------------------------------


def summary(lines: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    keys = ("crash_looping", "pod", "container", "restarts", "exit_code", "diagnosis", "message")
    return [(*(line.get(key) for key in keys), line.get("cause", {}).get("class")) for line in lines]


def verdicts(lines: list[dict[str, Any]], causes: bool = True) -> list[tuple[Any, ...]]:
    """Each verdict (and its cause), in order, a verdict said again in a row (at another restart count) once."""
    said: list[tuple[Any, ...]] = []
    for line in lines:
        cause = line.get("cause", {}).get("class") if causes else None
        verdict = (line["crash_looping"], line["pod"], line.get("diagnosis"), cause)
        if not said or said[-1] != verdict:
            said.append(verdict)
    return said


def said_then_again(replayed: list[dict[str, Any]], recorded: list[dict[str, Any]]) -> None:
    """The replay says each line the record said, in order; after them, only the last verdict again at a later
    restart count: a crash-looping worker goes on crashing, and a crash the record wrote to its file after the
    test last read its lines (it stops a moment later) is in the replay."""
    assert summary(replayed[: len(recorded)]) == summary(recorded)
    last = recorded[-1] if recorded else None
    for line in replayed[len(recorded) :]:
        assert last is not None and verdicts([line]) == verdicts([last]), (line, last)
        assert line["restarts"] > last["restarts"], (line, last)
        last = line


def test_a_replay_of_the_record_gives_the_same_first_crash_verdict(session: Session) -> None:
    s = session
    gated = s.names["gated"]
    # the record kept the output it read, as the kubelet served it
    read = [o for o in s.outputs if o["namespace"] == gated]
    assert read and read[0]["text"] == GATED_LOG.read_text() and read[0]["restarts"] <= 1, read
    for case in ("gated", "etcd", "slow"):
        said_then_again(s.of(case, s.replayed), s.of(case, s.recorded))
    # Ready between crashes, the live record fails the graph on the first output read while the Pod is not Ready
    # (often the second crash's, restart count 1). A replay fails it on the first output recorded, Ready or not:
    # its pipeline asks for no output, so its filter drops the Pod's updates that change readiness alone, and
    # the view the output meets is older. It may then say the verdict once more, at another restart count.
    assert verdicts(s.of("gated-ready", s.replayed)) == verdicts(s.of("gated-ready", s.recorded))
    first = s.of("gated", s.replayed)[0]
    assert first["diagnosis"] == "certain_crash" and first["cause"]["class"] == "model_access_denied", first
    # and what run said, from reads of its own: the same verdicts and causes, though a cause may be named a
    # line later by one of them (a read the Pod's next status write overtook is skipped, and the next crash's
    # output names it)
    for case in CASES:
        assert verdicts(s.of(case, s.replayed), causes=False) == verdicts(s.of(case, s.lines), causes=False), case
        named = {line["cause"]["class"] for line in s.of(case, s.lines) if "cause" in line}
        assert named == {line["cause"]["class"] for line in s.of(case, s.replayed) if "cause" in line}, case
