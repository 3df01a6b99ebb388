"""A real control plane for the tests: etcd, kube-apiserver and kube-controller-manager on loopback.

The binaries are built from the official Go modules by scripts/build-controlplane (cached). This module
makes the certificates (a CA, the serving certificate, an admin client certificate in system:masters,
the service-account key pair), starts the three processes on free ports, writes a kubeconfig, waits for
/readyz, installs the CRDs of k8s/crds, and stops everything again. The API server keeps an audit log of
the requests made by service accounts (tokens from the TokenRequest API), so that a test can read what an
identity asked for and what it was answered (`audit_events`).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from kube import Kube

if TYPE_CHECKING:
    import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "scripts" / "build-controlplane"
CRDS = ROOT / "k8s" / "crds"
# Metadata (who, what, the answer's code; no bodies) for service accounts' requests, nothing for the
# others (the tests' admin): the log stays small. RequestReceived is left out: every request is logged
# once it is answered (a watch also when it starts).
AUDITED_GROUPS = ("system:serviceaccounts",)
CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
)


def audit_policy(groups: tuple[str, ...] = AUDITED_GROUPS) -> dict[str, Any]:
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata", "userGroups": list(groups)}, {"level": "None"}],
    }


AUDIT_POLICY = audit_policy()


class ControlPlaneUnavailable(Exception):
    """The binaries cannot be built here (no Go)."""


def binaries() -> Path:
    """Build (or reuse) the binaries; the script prints its progress to stderr."""
    if shutil.which("go") is None and not os.environ.get("CRASHWATCH_CONTROLPLANE_BIN"):
        raise ControlPlaneUnavailable("Go is not installed")
    if os.environ.get("CRASHWATCH_CONTROLPLANE_BIN"):
        return Path(os.environ["CRASHWATCH_CONTROLPLANE_BIN"])
    done = subprocess.run([str(BUILD)], stdout=subprocess.PIPE, stderr=sys.stderr, text=True, check=True)
    return Path(done.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports: each socket stays bound until all are chosen."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]


class PortTaken(RuntimeError):
    """A component found its port taken: another process bound it between our pick and its start."""


START_ATTEMPTS = 3


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert(
    subject: x509.Name,
    key: rsa.RSAPrivateKey,
    issuer: x509.Name,
    issuer_key: rsa.RSAPrivateKey,
    ca: bool = False,
    server: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _name(common: str, org: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if org:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(parts)


def make_certs(folder: Path) -> dict[str, Path]:
    ca_key = _key()
    ca_name = _name("crashwatch-test-ca")
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True)
    files: dict[str, bytes] = {"ca.crt": ca.public_bytes(serialization.Encoding.PEM), "ca.key": _pem_key(ca_key)}
    server_key = _key()
    files["server.crt"] = _cert(_name("kube-apiserver"), server_key, ca_name, ca_key, server=True).public_bytes(
        serialization.Encoding.PEM
    )
    files["server.key"] = _pem_key(server_key)
    admin_key = _key()
    files["admin.crt"] = _cert(_name("crashwatch-admin", "system:masters"), admin_key, ca_name, ca_key).public_bytes(
        serialization.Encoding.PEM
    )
    files["admin.key"] = _pem_key(admin_key)
    sa_key = _key()
    files["sa.key"] = _pem_key(sa_key)
    files["sa.pub"] = sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    paths = {}
    for name, data in files.items():
        path = folder / name
        path.write_bytes(data)
        paths[name] = path
    return paths


def sign_client_cert(
    certs: dict[str, Path], folder: Path, user: str, groups: tuple[str, ...] = ()
) -> tuple[Path, Path]:
    """A client certificate for `user` in `groups`, signed by the control plane's CA."""
    ca = x509.load_pem_x509_certificate(certs["ca.crt"].read_bytes())
    ca_key = serialization.load_pem_private_key(certs["ca.key"].read_bytes(), password=None)
    key = _key()
    subject = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, user)]
        + [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
    )
    cert = _cert(subject, key, ca.subject, ca_key)  # type: ignore[arg-type]
    cert_path, key_path = folder / f"{user}.crt", folder / f"{user}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(_pem_key(key))
    return cert_path, key_path


def write_kubeconfig(
    path: Path,
    server: str,
    ca: Path,
    cert: Path | None = None,
    key: Path | None = None,
    namespace: str | None = None,
    token: str | None = None,
) -> Path:
    """A kubeconfig with a client certificate, or a bearer token (a service account's)."""
    context: dict[str, str] = {"cluster": "test", "user": "user"}
    if namespace:
        context["namespace"] = namespace
    user: dict[str, str] = {"token": token} if token else {"client-certificate": str(cert), "client-key": str(key)}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "crashwatch-test",
                "clusters": [{"name": "test", "cluster": {"server": server, "certificate-authority": str(ca)}}],
                "users": [{"name": "user", "user": user}],
                "contexts": [{"name": "crashwatch-test", "context": context}],
            }
        )
    )
    return path


