"""What kstatus and Helm 4's `--wait` make of the status `crashwatch run` writes, on the real control plane.

kstatus (sigs.k8s.io/cli-utils; Helm 4.3 uses the same rules through its fork, github.com/fluxcd/cli-utils)
is how Helm 4, Flux and others decide that an object is done: Current, InProgress or Failed. A
crash-looping Dynamo graph must read as Failed (crashwatch's `Stalled=True`), so that `helm install
--wait` gives up at once instead of at its timeout, and as Current again once the operator reports it
ready. The binaries are the real ones, built from the Go module proxy by scripts/build-waiters: `helm`
(helm.sh/helm/v4) and `kstatus`, a few lines around `status.Compute`.
No operator or kubelet runs here: the tests play them, as test_watcher.py does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import envtest
import pytest
import yaml
from dynamo import adopted_by_helm, conditions, dcds, dgds, labelled_pod, make_graph
from helm import Helm
from kube import Kube, crash_loop, crash_status, make_ready, set_pod_status
from waiters_bin import waiters_bin
from watcher import Watcher, kubeconfig_args

pytestmark = pytest.mark.e2e

CHART = Path(__file__).resolve().parent / "charts" / "dynamo-graph"
GRAPH, DCD, RELEASE = "llm", "llm-worker", "llm"


@pytest.fixture(scope="module")
def waiters() -> Path:
    return waiters_bin()


# --- kstatus --------------------------------------------------------------------------------------------


def kstatus(waiters: Path, *objects: dict[str, Any]) -> list[dict[str, str]]:
    """kstatus's verdict on each object, in order: {"status": "Failed", "message": "..."}."""
    done = subprocess.run(
        [str(waiters / "kstatus")], input=json.dumps(list(objects)).encode(), capture_output=True, timeout=30
    )
    assert done.returncode == 0, done.stderr.decode()
    verdicts = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert len(verdicts) == len(objects)
    return verdicts


