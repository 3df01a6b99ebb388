"""The real Dynamo operator and the real LeaderWorkerSet controller, run out of cluster beside a test control plane.

Users run crashwatch beside these two controllers, which write the same statuses (the operator) and recreate
whole groups (LWS) in ways our stand-ins did not show. Neither module is served by the Go module proxy, so
scripts/build-operator builds them from source tarballs (found in $CRASHWATCH_SHARED, by default the folder
`shared` beside the repository); this module finds the binaries (CRASHWATCH_OPERATOR_BIN and
CRASHWATCH_LWS_BIN, as scripts/test exports them, else a build), and starts a control plane of their own with
what they need to run:

- kube-apiserver with `--enable-aggregator-routing=true`, so that a webhook Service is resolved by the API
  server itself, here an ExternalName Service naming localhost (the operator insists on Service-form
  conversion webhooks on its CRDs, and an EndpointSlice may not name a loopback address);
- kube-controller-manager with the statefulset controller besides the usual ones (LWS builds on StatefulSets);
- the operator's 7 CRDs from its config/crd/bases, their conversion webhooks pointed at that Service, and
  LWS's CRDs, whose admission webhooks are URL-form configurations (the Pod webhooks keep LWS's
  objectSelector: they fail closed and would otherwise catch every Pod);
- webhook certificates of their own (a CA per control plane), the operator's Secret with the CA, and the
  ClusterRoles its configuration names (`dynamo-planner`, `dynamo-dgdr-profiling`, `dynamo-epp`);
- the operator's namespace file, which it reads from the hard-coded in-cluster path: the operator runs in a
  private mount namespace (`unshare -m`) with a tmpfs there, so nothing is written on the host.

Each controller talks to the API server as a user of its own (a client certificate in `system:masters`
and in AUDITED), so the audit log tells its requests from crashwatch's and the tests'. Every process is
stopped by its pid and every temporary folder removed. Driving Pods as a kubelet would is tests/kube.py's.
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NoReturn

import envtest
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from kube import Kube

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "scripts" / "build-operator"
OPERATOR_NAMESPACE = "dynamo-system"
WEBHOOK_SERVICE = "dynamo-operator-webhook-service"
WEBHOOK_SECRET = "webhook-server-cert"
CLUSTER_ROLES = ("dynamo-planner", "dynamo-dgdr-profiling", "dynamo-epp")
AUDITED = "crashwatch-test:audited"  # the group whose requests the audit log keeps (besides service accounts)
OPERATOR_USER, LWS_USER = "dynamo-operator", "lws-controller"
# the in-cluster path the operator reads its namespace from (hard-coded there)
NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
CONVERTED = ("dynamographdeployments", "dynamocomponentdeployments")
ENV = {"dynamo": "CRASHWATCH_OPERATOR_BIN", "lws": "CRASHWATCH_LWS_BIN"}


def binaries(name: str) -> Path:
    """The folder of the built controller (`manager`, and `../src` with its CRDs): from the environment, or
    built now. Skips the test, with one line saying why, where it cannot be had (no Go, no tarball)."""
    if os.environ.get(ENV[name]):
        return Path(os.environ[ENV[name]])
    if shutil.which("go") is None:
        _skip(f"the {name} controller tier is skipped: Go is not installed (scripts/build-operator {name})")
    done = subprocess.run([str(BUILD), name], capture_output=True, text=True, check=False)
    if done.returncode in (3, 4):
        why = done.stderr.strip().splitlines()[-1].removeprefix("build-operator: ")
        if done.returncode == 4:  # no source tarballs beside this checkout: nobody can build it here
            pytest.skip(f"the {name} controller tier is skipped: {why}")
        _skip(f"the {name} controller tier is skipped: {why}")
    if done.returncode != 0:
        raise RuntimeError(f"scripts/build-operator {name} failed:\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def _skip(why: str) -> NoReturn:
    """Skip, with one line saying why; under CI=true, which has Go and root, fail instead."""
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI must run it)")
    pytest.skip(why)


def _can_unshare() -> str | None:
    """Why a private mount namespace cannot be had here, or None."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    done = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    if done.returncode != 0:
        return f"unshare -m is refused here ({done.stderr.decode().strip()}): run as root"
    return None


