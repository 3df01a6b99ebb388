"""The Helm chart on a real node (tests/realnode.py): `helm install --wait` with the real Helm 4 brings up a
watcher Pod that the kubelet runs and its readiness probe finds ready; a real crash loop of a graph is
marked on its DCD and DGD and shows on the Pod's /metrics; `helm upgrade --wait` rolls the Pod; and
`helm uninstall` leaves no object of the chart behind. With `admission.enabled`, the real API server calls
the chart's status admission webhook through its Service (the watcher Pod's address, as the endpoint
controllers publish it) with the chart's own certificate, and stores another writer's `successful` during
the crash loop as `failed`.

The node's API server listens on loopback and no kube-proxy runs, so the chart is installed with the values
for that: `hostNetwork`, the API server's address in `extraEnv` (KUBERNETES_SERVICE_HOST/PORT), and
`http.host` 127.0.0.1, where the kubelet's probes and the test's scrape reach /metrics on the node's
loopback (no Service: none could reach it). The image is scripts/build-image's, imported into containerd.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import realnode
import yaml
from dynamo import conditions, dcds, dgds, operators_successful
from helm import Helm
from kube import ApiError, Kube, eventually
from prometheus_client.parser import text_string_to_metric_families
from realnode import container, make_component, spec
from watcher import http_get

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "crashwatch"
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration"}
# every kind the chart renders with the values below (the Service and ServiceMonitor are refused with a
# loopback http.host; one replica gets no PodDisruptionBudget; the PrometheusRule needs the Prometheus
# Operator's CRDs, which this control plane does not have)
# with `namespaces` set, the rights are namespaced: a Role and its binding in the watched namespace, and the
# Lease's in the release's
KINDS = ["ConfigMap", "Deployment", "Role", "Role", "RoleBinding", "RoleBinding", "ServiceAccount"]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[realnode.Node]:
    yield from realnode.started(tmp_path_factory, webhook_services=True)


@pytest.fixture(scope="module")
def watcher_image(node: realnode.Node, tmp_path_factory: pytest.TempPathFactory) -> str:
    return realnode.import_watcher_image(node, tmp_path_factory)


def path_of(doc: dict[str, Any], namespace: str) -> str:
    group, _, version = doc["apiVersion"].rpartition("/")
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    plural = doc["kind"].lower() + "s"
    scope = "" if doc["kind"] in CLUSTER_SCOPED else f"/namespaces/{doc['metadata'].get('namespace', namespace)}"
    return f"{prefix}{scope}/{plural}/{doc['metadata']['name']}"


def exists(kube: Kube, path: str) -> bool:
    try:
        kube.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return True


def node_network_values(node: realnode.Node, watcher_image: str, watched: str) -> dict[str, Any]:
    """The values every install here shares: the image imported into the node, one replica watching
    `watched`, on the host's network with the API server's loopback address (no Pod network reaches it)."""
    repository, _, tag = watcher_image.rpartition(":")
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "namespaces": [watched],
        "replicas": 1,
        "hostNetwork": True,
        "extraEnv": [
            {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
            {"name": "KUBERNETES_SERVICE_PORT", "value": node.plane.url.rsplit(":", 1)[1]},
        ],
    }


def remove(helm: Helm, kube: Kube, release: str, *namespaces: str) -> None:
    """The release (in the first namespace) and the namespaces, whatever the test left."""
    helm.run("uninstall", release, "--namespace", namespaces[0], "--wait", "--timeout", "2m")
    for namespace in namespaces:
        if exists(kube, f"/api/v1/namespaces/{namespace}"):
            kube.delete(f"/api/v1/namespaces/{namespace}")


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A /metrics body as {(name, sorted labels): value}."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_helm_install_on_a_real_node_runs_a_watcher_that_marks_a_crash_loop_and_uninstall_leaves_nothing(
    node: realnode.Node, watcher_image: str, tmp_path: Path
) -> None:
    kube = node.kube()
    helm = Helm(tmp_path / "helm", node.plane.kubeconfig, timeout=360)
    suffix = uuid.uuid4().hex[:6]
    release, where, watched = f"cw-{suffix}", f"cw-rel-{suffix}", f"rn-chart-{suffix}"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": watched}})
    http_port = realnode._free_port("127.0.0.1")
    values = {
        **node_network_values(node, watcher_image, watched),
        "http": {"host": "127.0.0.1", "port": http_port},
        "service": {"enabled": False},
        "grafanaDashboard": {"enabled": True},
    }
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    pods = f"/api/v1/namespaces/{where}/pods?labelSelector=app.kubernetes.io/instance%3D{release}"

    def watcher_pods() -> list[dict[str, Any]]:
        return [p for p in kube.get(pods)["items"] if "deletionTimestamp" not in p["metadata"]]

    try:
        # --wait: Helm 4's kstatus waits for the Deployment available, which takes the kubelet running the
        # Pod and its readiness probe answered by /readyz (every watch listed) on the node's loopback
        helm.ok(
            "install", release, str(CHART), "--namespace", where, "--create-namespace",
            "--values", str(tmp_path / "values.yaml"), "--wait", "--timeout", "4m",
        )  # fmt: skip
        assert json.loads(helm.ok("status", release, "-n", where, "-o", "json"))["info"]["status"] == "deployed"
        docs = [doc for doc in yaml.safe_load_all(helm.ok("get", "manifest", release, "-n", where)) if doc]
        assert sorted(doc["kind"] for doc in docs) == KINDS
        (deployment,) = [doc for doc in docs if doc["kind"] == "Deployment"]
        assert kube.get(path_of(deployment, where))["status"]["availableReplicas"] == 1
        (pod,) = watcher_pods()
        assert conditions(pod)["Ready"]["status"] == "True"
        assert pod["spec"]["hostNetwork"] is True and pod["spec"]["nodeName"] == realnode.NODE_NAME
        assert any(v["name"].startswith("kube-api-access-") for v in pod["spec"]["volumes"])  # the chart's account
        metrics = f"http://127.0.0.1:{http_port}/metrics"
        healthy = samples(http_get(metrics)[1])
        assert healthy[("crashwatch_synced", ())] == 1 and healthy[("crashwatch_leader", ())] == 1

        # a real crash loop: the kubelet restarts the container; the watcher Pod marks the DCD and the DGD
        make_component(kube, watched, spec([container(node.busybox, "exit 1")]))

        def dgd() -> dict[str, Any]:
            return kube.get(f"{dgds(watched)}/llm")  # type: ignore[no-any-return]

        def dcd() -> dict[str, Any]:
            return kube.get(f"{dcds(watched)}/llm-worker")  # type: ignore[no-any-return]

        eventually(
            lambda: (
                dgd()["status"]["state"] == "failed"
                and conditions(dgd()).get("Stalled", {}).get("status") == "True"
                and conditions(dcd()).get("Stalled", {}).get("status") == "True"
            ),
            120,
            "the crash loop written by the chart's watcher Pod",
        )
        assert conditions(dcd())["Stalled"]["reason"] == "ContainerCrashLooping"
        # its /metrics, scraped through the Pod's host network on the node's loopback
        crashing = samples(http_get(metrics)[1])
        graph = (("graph", "llm"), ("namespace", watched))
        assert crashing[("crashwatch_crash_looping_components", graph)] == 1
        assert crashing[("crashwatch_failed_graphs", ())] == 1
        assert crashing[("crashwatch_status_writes_total", (("result", "written"),))] >= 2
        # and the finding: the crash-looping Pod, its container and exit code, as the kubelet reported them
        (crashed,) = [p["metadata"]["name"] for p in kube.get(f"/api/v1/namespaces/{watched}/pods")["items"]]
        finding = {
            **dict(graph),
            "component": "worker",
            "reason": "ContainerCrashLooping",
            "pod": crashed,
            "container": "main",
            "exit_code": "1",
            "cause": "",
        }
        assert [dict(labels) for name, labels in crashing if name == "crashwatch_component_diagnosed"] == [finding]
        # the writes were the chart's ServiceAccount's
        account = f"system:serviceaccount:{where}:{deployment['spec']['template']['spec']['serviceAccountName']}"
        patched = {
            e["objectRef"]["resource"]
            for e in node.plane.audit_events(account)
            if e["verb"] == "patch" and e["responseStatus"]["code"] == 200
        }
        assert {"dynamographdeployments", "dynamocomponentdeployments"} <= patched

        # helm upgrade --wait: a changed command rolls the Pod (the old one stops first: the port is the node's)
        helm.ok(
            "upgrade", release, str(CHART), "--namespace", where, "--reuse-values", "--set", "events=false",
            "--wait", "--timeout", "4m",
        )  # fmt: skip
        assert json.loads(helm.ok("status", release, "-n", where, "-o", "json"))["version"] == 2
        (role,) = [doc for doc in docs if doc["kind"] == "Role" and doc["metadata"].get("namespace") == watched]
        assert all("events" not in rule["resources"] for rule in kube.get(path_of(role, where))["rules"])
        eventually(lambda: len(watcher_pods()) == 1, 60, "the old watcher Pod gone")
        (upgraded,) = watcher_pods()
        assert upgraded["metadata"]["name"] != pod["metadata"]["name"]
        assert "--events=false" in upgraded["spec"]["containers"][0]["args"]
        assert conditions(upgraded)["Ready"]["status"] == "True"
        # the new Pod diagnoses the crash loop again from its own list and says so on /metrics
        eventually(
            lambda: samples(http_get(metrics)[1]).get(("crashwatch_crash_looping_components", graph)) == 1,
            60,
            "the upgraded watcher's /metrics showing the crash loop",
        )

        # helm uninstall: every object the chart made, and the Pods and ReplicaSets they made, gone
        helm.ok("uninstall", release, "--namespace", where, "--wait", "--timeout", "2m")
        for doc in docs:
            assert not exists(kube, path_of(doc, where)), f"{doc['kind']} {doc['metadata']['name']} left behind"
        eventually(lambda: kube.get(pods)["items"] == [], 60, "the watcher Pods gone")
        assert kube.get(f"/apis/apps/v1/namespaces/{where}/replicasets")["items"] == []
        assert helm.run("status", release, "-n", where).returncode != 0
        # what remains is the watcher's own Lease, which goes with the namespace (docs/running.md)
        leases = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{where}/leases")["items"]
        assert [lease["metadata"]["name"] for lease in leases] == [deployment["metadata"]["name"]]
    finally:
        remove(helm, kube, release, where, watched)


def test_the_charts_admission_webhook_is_called_by_the_api_server_through_its_service(
    node: realnode.Node, watcher_image: str, tmp_path: Path
) -> None:
    kube = node.kube()
    helm = Helm(tmp_path / "helm", node.plane.kubeconfig, timeout=360)
    suffix = uuid.uuid4().hex[:6]
    release, where, watched = f"cw-{suffix}", f"cw-rel-{suffix}", f"rn-admit-{suffix}"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": watched}})
    http_port, admission_port = realnode._free_port(node.ip), realnode._free_port(node.ip)
    values = {
        # on the host's network the Pod's address is the node's, which the API server on this machine reaches
        **node_network_values(node, watcher_image, watched),
        "http": {"port": http_port},
        "service": {"enabled": True},
        "admission": {"enabled": True, "port": admission_port},
    }
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    try:
        helm.ok(
            "install", release, str(CHART), "--namespace", where, "--create-namespace",
            "--values", str(tmp_path / "values.yaml"), "--wait", "--timeout", "4m",
        )  # fmt: skip
        docs = [doc for doc in yaml.safe_load_all(helm.ok("get", "manifest", release, "-n", where)) if doc]
        kinds = {doc["kind"] for doc in docs}
        assert {"MutatingWebhookConfiguration", "Secret", "Service", "Deployment"} <= kinds
        (service,) = [doc for doc in docs if doc["kind"] == "Service"]
        slices = (
            f"/apis/discovery.k8s.io/v1/namespaces/{where}/endpointslices"
            f"?labelSelector=kubernetes.io/service-name%3D{service['metadata']['name']}"
        )

        def ready_addresses() -> set[str]:
            return {
                address
                for item in kube.get(slices)["items"]
                for endpoint in item.get("endpoints") or []
                if endpoint.get("conditions", {}).get("ready")
                for address in endpoint["addresses"]
            }

        eventually(lambda: ready_addresses() == {node.ip}, 60, "the Service's endpoint: the watcher Pod, Ready")

        make_component(kube, watched, spec([container(node.busybox, "exit 1")]))
        path = f"{dgds(watched)}/llm"
        eventually(
            lambda: (
                kube.get(path)["status"].get("state") == "failed"
                and conditions(kube.get(path)).get("Stalled", {}).get("status") == "True"
            ),
            120,
            "the crash loop written by the chart's watcher Pod",
        )

        # the operator's `successful` on a Ready flip, sent while the worker still crash-loops: what the
        # API server stores is crashwatch's answer, given by the Pod behind the chart's Service. The first
        # write may come before the API server's own view of the endpoint (failurePolicy Ignore lets it
        # through, and crashwatch then writes `failed` back): a few are tried, each on the latest version.
        stored = [operators_successful(kube, path, kube.get(path))]
        while stored[-1]["status"]["state"] != "failed" and len(stored) < 5:
            time.sleep(1)
            stored.append(operators_successful(kube, path, kube.get(path)))
        assert [s["status"]["state"] for s in stored][-1] == "failed", "no write was answered by the webhook"
        assert conditions(stored[-1])["Ready"]["reason"] == "component_crash_looping"
        print(f"\nthe webhook answered the operator's write at try {len(stored)}", file=sys.stderr)
        (pod,) = [
            p for p in kube.get(f"/api/v1/namespaces/{where}/pods")["items"] if "deletionTimestamp" not in p["metadata"]
        ]
        code, log = kube.get_raw(f"/api/v1/namespaces/{where}/pods/{pod['metadata']['name']}/log")
        assert code == 200 and b"another writer's status write made to say" in log
        # the Pod checked the chart's registration with the chart's grant: it trusts what the Pod serves
        name = next(doc for doc in docs if doc["kind"] == "MutatingWebhookConfiguration")["metadata"]["name"]
        assert f"the caBundle of MutatingWebhookConfiguration {name} signs the certificate served".encode() in log
        assert b"cannot verify" not in log and b"not allowed to read" not in log

        helm.ok("uninstall", release, "--namespace", where, "--wait", "--timeout", "2m")
        for doc in docs:
            assert not exists(kube, path_of(doc, where)), f"{doc['kind']} {doc['metadata']['name']} left behind"
    finally:
        remove(helm, kube, release, where, watched)