def graph_and_component(kube: Kube, namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return kube.get(f"{dgds(namespace)}/{GRAPH}"), kube.get(f"{dcds(namespace)}/{DCD}")


def stalled(obj: dict[str, Any], status: str, reason: str) -> bool:
    condition = conditions(obj).get("Stalled", {})
    return condition.get("status") == status and condition.get("reason") == reason


# --- the crash loop and its end, as crashwatch writes them -------------------------------------------------


def run_watcher(control_plane: envtest.ControlPlane, namespace: str) -> Watcher:
    return Watcher("run", "-n", namespace, "-o", "json", *kubeconfig_args(control_plane.kubeconfig))


def wait_crash_loop_written(kube: Kube, namespace: str, timeout: float = 15) -> None:
    kube.wait_for(
        f"{dcds(namespace)}/{DCD}",
        lambda dcd: (
            conditions(dcd)["Available"]["reason"] == "ContainerCrashLooping"
            and stalled(dcd, "True", "ContainerCrashLooping")
        ),
        timeout,
    )
    kube.wait_for(
        f"{dgds(namespace)}/{GRAPH}",
        lambda dgd: dgd["status"].get("state") == "failed" and stalled(dgd, "True", "ComponentCrashLooping"),
        timeout,
    )


def wait_cleared(kube: Kube, namespace: str, reason: str = "NoCrashLoop", timeout: float = 15) -> None:
    """Until crashwatch has withdrawn its failure from both objects, `Stalled=False` with `reason`:
    NoCrashLoop when the component recovered, SpecReplaced when a spec change replaced its Pods."""
    kube.wait_for(
        f"{dcds(namespace)}/{DCD}",
        lambda dcd: conditions(dcd)["Available"]["reason"] != "ContainerCrashLooping" and stalled(dcd, "False", reason),
        timeout,
    )
    kube.wait_for(
        f"{dgds(namespace)}/{GRAPH}",
        lambda dgd: dgd["status"].get("state") != "failed" and stalled(dgd, "False", reason),
        timeout,
    )


def fix(kube: Kube, namespace: str) -> None:
    """A new Pod of the worker becomes Ready; the crash-looping one goes."""
    labelled_pod(kube, namespace, f"{DCD}-1", GRAPH, "worker")
    make_ready(kube, namespace, f"{DCD}-1")
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/{DCD}-0", grace=0)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _replace_condition(kube: Kube, path: str, obj: dict[str, Any], new: dict[str, Any], **status: Any) -> None:
    """One condition replaced, the others kept (a merge patch replaces the whole list); the object's
    resourceVersion as precondition, so that a concurrent write fails the test rather than being lost."""
    kept = [new if c["type"] == new["type"] else c for c in obj["status"]["conditions"]]
    if new["type"] not in conditions(obj):
        kept.append(new)
    patch = {
        "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
        "status": {**status, "conditions": kept},
    }
    kube.merge_patch(f"{path}/status", patch)


def operator_reports_ready(kube: Kube, namespace: str) -> None:
    """The Dynamo operator's word once the component's Deployment is ready, at the current generation:
    DCD Available=True/DeploymentReady, DGD successful with Ready=True/all_resources_are_ready."""
    dgd, dcd = graph_and_component(kube, namespace)
    available = conditions(dcd)["Available"]
    generation = dcd["metadata"]["generation"]
    if (available["status"], available["reason"], available.get("observedGeneration")) != (
        "True",
        "DeploymentReady",
        generation,
    ):
        ready = {
            "type": "Available",
            "status": "True",
            "reason": "DeploymentReady",
            "message": "Deployment is ready",
            "lastTransitionTime": _now(),
            "observedGeneration": generation,
        }
        _replace_condition(kube, f"{dcds(namespace)}/{DCD}", dcd, ready)
    generation = dgd["metadata"]["generation"]
    ready = conditions(dgd)["Ready"]
    if (dgd["status"].get("state"), dgd["status"].get("observedGeneration"), ready["status"], ready["reason"]) != (
        "successful",
        generation,
        "True",
        "all_resources_are_ready",
    ):
        new = {
            "type": "Ready",
            "status": "True",
            "reason": "all_resources_are_ready",
            "message": "All resources are ready",
            "lastTransitionTime": _now(),
            "observedGeneration": generation,
        }
        _replace_condition(
            kube, f"{dgds(namespace)}/{GRAPH}", dgd, new, state="successful", observedGeneration=generation
        )


def test_kstatus_reads_a_crash_loop_as_failed_and_the_operators_ready_after_the_fix_as_current(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str, waiters: Path
) -> None:
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, f"{DCD}-0", GRAPH, "worker")
    # before: the operator's pending graph is InProgress (Ready=False); the DCD says nothing kstatus
    # reads (Available is not one of its conditions), so it is Current, as any custom resource is
    assert [v["status"] for v in kstatus(waiters, *graph_and_component(kube, namespace))] == ["InProgress", "Current"]
    with run_watcher(control_plane, namespace) as w:
        w.wait_synced()
        crash_loop(kube, namespace, f"{DCD}-0")
        wait_crash_loop_written(kube, namespace)
        dgd, dcd = graph_and_component(kube, namespace)
        graph_verdict, component_verdict = kstatus(waiters, dgd, dcd)
        finding = f"container main of Pod {DCD}-0 restarted 2 times and is down after exit code 1"
        for obj, verdict in ((dgd, graph_verdict), (dcd, component_verdict)):
            condition = conditions(obj)["Stalled"]
            assert condition["observedGeneration"] == obj["metadata"]["generation"]
            assert finding in condition["message"]
            assert verdict == {"status": "Failed", "message": condition["message"]}
        fix(kube, namespace)
        wait_cleared(kube, namespace)
        # crashwatch cleared the failure; the graph waits for the operator again
        assert [v["status"] for v in kstatus(waiters, *graph_and_component(kube, namespace))] == [
            "InProgress",
            "Current",
        ]
        operator_reports_ready(kube, namespace)
        time.sleep(1)  # room for a wrong write from crashwatch, were it to make one
        dgd, dcd = graph_and_component(kube, namespace)
        assert kstatus(waiters, dgd, dcd) == [
            {"status": "Current", "message": "Resource is Ready"},
            {"status": "Current", "message": "Resource is current"},
        ]
        assert stalled(dgd, "False", "NoCrashLoop") and stalled(dcd, "False", "NoCrashLoop")
        assert (dgd["status"]["state"], conditions(dcd)["Available"]["status"]) == ("successful", "True")


# --- Helm 4 --------------------------------------------------------------------------------------------