# --- certificates ------------------------------------------------------------------------------------------


@dataclass
class WebhookCerts:
    ca: bytes
    cert: bytes
    key: bytes

    def write(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "tls.crt").write_bytes(self.cert)
        (folder / "tls.key").write_bytes(self.key)
        (folder / "ca.crt").write_bytes(self.ca)
        return folder


def webhook_certs(dns_names: tuple[str, ...], expired: bool = False) -> WebhookCerts:
    """A CA and a serving certificate for 127.0.0.1 and `dns_names` (the name the API server checks when it
    calls a Service-form webhook is <service>.<namespace>.svc); `expired`: one that ended an hour ago."""
    now = datetime.datetime.now(datetime.UTC)
    starts, ends = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=2)
    if expired:
        starts, ends = now - datetime.timedelta(days=2), now - datetime.timedelta(hours=1)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "crashwatch-test-webhook-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    sans += [x509.DNSName(name) for name in dns_names]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "webhook")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(starts)
        .not_valid_after(ends)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return WebhookCerts(
        ca=ca.public_bytes(pem),
        cert=cert.public_bytes(pem),
        key=key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


# --- CRDs and webhook configurations -----------------------------------------------------------------------


def operator_crds(src: Path, port: int, ca: bytes) -> list[dict[str, Any]]:
    """The operator's CRDs, their conversion webhooks pointed at our Service in OPERATOR_NAMESPACE."""
    import base64

    crds = []
    for path in sorted((src / "deploy" / "operator" / "config" / "crd" / "bases").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        webhook = crd["spec"].get("conversion", {}).get("webhook")
        if webhook:
            webhook["clientConfig"] = {
                "service": {"namespace": OPERATOR_NAMESPACE, "name": WEBHOOK_SERVICE, "path": "/convert", "port": port},
                "caBundle": base64.b64encode(ca).decode(),
            }
        crds.append(crd)
    return crds


def lws_crds(src: Path) -> list[dict[str, Any]]:
    folder = next(src.glob("lws-*")) / "config" / "crd" / "bases"
    return [yaml.safe_load(path.read_text()) for path in sorted(folder.glob("*.yaml"))]


# The operator runs a multinode component on LWS only where the Volcano API group is served too (it makes a
# PodGroup per LWS): the PodGroup kind alone, schema-less, with no Volcano scheduler behind it. Nothing
# schedules the Pods here anyway.
VOLCANO_PODGROUP_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.volcano.sh"},
    "spec": {
        "group": "scheduling.volcano.sh",
        "names": {"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups", "singular": "podgroup"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1beta1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                "subresources": {"status": {}},
            }
        ],
    },
}


def lws_webhooks(src: Path, port: int, ca: bytes) -> list[dict[str, Any]]:
    """LWS's admission webhooks (config/webhook) as URL-form configurations, with the objectSelector its
    kustomize patches put on the Pod webhooks."""
    import base64

    folder = next(src.glob("lws-*")) / "config" / "webhook"
    docs = list(yaml.safe_load_all((folder / "manifests.yaml").read_text()))
    selector = {"matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]}
    for doc in docs:
        doc["metadata"]["name"] = f"lws-{doc['metadata']['name']}"
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": base64.b64encode(ca).decode()}
            if any("pods" in rule["resources"] for rule in hook["rules"]):
                hook["objectSelector"] = selector
    return docs


WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


def status_webhook(name: str, namespace: str, port: int, ca: bytes) -> dict[str, Any]:
    """crashwatch's status admission webhook as docs/status.md configures it, in URL form (crashwatch runs
    beside the control plane), for one namespace's DCDs and DGDs."""
    import base64

    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "status.crashwatch.dev",
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}/admit-status",
                    "caBundle": base64.b64encode(ca).decode(),
                },
                "rules": [
                    {
                        "apiGroups": ["nvidia.com"],
                        "apiVersions": ["*"],
                        "operations": ["UPDATE"],
                        "resources": ["dynamographdeployments/status", "dynamocomponentdeployments/status"],
                        "scope": "Namespaced",
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "timeoutSeconds": 5,
                "admissionReviewVersions": ["v1"],
            }
        ],
    }


