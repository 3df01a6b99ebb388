"""Least privilege, shown on the real API server: k8s/watcher installed as its kustomization lays it out
(in a namespace of the test's own, cluster-scoped names made unique), the Deployment's own command run with
a token of its ServiceAccount through a crash loop, a recovery and a leader election. It works end to end;
the same identity is refused what it has no business doing; and the API server's audit log shows that
every request it sent is granted by a rule of the manifests, and that every verb each rule grants was used.

A new rule goes in together with the code that uses it, and this test checks both: a request that no rule
grants fails it, and so does a grant that the watcher never exercises here."""

from __future__ import annotations

import http.client
import json
import re
import ssl
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import envtest
import pytest
import yaml
from dynamo import conditions, crash_loop_written, dcds, dgd_state, dgds, labelled_pod, make_graph
from kube import Kube, crash_loop, crash_status, eventually, make_ready, set_pod_status
from watcher import Watcher, http_get

pytestmark = pytest.mark.e2e

WATCHER = Path(__file__).resolve().parents[2] / "k8s" / "watcher"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
PROBE = "crashwatch-rbac-probe"  # the User-Agent of this test's own requests with the watcher's token
# what the default ClusterRoles system:discovery and system:public-info-viewer grant every identity
DISCOVERY = ("/api", "/apis", "/version", "/openapi/", "/healthz", "/livez", "/readyz")


def render(namespace: str, suffix: str) -> list[dict[str, Any]]:
    """k8s/watcher's resources, as `kubectl apply -k` would send them with the kustomization's namespace
    set to `namespace`: namespaced objects, ServiceAccount subjects and the Namespace itself in it;
    cluster-scoped roles and bindings renamed with `suffix` (the control plane is shared by the tests)."""
    kustomization = yaml.safe_load((WATCHER / "kustomization.yaml").read_text())
    docs = [doc for name in kustomization["resources"] for doc in yaml.safe_load_all((WATCHER / name).read_text())]
    for doc in docs:
        kind, meta = doc["kind"], doc["metadata"]
        if kind == "Namespace":
            meta["name"] = namespace
        elif kind in CLUSTER_SCOPED:
            meta["name"] += suffix
        else:
            meta["namespace"] = namespace
        if kind == "ClusterRoleBinding":
            doc["roleRef"]["name"] += suffix
        for subject in doc.get("subjects", []):
            if subject["kind"] == "ServiceAccount":
                subject["namespace"] = namespace
    return docs


def collection(doc: dict[str, Any]) -> str:
    group, _, version = doc["apiVersion"].rpartition("/")
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    plural = {"PodDisruptionBudget": "poddisruptionbudgets"}.get(doc["kind"], doc["kind"].lower() + "s")
    scope = "" if doc["kind"] in CLUSTER_SCOPED else f"/namespaces/{doc['metadata']['namespace']}"
    return f"{prefix}{scope}/{plural}"


@dataclass(frozen=True)
class Request:
    """What RBAC decides on: the verb, the API group, the resource (with /subresource) and where."""

    verb: str
    group: str
    resource: str
    namespace: str  # "" for a cluster-wide request


@dataclass(frozen=True)
class Grant:
    """One verb on one resource of one rule of a ClusterRole (any namespace) or a Role (its own)."""

    role: str
    rule: int  # its index in the role's rules
    verb: str
    group: str
    resource: str
    namespace: str | None  # None: everywhere

    def allows(self, request: Request) -> bool:
        return (self.verb, self.group, self.resource) == (request.verb, request.group, request.resource) and (
            self.namespace is None or self.namespace == request.namespace
        )