def terminate(process: subprocess.Popen[bytes] | None, grace: float) -> None:
    """SIGTERM to a component's process group, and SIGKILL if it is still there after `grace` seconds."""
    if process is None or process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=15)


@dataclass
class ControlPlane:
    bin: Path
    workdir: Path
    apiserver_args: list[str] = field(default_factory=list)  # extra flags, e.g. --watch-cache=false
    _apiserver: list[str] = field(default_factory=list)  # the flags it was started with
    controllers: bool = True  # kube-controller-manager (Deployments making Pods); benchmarks may do without
    extra_controllers: tuple[str, ...] = ()  # more of kube-controller-manager's controllers (a real node's)
    # The ServiceAccount admission plugin (a Pod gets its account's token volume) is off: with no kubelet,
    # nothing mounts it, and a Pod would be refused until the namespace's default account exists. A real
    # node (tests/realnode.py) turns it on.
    service_account_admission: bool = False
    env: dict[str, str] = field(default_factory=dict)  # for the control plane's processes (e.g. GOGC)
    # kube-controller-manager's controllers (tests/operators.py adds the statefulset controller for LWS)
    controller_names: tuple[str, ...] = CONTROLLERS
    # the users whose requests the audit log keeps, by group (a test may sign a client certificate in one)
    audited_groups: tuple[str, ...] = AUDITED_GROUPS
    # the CRDs installed at start; None: those of k8s/crds (tests/operators.py installs the real ones)
    crds: list[dict[str, Any]] | None = None
    url: str = ""
    kubeconfig: Path = Path()
    certs: dict[str, Path] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    etcd_url: str = ""
    started_in: float = 0.0

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    def audit_events(self, username: str) -> list[dict[str, Any]]:
        """The audit events (audit.k8s.io/v1, level Metadata) of the requests `username` made so far, one
        per request (a watch's ResponseStarted and ResponseComplete folded into one)."""
        events: dict[str, dict[str, Any]] = {}
        if self.audit_log.exists():
            for line in self.audit_log.read_text().splitlines():
                event = json.loads(line)
                if event.get("user", {}).get("username") == username:
                    events[event["auditID"]] = event
        return list(events.values())

    def kube(self) -> Kube:
        return Kube(self.url, self.certs["ca.crt"], self.certs["admin.crt"], self.certs["admin.key"])

    def _start(self, name: str, args: list[str]) -> None:
        # appended on a restart; the process keeps its own copy of the descriptor, ours is closed at once
        with open(self.workdir / f"{name}.log", "ab") as log:
            self.processes[name] = subprocess.Popen(
                [str(self.bin / name), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **self.env},
            )

    def _log_tail(self, name: str, lines: int = 15) -> str:
        path = self.workdir / f"{name}.log"
        text = path.read_text(errors="replace").splitlines() if path.exists() else []
        return "\n".join(text[-lines:])

    def _wait(self, name: str, check: object, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            process = self.processes[name]
            if process.poll() is not None:
                tail = self._log_tail(name)
                failure = PortTaken if "address already in use" in tail else RuntimeError
                raise failure(f"{name} exited with {process.returncode}:\n{tail}")
            try:
                if check():  # type: ignore[operator]
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{name} not ready after {timeout:.0f}s:\n{self._log_tail(name)}")

    def start(self) -> ControlPlane:
        """Start etcd and kube-apiserver (and the controllers): on free ports picked here, picked again if
        another process took one of them before the component bound it."""
        began = time.monotonic()
        self.certs = make_certs(self.workdir)
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._start_plane()
                break
            except PortTaken as exc:
                for name in ("kube-apiserver", "etcd"):
                    self._terminate(name, 15)
                shutil.rmtree(self.workdir / "etcd", ignore_errors=True)
                if attempt == START_ATTEMPTS:
                    raise
                said = str(exc).splitlines()[-1]
                print(f"control plane: a port was taken, starting again ({said})", file=sys.stderr)
        c = self.certs
        kubeconfig = self.workdir / "kubeconfig"
        self.kubeconfig = write_kubeconfig(kubeconfig, self.url, c["ca.crt"], c["admin.crt"], c["admin.key"])
        if self.controllers:
            self._start_controllers()
        self.install_crds()
        self.started_in = time.monotonic() - began
        return self

    def _start_plane(self) -> None:
        etcd_port, peer_port, api_port = free_ports(3)
        self.etcd_url = f"http://127.0.0.1:{etcd_port}"
        self._start(
            "etcd",
            [
                "--name=default",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._wait("etcd", lambda: _http_ok(f"{self.etcd_url}/health"), 30)
        self.url = f"https://127.0.0.1:{api_port}"
        c = self.certs
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(audit_policy(self.audited_groups)))
        self._apiserver = [
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={api_port}",
            f"--tls-cert-file={c['server.crt']}",
            f"--tls-private-key-file={c['server.key']}",
            f"--client-ca-file={c['ca.crt']}",
            f"--service-account-key-file={c['sa.pub']}",
            f"--service-account-signing-key-file={c['sa.key']}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",  # written before the answer: a test reads it right after
            "--authorization-mode=RBAC",
            "--service-cluster-ip-range=10.0.0.0/24",
            *([] if self.service_account_admission else ["--disable-admission-plugins=ServiceAccount"]),
            "--allow-privileged=true",
            "--profiling=false",
            "--endpoint-reconciler-type=none",
            "--v=1",
            *self.apiserver_args,
        ]
        self.start_apiserver()

    def _start_controllers(self) -> None:
        c = self.certs
        self._start(
            "kube-controller-manager",
            [
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                f"--root-ca-file={c['ca.crt']}",
                f"--service-account-private-key-file={c['sa.key']}",
                "--controllers=" + ",".join((*self.controller_names, *self.extra_controllers)),
                "--use-service-account-credentials=false",
                "--v=1",
            ],
        )

    def start_apiserver(self) -> None:
        self._start("kube-apiserver", self._apiserver)
        kube = self.kube()
        self._wait("kube-apiserver", lambda: kube.get_raw("/readyz")[0] == 200, 90)

    def _terminate(self, name: str, grace: float) -> None:
        terminate(self.processes.get(name), grace)

    def stop_apiserver(self) -> None:
        """It stops listening at once on SIGTERM, then drains for up to a minute: 5 s is enough here."""
        self._terminate("kube-apiserver", 5)

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port, with the same etcd."""
        self.stop_apiserver()
        self.start_apiserver()

    def compact_etcd(self) -> int:
        """Compact etcd up to its current revision (what kube-apiserver does every few minutes), so a
        watch from any older resourceVersion finds its history gone. Returns that revision."""
        import base64
        import json
        import urllib.request

        def post(path: str, body: dict[str, object]) -> dict[str, object]:
            request = urllib.request.Request(
                f"{self.etcd_url}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())  # type: ignore[no-any-return]

        header = post("/v3/kv/range", {"key": base64.b64encode(b"\0").decode(), "limit": 1})["header"]
        revision = int(header["revision"])  # type: ignore[index]
        post("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def user_kubeconfig(self, user: str, groups: tuple[str, ...] = (), server: str | None = None) -> Path:
        """A kubeconfig for another user (RBAC applies to it), optionally through another address."""
        cert, key = sign_client_cert(self.certs, self.workdir, user, groups)
        return write_kubeconfig(
            self.workdir / f"kubeconfig-{user}", server or self.url, self.certs["ca.crt"], cert, key
        )

    def install_crds(self) -> None:
        kube = self.kube()
        names = []
        crds = (
            self.crds if self.crds is not None else [yaml.safe_load(p.read_text()) for p in sorted(CRDS.glob("*.yaml"))]
        )
        for crd in crds:
            kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
            names.append(crd["metadata"]["name"])
        for name in names:
            kube.wait_for(
                f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}",
                lambda crd: any(
                    c["type"] == "Established" and c["status"] == "True"
                    for c in crd.get("status", {}).get("conditions", [])
                ),
                timeout=30,
            )
        # discovery of the new groups can lag the Established condition a little
        for group in ("nvidia.com/v1beta1", "nvidia.com/v1alpha1"):
            kube.wait_for(f"/apis/{group}", lambda doc: bool(doc.get("resources")), timeout=30)

    def stop(self) -> None:
        for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
            self._terminate(name, 15)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _http_ok(url: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(url, timeout=2) as response:
        return bool(response.status == 200)


ENABLE = "install Go >= 1.26 (the control plane is built from the Go module proxy by scripts/build-controlplane)"


def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane, up until the generator is closed: for the session's fixture, and for a module that
    needs one of its own. (pytest is imported here: the benchmarks use this module without it.)"""
    import pytest

    try:
        found = binaries()
    except ControlPlaneUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"e2e tests must run under CI, but {exc}: {ENABLE}")
        pytest.skip(f"e2e tests skipped: {exc}; to run them, {ENABLE}")
    plane = ControlPlane(found, tmp_path_factory.mktemp("controlplane"))
    try:
        plane.start()
        print(f"\ncontrol plane up in {plane.started_in:.1f}s at {plane.url}", file=sys.stderr)
        yield plane
    finally:
        plane.stop()