def admission_args(kube: Kube, namespace: str, folder: Path, name: str) -> tuple[str, ...]:
    """Register crashwatch's status admission webhook for `namespace` (configuration `name`, on a port
    of its own, with certificates in `folder`): the `crashwatch run` flags that serve it."""
    import envtest

    certs = webhook_certs(()).write(folder)
    port = envtest.free_port()
    kube.create(WEBHOOKS, status_webhook(name, namespace, port, (certs / "ca.crt").read_bytes()))
    tls = ("--tls-cert-file", str(certs / "tls.crt"), "--tls-private-key-file", str(certs / "tls.key"))
    return ("--admission-address", f"127.0.0.1:{port}", *tls)


# --- the processes -----------------------------------------------------------------------------------------


@dataclass
class Process:
    """A controller we started: its own process group, its log, stopped by its pid."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join(text[-lines:])

    def stop(self, grace: float = 10) -> None:
        if self.popen.poll() is not None:
            return
        os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=15)


def _start(name: str, argv: list[str], log: Path, env: dict[str, str]) -> Process:
    with open(log, "ab") as out:
        popen = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **env},
        )
    return Process(name, popen, log)


def _in_private_mount_namespace(argv: list[str], namespace: str) -> list[str]:
    """argv run with NAMESPACE_FILE saying `namespace`, in a mount namespace of its own: a tmpfs on the
    deepest folder of that path that exists here (nothing below it is needed by the operator), the rest of
    the path made inside it. Mounts made there never reach the host's (private propagation)."""
    target = Path(NAMESPACE_FILE).parent
    mount_at = target
    while not mount_at.exists():
        mount_at = mount_at.parent
    script = (
        'set -e; mount -t tmpfs -o size=1m,mode=0755 crashwatch-test "$1"; mkdir -p "$2"; '
        'printf %s "$3" > "$2/namespace"; shift 3; exec "$@"'
    )
    return [
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "sh",
        str(mount_at),
        str(target),
        namespace,
        *argv,
    ]