def grants(docs: list[dict[str, Any]]) -> list[Grant]:
    """Every (verb, group, resource) the bound roles grant the ServiceAccount; no wildcards are expected."""
    roles = {(doc["kind"], doc["metadata"]["name"]): doc for doc in docs if doc["kind"] in ("Role", "ClusterRole")}
    found = []
    for binding in (doc for doc in docs if doc["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        where = binding["metadata"]["namespace"] if binding["kind"] == "RoleBinding" else None
        for index, rule in enumerate(role["rules"]):
            for part in ("verbs", "apiGroups", "resources"):
                assert "*" not in rule[part], f"{role['metadata']['name']}: a wildcard in {part}"
            found += [
                Grant(role["metadata"]["name"], index, verb, group, resource, where)
                for verb in rule["verbs"]
                for group in rule["apiGroups"]
                for resource in rule["resources"]
            ]
    return found


class TokenClient:
    """Requests with a bearer token, as the watcher's identity, answered with their status."""

    def __init__(self, url: str, ca: Path, token: str) -> None:
        self.host, port = url.removeprefix("https://").rsplit(":", 1)
        self.port = int(port)
        self.context = ssl.create_default_context(cafile=str(ca))
        self.token = token

    def status(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> int:
        connection = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=30)
        try:
            headers = {"Authorization": f"Bearer {self.token}", "User-Agent": PROBE, "Content-Type": content_type}
            connection.request(
                method, path, body=json.dumps(body).encode() if body is not None else None, headers=headers
            )
            response = connection.getresponse()
            response.read()
            return response.status
        finally:
            connection.close()


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[envtest.ControlPlane]:
    """A control plane of its own: the watcher runs with -A and one status write in two seconds, so the
    graphs other tests leave behind on the session's would queue their writes ahead of this test's."""
    yield from envtest.started(tmp_path_factory)


@pytest.fixture
def installed(control_plane: envtest.ControlPlane, kube: Kube) -> Iterator[tuple[str, list[dict[str, Any]], str]]:
    """k8s/watcher installed in a namespace of its own: (that namespace, the objects, a token)."""
    suffix = f"-{uuid.uuid4().hex[:8]}"
    where = f"cw{suffix}"
    docs = render(where, suffix)
    created = []
    try:
        for doc in docs:
            dry = "?dryRun=All" if doc["kind"] in ("Deployment", "PodDisruptionBudget") else ""  # no kubelet here
            kube.create(collection(doc) + dry, doc)
            if not dry and doc["kind"] in CLUSTER_SCOPED:
                created.append(f"{collection(doc)}/{doc['metadata']['name']}")
        (account,) = [doc["metadata"]["name"] for doc in docs if doc["kind"] == "ServiceAccount"]
        token = kube.create(
            f"/api/v1/namespaces/{where}/serviceaccounts/{account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
        )["status"]["token"]
        yield where, docs, token
    finally:
        for path in reversed(created):  # the namespace last, with the Role, binding and account in it
            kube.delete(path)


def deployment_args(docs: list[dict[str, Any]]) -> list[str]:
    """The watcher container's arguments, its HTTP endpoints moved to a free loopback port."""
    (deployment,) = [doc for doc in docs if doc["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = list(container["args"])
    args[args.index("--http-address") + 1] = "127.0.0.1:0"
    return args


def test_the_watchers_identity_works_end_to_end_is_refused_the_rest_and_uses_every_grant_it_has(
    control_plane: envtest.ControlPlane,
    kube: Kube,
    namespace: str,
    installed: tuple[str, list[dict[str, Any]], str],
    tmp_path: Path,
) -> None:
    where, docs, token = installed
    (account,) = [doc["metadata"]["name"] for doc in docs if doc["kind"] == "ServiceAccount"]
    username = f"system:serviceaccount:{where}:{account}"
    config = envtest.write_kubeconfig(
        tmp_path / "sa", control_plane.url, control_plane.certs["ca.crt"], namespace=where, token=token
    )
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, "llm-worker-0", "llm", "worker")
    lease = f"/apis/coordination.k8s.io/v1/namespaces/{where}/leases/crashwatch"

    # End to end: ready and leading; a crash loop written, going on (one more restart), then its recovery
    # written; the lease released on SIGTERM. One status write in two seconds (--qps 0.5 --burst 1) holds
    # the second write of the crash loop's pair back: the graph and its component are changed meanwhile,
    # so that write meets a 409 and reads the object again, as it does when anyone else writes between a
    # watch event and the patch.
    def touch() -> None:
        for path in (f"{dgds(namespace)}/llm", f"{dcds(namespace)}/llm-worker"):
            kube.merge_patch(path, {"metadata": {"labels": {"touched": "while-a-write-waits"}}})

    def ours() -> list[str]:  # -A: the graphs other tests left behind are the watcher's too
        return [line for line in w.writes() if f" {namespace}/" in line]

    with Watcher(*deployment_args(docs), "--qps", "0.5", "--burst", "1", "--kubeconfig", str(config)) as w:
        w.wait_synced()
        url = w.served_at()
        eventually(lambda: http_get(f"{url}/readyz")[1].startswith("ok: leading"), 15, "leading")
        crash_loop(kube, namespace, "llm-worker-0")
        eventually(lambda: len(ours()) >= 1, 30, "the first write")
        touch()
        eventually(
            lambda: crash_loop_written(kube, namespace),
            15,
            "the crash loop written",
        )
        assert f" as {kube.get(lease)['spec']['holderIdentity']};" in w.stderr()
        set_pod_status(kube, namespace, "llm-worker-0", crash_status(3))
        w.wait_for(
            lambda: any(f'"namespace":"{namespace}"' in line and '"restarts":3' in line for line in w.snapshot(w.out)),
            15,
            "the third restart seen",
        )
        make_ready(kube, namespace, "llm-worker-0")
        eventually(
            lambda: (
                dgd_state(kube, namespace)[0] != "failed"
                and conditions(kube.get(f"{dcds(namespace)}/llm-worker"))["Stalled"]["status"] == "False"
            ),
            30,
            "the recovery written",
        )
        status, metrics = http_get(f"{url}/metrics")
    assert w.process.returncode == 0, w.stderr()
    conflicts = re.search(r"^crashwatch_status_write_conflicts_total (\S+)$", metrics, re.MULTILINE)
    assert status == 200 and conflicts is not None and float(conflicts.group(1)) >= 1, metrics
    assert "released the lease" in w.stderr()
    assert kube.get(lease)["spec"].get("holderIdentity") in ("", None)
    for line in w.snapshot(w.err):
        assert "forbidden" not in line.lower() and "not allowed" not in line, line

    # refused: a Pod update, a Secret read, a DGD spec update, a Lease in another namespace
    as_watcher = TokenClient(control_plane.url, control_plane.certs["ca.crt"], token)
    kube.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token"}, "stringData": {"token": "x"}},
    )
    pod_path = f"/api/v1/namespaces/{namespace}/pods/llm-worker-0"
    dgd_path = f"{dgds(namespace)}/llm"
    other_lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "crashwatch"},
        "spec": {"holderIdentity": "x"},
    }
    merge = "application/merge-patch+json"
    # the token works (listing Pods is granted): what follows is RBAC saying no
    assert as_watcher.status("GET", f"/api/v1/namespaces/{namespace}/pods") == 200
    assert as_watcher.status("PUT", pod_path, kube.get(pod_path)) == 403
    assert as_watcher.status("PATCH", pod_path, {"metadata": {"labels": {"x": "y"}}}, merge) == 403
    assert as_watcher.status("GET", f"/api/v1/namespaces/{namespace}/secrets/hf-token") == 403
    assert as_watcher.status("GET", f"/api/v1/namespaces/{namespace}/secrets") == 403
    assert as_watcher.status("PATCH", dgd_path, {"spec": {"services": {}}}, merge) == 403
    assert as_watcher.status("PUT", dgd_path, kube.get(dgd_path)) == 403
    assert as_watcher.status("PATCH", f"{dgd_path}/status", {"status": {}}, merge) == 200  # status: yes
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    assert as_watcher.status("POST", leases, other_lease) == 403
    assert as_watcher.status("GET", f"{leases}/crashwatch") == 403
    assert as_watcher.status("GET", lease) == 200  # its own namespace's
    # and its own Lease alone there: another one in its namespace is neither read nor updated (the Role
    # names its Lease; a create names no object, so that rule alone stays unnamed)
    other = f"/apis/coordination.k8s.io/v1/namespaces/{where}/leases/not-crashwatch"
    assert as_watcher.status("GET", other) == 403
    assert as_watcher.status("PUT", other, {**other_lease, "metadata": {"name": "not-crashwatch"}}) == 403

    # the audit log: what the watcher sent (this test's probes left out), against what the manifests grant
    events = [e for e in control_plane.audit_events(username) if e.get("userAgent") != PROBE]
    assert events, f"no audit events for {username}"
    refused = [e["requestURI"] for e in events if e["responseStatus"]["code"] == 403]
    assert refused == [], refused
    sent: set[Request] = set()
    for event in events:
        ref = event.get("objectRef")
        if ref is None:  # discovery, granted to every identity by the default roles
            assert event["requestURI"].startswith(DISCOVERY), event["requestURI"]
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        sent.add(Request(event["verb"], ref.get("apiGroup", ""), resource, ref.get("namespace", "")))
    granted = grants(docs)
    print("sent:", *sorted(sent, key=repr), sep="\n  ")
    ungranted = [r for r in sent if not any(g.allows(r) for g in granted)]
    assert ungranted == [], f"sent but granted by no rule of k8s/watcher: {ungranted}"

    # each verb of each rule was sent (on one of its resources at least), and each resource of each rule
    # was asked for (with one of its verbs at least)
    def verbs(grants: list[Grant]) -> set[tuple[str, int, str]]:
        return {(g.role, g.rule, f"verb {g.verb}") for g in grants}

    def resources(grants: list[Grant]) -> set[tuple[str, int, str]]:
        return {(g.role, g.rule, f"resource {g.group}/{g.resource}") for g in grants}

    used = [g for g in granted if any(g.allows(r) for r in sent)]
    unused = sorted((verbs(granted) - verbs(used)) | (resources(granted) - resources(used)))
    assert unused == [], f"granted but never sent: {unused}"
    assert kube.get(f"{dcds(namespace)}/llm-worker")["status"]
