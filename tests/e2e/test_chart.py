"""The Helm chart (charts/crashwatch) with the real Helm 4: `helm lint` and `helm template` (the values
schema refusing bad values, the RBAC equal to k8s/watcher's, the Pods' commands ones crashwatch takes,
the PrometheusRule equal to the plain rules file), then on the real control plane `helm install`, the
watcher's command run with a token of the chart's ServiceAccount through a crash loop (the grants
suffice), its /metrics scrape fed to promtool until the crash-loop alert fires, and `helm upgrade` and
`helm uninstall` leaving nothing of the release behind.

No kubelet runs here: the chart's Pods are created and stay Pending, so `helm install --wait` is shown on
what can become ready without one (replicas: 0), and the watcher itself runs as a local process with the
Pod's arguments and the ServiceAccount's identity."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import envtest
import pytest
import yaml
from dynamo import crash_loop_written, labelled_pod, make_graph
from helm import Helm
from kube import NODE, ApiError, Kube, crash_loop, eventually, make_ready
from promtool_bin import promtool
from scrapes import METRIC, Target, duration_seconds, input_series, names, render_annotation
from watcher import Watcher, http_get

from crashwatch.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "crashwatch"
WATCHER = ROOT / "k8s" / "watcher"
MONITORING = ROOT / "k8s" / "monitoring"
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding"}


class ChartHelm(Helm):
    """helm (tests/helm.py) with the chart's renderings; against the test control plane when given one."""

    def template(
        self, *values: str, release: str = "crashwatch", namespace: str = "crashwatch"
    ) -> list[dict[str, Any]]:
        out = self.ok("template", release, str(CHART), "--namespace", namespace, *values)
        return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> ChartHelm:
    return ChartHelm(tmp_path_factory.mktemp("helm"))


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return found


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(d["kind"] for d in docs)