def _healthy(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _wait(process: Process, check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process.alive():
            raise RuntimeError(f"{process.name} exited with {process.popen.returncode}:\n{process.tail()}")
        if check():
            return
        time.sleep(0.2)
    raise RuntimeError(f"{process.name}: {what} not reached in {timeout:.0f}s:\n{process.tail()}")


@dataclass
class Controllers:
    """A control plane with the real Dynamo operator and (optionally) the real LWS controller beside it."""

    plane: envtest.ControlPlane
    workdir: Path
    operator: Process | None = None
    lws: Process | None = None
    operator_args: list[str] = field(default_factory=list)
    operator_env: dict[str, str] = field(default_factory=dict)

    def kube(self) -> Kube:
        return self.plane.kube()

    def user_kubeconfig(self, user: str) -> Path:
        """A kubeconfig for `user`, a cluster admin whose requests the audit log keeps."""
        return self.plane.user_kubeconfig(user, ("system:masters", AUDITED))

    def start_operator(self) -> Process:
        assert self.operator is None or not self.operator.alive()
        self.operator = _start("dynamo-operator", self.operator_args, self.workdir / "operator.log", self.operator_env)
        return self.operator

    def stop_operator(self) -> None:
        if self.operator is not None:
            self.operator.stop()

    def stop(self) -> None:
        for process in (self.operator, self.lws):
            if process is not None:
                process.stop()

    def check_alive(self) -> None:
        for process in (self.operator, self.lws):
            if process is not None and not process.alive():
                raise AssertionError(f"{process.name} exited with {process.popen.returncode}:\n{process.tail()}")


@dataclass
class Setup:
    """What the controllers need, decided before their control plane starts: the binaries, the webhook
    certificates and ports (the CRDs name them), and a folder for their configurations and logs."""

    operator_bin: Path
    lws_bin: Path | None
    certs: WebhookCerts
    operator_port: int
    lws_port: int
    workdir: Path


def wait_operator_ready(controllers: Controllers, timeout: float = 180) -> Process:
    """Start the operator again (after Controllers.stop_operator) and wait until it answers /readyz and its
    DynamoGraphDeployment controller runs (its caches synced: /readyz says yes before that)."""
    log = controllers.workdir / "operator.log"
    offset = log.stat().st_size if log.exists() else 0
    operator = controllers.start_operator()
    health = _operator_health_port(controllers.operator_args)
    _wait(operator, lambda: _healthy(f"http://127.0.0.1:{health}/readyz"), timeout, "/readyz")

    def reconciling() -> bool:
        with open(log, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        return any(
            "Starting workers" in line and '"controller": "DynamoGraphDeployment",' in line
            for line in text.splitlines()
        )

    _wait(operator, reconciling, timeout, "the DynamoGraphDeployment controller's workers")
    return operator


def configure(plane: envtest.ControlPlane, tmp_path_factory: pytest.TempPathFactory, lws: bool = True) -> Setup:
    """Add what the controllers need to a control plane not yet started, whatever else it carries (a real
    node's options): aggregator routing, the statefulset controller, their CRDs, the audited group. Skips,
    with one line, where the controllers cannot be had."""
    operator_bin = binaries("dynamo")
    lws_bin = binaries("lws") if lws else None
    why = _can_unshare()
    if why:
        pytest.skip(
            f"the operator tier is skipped: {why} (the operator's namespace file needs a private mount namespace)"
        )
    setup = Setup(
        operator_bin,
        lws_bin,
        webhook_certs((f"{WEBHOOK_SERVICE}.{OPERATOR_NAMESPACE}.svc", f"{WEBHOOK_SERVICE}.{OPERATOR_NAMESPACE}")),
        envtest.free_port(),
        envtest.free_port(),
        tmp_path_factory.mktemp("operators"),
    )
    crds = operator_crds(operator_bin.parent / "src", setup.operator_port, setup.certs.ca)
    if lws_bin is not None:
        crds += [*lws_crds(lws_bin.parent / "src"), VOLCANO_PODGROUP_CRD]
    plane.apiserver_args = [*plane.apiserver_args, "--enable-aggregator-routing=true"]
    if "statefulset-controller" not in (*plane.controller_names, *plane.extra_controllers):
        plane.extra_controllers = (*plane.extra_controllers, "statefulset-controller")
    plane.audited_groups = (*plane.audited_groups, AUDITED)
    plane.crds = crds
    return setup


def launch(setup: Setup, plane: envtest.ControlPlane, webhook_host: str = "127.0.0.1") -> Controllers:
    """On the started control plane configure() prepared: the prerequisites, LWS's webhooks, LWS and the
    operator running, its CRDs settled. The caller stops them (Controllers.stop) before the plane.

    `webhook_host`: where the operator's conversion webhook listens. On loopback (the default) the API
    server reaches it through an ExternalName Service, which serves admission-style calls but NOT
    conversion ("unsupported service type ExternalName"): enough while every object is read at its stored
    version, not once the operator, restarted, reads DGDs at v1alpha1 (its cache then never syncs, and it
    exits after 2 minutes). A real node gives a non-loopback address of this machine: then a Service with
    an EndpointSlice there, which conversion can use."""
    controllers = Controllers(plane, setup.workdir)
    try:
        kube = plane.kube()
        _operator_prerequisites(kube, setup.certs, setup.operator_port, webhook_host)
        if setup.lws_bin is not None:
            for doc in lws_webhooks(setup.lws_bin.parent / "src", setup.lws_port, setup.certs.ca):
                kind = doc["kind"].lower() + "s"
                kube.create(f"/apis/admissionregistration.k8s.io/v1/{kind}", doc)
            controllers.lws = _start_lws(
                controllers, setup.lws_bin / "manager", setup.certs.write(setup.workdir / "lws-certs"), setup.lws_port
            )
        controllers.operator_args = _operator_argv(
            controllers,
            setup.operator_bin / "manager",
            setup.certs.write(setup.workdir / "operator-certs"),
            setup.operator_port,
            webhook_host,
        )
        operator = controllers.start_operator()
        health = _operator_health_port(controllers.operator_args)
        _wait(operator, lambda: _healthy(f"http://127.0.0.1:{health}/readyz"), 120, "/readyz")
        _settled(kube, operator)
    except BaseException:
        controllers.stop()
        raise
    return controllers


def started(tmp_path_factory: pytest.TempPathFactory, lws: bool = True) -> Iterator[Controllers]:
    """A control plane of its own with the real operator (and LWS) running, until the generator is closed."""
    plane = envtest.ControlPlane(
        envtest.binaries(),
        tmp_path_factory.mktemp("controlplane"),
        controller_names=(*envtest.CONTROLLERS, "statefulset-controller"),
    )
    setup = configure(plane, tmp_path_factory, lws)
    controllers: Controllers | None = None
    try:
        plane.start()
        controllers = launch(setup, plane)
        print(f"\noperator up in {plane.url}; control plane in {plane.started_in:.1f}s", file=sys.stderr)
        yield controllers
    finally:
        if controllers is not None:
            controllers.stop()
        plane.stop()
        shutil.rmtree(setup.workdir, ignore_errors=True)


class Folders:
    """What on_node asks of pytest's tmp_path_factory, for a benchmark run outside pytest: fresh folders
    under one root named `prefix`."""

    def __init__(self, prefix: str) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))

    def mktemp(self, name: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.root))


