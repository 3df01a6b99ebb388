"""Crash loops as a real kubelet makes them (tests/realnode.py: containerd, runc, the kubelet and the scheduler
on this machine), on Deployment-backed components with their DCD and DGD, each case checked against what the
verdict must be, through `run` (status writes, Events), `tail`, `wait`, and `record` then `replay`.

A real kubelet runs a crash-looping container again between crashes (Ready, when it has no readiness probe)
and keeps `terminated` through a backoff: the verdict must hold through every restart (no RECOVERED line, no
cleared status, no recovered Event) and clear only where the crash loop is really over. The scenarios run
side by side on one node, each in a namespace of its own, watched by one `run`, one `tail` and one `record`
(all with `--recovery-window 30s`, so that the case which recovers does within the test), while a poller
reads every graph twice a second as a waiter would. The tests then judge what was collected, case by case.

Last, the watcher as a Pod on the node: k8s/watcher's objects, the image scripts/build-image makes imported
into containerd, the ServiceAccount token the kubelet mounts. The API server listens on loopback and no
kube-proxy runs, so the Pod uses the host's network (for this test only) and is pointed at the API server by
KUBERNETES_SERVICE_HOST/PORT; docs/testing.md says so.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import realnode
import yaml
from cli import run
from dynamo import conditions, dcds, dgds
from kube import ApiError, Kube, eventually
from realnode import container, make_component, spec
from watcher import Watcher

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
WINDOW = "30s"  # --recovery-window: longer than any case's run between crashes (20 s), short enough to wait for
TIMEOUT = 360  # seconds for every case to have shown what it must (about 2 minutes here)


# --- the cases --------------------------------------------------------------------------------------------


LAST_WORDS = "model-failed-to-load"  # what exits-at-once says before it exits: tail shows it from the kubelet
COUNTED = (  # the emptyDir outlives the container's restarts: the fourth run stays up
    "n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/n; "
    "if [ $n -gt 3 ]; then exec sleep 3600; fi; sleep 1; exit 1"
)


@dataclass(frozen=True)
class Case:
    name: str
    template: Callable[[str], dict[str, Any]]  # the Pod spec, given the busybox image
    verdict: str  # "crash-looping" (and holds), "recovers" (once), "restart-loop" (held, never crash-looping)
    container: str = "main"
    exit_code: int = 1


CASES = (
    Case("exits-at-once", lambda i: spec([container(i, f"echo {LAST_WORDS}; exit 1")]), "crash-looping"),
    Case("runs-20s-first", lambda i: spec([container(i, "sleep 20; exit 1")]), "crash-looping"),
    Case(
        "never-ready",
        lambda i: spec(
            [container(i, "sleep 5; exit 1", readinessProbe={"exec": {"command": ["false"]}, "periodSeconds": 1})]
        ),
        "crash-looping",
    ),
    Case("no-readiness-probe", lambda i: spec([container(i, "sleep 3; exit 1")]), "crash-looping"),
    Case(
        "init-exits-1",
        lambda i: spec([container(i, "exec sleep 3600")], initContainers=[container(i, "exit 1", name="init")]),
        "crash-looping",
        container="init",
    ),
    Case(
        "crashes-3-times-then-ready",
        lambda i: spec(
            [container(i, COUNTED, volumeMounts=[{"name": "data", "mountPath": "/data"}])],
            volumes=[{"name": "data", "emptyDir": {}}],
        ),
        "recovers",
    ),
    Case("exits-0", lambda i: spec([container(i, "sleep 1; exit 0")]), "restart-loop", exit_code=0),
    Case(
        "oom-killed",
        lambda i: spec(
            [
                {
                    "name": "main",
                    "image": i,
                    "imagePullPolicy": "Never",
                    # 64 MiB read into one buffer, under a 16 MiB limit: the kernel kills it (137)
                    "command": ["dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"],
                    "resources": {"limits": {"memory": "16Mi"}, "requests": {"memory": "16Mi"}},
                }
            ]
        ),
        "crash-looping",
        exit_code=137,
    ),
)


# --- what a session of the cases collects -----------------------------------------------------------------


@dataclass
class Seen:
    """One case's observations."""

    namespace: str
    states: list[tuple[float, str, str]] = field(default_factory=list)  # (time, DGD state, DGD Stalled status)
    pods: list[tuple[float, str, int, str, int | None]] = field(default_factory=list)  # (t, pod, restarts, state, exit)
    events: list[dict[str, Any]] = field(default_factory=list)
    final_dgd: dict[str, Any] = field(default_factory=dict)
    final_dcd: dict[str, Any] = field(default_factory=dict)
    wait: tuple[int, dict[str, Any]] = (0, {})