def watcher_manifest(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((WATCHER / name).read_text())
    return doc


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


# --- lint, schema, template ----------------------------------------------------------------------------


def test_helm_lint_passes_and_the_values_schema_refuses_what_would_not_run(helm: ChartHelm) -> None:
    out = helm.ok("lint", "--strict", str(CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in out
    for bad, why in [
        (("--set", "replicas=0"), "replicas"),  # a Deployment of none: no watcher, and no PDB can hold
        (("--set", "http.port=80"), "port"),  # uid 10001 binds no port below 1024
        (("--set", "leaderElection.leaseDuration=15"), "leaseDuration"),  # a duration needs its unit
        (("--set", "logFormat=xml"), "logFormat"),
        (("--set", "prometheusRule.for.CrashwatchTypo=5m"), "CrashwatchTypo"),
        (("--set", "terminationGracePeriodSeconds=5"), "terminationGracePeriodSeconds"),
        (("--set", "replica=3"), "replica"),  # a misspelt key is not silently ignored
        (("--set", "admission.wait=1m"), "wait"),  # in s or ms: the chart compares it with the timeout
        (("--set", "admission.certificate.source=vault"), "source"),
    ]:
        done = helm.run("lint", "--strict", str(CHART), *bad)
        assert done.returncode != 0 and why in done.stdout + done.stderr, (bad, done.stdout, done.stderr)
        done = helm.run("template", "x", str(CHART), *bad)
        assert done.returncode != 0 and "schema" in done.stderr, (bad, done.stderr)


def test_the_chart_grants_exactly_the_rules_of_k8s_watcher(helm: ChartHelm) -> None:
    docs = helm.template(release="cw", namespace="ops")
    assert one(docs, "ClusterRole")["rules"] == watcher_manifest("clusterrole.yaml")["rules"]
    # the same Lease rules, on the release's Lease by name (k8s/watcher's is named crashwatch)
    named, create = one(docs, "Role")["rules"]
    assert named["resourceNames"] == ["cw-crashwatch"] and "resourceNames" not in create
    assert [{**named, "resourceNames": ["crashwatch"]}, create] == watcher_manifest("role.yaml")["rules"]
    args = build_parser().parse_args(pod_spec(one(docs, "Deployment"))["containers"][0]["args"])
    assert args.leader_election_id == "cw-crashwatch"
    account = one(docs, "ServiceAccount")["metadata"]["name"]
    subject = [{"kind": "ServiceAccount", "name": account, "namespace": "ops"}]
    for kind, role in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        binding = one(docs, kind)
        assert binding["subjects"] == subject
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role,
            "name": one(docs, role)["metadata"]["name"],
        }
    assert pod_spec(one(docs, "Deployment"))["serviceAccountName"] == account
    # what is optional goes with what needs it: no Events, no events grant; no LeaderWorkerSets ...
    docs = helm.template("--set", "events=false", "--set", "rbac.leaderWorkerSets=false")
    resources = {r for rule in one(docs, "ClusterRole")["rules"] for r in rule["resources"]}
    assert "events" not in resources and "leaderworkersets" not in resources
    assert "--events=false" in pod_spec(one(docs, "Deployment"))["containers"][0]["args"]
    single = ("--set", "leaderElection.enabled=false", "--set", "replicas=1")
    docs = helm.template(*single, "--set", "rbac.namespaces=true")
    assert "Role" not in kinds(docs) and "RoleBinding" not in kinds(docs)
    assert ["namespaces"] in [rule["resources"] for rule in one(docs, "ClusterRole")["rules"]]
    assert "--leader-elect" not in pod_spec(one(docs, "Deployment"))["containers"][0]["args"]
    # the crashed runs' output: one grant, k8s/watcher's, for the causes (readCauses) and --event-logs alike
    (logs,) = [rule for rule in watcher_manifest("clusterrole.yaml")["rules"] if "pods/log" in rule["resources"]]
    docs = helm.template("--set", "eventLogs=true")
    assert [rule for rule in one(docs, "ClusterRole")["rules"] if "pods/log" in rule["resources"]] == [logs]
    assert "--event-logs" in pod_spec(one(docs, "Deployment"))["containers"][0]["args"]
    docs = helm.template("--set", "readCauses=false", "--set", "eventLogs=true")
    assert [rule for rule in one(docs, "ClusterRole")["rules"] if "pods/log" in rule["resources"]] == [logs]
    assert "--read-causes=false" in pod_spec(one(docs, "Deployment"))["containers"][0]["args"]
    # neither: no grant; --event-logs never without Events
    docs = helm.template("--set", "readCauses=false", "--set", "eventLogs=true", "--set", "events=false")
    assert "pods/log" not in {r for rule in one(docs, "ClusterRole")["rules"] for r in rule["resources"]}
    assert "--event-logs" not in pod_spec(one(docs, "Deployment"))["containers"][0]["args"]


def test_with_namespaces_given_the_grants_are_roles_in_those_namespaces_alone(helm: ChartHelm) -> None:
    docs = helm.template("--set", "namespaces={a,b}", release="cw", namespace="ops")
    assert "ClusterRole" not in kinds(docs) and "ClusterRoleBinding" not in kinds(docs)
    cluster_rules = watcher_manifest("clusterrole.yaml")["rules"]
    roles = {d["metadata"]["namespace"]: d for d in docs if d["kind"] == "Role" and d["metadata"].get("namespace")}
    assert sorted(roles) == ["a", "b"]
    for namespace, role in roles.items():
        assert role["rules"] == cluster_rules  # k8s/watcher's rules (the causes' get on pods/log too), here only
        (binding,) = [d for d in docs if d["kind"] == "RoleBinding" and d["metadata"].get("namespace") == namespace]
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "cw-crashwatch", "namespace": "ops"}]
    # the namespaces' list and watch stay cluster-wide, alone, when --namespace-selector needs them
    docs = helm.template("--set", "namespaces={a}", "--set", "rbac.namespaces=true")
    assert one(docs, "ClusterRole")["rules"] == [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}
    ]
    # shards: each shard's Lease by name
    docs = helm.template("--set", "shards.enabled=true", "--set", "shards.count=3", release="cw")
    (role,) = [d for d in docs if d["kind"] == "Role"]
    assert role["rules"][0]["resourceNames"] == ["cw-crashwatch-0", "cw-crashwatch-1", "cw-crashwatch-2"]


def test_the_chart_refuses_two_writers_in_one_line(helm: ChartHelm) -> None:
    for values in (
        ("--set", "leaderElection.enabled=false"),  # 2 replicas
        ("--set", "leaderElection.enabled=false", "--set", "shards.enabled=true", "--set", "shards.replicasPerShard=2"),
    ):
        done = helm.run("template", "x", str(CHART), *values)
        assert done.returncode != 0 and "writers" in done.stderr, done.stderr
    assert helm.template("--set", "leaderElection.enabled=false", "--set", "replicas=1")