def on_node(tmp_path_factory: pytest.TempPathFactory, lws: bool = True) -> Iterator[tuple[Any, Controllers]]:
    """A real node (tests/realnode.py: kubelet, containerd, runc) with the real operator (and LWS) on its
    control plane, which carries both the node's options and the controllers'; until the generator is
    closed. Skipped, with one line, where either cannot be had."""
    import realnode

    found, envtest_bin = realnode.available()
    node = realnode.make(found, envtest_bin, tmp_path_factory.mktemp("node"), tmp_path_factory.mktemp("node-plane"))
    setup = configure(node.plane, tmp_path_factory, lws)
    controllers: Controllers | None = None
    try:
        node.start()
        controllers = launch(setup, node.plane, webhook_host=node.ip)
        print(
            f"\nreal node up in {node.started_in:.1f}s (kubelet at {node.ip}), the operator"
            f"{' and LWS' if lws else ''} beside it",
            file=sys.stderr,
        )
        yield node, controllers
    finally:
        if controllers is not None:
            controllers.stop()
        node.stop()
        shutil.rmtree(setup.workdir, ignore_errors=True)


def _settled(kube: Kube, operator: Process, quiet: float = 3.0, timeout: float = 120) -> None:
    """Wait until the operator is done updating its CRDs (it injects the conversion CA; a CRD update makes
    the API server answer 429 "storage is (re)initializing" for a moment) and DGDs and DCDs are served."""
    from kube import ApiError

    crds = [f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}.nvidia.com" for n in CONVERTED]
    lists = [f"/apis/nvidia.com/v1beta1/{n}" for n in CONVERTED]
    last: list[str] = []
    since = time.monotonic()
    deadline = since + timeout
    while time.monotonic() < deadline:
        if not operator.alive():
            raise RuntimeError(f"{operator.name} exited with {operator.popen.returncode}:\n{operator.tail()}")
        try:
            versions = [kube.get(path)["metadata"]["resourceVersion"] for path in crds]
            for path in lists:
                kube.get(path)
        except ApiError:
            versions = []
        if not versions or versions != last:
            last, since = versions, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(0.2)
    raise RuntimeError(f"the operator's CRDs did not settle in {timeout:.0f}s:\n{operator.tail()}")


def _operator_prerequisites(kube: Kube, certs: WebhookCerts, port: int, host: str = "127.0.0.1") -> None:
    import base64

    kube.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}}
    )
    for role in CLUSTER_ROLES:
        kube.create(
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": role},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
            },
        )
    kube.create(
        f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": WEBHOOK_SECRET},
            "type": "kubernetes.io/tls",
            "data": {
                "ca.crt": base64.b64encode(certs.ca).decode(),
                "tls.crt": base64.b64encode(certs.cert).decode(),
                "tls.key": base64.b64encode(certs.key).decode(),
            },
        },
    )
    # the conversion webhook's Service, resolved by the API server (aggregator routing) to where the operator
    # listens on loopback: an ExternalName Service naming localhost (an EndpointSlice may not name a loopback
    # address), on the port the CRDs' conversion webhooks call
    if not host.startswith("127."):
        _webhook_service_at(kube, host, port)
        return
    kube.create(
        f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": WEBHOOK_SERVICE},
            "spec": {
                "type": "ExternalName",
                "externalName": "localhost",
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            },
        },
    )