def wait_waiting(process: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    """Until helm has applied the chart and watches its objects (its debug log says so)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "waiting for resources" in log.read_text(errors="replace"):
            return
        assert process.poll() is None, f"helm exited with {process.returncode}:\n{log.read_text(errors='replace')}"
        time.sleep(0.05)
    raise AssertionError(f"helm did not start waiting in {timeout}s:\n{log.read_text(errors='replace')}")


def first_seen(checks: dict[str, Callable[[], bool]], timeout: float = 60) -> dict[str, float]:
    """The monotonic time at which each check first held, polling all of them every 50 ms."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(seen) < len(checks) and time.monotonic() < deadline:
        for name, check in checks.items():
            if name not in seen and check():
                seen[name] = time.monotonic()
        time.sleep(0.05)
    assert len(seen) == len(checks), f"not seen in {timeout}s: {set(checks) - set(seen)}"
    return seen


def test_helm_install_wait_fails_within_seconds_of_the_crash_loop_and_the_upgrade_with_the_fix_succeeds(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str, waiters: Path, tmp_path: Path
) -> None:
    helm = Helm(tmp_path, control_plane.kubeconfig, namespace)
    rendered = helm.run("template", RELEASE, str(CHART))
    assert rendered.returncode == 0, rendered.stderr
    (manifest,) = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    assert (manifest["kind"], manifest["metadata"]["name"]) == ("DynamoGraphDeployment", GRAPH)
    # A custom resource with no status at all is Current to kstatus, so a DGD that helm creates would
    # let `--wait` succeed before the operator's first status write. Here the DGD exists already, with
    # the chart's spec, the operator's pending status at its generation, and Helm's ownership metadata:
    # `helm install` adopts it (pkg/action/validate.go, existingResourceConflict) and waits on it.
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, f"{DCD}-0", GRAPH, "worker")
    adopted_by_helm(kube, namespace, manifest, RELEASE)
    path = f"{dgds(namespace)}/{GRAPH}"
    generation = kube.get(path)["metadata"]["generation"]

    with run_watcher(control_plane, namespace) as w:
        w.wait_synced()
        with helm.start("install", "install", RELEASE, str(CHART), "--wait", "--timeout", "5m") as (install, log):
            wait_waiting(install, log)
            started = time.monotonic()
            time.sleep(1)
            assert install.poll() is None, log.read_text()  # waiting on the pending graph, as it should
            dgd = kube.get(path)
            assert dgd["metadata"]["generation"] == generation  # adopted with its spec unchanged
            waited = log.read_text(errors="replace")
            assert f'msg="Patched resource" namespace={namespace} name={GRAPH}' in waited  # adopted, not created
            assert "kind=DynamoGraphDeployment expectedStatus=Current actualStatus=InProgress" in waited
            assert kstatus(waiters, dgd)[0]["status"] == "InProgress"
            crash_loop(kube, namespace, f"{DCD}-0")
            crashed = time.monotonic()
            seen = first_seen(
                {
                    "marked": lambda: stalled(kube.get(path), "True", "ComponentCrashLooping"),
                    "exited": lambda: install.poll() is not None,
                }
            )
        output = log.read_text(errors="replace")
        stall = conditions(kube.get(path))["Stalled"]
        print(
            f"\nhelm install --wait --timeout 5m: exited {install.returncode} {seen['exited'] - crashed:.2f}s after "
            f"the crash loop, {seen['exited'] - seen['marked']:+.2f}s after crashwatch's mark was seen "
            f"({seen['exited'] - started:.1f}s of waiting in all)",
            file=sys.stderr,
        )
        assert install.returncode != 0, output
        assert seen["marked"] <= seen["exited"]  # it gave up on crashwatch's word, not before
        assert seen["exited"] - crashed < 15, output  # not at its 5 min timeout
        assert f"DynamoGraphDeployment/{namespace}/{GRAPH} not ready. status: Failed" in output
        assert stall["message"] in output
        status = json.loads(helm.run("status", RELEASE, "-o", "json").stdout)
        assert (status["info"]["status"], status["version"]) == ("failed", 1)

        # the fix ships as a chart upgrade. kstatus compares only status.observedGeneration (the
        # operator's) with the generation, before it looks at Stalled, and ignores the conditions' own
        # observedGeneration: the new spec is InProgress, not failed by the previous spec's Stalled=True
        # (without status.observedGeneration the upgrade would fail at once)
        fixed = ("--set", "image=registry.invalid/worker:2", "--wait", "--timeout", "5m")
        with helm.start("upgrade", "upgrade", RELEASE, str(CHART), *fixed) as (upgrade, log):
            wait_waiting(upgrade, log)
            dgd = kube.get(path)
            assert dgd["metadata"]["generation"] == generation + 1
            assert kstatus(waiters, dgd)[0] == {
                "status": "InProgress",
                "message": f"DynamoGraphDeployment generation is {generation + 1}, "
                f"but latest observed generation is {generation}",
            }
            fix(kube, namespace)
            # the failure ends with the upgrade that replaced the crash-looping Pod's spec, not by recovering
            wait_cleared(kube, namespace, "SpecReplaced")
            time.sleep(1)
            assert upgrade.poll() is None, log.read_text()  # the graph is not ready until the operator says so
            operator_reports_ready(kube, namespace)
            reported = time.monotonic()
            seen = first_seen({"exited": lambda: upgrade.poll() is not None})
        output = log.read_text(errors="replace")
        print(
            f"helm upgrade --wait: exited {upgrade.returncode} {seen['exited'] - reported:.2f}s after the "
            f"operator's Ready=True",
            file=sys.stderr,
        )
        assert upgrade.returncode == 0, output
        assert seen["exited"] - reported < 15, output
    status = json.loads(helm.run("status", RELEASE, "-o", "json").stdout)
    assert (status["info"]["status"], status["version"]) == ("deployed", 2)
    dgd = kube.get(path)
    assert dgd["spec"]["services"]["worker"]["extraPodSpec"]["mainContainer"]["image"] == "registry.invalid/worker:2"
    assert kstatus(waiters, dgd)[0]["status"] == "Current"