def test_the_deployment_runs_a_command_crashwatch_takes_as_k8s_watcher_runs_it(helm: ChartHelm) -> None:
    docs = helm.template()
    deployment = one(docs, "Deployment")
    ours, theirs = pod_spec(deployment), pod_spec(watcher_manifest("deployment.yaml"))
    (container,), (reference,) = ours["containers"], theirs["containers"]
    args = build_parser().parse_args(container["args"])
    expected = build_parser().parse_args(reference["args"])
    assert (args.command, args.all_namespaces, args.http_address, args.format) == (
        expected.command,
        expected.all_namespaces,
        expected.http_address,
        expected.format,
    )
    assert args.leader_elect and args.leader_election_id == "crashwatch"
    assert args.leader_election_namespace is None  # the Pod's own, where the Role is
    assert (args.leader_elect_lease_duration, args.leader_elect_renew_deadline, args.leader_elect_retry_period) == (
        15.0,
        10.0,
        2.0,
    )
    assert ours["terminationGracePeriodSeconds"] > args.grace_period
    for key in ("readinessProbe", "livenessProbe", "resources", "securityContext", "ports"):
        assert container[key] == reference[key], key  # the sizing guide's figures; the image's user
    assert ours["securityContext"] == theirs["securityContext"]
    assert container["image"] == f"crashwatch:{yaml.safe_load((CHART / 'Chart.yaml').read_text())['appVersion']}"
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == watcher_manifest("deployment.yaml")["spec"]["strategy"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"] == labels
    (term,) = ours["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == labels
    assert one(docs, "PodDisruptionBudget")["spec"] == {"minAvailable": 1, "selector": {"matchLabels": labels}}
    service = one(docs, "Service")
    assert service["spec"]["selector"] == labels
    assert service["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http"}]
    # -n instead of -A; a single replica gets no budget that would block every drain
    docs = helm.template("--set", "namespaces={a,b}", "--set", "replicas=1")
    args = build_parser().parse_args(pod_spec(one(docs, "Deployment"))["containers"][0]["args"])
    assert (args.namespaces, args.all_namespaces) == (["a", "b"], False)
    assert "PodDisruptionBudget" not in kinds(docs)


def test_on_the_nodes_network_the_watcher_listens_where_its_probes_ask_and_no_service_claims_to_reach_it(
    helm: ChartHelm,
) -> None:
    default = pod_spec(one(helm.template(), "Deployment"))
    assert "hostNetwork" not in default and "dnsPolicy" not in default and "env" not in default["containers"][0]
    env = [
        {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"},
    ]
    docs = helm.template(
        "--set", "hostNetwork=true", "--set", "http.host=127.0.0.1", "--set", "http.port=9400",
        "--set", "service.enabled=false", "--set-json", f"extraEnv={json.dumps(env)}",
    )  # fmt: skip
    assert "Service" not in kinds(docs)
    ours = pod_spec(one(docs, "Deployment"))
    assert (ours["hostNetwork"], ours["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
    (container,) = ours["containers"]
    assert container["env"] == env
    assert build_parser().parse_args(container["args"]).http_address == ("127.0.0.1", 9400)
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {**default["containers"][0][probe]["httpGet"], "host": "127.0.0.1"}
    assert container["ports"] == [{"name": "http", "containerPort": 9400}]
    # the port is the node's: a rollout cannot start a new replica beside the old one on its node
    assert one(docs, "Deployment")["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    # with shards, the shard's ordinal comes first and the extra variables after it
    docs = helm.template("--set", "shards.enabled=true", "--set-json", f"extraEnv={json.dumps(env)}")
    (statefulset,) = [d for d in docs if d["kind"] == "StatefulSet"]
    assert [e["name"] for e in pod_spec(statefulset)["containers"][0]["env"]] == [
        "SHARD_INDEX",
        *(e["name"] for e in env),
    ]
    # an IPv6 host in brackets, as --http-address takes it
    docs = helm.template("--set", "http.host=::1", "--set", "service.enabled=false")
    args = pod_spec(one(docs, "Deployment"))["containers"][0]["args"]
    assert args[args.index("--http-address") + 1] == "[::1]:8080"
    assert build_parser().parse_args(args).http_address == ("::1", 8080)
    # a Service (or a ServiceMonitor through it) could never reach a loopback address: refused in one line
    for values in (
        ("--set", "http.host=127.0.0.1"),
        ("--set", "http.host=127.0.0.1", "--set", "service.enabled=false", "--set", "serviceMonitor.enabled=true"),
        ("--set", "service.enabled=false", "--set", "serviceMonitor.enabled=true"),
    ):
        done = helm.run("template", "x", str(CHART), *values)
        assert done.returncode != 0 and "service.enabled" in done.stderr, (values, done.stderr)
    done = helm.run("template", "x", str(CHART), "--set", "http.host=a b", "--set", "service.enabled=false")
    assert done.returncode != 0 and "schema" in done.stderr, done.stderr


def test_the_status_admission_webhook_is_served_by_the_pods_through_the_service_with_a_certificate_it_trusts(
    helm: ChartHelm,
) -> None:
    import base64

    from cryptography import x509

    docs = helm.template("--set", "admission.enabled=true", "--set", "namespaces={a,b}")
    secret, hook, service = one(docs, "Secret"), one(docs, "MutatingWebhookConfiguration"), one(docs, "Service")
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)  # raises unless the CA signed it
    (webhook,) = hook["webhooks"]
    assert webhook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    called = webhook["clientConfig"]["service"]
    name = service["metadata"]["name"]
    assert (called["name"], called["namespace"], called["path"]) == (name, "crashwatch", "/admit-status")
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert f"{name}.crashwatch.svc" in sans  # the name the API server checks
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == called["port"]]
    (rule,) = webhook["rules"]
    assert rule["resources"] == ["dynamographdeployments/status", "dynamocomponentdeployments/status"]
    assert (rule["operations"], webhook["failurePolicy"]) == (["UPDATE"], "Ignore")
    assert webhook["namespaceSelector"]["matchExpressions"][0]["values"] == ["a", "b"]
    ours = pod_spec(one(docs, "Deployment"))
    (container,) = ours["containers"]
    assert {"name": port["targetPort"], "containerPort": 9443} in container["ports"]
    args = build_parser().parse_args(container["args"])
    assert args.admission_address == (None, 9443)
    assert webhook["timeoutSeconds"] > args.admission_wait  # an answer that waits still arrives in time
    (mount,) = container["volumeMounts"]
    (volume,) = ours["volumes"]
    assert (volume["name"], volume["secret"]["secretName"]) == (mount["name"], secret["metadata"]["name"])
    for path in (args.tls_cert_file, args.tls_private_key_file):
        assert Path(path).parent == Path(mount["mountPath"]) and Path(path).name in secret["data"]
    # the Pods check the registration against what they serve, read by its name, with a grant on it alone
    assert args.admission_configuration == hook["metadata"]["name"] == "crashwatch-crashwatch"
    assert one(docs, "ClusterRole", "crashwatch-admission")["rules"] == [READ_REGISTRATION]
    binding = one(docs, "ClusterRoleBinding", "crashwatch-admission")
    assert (binding["roleRef"]["kind"], binding["roleRef"]["name"]) == ("ClusterRole", "crashwatch-admission")
    account = {"kind": "ServiceAccount", "name": ours["serviceAccountName"], "namespace": "crashwatch"}
    assert binding["subjects"] == [account]
    # crashwatch's own writes are kept out; the certificate lasts admission.certificate.days
    (condition,) = webhook["matchConditions"]
    assert condition["expression"] == (
        f'request.userInfo.username != "system:serviceaccount:crashwatch:{ours["serviceAccountName"]}"'
    )
    days = (cert.not_valid_after_utc - cert.not_valid_before_utc).days
    assert days == 365 and int(secret["metadata"]["annotations"]["crashwatch.dev/expires"]) > time.time() + 364 * 86400
    # shards hold a namespace each, and the API server would ask any of them: refused, as is no Service, a
    # Service reachable from outside, and a wait the API server would not wait for
    for values in (
        ("--set", "shards.enabled=true"),
        ("--set", "service.enabled=false"),
        ("--set", "service.type=LoadBalancer"),
        ("--set", "service.type=NodePort"),
        ("--set", "admission.wait=3s"),
        ("--set", "admission.wait=2500ms", "--set", "admission.timeoutSeconds=2"),
        ("--set", "admission.certificate.source=secret"),
    ):
        done = helm.run("template", "x", str(CHART), "--set", "admission.enabled=true", *values)
        said = values[1].split("=")[0].split(".")[-1]
        assert done.returncode != 0 and said in done.stderr, (values, done.stderr)


READ_REGISTRATION = {
    "apiGroups": ["admissionregistration.k8s.io"],
    "resources": ["mutatingwebhookconfigurations"],
    "verbs": ["get"],
    "resourceNames": ["crashwatch-crashwatch"],
}


def test_the_webhooks_registration_check_is_granted_apart_from_k8s_watchers_rules(helm: ChartHelm) -> None:
    docs = helm.template("--set", "admission.enabled=true")
    # the watch rules stay k8s/watcher's (which registers no webhook); the registration's read is its own role
    assert one(docs, "ClusterRole", "crashwatch")["rules"] == watcher_manifest("clusterrole.yaml")["rules"]
    assert one(docs, "ClusterRole", "crashwatch-admission")["rules"] == [READ_REGISTRATION]
    # no webhook, no grant and no flag; no RBAC made, the flag all the same (a 403 is said once)
    docs = helm.template()
    assert [d["metadata"]["name"] for d in docs if d["kind"] in CLUSTER_SCOPED] == ["crashwatch", "crashwatch"]
    assert "--admission-configuration" not in pod_spec(one(docs, "Deployment"))["containers"][0]["args"]
    docs = helm.template("--set", "admission.enabled=true", "--set", "rbac.create=false")
    assert not [d for d in docs if d["kind"] in CLUSTER_SCOPED]
    assert "--admission-configuration" in pod_spec(one(docs, "Deployment"))["containers"][0]["args"]


@pytest.mark.e2e
def test_the_charts_identity_may_read_its_webhooks_registration_and_no_other(
    control_plane: envtest.ControlPlane, kube: Kube, helm: ChartHelm, namespace: str
) -> None:
    """The API server's authorizer asked (SubjectAccessReview) about the rendered grant, as it is applied."""
    release = f"cw-{namespace[-6:]}"
    docs = helm.template("--set", "admission.enabled=true", release=release, namespace=namespace)
    configuration = one(docs, "MutatingWebhookConfiguration")["metadata"]["name"]
    fullname = one(docs, "Deployment")["metadata"]["name"]
    grant = [one(docs, kind, f"{fullname}-admission") for kind in ("ClusterRole", "ClusterRoleBinding")]
    created = [kube.create(path_of(doc, namespace).rsplit("/", 1)[0], doc) for doc in grant]
    account = f"system:serviceaccount:{namespace}:{one(docs, 'ServiceAccount')['metadata']['name']}"

    def allowed(verb: str, name: str) -> bool:
        attributes = {"group": "admissionregistration.k8s.io", "resource": "mutatingwebhookconfigurations"}
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": account, "resourceAttributes": {**attributes, "verb": verb, "name": name}},
        }
        answer = kube.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
        return bool(answer["status"].get("allowed"))

    try:
        eventually(lambda: allowed("get", configuration), 10, "the grant in force")
        assert not allowed("get", f"{configuration}-other")
        assert not allowed("update", configuration) and not allowed("list", "")
    finally:
        for doc in reversed(created):
            kube.delete(path_of(doc, namespace))


def test_the_webhooks_certificate_from_cert_manager_or_a_secret_is_the_same_at_every_render(helm: ChartHelm) -> None:
    on = ("--set", "admission.enabled=true")
    first, second = (helm.template(*on, "--set", "admission.certificate.source=certManager") for _ in range(2))
    assert first == second  # nothing made at render time
    hook = one(first, "MutatingWebhookConfiguration")
    assert hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "crashwatch/crashwatch-admission"
    assert "caBundle" not in hook["webhooks"][0]["clientConfig"]  # cert-manager's CA injector fills it
    serving = one(first, "Certificate", "crashwatch-admission")
    assert serving["spec"]["secretName"] == "crashwatch-admission"
    assert "crashwatch.crashwatch.svc" in serving["spec"]["dnsNames"]
    assert serving["spec"]["issuerRef"] == {"name": "crashwatch-admission-ca", "kind": "Issuer"}
    assert "Secret" not in kinds(first)
    given = helm.template(
        *on,
        "--set", "admission.certificate.source=certManager",
        "--set", "admission.certificate.certManager.issuerRef.name=corp",
        "--set", "admission.certificate.certManager.issuerRef.kind=ClusterIssuer",
    )
    assert kinds(given).count("Certificate") == 1 and "Issuer" not in kinds(given)
    assert one(given, "Certificate")["spec"]["issuerRef"] == {"name": "corp", "kind": "ClusterIssuer"}
    mine = helm.template(
        *on, "--set", "admission.certificate.source=secret",
        "--set", "admission.certificate.secretName=tls", "--set", "admission.certificate.caBundle=Q0E=",
    )
    assert one(mine, "MutatingWebhookConfiguration")["webhooks"][0]["clientConfig"]["caBundle"] == "Q0E="
    assert pod_spec(one(mine, "Deployment"))["volumes"][0]["secret"]["secretName"] == "tls"
    # the generated pair: the Secret, the caBundle and the Pods' volume the same within one render
    generated = helm.template(*on)
    assert one(generated, "MutatingWebhookConfiguration")["webhooks"][0]["clientConfig"]["caBundle"] == (
        one(generated, "Secret")["data"]["ca.crt"]
    )


def test_who_may_call_the_watchers_ports(helm: ChartHelm) -> None:
    api_server = [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    spread = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}
    docs = helm.template(
        "--set", "admission.enabled=true", "--set", "networkPolicy.enabled=true",
        "--set-json", f"networkPolicy.admission={json.dumps(api_server)}",
        "--set", "admission.clientCA=PEM",
        "--set-json", f"topologySpreadConstraints={json.dumps([spread])}",
        "--set", "priorityClassName=system-cluster-critical",
    )
    policy = one(docs, "NetworkPolicy")
    http, admission = policy["spec"]["ingress"]
    assert http == {"ports": [{"port": "http"}]}  # the probes and Prometheus: from anywhere, that port only
    assert admission == {"ports": [{"port": "admission"}], "from": api_server}
    assert policy["spec"]["podSelector"]["matchLabels"] == one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    spec = pod_spec(one(docs, "Deployment"))
    args = build_parser().parse_args(spec["containers"][0]["args"])
    assert args.tls_client_ca_file == "/etc/crashwatch/admission-client-ca/ca.crt"
    assert one(docs, "ConfigMap", "crashwatch-admission-client-ca")["data"]["ca.crt"].strip() == "PEM"
    (spread_out,) = spec["topologySpreadConstraints"]
    selector = one(docs, "Deployment")["spec"]["selector"]
    assert spread_out == {**spread, "labelSelector": selector}
    assert spec["priorityClassName"] == "system-cluster-critical"


def test_shards_are_a_statefulset_each_ordinal_a_shard_with_a_lease_of_its_own(helm: ChartHelm) -> None:
    docs = helm.template("--set", "shards.enabled=true", "--set", "shards.count=4")
    assert "Deployment" not in kinds(docs)
    statefulset = one(docs, "StatefulSet")
    spec = statefulset["spec"]
    assert spec["replicas"] == 4 and spec["serviceName"] == one(docs, "Service")["metadata"]["name"]
    assert one(docs, "Service")["spec"]["clusterIP"] == "None"
    assert one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    (container,) = pod_spec(statefulset)["containers"]
    (env,) = container["env"]
    assert env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    from crashwatch.cli import _leader_settings

    parser, leases = build_parser(), set()
    for ordinal in range(4):
        args = parser.parse_args([a.replace("$(SHARD_INDEX)", str(ordinal)) for a in container["args"]])
        assert (args.shard_index, args.shard_count) == (ordinal, 4)
        settings = _leader_settings(parser, args)
        assert settings is not None
        leases.add(settings.name)
    assert leases == {f"crashwatch-{n}" for n in range(4)}
    # twins: a second StatefulSet whose Pod I runs shard I on the same Lease; neither selects the other's
    docs = helm.template("--set", "shards.enabled=true", "--set", "shards.replicasPerShard=2")
    first, second = [d for d in docs if d["kind"] == "StatefulSet"]
    assert (first["metadata"]["name"], second["metadata"]["name"]) == ("crashwatch", "crashwatch-b")
    for ordinal in range(3):
        (a,), (b,) = pod_spec(first)["containers"], pod_spec(second)["containers"]
        assert [x.replace("$(SHARD_INDEX)", str(ordinal)) for x in a["args"]] == [
            x.replace("$(SHARD_INDEX)", str(ordinal)) for x in b["args"]
        ]
    selectors = [s["spec"]["selector"]["matchLabels"] for s in (first, second)]
    for mine, other in ((first, selectors[1]), (second, selectors[0])):
        labels = mine["spec"]["template"]["metadata"]["labels"]
        assert mine["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert not other.items() <= labels.items()
        assert mine["spec"]["serviceName"] == one(docs, "Service")["metadata"]["name"]
    # the Service and the budget cover both
    for selector in (
        one(docs, "Service")["spec"]["selector"],
        one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
    ):
        assert all(selector.items() <= s["spec"]["template"]["metadata"]["labels"].items() for s in (first, second))


def test_the_monitoring_objects_carry_the_plain_files_and_select_the_service(helm: ChartHelm) -> None:
    docs = helm.template(
        "--set", "serviceMonitor.enabled=true",
        "--set", "prometheusRule.enabled=true",
        "--set", "grafanaDashboard.enabled=true",
    )  # fmt: skip
    monitor = one(docs, "ServiceMonitor")
    service = one(docs, "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["honorLabels"]) == ("http", "/metrics", True)
    plain = yaml.safe_load((MONITORING / "crashwatch.rules.yaml").read_text())
    assert one(docs, "PrometheusRule")["spec"]["groups"] == plain["groups"]
    dashboard = one(docs, "ConfigMap")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["crashwatch.json"]) == json.loads(
        (MONITORING / "crashwatch-dashboard.json").read_text()
    )
    # labels added to every alert, and one alert's `for` changed, the rest as in the file
    docs = helm.template(
        "--set", "prometheusRule.enabled=true",
        "--set", "prometheusRule.ruleLabels.team=inference",
        "--set", "prometheusRule.for.CrashwatchGraphCrashLooping=10m",
    )  # fmt: skip
    (group,) = one(docs, "PrometheusRule")["spec"]["groups"]
    (expected,) = plain["groups"]
    assert len(group["rules"]) == len(expected["rules"])
    for rule, original in zip(group["rules"], expected["rules"], strict=True):
        assert rule["labels"] == {**original["labels"], "team": "inference"}
        changed = rule["alert"] == "CrashwatchGraphCrashLooping"
        assert rule["for"] == ("10m" if changed else original["for"])
        assert {k: v for k, v in rule.items() if k not in ("labels", "for")} == {
            k: v for k, v in original.items() if k not in ("labels", "for")
        }


# --- install, run as the chart's identity, alert, upgrade, uninstall ---------------------------------------


def manifest_objects(helm: ChartHelm, release: str, namespace: str) -> list[dict[str, Any]]:
    out = helm.ok("get", "manifest", release, "--namespace", namespace)
    return [doc for doc in yaml.safe_load_all(out) if doc]


def path_of(doc: dict[str, Any], namespace: str) -> str:
    group, _, version = doc["apiVersion"].rpartition("/")
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    plural = {"PodDisruptionBudget": "poddisruptionbudgets"}.get(doc["kind"], doc["kind"].lower() + "s")
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


@pytest.fixture
def release_namespace(kube: Kube) -> Iterator[str]:
    """The namespace helm installs into (created by `helm install --create-namespace`), deleted at the end."""
    name = f"cw-{os.urandom(4).hex()}"
    try:
        yield name
    finally:
        if exists(kube, f"/api/v1/namespaces/{name}"):
            kube.delete(f"/api/v1/namespaces/{name}")


@pytest.mark.e2e
def test_helm_install_gives_a_watcher_that_marks_a_crash_loop_and_alerts_and_uninstall_leaves_nothing(
    control_plane: envtest.ControlPlane,
    kube: Kube,
    namespace: str,
    release_namespace: str,
    tmp_path: Path,
) -> None:
    helm = ChartHelm(tmp_path / "helm", control_plane.kubeconfig)
    release, where = f"cw-{namespace[-6:]}", release_namespace
    pods = f"/api/v1/namespaces/{where}/pods?labelSelector=app.kubernetes.io/instance%3D{release}"
    # `helm install --wait`, the test playing the kubelet: each Pod of the release bound to a node and
    # reported Ready, until Helm sees the Deployment available. The PodDisruptionBudget comes with the
    # upgrade below: its status is the disruption controller's, which this control plane does not run.
    install = [
        str(helm.binary), "install", release, str(CHART), "--namespace", where, "--create-namespace",
        "--set", f"namespaces={{{namespace}}}", "--set", "podDisruptionBudget.enabled=false",
        "--wait", "--timeout", "3m",
    ]  # fmt: skip
    with subprocess.Popen(install, env=helm.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as run:
        try:
            deadline = time.monotonic() + 180
            while run.poll() is None and time.monotonic() < deadline:
                for pod in kube.get(pods)["items"] if exists(kube, f"/api/v1/namespaces/{where}") else []:
                    name = pod["metadata"]["name"]
                    if not pod["spec"].get("nodeName"):
                        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}}
                        kube.create(
                            f"/api/v1/namespaces/{where}/pods/{name}/binding",
                            {**binding, "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}},
                        )
                    if not any(
                        c["type"] == "Ready" and c["status"] == "True"
                        for c in pod.get("status", {}).get("conditions", [])
                    ):
                        make_ready(kube, where, name)
                time.sleep(0.2)
        finally:
            if run.poll() is None:
                run.kill()
        output = run.communicate()[0]
    assert run.returncode == 0, output
    assert json.loads(helm.ok("status", release, "-n", where, "-o", "json"))["info"]["status"] == "deployed"
    helm.ok(
        "upgrade",
        release,
        str(CHART),
        "--namespace",
        where,
        "--reuse-values",
        "--set",
        "podDisruptionBudget.enabled=true",
    )
    docs = manifest_objects(helm, release, where)
    # namespaces given: the watch rules are a Role in the watched namespace (the namespaced RBAC mode, which
    # the watcher below runs with through a crash loop), the Lease's Role in the release's; nothing cluster-wide
    assert kinds(docs) == sorted(
        ["Deployment", "PodDisruptionBudget", "Role", "Role", "RoleBinding", "RoleBinding", "Service",
         "ServiceAccount"]
    )  # fmt: skip
    assert {d["metadata"].get("namespace", where) for d in docs if d["kind"] == "Role"} == {namespace, where}
    for doc in docs:
        assert exists(kube, path_of(doc, where)), doc["kind"]
    fullname = one(docs, "Deployment")["metadata"]["name"]
    assert kube.get(path_of(one(docs, "Deployment"), where))["status"]["availableReplicas"] == 2

    # the watcher, as the Pod runs it: its arguments, its ServiceAccount's token, its namespace's Lease
    account = one(docs, "ServiceAccount")["metadata"]["name"]
    token = kube.create(
        f"/api/v1/namespaces/{where}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )["status"]["token"]
    config = envtest.write_kubeconfig(
        tmp_path / "sa", control_plane.url, control_plane.certs["ca.crt"], namespace=where, token=token
    )
    (container,) = pod_spec(one(docs, "Deployment"))["containers"]
    args = list(container["args"])
    args[args.index("--http-address") + 1] = "127.0.0.1:0"
    args[args.index("--log-format") + 1] = "text"  # the lines tests/watcher.py reads (json in the Pod)
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, "llm-worker-0", "llm", "worker")
    target: Target = {"job": fullname, "namespace": where, "instance": "127.0.0.1:8080", "pod": f"{fullname}-0"}
    with Watcher(*args, "--kubeconfig", str(config)) as w:
        w.wait_synced()
        url = w.served_at()
        eventually(lambda: http_get(f"{url}/readyz")[1].startswith("ok: leading"), 20, "leading")
        lease = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{where}/leases/{fullname}")
        assert lease["spec"]["holderIdentity"]
        healthy = http_get(f"{url}/metrics")[1]
        crash_loop(kube, namespace, "llm-worker-0")
        eventually(lambda: crash_loop_written(kube, namespace), 30, "the crash loop written")
        status, crashing = http_get(f"{url}/metrics")
    assert w.process.returncode == 0, w.stderr()
    assert status == 200
    for line in w.snapshot(w.err):
        assert "forbidden" not in line.lower(), line
    # the API server's audit log: the chart's identity sent the writes a crash loop takes, none refused
    events = control_plane.audit_events(f"system:serviceaccount:{where}:{account}")
    assert [e["requestURI"] for e in events if e["responseStatus"]["code"] == 403] == []
    sent = {
        (e["verb"], e["objectRef"]["resource"] + "/" + e["objectRef"].get("subresource", ""))
        for e in events
        if "objectRef" in e
    }
    expected = {
        ("patch", "dynamographdeployments/status"),
        ("patch", "dynamocomponentdeployments/status"),
        ("create", "events/"),
        ("list", "pods/"),
        ("watch", "pods/"),
    }
    assert expected <= sent, expected - sent
    assert {("create", "leases/"), ("update", "leases/")} & sent  # the Lease taken, in the release's namespace

    # the scrape, through the chart's own PrometheusRule, in promtool: the alert fires after its `for`
    rendered = helm.template("--set", "prometheusRule.enabled=true", release=release, namespace=where)
    groups = one(rendered, "PrometheusRule")["spec"]["groups"]
    (rule,) = [r for g in groups for r in g["rules"] if r["alert"] == "CrashwatchGraphCrashLooping"]
    wait = duration_seconds(rule["for"])
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": groups}))
    healthy_steps, crashing_steps = 4, wait // 30 + 2
    # the page names the finding: the live watcher's crashwatch_component_diagnosed, through the query
    labels = {"namespace": namespace, "graph": "llm", "job": fullname}
    finding = {"component": "worker", "container": "main", "pod": "llm-worker-0", "exit_code": "1"}
    annotations = rule["annotations"]
    said = "component worker, container main of Pod llm-worker-0, down after exit code 1;"
    assert said in render_annotation(annotations["description"], labels, "1", [finding])
    series = input_series([[(target, healthy)]] * healthy_steps + [[(target, crashing)]] * crashing_steps)
    assert any(f'namespace="{namespace}"' in s["series"] for s in series), "the crash loop is not in the scrape"
    assert any(
        s["series"].startswith("crashwatch_component_diagnosed{") and 'pod="llm-worker-0"' in s["series"]
        for s in series
    )
    test = {
        "rule_files": [str(rules_file)],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "30s",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": f"{healthy_steps * 30 + wait - 30}s", "alertname": rule["alert"], "exp_alerts": []},
                    {
                        "eval_time": f"{healthy_steps * 30 + wait}s",
                        "alertname": rule["alert"],
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "namespace": namespace,
                                    "graph": "llm",
                                    "job": fullname,
                                    "severity": "critical",
                                },
                                "exp_annotations": {
                                    k: render_annotation(v, labels, "1", [finding]) for k, v in annotations.items()
                                },
                            }
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    done = subprocess.run(
        [str(promtool()), "test", "rules", str(tmp_path / "test.yaml")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # and every metric the dashboard asks for is in the watcher's scrape
    dashboard = json.loads((MONITORING / "crashwatch-dashboard.json").read_text())
    asked = {m for panel in dashboard["panels"] for t in panel["targets"] for m in METRIC.findall(t["expr"])}
    assert asked and asked <= names(crashing), asked - names(crashing)

    # an upgrade that drops a grant takes it away; uninstall takes every object of the release away
    helm.ok("upgrade", release, str(CHART), "--namespace", where, "--reuse-values", "--set", "events=false")
    (watching,) = [d for d in docs if d["kind"] == "Role" and d["metadata"].get("namespace") == namespace]
    role = kube.get(path_of(watching, where))
    assert all("events" not in rule["resources"] for rule in role["rules"])
    assert json.loads(helm.ok("status", release, "-n", where, "-o", "json"))["version"] == 3
    helm.ok("uninstall", release, "--namespace", where, "--wait", "--timeout", "2m")
    for doc in docs:
        assert not exists(kube, path_of(doc, where)), f"{doc['kind']} {doc['metadata']['name']} left behind"

    def pods_gone() -> bool:  # the garbage collector deletes them; the kubelet (played here) lets them go
        left = kube.get(pods)["items"]
        for pod in left:
            if "deletionTimestamp" in pod["metadata"]:
                kube.delete(f"/api/v1/namespaces/{where}/pods/{pod['metadata']['name']}", grace=0)
        return not left

    eventually(pods_gone, 60, "the Pods gone")
    replicasets = kube.get(f"/apis/apps/v1/namespaces/{where}/replicasets")["items"]
    assert replicasets == []
    assert helm.run("status", release, "-n", where).returncode != 0
    # what remains is the watcher's own Lease, which goes with the namespace (docs/running.md)
    left = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{where}/leases")["items"]
    leases = [lease["metadata"]["name"] for lease in left]
    assert leases == [fullname]