def _webhook_service_at(kube: Kube, address: str, port: int) -> None:
    """The webhook Service as a cluster has it: no selector, an EndpointSlice (and the Endpoints older
    resolvers read) naming `address`, a non-loopback address of this machine."""
    kube.create(
        f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": WEBHOOK_SERVICE},
            "spec": {"ports": [{"name": "https", "port": port, "targetPort": port, "protocol": "TCP"}]},
        },
    )
    kube.create(
        f"/apis/discovery.k8s.io/v1/namespaces/{OPERATOR_NAMESPACE}/endpointslices",
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": WEBHOOK_SERVICE, "labels": {"kubernetes.io/service-name": WEBHOOK_SERVICE}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        },
    )
    kube.create(
        f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/endpoints",
        {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": WEBHOOK_SERVICE},
            "subsets": [{"addresses": [{"ip": address}], "ports": [{"name": "https", "port": port}]}],
        },
    )


def _operator_argv(
    controllers: Controllers, manager: Path, cert_dir: Path, port: int, host: str = "127.0.0.1"
) -> list[str]:
    config = {
        "apiVersion": "operator.config.dynamo.nvidia.com/v1alpha1",
        "kind": "OperatorConfiguration",
        "server": {
            "metrics": {"bindAddress": "127.0.0.1", "port": envtest.free_port(), "secure": False},
            "healthProbe": {"bindAddress": "127.0.0.1", "port": envtest.free_port()},
            "webhook": {
                "host": host,
                "port": port,
                "certDir": str(cert_dir),
                "certProvisionMode": "manual",
                "secretName": WEBHOOK_SECRET,
                "serviceName": WEBHOOK_SERVICE,
            },
        },
        "leaderElection": {"enabled": False},
        "namespace": {"restricted": ""},
        "orchestrators": {
            "grove": {"enabled": False},
            "kaiScheduler": {"enabled": False},
            "volcanoScheduler": {"enabled": False},
        },
        "rbac": {
            "plannerClusterRoleName": CLUSTER_ROLES[0],
            "dgdrProfilingClusterRoleName": CLUSTER_ROLES[1],
            "eppClusterRoleName": CLUSTER_ROLES[2],
        },
        "mpi": {"sshSecretName": "mpi-run-ssh-secret", "sshSecretNamespace": OPERATOR_NAMESPACE},
        "discovery": {"backend": "kubernetes"},
    }
    path = controllers.workdir / "operator-config.yaml"
    path.write_text(yaml.safe_dump(config))
    controllers.operator_env = {"KUBECONFIG": str(controllers.user_kubeconfig(OPERATOR_USER))}
    argv = [str(manager), f"--config={path}", "--operator-version=0.9.0"]
    return _in_private_mount_namespace(argv, OPERATOR_NAMESPACE)


def _operator_health_port(argv: list[str]) -> int:
    config = next(a for a in argv if a.startswith("--config=")).partition("=")[2]
    return int(yaml.safe_load(Path(config).read_text())["server"]["healthProbe"]["port"])


def _start_lws(controllers: Controllers, manager: Path, cert_dir: Path, port: int) -> Process:
    health = envtest.free_port()
    config = {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
    }
    path = controllers.workdir / "lws-config.yaml"
    path.write_text(yaml.safe_dump(config))
    kubeconfig = controllers.user_kubeconfig(LWS_USER)
    process = _start(
        "lws-controller",
        [str(manager), f"--config={path}"],
        controllers.workdir / "lws.log",
        {"KUBECONFIG": str(kubeconfig)},
    )
    _wait(process, lambda: _healthy(f"http://127.0.0.1:{health}/readyz"), 120, "/readyz")
    return process


# --- watching what everyone writes -------------------------------------------------------------------------


@dataclass
class Seen:
    at: float  # time.monotonic() when it arrived
    type: str
    obj: dict[str, Any]


