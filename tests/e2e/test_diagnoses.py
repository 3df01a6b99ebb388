"""The diagnoses beside the crash loop on the real control plane: `crashwatch wait` fails on them with
read rights alone, `run` writes `Stalled=True` with a reason naming each on the DCD and the DGD (which
kstatus, that is Helm 4 and Flux, reads as Failed) and clears it when it is fixed.

No kubelet or scheduler runs here: the tests write the Pod statuses they would (a container waiting with
ImagePullBackOff or ErrImageNeverPull, PodScheduled=False with reason Unschedulable).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import envtest
import pytest
import yaml
from builders import container, pod_status
from cli import run
from dynamo import conditions, dcds, dgds, labelled_pod, make_graph
from kube import Kube, crash_status, make_ready, set_pod_status
from waiters_bin import waiters_bin
from watcher import Watcher, kubeconfig_args

pytestmark = pytest.mark.e2e

GRAPH, DCD = "llm", "llm-worker"


def waiting_status(reason: str, message: str) -> dict[str, Any]:
    main = container(exit_code=None, waiting=reason, backoff=message, realistic=True)
    return pod_status(phase="Pending", ready=False, containers=[main])


def unschedulable_status(since: str) -> dict[str, Any]:
    return {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                "lastProbeTime": None,
                "lastTransitionTime": since,
            }
        ],
    }


def stalled(obj: dict[str, Any], status: str, reason: str) -> bool:
    condition = conditions(obj).get("Stalled", {})
    return condition.get("status") == status and condition.get("reason") == reason


def test_wait_fails_at_once_on_an_image_that_is_never_pulled(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, f"{DCD}-0", GRAPH, "worker")
    never = 'Container image "registry.invalid/worker:1" is not present with pull policy of Never'
    set_pod_status(kube, namespace, f"{DCD}-0", waiting_status("ErrImageNeverPull", never))
    result = run("wait", "dgd/llm", "-n", namespace, "-o", "json", "--kubeconfig", str(control_plane.kubeconfig))
    assert result.returncode == 1, result.stderr
    (graph,) = json.loads(result.stdout)["graphs"]
    assert (graph["verdict"], graph["reason"]) == ("failed", "component_image_pull_failing")
    (entry,) = graph["crash_looping"]
    assert (entry["diagnosis"], entry["reason"]) == ("image_pull_failing", "ErrImageNeverPull")
    assert never in entry["message"]


def test_wait_fails_on_an_unschedulable_pod_once_its_grace_has_passed(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, f"{DCD}-0", GRAPH, "worker")
    set_pod_status(kube, namespace, f"{DCD}-0", unschedulable_status("2026-01-01T00:00:00Z"))
    args = ("wait", "dgd/llm", "-n", namespace, "--kubeconfig", str(control_plane.kubeconfig))
    result = run(*args, "--timeout", "0")  # its default 15m grace has passed long since
    assert result.returncode == 1, result.stderr
    assert result.stdout.decode().startswith(f"{namespace}/llm  FAILED  component_unschedulable: Components failing: ")
    assert "Insufficient nvidia.com/gpu" in result.stdout.decode()
    # an autoscaler could still bring a node: within its grace, the graph is only waiting
    set_pod_status(kube, namespace, f"{DCD}-0", unschedulable_status("2099-01-01T00:00:00Z"))
    result = run(*args, "--timeout", "0")
    assert result.returncode == 124, result.stderr


def test_run_stalls_the_graph_on_a_pull_that_keeps_failing_and_clears_it_when_fixed(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str
) -> None:
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, f"{DCD}-0", GRAPH, "worker")
    args = (
        "run",
        "-n",
        namespace,
        "-o",
        "json",
        "--image-pull-grace",
        "2s",
        *kubeconfig_args(control_plane.kubeconfig),
    )
    with Watcher(*args) as w:
        w.wait_synced()
        pull = 'Back-off pulling image "registry.invalid/worker:1"'
        set_pod_status(kube, namespace, f"{DCD}-0", waiting_status("ImagePullBackOff", pull))
        dcd = kube.wait_for(f"{dcds(namespace)}/{DCD}", lambda o: stalled(o, "True", "ImagePullFailing"), 20)
        dgd = kube.wait_for(f"{dgds(namespace)}/{GRAPH}", lambda o: stalled(o, "True", "ComponentImagePullFailing"))
        # the operator's verdicts are left alone: upstream fails a graph for crash loops only
        assert conditions(dcd)["Available"]["reason"] != "ImagePullFailing"
        assert dgd["status"]["state"] == "pending"
        assert pull in conditions(dgd)["Stalled"]["message"]
        kstatus = subprocess_kstatus(waiters_bin(), dgd, dcd)
        assert [v["status"] for v in kstatus] == ["Failed", "Failed"]
        make_ready(kube, namespace, f"{DCD}-0")  # the image came: the container runs and is Ready
        kube.wait_for(f"{dcds(namespace)}/{DCD}", lambda o: stalled(o, "False", "Recovered"))
        kube.wait_for(f"{dgds(namespace)}/{GRAPH}", lambda o: stalled(o, "False", "Recovered"))
    lines = [json.loads(line) for line in w.stdout().splitlines()]
    components = [(line["crash_looping"], line.get("diagnosis")) for line in lines if line["kind"] == "component"]
    assert components == [(False, "image_pull_failing"), (False, None)]


def subprocess_kstatus(waiters: Path, *objects: dict[str, Any]) -> list[dict[str, str]]:
    done = subprocess.run(
        [str(waiters / "kstatus")], input=json.dumps(list(objects)).encode(), capture_output=True, timeout=30
    )
    assert done.returncode == 0, done.stderr.decode()
    return [json.loads(line) for line in done.stdout.decode().splitlines()]


WATCHER = Path(__file__).resolve().parents[2] / "k8s" / "watcher"


def _grant(kube: Kube, manifest: str, suffix: str, namespace: str, account: str, logs: bool = True) -> list[str]:
    """The ClusterRole of a k8s/watcher manifest, named uniquely, bound to the test's ServiceAccount
    (`logs` False: without its get on pods and pods/log)."""
    role = next(doc for doc in yaml.safe_load_all((WATCHER / manifest).read_text()) if doc["kind"] == "ClusterRole")
    if not logs:
        role["rules"] = [rule for rule in role["rules"] if "pods/log" not in rule["resources"]]
    name = role["metadata"]["name"] + suffix
    role["metadata"] = {"name": name}
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    kube.create(f"{rbac}/clusterroles", role)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }
    kube.create(f"{rbac}/clusterrolebindings", binding)
    return [f"{rbac}/clusterrolebindings/{name}", f"{rbac}/clusterroles/{name}"]


def test_event_logs_and_causes_need_exactly_the_watchers_grant_on_pods_log(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    """`run --event-logs` as k8s/watcher's identity without its rule on pods and pods/log: refused the
    logs (said once, Events written without them) and the crashed runs' output (said once, no causes);
    with the rule, it reads the Pod and asks for its log (here no kubelet answers it, so only the
    refusals' absence shows)."""
    suffix = f"-{uuid.uuid4().hex[:8]}"
    account = "crashwatch"
    kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": account}})
    created: list[str] = []
    try:
        token = kube.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
        )["status"]["token"]
        config = envtest.write_kubeconfig(
            tmp_path / "sa", control_plane.url, control_plane.certs["ca.crt"], namespace=namespace, token=token
        )
        make_graph(kube, namespace, deployments=False)
        events = f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"

        def warnings() -> list[dict[str, Any]]:
            return [e for e in kube.get(events)["items"] if e["regarding"]["kind"] == "DynamoComponentDeployment"]

        for pod, granted in (("llm-worker-0", False), ("llm-worker-1", True)):
            for path in created:
                kube.delete(path)
            created = _grant(kube, "clusterrole.yaml", f"{suffix}-{int(granted)}", namespace, account, logs=granted)
            with Watcher("run", "-n", namespace, "--event-logs", "--kubeconfig", str(config)) as w:
                w.wait_synced()
                labelled_pod(kube, namespace, pod, GRAPH, "worker")
                for restarts in (1, 2):
                    set_pod_status(kube, namespace, pod, _crash(restarts))
                w.wait_for(lambda pod=pod: any(pod in e["note"] for e in warnings()), what="the Warning Event")
                refused = "cannot read container logs (403" in w.stderr()
                assert refused is not granted, w.stderr()
                said = "not allowed to read pods: causes are not read"
                if not granted:
                    w.wait_for(lambda said=said: said in w.stderr(), what="the refusal of the crashed output")
                assert w.stderr().count(said) == (0 if granted else 1), w.stderr()
                make_ready(kube, namespace, pod)
                kube.wait_for(f"{dcds(namespace)}/{DCD}", lambda o: stalled(o, "False", "NoCrashLoop"))
            kube.delete(f"/api/v1/namespaces/{namespace}/pods/{pod}", grace=0)
    finally:
        for path in created:
            kube.delete(path)


def _crash(restarts: int) -> dict[str, Any]:
    return crash_status(restarts)