def test_the_upgrade_with_the_fix_succeeds_while_the_old_pod_crash_loops_on_at_the_new_generation(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str, waiters: Path, tmp_path: Path
) -> None:
    """The operator says it observed the new generation at once, while the Pod of the old spec still
    crash-loops on its way out (the real operator keeps the old worker generation until the new one is
    Ready). kstatus then reads `Stalled` at the new generation, so the old Pod's crashes must not count
    there: crashwatch withdraws its mark as it sees the spec change replace the worker, and the upgrade
    waits for the new Pod instead of failing on the old one."""
    helm = Helm(tmp_path, control_plane.kubeconfig, namespace)
    rendered = helm.run("template", RELEASE, str(CHART))
    (manifest,) = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, f"{DCD}-0", GRAPH, "worker")
    adopted_by_helm(kube, namespace, manifest, RELEASE)
    path = f"{dgds(namespace)}/{GRAPH}"
    installed = helm.run("install", RELEASE, str(CHART))
    assert installed.returncode == 0, installed.stderr

    with run_watcher(control_plane, namespace) as w:
        w.wait_synced()
        crash_loop(kube, namespace, f"{DCD}-0")
        wait_crash_loop_written(kube, namespace)
        kube.wait_for(path, lambda dgd: stalled(dgd, "True", "ComponentCrashLooping"), 15)
        fixed = ("--set", "image=registry.invalid/worker:2", "--wait", "--timeout", "5m")
        with helm.start("upgrade", "upgrade", RELEASE, str(CHART), *fixed) as (upgrade, log):
            wait_waiting(upgrade, log)
            # the old Pod still crash-loops, yet the mark is withdrawn: its evidence is of the old spec
            kube.wait_for(path, lambda dgd: conditions(dgd)["Stalled"]["status"] == "False", 15)
            dgd = kube.get(path)
            generation = dgd["metadata"]["generation"]
            pending = {
                "type": "Ready",
                "status": "False",
                "reason": "some_resources_are_not_ready",
                "message": "Resources not ready: llm-worker: not ready",
                "lastTransitionTime": _now(),
                "observedGeneration": generation,
            }
            _replace_condition(kube, path, dgd, pending, state="pending", observedGeneration=generation)
            set_pod_status(kube, namespace, f"{DCD}-0", crash_status(3))  # it crashes on, on its way out
            time.sleep(1)  # time for a mark, were the old Pod's crash to count
            dgd = kube.get(path)
            assert conditions(dgd)["Stalled"]["status"] == "False"
            assert kstatus(waiters, dgd)[0]["status"] != "Failed"
            fix(kube, namespace)  # the new Pod is Ready, the old one goes
            operator_reports_ready(kube, namespace)
            first_seen({"exited": lambda: upgrade.poll() is not None})
        output = log.read_text(errors="replace")
        assert upgrade.returncode == 0, output
        said = [json.loads(line) for line in w.snapshot(w.out)]
    replaced = [s for s in said if s.get("kind") == "component" and "a change that replaces" in s.get("message", "")]
    assert replaced, said
    status = json.loads(helm.run("status", RELEASE, "-o", "json").stdout)
    assert (status["info"]["status"], status["version"]) == ("deployed", 2)