@dataclass
class Session:
    seen: dict[str, Seen]
    run_lines: list[dict[str, Any]]
    tail_lines: list[dict[str, Any]]
    replay_lines: list[dict[str, Any]]
    run_writes: list[str]
    wall: float


def of(lines: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """The verdict lines (component and graph) of one namespace; `tail`'s last lines of a crash aside."""
    return [line for line in lines if line["namespace"] == namespace and line["kind"] in ("component", "graph")]


def container_state(status: dict[str, Any]) -> tuple[str, int | None]:
    state = status.get("state", {})
    if "running" in state:
        return "running", None
    if "terminated" in state:
        return "terminated", state["terminated"].get("exitCode")
    return "waiting:" + state.get("waiting", {}).get("reason", ""), None


class Poller(threading.Thread):
    """Reads every graph and Pod twice a second, as a waiter polling the API server would."""

    def __init__(self, kube: Kube, by_namespace: dict[str, tuple[Case, Seen]]) -> None:
        super().__init__(daemon=True)
        self.kube, self.by_namespace = kube, by_namespace
        self.stopping = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                try:
                    self.read()
                except ApiError as exc:  # a 429 or 5xx of a loaded API server: this round is skipped
                    if exc.status < 429:
                        raise
                self.stopping.wait(0.5)
        except BaseException as exc:  # handed to the test
            self.failure = exc

    def read(self) -> None:
        now = time.monotonic()
        for dgd in self.kube.get(dgds("").replace("/namespaces//", "/"))["items"]:
            found = self.by_namespace.get(dgd["metadata"]["namespace"])
            if found:
                status = dgd.get("status", {})
                stalled = conditions(dgd).get("Stalled", {}).get("status", "")
                found[1].states.append((now, status.get("state", ""), stalled))
        for pod in self.kube.get("/api/v1/pods")["items"]:
            found = self.by_namespace.get(pod["metadata"]["namespace"])
            if not found or "deletionTimestamp" in pod["metadata"]:
                continue
            case, seen = found
            key = "initContainerStatuses" if case.container == "init" else "containerStatuses"
            for status in pod.get("status", {}).get(key, []):
                if status["name"] == case.container:
                    state, code = container_state(status)
                    seen.pods.append((now, pod["metadata"]["name"], status["restartCount"], state, code))


def done(case: Case, seen: Seen, tail: list[dict[str, Any]]) -> bool:
    """Whether the case has shown what it must: a crash loop flagged, then the container run again after
    the verdict and down again (so the verdict was tested through a restart); a recovery; or, for exit 0,
    an exit-0 restart loop likewise, read in Stalled (its state stays the operator's)."""
    lines = [line for line in of(tail, seen.namespace) if line["kind"] == "component"]
    states = runs([state for _, state, _ in seen.states])
    if case.verdict == "restart-loop":
        states = runs([stalled for _, _, stalled in seen.states])
        states = ["failed" if s == "True" else s for s in states]
    if case.verdict == "recovers":  # said, and written (the poller read the graph failed, then not)
        return any(not line["crash_looping"] for line in lines) and "failed" in states and states[-1] != "failed"
    if not lines or "failed" not in states:
        return False
    flagged = lines[0]["restarts"]
    return any(restarts > flagged and state != "running" for _, _, restarts, state, _ in seen.pods)


def events_in(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    return kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]  # type: ignore[no-any-return]


def events_written(kube: Kube, case: Case, seen: Seen) -> bool:
    """`run` paces its Events (a token bucket): those the case must have are there."""
    reasons = {(e["regarding"]["kind"], e["reason"]) for e in events_in(kube, seen.namespace)}
    wanted = {
        "crash-looping": {"ComponentCrashLooping"},
        "recovers": {"ComponentCrashLooping", "CrashLoopRecovered"},
        "restart-loop": {"ComponentRestartLooping"},
    }
    kinds = ("DynamoComponentDeployment", "DynamoGraphDeployment")
    return {(kind, reason) for kind in kinds for reason in wanted.get(case.verdict, set())} <= reasons


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[realnode.Node]:
    yield from realnode.started(tmp_path_factory)


@pytest.fixture(scope="module")
def session(node: realnode.Node, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    kube = node.kube()
    kubeconfig = node.plane.kubeconfig
    record = tmp_path_factory.mktemp("realnode-record") / "session.jsonl"
    live = ("-A", "-o", "json", "--recovery-window", WINDOW, "--kubeconfig", str(kubeconfig))
    began = time.monotonic()
    by_namespace: dict[str, tuple[Case, Seen]] = {}
    seen: dict[str, Seen] = {}
    for case in CASES:
        namespace = f"rn-{case.name}-{uuid.uuid4().hex[:6]}"
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        seen[case.name] = Seen(namespace)
        by_namespace[namespace] = (case, seen[case.name])
    with (
        Watcher("run", *live) as runner,
        Watcher("tail", *live) as tail,
        Watcher(
            "record", "-A", "-o", str(record), "--recovery-window", WINDOW, "--kubeconfig", str(kubeconfig)
        ) as recorder,
    ):
        for w in (runner, tail, recorder):
            w.wait_synced(60)
        poller = Poller(kube, by_namespace)
        poller.start()
        for case in CASES:
            make_component(kube, seen[case.name].namespace, case.template(node.busybox))
        waits = {
            case.name: realnode.wait_for_graph(seen[case.name].namespace, kubeconfig, "5m", "--recovery-window", WINDOW)
            for case in CASES
        }
        try:

            def all_done() -> bool:
                assert poller.failure is None, poller.failure
                lines = [json.loads(line) for line in tail.snapshot(tail.out)]
                return all(done(case, seen[case.name], lines) for case in CASES)

            eventually(all_done, TIMEOUT, "every case shown", step=1)
            eventually(
                lambda: all(events_written(kube, case, seen[case.name]) for case in CASES), 60, "the Events", step=1
            )
            for name, process in waits.items():
                out, err = process.communicate(timeout=330)
                seen[name].wait = (process.returncode, json.loads(out) if out.strip() else {"stderr": err})
        finally:
            poller.stopping.set()
            poller.join(timeout=10)
            for process in waits.values():
                if process.poll() is None:
                    process.kill()
                    process.communicate()
        time.sleep(2)  # the last writes and Events land
        run_lines = [json.loads(line) for line in runner.snapshot(runner.out)]
        tail_lines = [json.loads(line) for line in tail.snapshot(tail.out)]
        run_writes = runner.writes()
    assert runner.process.returncode == 0, runner.stderr()
    assert recorder.process.returncode == 0, recorder.stderr()
    for case in CASES:
        s = seen[case.name]
        s.final_dgd = kube.get(f"{dgds(s.namespace)}/llm")
        s.final_dcd = kube.get(f"{dcds(s.namespace)}/llm-worker")
        s.events = events_in(kube, s.namespace)
    replayed = run("replay", "-o", "json", "--recovery-window", WINDOW, str(record))
    assert replayed.returncode == 0, replayed.stderr
    replay_lines = [json.loads(line) for line in replayed.stdout.decode().splitlines()]
    wall = time.monotonic() - began
    print(f"\nreal-node cases observed in {wall:.0f}s:", file=sys.stderr)
    for case in CASES:  # what each case did, for the log of a run that fails
        s = seen[case.name]
        restarts = max((r for _, _, r, _, _ in s.pods), default=0)
        said = [
            f"{line['kind'][0]}:{line.get('crash_looping', line.get('failed'))}:{line.get('restarts')}"
            for line in of(tail_lines, s.namespace)
        ]
        print(
            f"  {case.name}: restarts {restarts}; DGD {runs([st for _, st, _ in s.states])}; tail {said}; "
            f"wait {s.wait[0]}",
            file=sys.stderr,
        )
    # the cases' Pods go before the next test uses the node; the fixed graph stays for test_wait_after
    for case in CASES:
        if case.verdict != "recovers" and case.name != "runs-20s-first":
            kube.delete(f"/api/v1/namespaces/{seen[case.name].namespace}")
    yield Session(seen, run_lines, tail_lines, replay_lines, run_writes, wall)


# --- the verdicts -----------------------------------------------------------------------------------------


def summary(lines: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What must agree between run, tail and replay: each line's kind, verdict and finding."""
    return [
        (
            line["kind"],
            line.get("crash_looping", line.get("failed")),
            line.get("container"),
            line.get("restarts"),
            line.get("exit_code"),
            line.get("diagnosis"),
        )
        for line in lines
    ]


def runs(states: list[str]) -> list[str]:
    """A series with its repeats folded: ["pending", "failed", "failed"] -> ["pending", "failed"]."""
    folded: list[str] = []
    for state in states:
        if not folded or folded[-1] != state:
            folded.append(state)
    return folded


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_verdict_on_a_real_kubelets_statuses(session: Session, case: Case) -> None:
    s = session.seen[case.name]
    lines = of(session.tail_lines, s.namespace)
    components = [line for line in lines if line["kind"] == "component"]
    graphs = [line for line in lines if line["kind"] == "graph"]
    dgd_states = runs([state for _, state, _ in s.states])
    stalled = runs([status for _, _, status in s.states if status])
    recovered_events = [e for e in s.events if e["reason"] == "CrashLoopRecovered"]
    code, waited = s.wait
    if case.verdict == "restart-loop":
        # restarted with backoff after exit 0: not a crash loop by the rule (the graph's state stays the
        # operator's), but an exit-0 restart loop, Stalled on both and held between restarts like one
        assert components and not any(line["crash_looping"] for line in components), components
        assert {line.get("diagnosis") for line in components} == {"restart_loop"}, components
        first = components[0]
        assert (first["container"], first["exit_code"], first["dcd"]) == ("main", 0, "llm-worker"), first
        assert all(line["pod"] for line in components), components  # never a recovery line
        assert "failed" not in dgd_states, dgd_states
        assert stalled == ["True"], stalled
        assert conditions(s.final_dcd)["Stalled"]["reason"] == "ContainerRestartLooping"
        assert conditions(s.final_dcd)["Available"]["reason"] != "ContainerCrashLooping"
        assert conditions(s.final_dgd)["Stalled"]["reason"] == "ComponentRestartLooping"
        assert not [
            e for e in s.events if e["reason"] in ("ComponentCrashLooping", "CrashLoopRecovered", "ComponentRecovered")
        ], s.events
        assert code == 1 and waited["result"] == "failed", waited
        (finding,) = waited["graphs"][0]["crash_looping"]
        assert (finding["diagnosis"], finding["container"], finding["exit_code"]) == ("restart_loop", "main", 0)
        assert any(r > first["restarts"] for _, _, r, _, _ in s.pods), s.pods
        return
    first = components[0]
    assert (first["crash_looping"], first["dcd"], first["container"], first["exit_code"]) == (
        True,
        "llm-worker",
        case.container,
        case.exit_code,
    ), first
    assert first["restarts"] >= 2
    assert code == 1 and waited["result"] == "failed", waited
    (finding,) = waited["graphs"][0]["crash_looping"]
    assert (finding["component"], finding["container"], finding["exit_code"]) == (
        "worker",
        case.container,
        case.exit_code,
    )
    if case.verdict == "crash-looping":
        # held through every restart: never a RECOVERED line, the graph never left failed, Stalled never False
        assert all(line["crash_looping"] for line in components), components
        assert all(line["failed"] for line in graphs), graphs
        assert dgd_states[-1] == "failed" and dgd_states.count("failed") == 1, dgd_states
        assert stalled[-1] == "True" and stalled.count("True") == 1, stalled
        assert recovered_events == [], recovered_events
        assert any(e["reason"] == "ComponentCrashLooping" for e in s.events), s.events
        # the kubelet did run the container again after the verdict (the moment the rule alone clears)
        restarts_then = first["restarts"]
        assert any(r > restarts_then for _, _, r, _, _ in s.pods), s.pods
        available = conditions(s.final_dcd)["Available"]
        assert (available["status"], available["reason"]) == ("False", "ContainerCrashLooping")
        assert conditions(s.final_dcd)["Stalled"]["status"] == "True"
        assert s.final_dgd["status"]["state"] == "failed"
        assert conditions(s.final_dgd)["Stalled"]["reason"] == "ComponentCrashLooping"
        if case.name == "oom-killed":  # named as such, with its memory limit (pipeline.diagnoses)
            assert conditions(s.final_dcd)["Stalled"]["message"].endswith("(OOMKilled, memory limit 16Mi)"), s.final_dcd
        # every write of the DGD said failed: the status was never cleared in between
        writes = [w for w in session.run_writes if f"DynamoGraphDeployment {s.namespace}/llm:" in w]
        assert writes and all("state=failed" in w for w in writes), writes
    else:
        # crashes three times, then stays up: crash-looping once, recovered once, after the window
        assert [line["crash_looping"] for line in components][-1] is False
        assert [line["crash_looping"] for line in components].count(False) == 1, components
        assert runs([str(line["crash_looping"]) for line in components]) == ["True", "False"], components
        assert runs([str(line["failed"]) for line in graphs]) == ["True", "False"], graphs
        assert dgd_states.count("failed") == 1 and dgd_states[-1] != "failed", dgd_states
        assert stalled == ["True", "False"], stalled
        assert len({e["regarding"]["kind"] for e in recovered_events}) == 2, recovered_events


def test_tail_shows_a_crashed_containers_last_lines_read_from_the_real_kubelet(session: Session) -> None:
    namespace = session.seen["exits-at-once"].namespace
    logs = [line for line in session.tail_lines if line["kind"] == "logs" and line["namespace"] == namespace]
    assert logs, "no last lines from tail"
    assert all(line["container"] == "main" and line["lines"] == [LAST_WORDS] for line in logs), logs


def test_run_and_tail_say_the_same_and_a_replay_of_the_record_says_it_again(session: Session) -> None:
    for case in CASES:
        namespace = session.seen[case.name].namespace
        tail = summary(of(session.tail_lines, namespace))
        assert summary(of(session.run_lines, namespace)) == tail, case.name
        assert summary(of(session.replay_lines, namespace)) == tail, case.name


def test_wait_after_the_session_reads_the_fixed_graph_ready_and_the_crash_loop_failed(
    session: Session, node: realnode.Node
) -> None:
    fixed = session.seen["crashes-3-times-then-ready"].namespace
    done = run(
        "wait", "dgd/llm", "-n", fixed, "--timeout", "60s", "-o", "json", "--kubeconfig", str(node.plane.kubeconfig)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    looping = session.seen["runs-20s-first"].namespace
    done = run(
        "wait", "dgd/llm", "-n", looping, "--timeout", "60s", "-o", "json", "--kubeconfig", str(node.plane.kubeconfig)
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert json.loads(done.stdout)["graphs"][0]["state"] == "failed"
    kube = node.kube()
    for namespace in (fixed, looping):
        kube.delete(f"/api/v1/namespaces/{namespace}")


# --- the watcher as a Pod on the node ---------------------------------------------------------------------

WATCHER = ROOT / "k8s" / "watcher"


def watcher_objects(image: str, api_port: int, http_port: int) -> list[dict[str, Any]]:
    """k8s/watcher's objects as `kubectl apply -k k8s/watcher` sends them (namespace crashwatch), with the
    test's changes: the image imported into containerd (never pulled), one replica, and the host's network,
    since the API server listens on loopback and no kube-proxy serves the kubernetes Service here."""
    kustomization = yaml.safe_load((WATCHER / "kustomization.yaml").read_text())
    docs = [doc for name in kustomization["resources"] for doc in yaml.safe_load_all((WATCHER / name).read_text())]
    for doc in docs:
        if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            doc["metadata"]["namespace"] = kustomization["namespace"]
        if doc["kind"] != "Deployment":
            continue
        doc["spec"]["replicas"] = 1
        pod = doc["spec"]["template"]["spec"]
        pod["hostNetwork"] = True
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"
        (main,) = pod["containers"]
        main["image"] = image
        main["imagePullPolicy"] = "Never"
        args = main["args"]
        args[args.index("--http-address") + 1] = f"127.0.0.1:{http_port}"
        main["args"] = [*args, "--recovery-window", WINDOW]
        main["ports"] = [{"name": "http", "containerPort": http_port}]
        for probe in ("readinessProbe", "livenessProbe"):
            main[probe]["httpGet"]["host"] = "127.0.0.1"
        main["env"] = [
            {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
            {"name": "KUBERNETES_SERVICE_PORT", "value": str(api_port)},
        ]
    return docs


def collection(doc: dict[str, Any]) -> str:
    group, _, version = doc["apiVersion"].rpartition("/")
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    plural = {"PodDisruptionBudget": "poddisruptionbudgets"}.get(doc["kind"], doc["kind"].lower() + "s")
    namespace = doc["metadata"].get("namespace")
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"


@pytest.fixture(scope="module")
def watcher_image(node: realnode.Node, tmp_path_factory: pytest.TempPathFactory) -> str:
    return realnode.import_watcher_image(node, tmp_path_factory)


def test_the_watcher_pod_marks_a_real_crash_loop_and_clears_it_after_the_fix(
    node: realnode.Node, watcher_image: str
) -> None:
    kube = node.kube()
    namespace = f"rn-watched-{uuid.uuid4().hex[:6]}"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    api_port = int(node.plane.url.rsplit(":", 1)[1])
    docs = watcher_objects(watcher_image, api_port, realnode._free_port("127.0.0.1"))
    created: list[str] = []
    try:
        for doc in docs:
            kube.create(collection(doc), doc)
            created.append(f"{collection(doc)}/{doc['metadata']['name']}")
        pods = "/api/v1/namespaces/crashwatch/pods"

        def watcher_pod() -> dict[str, Any]:
            # none yet: StopIteration, which eventually() reads as "not yet"
            live = (p for p in kube.get(pods)["items"] if "deletionTimestamp" not in p["metadata"])
            return next(live)

        def ready() -> bool:
            return conditions(watcher_pod()).get("Ready", {}).get("status") == "True"

        eventually(ready, 120, "the watcher Pod Ready (every watch listed, /readyz through the kubelet's probe)")
        pod = watcher_pod()
        # the token is the one the kubelet mounts: the ServiceAccount admission plugin's projected volume
        assert pod["spec"]["serviceAccountName"] == "crashwatch"
        assert any(v["name"].startswith("kube-api-access-") for v in pod["spec"]["volumes"])

        make_component(kube, namespace, spec([container(node.busybox, "exit 1")]))

        def dgd() -> dict[str, Any]:
            return kube.get(f"{dgds(namespace)}/llm")  # type: ignore[no-any-return]

        def dcd() -> dict[str, Any]:
            return kube.get(f"{dcds(namespace)}/llm-worker")  # type: ignore[no-any-return]

        eventually(
            lambda: (
                dgd()["status"]["state"] == "failed"
                and conditions(dcd())["Available"]["reason"] == "ContainerCrashLooping"
            ),
            120,
            "the crash loop written by the watcher Pod",
        )
        assert conditions(dgd())["Stalled"]["status"] == "True"
        # the writes were the ServiceAccount's, through its mounted token
        username = "system:serviceaccount:crashwatch:crashwatch"
        patched = {
            (e["objectRef"]["resource"], e["objectRef"].get("subresource"))
            for e in node.plane.audit_events(username)
            if e["verb"] == "patch" and e["responseStatus"]["code"] == 200
        }
        assert {("dynamographdeployments", "status"), ("dynamocomponentdeployments", "status")} <= patched
        # the fix, rolled out: a command that stays up; the old Pod's replacement clears at once
        kube.merge_patch(
            f"/apis/apps/v1/namespaces/{namespace}/deployments/llm-worker",
            {"spec": {"template": {"spec": {"containers": [container(node.busybox, "exec sleep 3600")]}}}},
        )
        eventually(
            lambda: (
                dgd()["status"]["state"] != "failed"
                and conditions(dgd())["Stalled"]["status"] == "False"
                and conditions(dcd())["Stalled"]["status"] == "False"
            ),
            120,
            "the recovery written by the watcher Pod",
        )
        # its output, read through the API server from the kubelet (InternalIP): the crash loop and recovery
        name = watcher_pod()["metadata"]["name"]
        log = kube.get_raw(f"{pods}/{name}/log?container=crashwatch")
        assert log[0] == 200, log
        lines = [json.loads(line) for line in log[1].decode().splitlines() if line.startswith('{"kind":')]
        mine = [line for line in lines if line["namespace"] == namespace]
        for kind, key in (("component", "crash_looping"), ("graph", "failed")):
            said = runs([str(line[key]) for line in mine if line["kind"] == kind])
            assert said == ["True", "False"], (kind, mine)
        assert watcher_pod()["status"]["containerStatuses"][0]["restartCount"] == 0
    finally:
        for path in reversed(created):
            if "/namespaces/" not in path or path.endswith("/namespaces/crashwatch"):
                try:
                    kube.delete(path)
                except ApiError as exc:
                    assert exc.status == 404
        kube.delete(f"/api/v1/namespaces/{namespace}")