class Recorder:
    """Every version of a collection, as a watch delivers it, with the time it arrived: what a waiter polling
    at any moment could have read. A watch the server ends (its timeout, or a busy API server closing a
    watcher that reads too slowly) is resumed from the last version seen, so no version goes missing
    unnoticed; if the server can no longer resume it (410 Gone), `snapshot()` fails the test, since an
    assertion over the versions would then be over only some of them."""

    def __init__(self, kube: Kube, path: str) -> None:
        self.kube, self.path = kube, path
        self.seen: list[Seen] = []
        self.resumed = 0  # watches resumed after the server ended one
        self._lost: str | None = None
        self._version = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._response: Any = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError(f"watch of {path} did not start")

    def _run(self) -> None:
        listed = self.kube.get(self.path)
        kind, api = listed["kind"].removesuffix("List"), listed["apiVersion"]
        now = time.monotonic()
        with self._lock:
            self.seen.extend(Seen(now, "ADDED", {"kind": kind, "apiVersion": api, **o}) for o in listed["items"])
        self._version = listed["metadata"]["resourceVersion"]
        while not self._stop.is_set():
            with contextlib.suppress(OSError, ValueError, http.client.HTTPException):
                self._watch()
            if self._lost is not None or self._stop.wait(0.1):
                return
            self.resumed += 1

    def _watch(self) -> None:
        """One watch from the last version seen, until the server ends it."""
        connection = http.client.HTTPSConnection(
            self.kube.host, self.kube.port, context=self.kube.context, timeout=None
        )
        try:
            connection.request(
                "GET",
                f"{self.path}?watch=true&allowWatchBookmarks=true&resourceVersion={self._version}",
                headers={"Accept": "application/json"},
            )
            response = connection.getresponse()
            self._response = response
            self._ready.set()
            if response.status != 200:
                self._lost = f"{response.status} {response.read(500)!r}"
                return
            stream: IO[bytes] = response
            for line in stream:
                if self._stop.is_set():
                    break
                event = json.loads(line)
                obj = event["object"]
                if event["type"] == "ERROR":
                    self._lost = f"{obj.get('code')} {obj.get('message')}"
                    break
                self._version = obj["metadata"]["resourceVersion"]
                if event["type"] == "BOOKMARK":
                    continue
                with self._lock:
                    self.seen.append(Seen(time.monotonic(), event["type"], obj))
        finally:
            connection.close()

    def snapshot(self, name: str | None = None) -> list[Seen]:
        if self._lost is not None:
            raise AssertionError(f"the watch of {self.path} lost versions: {self._lost}")
        with self._lock:
            return [s for s in self.seen if name is None or s.obj["metadata"]["name"] == name]

    def close(self) -> None:
        self._stop.set()
        try:
            if self._response is not None:
                self._response.fp.raw._sock.shutdown(2)  # end the blocking read at once
        except (AttributeError, OSError):
            pass
        self._thread.join(timeout=10)


def status_writes(plane: envtest.ControlPlane, user: str, since: str, until: str) -> dict[str, int]:
    """Status writes (patch or update of a DGD's or DCD's status subresource) by `user` between two audit
    timestamps (RFC 3339 with microseconds), 409s included, and those 409s: {"dgd", "dcd", "conflicts"}."""
    start = datetime.datetime.fromisoformat(since)
    end = datetime.datetime.fromisoformat(until)
    counts = {"dgd": 0, "dcd": 0, "conflicts": 0}
    for event in plane.audit_events(user):
        ref = event.get("objectRef", {})
        when = datetime.datetime.fromisoformat(event["requestReceivedTimestamp"])
        if not start <= when <= end or ref.get("subresource") != "status" or event["verb"] not in ("patch", "update"):
            continue
        kind = {"dynamographdeployments": "dgd", "dynamocomponentdeployments": "dcd"}.get(ref.get("resource", ""))
        if kind is None:
            continue
        counts[kind] += 1
        if event.get("responseStatus", {}).get("code") == 409:
            counts["conflicts"] += 1
    return counts


def per_minute(counts: dict[str, int], since: str, until: str) -> dict[str, float]:
    minutes = (datetime.datetime.fromisoformat(until) - datetime.datetime.fromisoformat(since)).total_seconds() / 60
    return {key: round(value / max(minutes, 1e-9), 1) for key, value in counts.items()}
