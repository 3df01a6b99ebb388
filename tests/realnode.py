"""A real node for the tests: containerd and runc, the CNI bridge, a kubelet registered as a node, kube-scheduler,
and kube-controller-manager with what Deployments and Pods need, on a control plane of the node's own.

Everywhere else a test plays the kubelet (tests/kube.py) and writes the statuses it imagines; here a real
kubelet (built from the control plane's k8s.io/kubernetes pin by scripts/build-node) runs real containers
(Debian's containerd, runc and CNI plugins) and writes the statuses it really writes: a crash-looping
container runs again between crashes, `CrashLoopBackOff` shows only as a backoff ends, a Pod without a
readiness probe is Ready between crashes. Images come from docker-archive tarballs (scripts/build-node makes
a busybox and a pause image; scripts/build-image's watcher image is saved by podman) imported with
`ctr -n k8s.io images import`; Pods use `imagePullPolicy: Never`, and nothing is pulled from a registry.

What this machine needs, and why each setting is here:
- containerd: `restrict_oom_score_adj` (root without CAP_SYS_RESOURCE cannot lower a score: every sandbox
  would fail), its root, state, socket and CNI configuration in the node's temp folder;
- kubelet: `failCgroupV1: false` (cgroup v1 hosts), `cgroupDriver: cgroupfs` (no systemd), `failSwapOn: false`,
  a `clusterDNS` (without one, an event on every sync), and `--node-ip` the machine's own interface address
  (a loopback one is refused); its API on that address (the API server reaches it there for logs), its
  health endpoint on loopback. Traffic stays on this machine;
- kube-apiserver: `--kubelet-preferred-address-types=InternalIP` (the node's name resolves nowhere), the
  ServiceAccount admission plugin (Pods get their account's token as the kubelet mounts it);
- kube-controller-manager: besides the Deployment controllers, node-lifecycle (the node's taints follow its
  Ready condition) and the root CA publisher (the token volume's `kube-root-ca.crt`).

Some paths are fixed by the components and lie outside any temp folder: /run/containerd (shim sockets),
/var/lib/kubelet (device plugins, pod resources), /var/log/containers, /var/lib/cni (the CNI cache), the
`kubepods` cgroups and the bridge. Those that did not exist before the node started are removed when it stops,
and what a node left behind when its process was killed is removed by the next one (a state file beside
the lock). Every process is stopped by its pid. A lock file makes a second test process wait rather than start
a second node on the same machine.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import http.client
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import envtest
import yaml
from cli import crashwatch_command
from dynamo import dcds, deployment, dgds, make_graph
from kube import ApiError, Kube

if TYPE_CHECKING:
    import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "scripts" / "build-node"
BUILD_IMAGE = ROOT / "scripts" / "build-image"
NODE_NAME = "crashwatch-node"
BRIDGE = "cwtest0"
POD_SUBNET = "10.213.77.0/24"
CLUSTER_DNS = "10.0.0.10"  # in the control plane's service range; nothing answers there, nothing asks
CNI_BIN = Path("/usr/lib/cni")
LOCK = Path(tempfile.gettempdir()) / "crashwatch-realnode.lock"
STATE = Path(tempfile.gettempdir()) / "crashwatch-realnode.state.json"
# fixed by the components, outside any temp folder
FIXED_PATHS = (
    Path("/run/containerd"),
    Path("/var/lib/kubelet"),
    Path("/var/log/containers"),
    Path("/var/lib/cni"),
)
ENABLE = (
    "run as root with Go >= 1.26 (scripts/build-node installs containerd, runc, containernetworking-plugins and "
    "busybox-static with apt-get, and builds kubelet and kube-scheduler)"
)


class NodeUnavailable(Exception):
    """This machine cannot run a node (`machine` True: not root, no cgroups), or its parts are missing."""

    def __init__(self, reason: str, machine: bool) -> None:
        super().__init__(reason)
        self.machine = machine


@dataclass(frozen=True)
class Parts:
    bin: Path  # kubelet, kube-scheduler, pause
    busybox: Path  # docker-archive tarballs
    pause: Path


def parts() -> Parts:
    """The node's binaries and images (CRASHWATCH_NODE_*, as scripts/test exports them, or built here)."""
    if os.geteuid() != 0:
        raise NodeUnavailable("not root (containerd, runc and the kubelet need it)", machine=True)
    if not (Path("/sys/fs/cgroup/memory").is_dir() or Path("/sys/fs/cgroup/cgroup.controllers").exists()):
        raise NodeUnavailable("no memory cgroup under /sys/fs/cgroup", machine=True)
    env = {
        name: os.environ.get(name, "")
        for name in ("CRASHWATCH_NODE_BIN", "CRASHWATCH_NODE_BUSYBOX_IMAGE", "CRASHWATCH_NODE_PAUSE_IMAGE")
    }
    if not all(env.values()):
        done = subprocess.run([str(BUILD), "--env"], stdout=subprocess.PIPE, stderr=sys.stderr, text=True, check=False)
        if done.returncode == 3:
            raise NodeUnavailable("kubelet or the Debian packages are missing (scripts/build-node exited 3)", False)
        if done.returncode != 0:
            raise RuntimeError(f"scripts/build-node exited with {done.returncode}")
        env.update(dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line))
    found = Parts(
        Path(env["CRASHWATCH_NODE_BIN"]),
        Path(env["CRASHWATCH_NODE_BUSYBOX_IMAGE"]),
        Path(env["CRASHWATCH_NODE_PAUSE_IMAGE"]),
    )
    missing = [
        str(p)
        for p in (found.bin / "kubelet", found.bin / "kube-scheduler", found.busybox, found.pause)
        if not p.exists()
    ]
    tools = [t for t in ("containerd", "ctr", "runc") if shutil.which(t) is None]
    if not (CNI_BIN / "bridge").exists():
        tools.append(str(CNI_BIN / "bridge"))
    if missing or tools:
        raise NodeUnavailable(f"missing: {', '.join(missing + tools)}", machine=False)
    return found


def image_ref(tarball: Path) -> str:
    """The reference a docker-archive tarball carries (what `ctr images import` names the image)."""
    with tarfile.open(tarball) as tar:
        member = tar.extractfile("manifest.json")
        assert member is not None
        return str(json.load(member)[0]["RepoTags"][0])


def node_ip() -> str:
    """The machine's own IPv4 address on its first non-loopback interface that has one (the kubelet
    refuses a loopback one). Nothing is sent anywhere to find it: the interfaces are asked (SIOCGIFADDR)."""
    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in sorted(socket.if_nameindex()):
            if name == "lo" or name.startswith(BRIDGE):
                continue
            try:
                raw = fcntl.ioctl(s.fileno(), siocgifaddr, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            address = socket.inet_ntoa(raw[20:24])
            if not address.startswith("127."):
                return address
    raise NodeUnavailable("no non-loopback IPv4 address for the kubelet's --node-ip", machine=True)


# --- what lies outside the temp folder ----------------------------------------------------------------------


def _cgroup_mounts() -> list[Path]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if fstype in ("cgroup", "cgroup2") and fields[4].startswith("/sys/fs/cgroup"):
            found.append(Path(fields[4]))
    return found


def fixed_paths() -> list[Path]:
    """The paths outside the temp folder the node may create: FIXED_PATHS and the kubepods cgroups."""
    return [*FIXED_PATHS, *(mount / "kubepods" for mount in _cgroup_mounts())]


def _umount_under(prefixes: list[Path]) -> None:
    """Detach every mount at or under the prefixes, deepest first (rootfs overlays, token tmpfs, netns)."""
    libc = ctypes.CDLL(None, use_errno=True)
    mnt_detach = 2
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = Path(line.split()[4].replace("\\040", " "))
        if any(point == p or p in point.parents for p in prefixes):
            points.append(point)
    for point in sorted(set(points), key=lambda p: len(p.parts), reverse=True):
        libc.umount2(str(point).encode(), mnt_detach)


def _remove(path: Path) -> None:
    if not path.exists() and not path.is_symlink():
        return
    if path.parts[1:3] == ("sys", "fs"):  # a cgroup: rmdir the children first, nothing else can go
        _kill_cgroup(path)
        for child in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                child.rmdir()
        with contextlib.suppress(OSError):
            path.rmdir()
        return
    _umount_under([path])
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _kill_cgroup(path: Path) -> None:
    """SIGKILL what still runs in a kubepods cgroup the node created: its containers' processes (a pause,
    a `sleep`) outlive a killed shim, and a cgroup with a process in it cannot be removed."""
    pids: set[int] = set()
    for procs in path.rglob("cgroup.procs"):
        with contextlib.suppress(OSError):
            pids.update(int(pid) for pid in procs.read_text().split())
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pids and time.monotonic() < deadline:
        pids = {pid for pid in pids if Path(f"/proc/{pid}").exists()}
        time.sleep(0.1)


def _delete_bridge() -> None:
    if Path(f"/sys/class/net/{BRIDGE}").exists() and shutil.which("ip"):
        subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False)


def _process_mentions(pid: int, text: str) -> bool:
    try:
        return text in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False


def _pids_mentioning(text: str) -> list[int]:
    """Processes whose command line names `text` (this node's own temp folder: its containerd's shims)."""
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _process_mentions(int(p.name), text)]


def clean_leftovers() -> None:
    """What a node whose test process was killed left behind: its processes (by the pids it recorded, if they
    still run what it started) and the paths it created. Called with the lock held."""
    if not STATE.exists():
        return
    try:
        state = json.loads(STATE.read_text())
    except ValueError:
        STATE.unlink()
        return
    workdir = state.get("workdir", "")
    for pid, marker in state.get("pids", []):
        if marker and _process_mentions(pid, marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    if workdir:
        for pid in _pids_mentioning(workdir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
        _umount_under([Path(workdir)])
        shutil.rmtree(workdir, ignore_errors=True)
    for path in state.get("created", []):
        _remove(Path(path))
    _delete_bridge()
    STATE.unlink()


# --- the node ---------------------------------------------------------------------------------------------


@dataclass
class Node:
    parts: Parts
    workdir: Path
    plane: envtest.ControlPlane
    ip: str = ""
    busybox: str = ""  # image references, as imported
    pause: str = ""
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    existed: set[Path] = field(default_factory=set)
    started_in: float = 0.0
    _lock: IO[str] | None = None

    @property
    def socket(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    def kube(self) -> Kube:
        return self.plane.kube()

    # -- processes --

    def _start(self, name: str, args: list[str]) -> None:
        with open(self.workdir / f"{name}.log", "ab") as log:
            self.processes[name] = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        self._save_state()

    def log_tail(self, name: str, lines: int = 20) -> str:
        path = self.workdir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def _wait(self, name: str, check: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            process = self.processes[name]
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{self.log_tail(name)}")
            try:
                if check():
                    return
            except (OSError, ApiError, subprocess.SubprocessError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{name} not ready after {timeout:.0f}s:\n{self.log_tail(name)}")

    def _stop(self, name: str, grace: float = 10) -> None:
        envtest.terminate(self.processes.get(name), grace)

    def _save_state(self) -> None:
        """What the next node must clean up if this test process is killed: each process with a path its
        command line names (so that a pid reused since is left alone), and the paths created outside."""
        created = [str(p) for p in fixed_paths() if p not in self.existed]
        pids = []
        for process in [*self.processes.values(), *self.plane.processes.values()]:
            named = " ".join(map(str, process.args))  # type: ignore[arg-type]
            pids += [[process.pid, str(d)] for d in (self.workdir, self.plane.workdir) if str(d) in named][:1]
        STATE.write_text(json.dumps({"workdir": str(self.workdir), "pids": pids, "created": created}))

    def ctr(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    # -- start --

    def start(self) -> Node:
        began = time.monotonic()
        self._lock = open(LOCK, "a")  # noqa: SIM115 - held until stop()
        fcntl.flock(self._lock, fcntl.LOCK_EX)  # another test process's node first
        clean_leftovers()
        self.existed = {p for p in fixed_paths() if p.exists() or p.is_symlink()}
        self._save_state()
        self.ip = node_ip()
        self.busybox, self.pause = image_ref(self.parts.busybox), image_ref(self.parts.pause)
        self._start_containerd()
        for tarball in (self.parts.pause, self.parts.busybox):
            self.import_image(tarball)
        self.plane.start()
        self._save_state()
        self._start_kubelet()
        self._start(
            "kube-scheduler",
            [
                str(self.parts.bin / "kube-scheduler"),
                f"--kubeconfig={self.plane.kubeconfig}",
                f"--authentication-kubeconfig={self.plane.kubeconfig}",
                f"--authorization-kubeconfig={self.plane.kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--v=1",
            ],
        )
        kube = self.kube()
        self._wait("kubelet", lambda: self.ready(kube), 120)
        # the node-lifecycle controller lifts the not-ready taint it put on the node while it registered
        self._wait("kubelet", lambda: not kube.get(f"/api/v1/nodes/{NODE_NAME}")["spec"].get("taints"), 60)
        self.started_in = time.monotonic() - began
        return self

    def ready(self, kube: Kube) -> bool:
        node = kube.get(f"/api/v1/nodes/{NODE_NAME}")
        return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))

    def _start_containerd(self) -> None:
        base = self.workdir / "containerd"
        for sub in ("root", "state", "opt"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        net = self.workdir / "cni" / "net.d"
        net.mkdir(parents=True)
        (net / "10-crashwatch.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "0.4.0",
                    "name": "crashwatch-test",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": BRIDGE,
                            "isGateway": True,
                            "ipMasq": False,  # no iptables rules: nothing leaves the machine
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": POD_SUBNET}]],
                                "dataDir": str(self.workdir / "cni" / "ipam"),
                            },
                        }
                    ],
                },
                indent=2,
            )
        )
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = base / "config.toml"
        config.write_text(
            f"""version = 2
root = "{base / "root"}"
state = "{base / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{self.socket}"

[ttrpc]
  address = "{base / "ttrpc.sock"}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{base / "opt"}"

[{cri}]
  sandbox_image = "{self.pause}"
  # root here lacks CAP_SYS_RESOURCE: without this every sandbox fails in runc
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  netns_mounts_under_state_dir = true

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{base / "runc"}"

[{cri}.cni]
  bin_dir = "{CNI_BIN}"
  conf_dir = "{net}"

[{cri}.registry]
  # a registry's hosts.toml, read at each pull: plain_http_registry() writes one for a stand-in on loopback
  config_path = "{base / "certs.d"}"
"""
        )
        self._start("containerd", ["containerd", "--config", str(config), "--log-level", "warn"])
        self._wait("containerd", lambda: self.ctr("version", timeout=10).returncode == 0, 60)

    def plain_http_registry(self, host: str) -> None:
        """Lets containerd pull from `host` (HOST:PORT, a stand-in registry on loopback: tests/registry.py) over
        plain HTTP, as a hosts.toml says it."""
        folder = self.workdir / "containerd" / "certs.d" / host
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "hosts.toml").write_text(
            f'server = "http://{host}"\n\n[host."http://{host}"]\n  capabilities = ["pull", "resolve"]\n'
        )

    def import_image(self, tarball: Path) -> str:
        done = self.ctr("images", "import", str(tarball), timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"ctr images import {tarball}: {done.stderr}")
        return image_ref(tarball)

    def _start_kubelet(self) -> None:
        folder = self.workdir / "kubelet"
        (folder / "root").mkdir(parents=True)
        cert, key = envtest.sign_client_cert(
            self.plane.certs, folder, f"system:node:{NODE_NAME}", ("system:nodes", "system:masters")
        )
        kubeconfig = envtest.write_kubeconfig(
            folder / "kubeconfig", self.plane.url, self.plane.certs["ca.crt"], cert, key
        )
        resolv = folder / "resolv.conf"
        resolv.write_text("")  # the Pods' DNS is clusterDNS alone; the machine's resolvers are not theirs
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,  # this machine has cgroup v1
            "cgroupDriver": "cgroupfs",
            "failSwapOn": False,
            "clusterDNS": [CLUSTER_DNS],
            "clusterDomain": "cluster.local",
            "resolvConf": str(resolv),
            "address": self.ip,
            "port": _free_port(self.ip),
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": envtest.free_port(),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(self.plane.certs["ca.crt"])},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "podLogsDir": str(folder / "pod-logs"),
            "serializeImagePulls": False,
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            # a shared machine's disk or memory must not evict the tests' Pods
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "nodeStatusUpdateFrequency": "5s",
            "registerNode": True,
        }
        (folder / "config.yaml").write_text(yaml.safe_dump(config))
        self._start(
            "kubelet",
            [
                str(self.parts.bin / "kubelet"),
                f"--config={folder / 'config.yaml'}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={folder / 'root'}",
                f"--cert-dir={folder / 'pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={self.ip}",
                "--v=1",
            ],
        )

    # -- stop --

    def stop(self) -> None:
        """Pods gone (the kubelet stops their sandboxes and the CNI releases their addresses), then every
        process by its pid, every mount and path, and the lock."""
        try:
            self._drain()
        finally:
            for name in ("kube-scheduler", "kubelet"):
                self._stop(name)
            self._kill_tasks()
            self._stop("containerd")
            for pid in _pids_mentioning(str(self.workdir)):  # a shim our containerd started and left
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.plane.stop()
            _umount_under([self.workdir, *FIXED_PATHS])
            for path in fixed_paths():
                if path not in self.existed:
                    _remove(path)
            _delete_bridge()
            shutil.rmtree(self.workdir, ignore_errors=True)
            STATE.unlink(missing_ok=True)
            if self._lock is not None:
                fcntl.flock(self._lock, fcntl.LOCK_UN)
                self._lock.close()

    def _drain(self) -> None:
        if "kubelet" not in self.processes or self.processes["kubelet"].poll() is not None:
            return
        kube = self.kube()
        with contextlib.suppress(ApiError, OSError):
            for pod in kube.get("/api/v1/pods")["items"]:
                meta = pod["metadata"]
                with contextlib.suppress(ApiError):
                    kube.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", grace=0)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # every sandbox stopped by the kubelet (CNI DEL run)
            done = self.ctr("tasks", "list", "--quiet", timeout=10)
            if done.returncode == 0 and not done.stdout.strip():
                return
            time.sleep(0.5)

    def _kill_tasks(self) -> None:
        if "containerd" not in self.processes or self.processes["containerd"].poll() is not None:
            return
        with contextlib.suppress(subprocess.SubprocessError):
            tasks = self.ctr("tasks", "list", "--quiet", timeout=10).stdout.split()
            for task in tasks:
                self.ctr("tasks", "kill", "--signal", "SIGKILL", task, timeout=10)
            for task in tasks:
                self.ctr("tasks", "delete", "--force", task, timeout=30)
            for container in self.ctr("containers", "list", "--quiet", timeout=10).stdout.split():
                self.ctr("containers", "delete", container, timeout=30)


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def make(found: Parts, controlplane_bin: Path, workdir: Path, plane_dir: Path) -> Node:
    """A node (not started) on a control plane of its own, in two folders (the control plane removes its own)."""
    plane = envtest.ControlPlane(
        controlplane_bin,
        plane_dir,
        apiserver_args=[
            "--kubelet-preferred-address-types=InternalIP",
            # the API server's client certificate for the kubelet (logs): the admin's, which envtest writes there
            f"--kubelet-client-certificate={plane_dir / 'admin.crt'}",
            f"--kubelet-client-key={plane_dir / 'admin.key'}",
        ],
        extra_controllers=("node-lifecycle-controller", "root-ca-certificate-publisher-controller"),
        service_account_admission=True,
    )
    return Node(found, workdir, plane)


def available() -> tuple[Parts, Path]:
    """The node's parts and the control plane's binaries; skipped with one line where this machine cannot
    run a node, a failure under CI=true where only its parts are missing."""
    import pytest

    try:
        return parts(), envtest.binaries()
    except NodeUnavailable as exc:
        if os.environ.get("CI") and not exc.machine:
            pytest.fail(f"the real-node tests must run under CI, but {exc}: {ENABLE}")
        pytest.skip(f"real-node tests skipped: {exc}; to run them, {ENABLE}")
    except envtest.ControlPlaneUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the real-node tests must run under CI, but {exc}: {envtest.ENABLE}")
        pytest.skip(f"real-node tests skipped: {exc}; to run them, {envtest.ENABLE}")


@contextlib.contextmanager
def bench_node(prefix: str) -> Iterator[tuple[Node, Path]]:
    """A benchmark's node and a folder of its own, up for the `with` (both gone after it); not skipped:
    a benchmark says what is missing and stops."""
    found = parts()
    top = Path(tempfile.mkdtemp(prefix=prefix))
    node = make(found, envtest.binaries(), top / "node", top / "controlplane")
    (top / "node").mkdir()
    (top / "controlplane").mkdir()
    node.start()
    print(f"node up in {node.started_in:.1f}s", file=sys.stderr)
    try:
        yield node, top
    finally:
        node.stop()
        shutil.rmtree(top, ignore_errors=True)


def started(tmp_path_factory: pytest.TempPathFactory, webhook_services: bool = False) -> Iterator[Node]:
    """A node and its control plane, up until the generator is closed (skipped as available() says).

    `webhook_services`: the API server calls a webhook's Service at its Pods' addresses, as read from the
    EndpointSlices the endpoint controllers keep (aggregator routing: no kube-proxy makes a Service's
    cluster IP reach anything here)."""
    found, envtest_bin = available()
    node = make(found, envtest_bin, tmp_path_factory.mktemp("node"), tmp_path_factory.mktemp("node-controlplane"))
    if webhook_services:
        node.plane.apiserver_args = [*node.plane.apiserver_args, "--enable-aggregator-routing=true"]
        node.plane.extra_controllers = (
            *node.plane.extra_controllers,
            "endpointslice-controller",
            "endpoints-controller",
        )
    try:
        node.start()
        print(f"\nreal node up in {node.started_in:.1f}s (kubelet at {node.ip})", file=sys.stderr)
        yield node
    finally:
        node.stop()


def import_watcher_image(node: Node, tmp_path_factory: pytest.TempPathFactory) -> str:
    """scripts/build-image's image (CRASHWATCH_IMAGE, or built here), saved by podman as a docker-archive
    and imported into the node's containerd."""
    import pytest

    env = dict(os.environ)
    printed = subprocess.run([str(BUILD_IMAGE), "--print-env"], capture_output=True, text=True, check=True).stdout
    env.update(dict(line.split("=", 1) for line in printed.splitlines() if "=" in line))
    ref = os.environ.get("CRASHWATCH_IMAGE", "")
    if not ref:
        done = subprocess.run(
            [str(BUILD_IMAGE)], stdout=subprocess.PIPE, stderr=sys.stderr, text=True, env=env, check=False
        )
        if done.returncode == 3:
            if os.environ.get("CI"):
                pytest.fail("the watcher image must be built under CI, but podman, runc or mmdebstrap is missing")
            pytest.skip("the watcher Pod needs the image: install podman, runc and mmdebstrap (or run as root)")
        assert done.returncode == 0, f"scripts/build-image exited with {done.returncode}"
        ref = done.stdout.strip().splitlines()[-1]
    exists = subprocess.run(["podman", "image", "exists", ref], env=env, capture_output=True, check=False)
    assert exists.returncode == 0, (
        f"{ref} is not in podman's storage ({env.get('CONTAINERS_STORAGE_CONF')}): another scripts/build-image "
        "sharing CRASHWATCH_CACHE removes older images when it builds; run scripts/build-image again"
    )
    archive = tmp_path_factory.mktemp("watcher-image") / "crashwatch.tar"
    saved = subprocess.run(
        ["podman", "save", "--format", "docker-archive", "-o", str(archive), ref],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert saved.returncode == 0, saved.stderr
    imported = node.ctr("images", "import", str(archive), timeout=300)
    assert imported.returncode == 0, imported.stderr
    archive.unlink()
    return ref


# --- the Pods the tests run on the node ---------------------------------------------------------------------


def container(image: str, script: str, name: str = "main", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": image, "imagePullPolicy": "Never", "command": ["sh", "-c", script], **extra}


def spec(containers: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    # busybox's sh as PID 1 ignores SIGTERM: a grace period of 1 s keeps deletions short
    return {
        "containers": containers,
        "terminationGracePeriodSeconds": 1,
        "automountServiceAccountToken": False,
        **extra,
    }


def printing(image: str, probed: bool = False) -> dict[str, Any]:
    """A worker that prints a crashed run's output (the ConfigMap of output_map(), e.g. a file of
    tests/data/crashlogs) and exits 1. `probed`: with a readiness probe that does not pass while it crashes, as
    the Dynamo operator gives every worker (HTTP on its system port, which a worker that dies loading its
    model never serves); else Ready from each start to its crash."""
    mount = {"name": "output", "mountPath": "/crash", "readOnly": True}
    probe: dict[str, Any] = {"exec": {"command": ["test", "-f", "/tmp/serving"]}, "periodSeconds": 2}
    main = container(image, "cat /crash/output.log; exit 1", volumeMounts=[mount])
    if probed:
        main["readinessProbe"] = probe
    return spec([main], volumes=[{"name": "output", "configMap": {"name": "crash-output"}}])


def output_map(text: str) -> dict[str, Any]:
    """The ConfigMap a printing() worker prints."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "crash-output"}, "data": {"output.log": text}}


def restarts(pod: dict[str, Any]) -> int:
    return max((s.get("restartCount", 0) for s in pod.get("status", {}).get("containerStatuses", [])), default=0)


def crashed(pod: dict[str, Any]) -> bool:
    """The kubelet wrote a run of a container that ended with exit code 1 (now, or as its last state)."""
    for s in pod.get("status", {}).get("containerStatuses", []):
        for state in (s.get("state", {}), s.get("lastState", {})):
            if state.get("terminated", {}).get("exitCode") == 1:
                return True
    return False


def crash_looping(pod: dict[str, Any]) -> bool:
    """The upstream rule on one version: not Ready, a container restarted twice and down after a non-zero exit."""
    ready = [c for c in pod.get("status", {}).get("conditions", []) if c["type"] == "Ready"]
    if ready and ready[0]["status"] == "True":
        return False
    for s in pod.get("status", {}).get("containerStatuses", []):
        state = s.get("state", {})
        terminated = state.get("terminated") or s.get("lastState", {}).get("terminated") or {}
        if s.get("restartCount", 0) >= 2 and "running" not in state and terminated.get("exitCode"):
            return True
    return False


def make_component(kube: Kube, namespace: str, template: dict[str, Any]) -> None:
    """The graph llm with one component, worker: its DGD and DCD as the operator leaves them, and the
    DCD's Deployment, whose Pods carry the graph's labels, with the case's Pod spec."""
    make_graph(kube, namespace, deployments=False)
    make_worker(kube, namespace, template)


def make_worker(kube: Kube, namespace: str, template: dict[str, Any], graph: str = "llm") -> None:
    """The Deployment of make_component()'s worker alone, on a graph made before (make_graph without
    Deployments): what lets a test start its waiters on the graph before any Pod runs."""
    dcd = kube.get(f"{dcds(namespace)}/{graph}-worker")
    manifest = deployment(f"{graph}-worker", graph, "worker", dcd)
    manifest["spec"]["template"]["spec"] = template
    kube.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", manifest)


def wait_for_graph(namespace: str, kubeconfig: Path, timeout: str, *flags: str) -> subprocess.Popen[str]:
    """`crashwatch wait dgd/llm -o json` on the graph of make_component(), started and left running; `flags`
    are the tier's (its recovery window, its graces)."""
    command = [*crashwatch_command(), "wait", "dgd/llm", "-n", namespace, "--timeout", timeout, "-o", "json"]
    return subprocess.Popen(
        [*command, *flags, "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )


# --- every version of what the node and crashwatch write ----------------------------------------------------


@dataclass(frozen=True)
class Version:
    arrived: float  # time.monotonic() when the watch delivered it
    obj: dict[str, Any]

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"].get("namespace", ""))

    @property
    def revision(self) -> int:
        """The object's resourceVersion as a number. On this node's control plane (one etcd) it is etcd's
        revision, shared by every resource: it orders a Pod's versions and a DGD's as they were written,
        which arrival times of two watches can only approximate."""
        return int(self.obj["metadata"]["resourceVersion"])


class Versions(threading.Thread):
    """Every version of a collection (`path`, e.g. all namespaces' Pods) as the API server's watch delivers
    it, each with its arrival: a list, then a watch resumed from the last version seen whenever it ends (its
    timeout, a cut), so that none is missed; listed again only where the API server cannot resume (an ERROR
    event: 410 Gone), each such gap counted in `relists`, where versions may be missing."""

    def __init__(self, kube: Kube, path: str) -> None:
        super().__init__(daemon=True)
        self.kube, self.path = kube, path
        self.stopping = threading.Event()
        self.listed = threading.Event()
        self.relists = 0
        self._versions: list[Version] = []
        self._lock = threading.Lock()

    def run(self) -> None:
        version = ""
        while not self.stopping.is_set():
            with contextlib.suppress(OSError, ApiError, ValueError, http.client.HTTPException):
                if not version:
                    version = self._list()
                version = self._follow(version)
            self.stopping.wait(0.2)

    def _list(self) -> str:
        listed = self.kube.get(self.path)
        now = time.monotonic()
        with self._lock:
            self._versions += (Version(now, item) for item in listed["items"])
        if self.listed.is_set():
            self.relists += 1
        self.listed.set()
        return str(listed["metadata"]["resourceVersion"])

    def _follow(self, version: str) -> str:
        """Watch from `version`; the last version seen when the watch ends, or "" to list again."""
        connection = http.client.HTTPSConnection(self.kube.host, self.kube.port, context=self.kube.context, timeout=60)
        query = f"watch=true&allowWatchBookmarks=true&resourceVersion={version}&timeoutSeconds=30"
        try:
            connection.request("GET", f"{self.path}?{query}")
            response = connection.getresponse()
            if response.status == 410:
                return ""
            if response.status != 200:
                return version
            while not self.stopping.is_set():
                line = response.readline()
                if not line:
                    return version
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    return ""
                version = str(event["object"]["metadata"]["resourceVersion"])
                if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    with self._lock:
                        self._versions.append(Version(time.monotonic(), event["object"]))
            return version
        finally:
            connection.close()

    def snapshot(self, namespace: str | None = None) -> list[Version]:
        """The versions delivered so far (of one namespace, if given), in the order they were written."""
        with self._lock:
            found = [v for v in self._versions if namespace is None or v.namespace == namespace]
        unique = {(v.obj["metadata"].get("uid"), v.revision): v for v in found}
        return sorted(unique.values(), key=lambda v: v.revision)

    def first(self, namespace: str, holds: Callable[[dict[str, Any]], bool]) -> Version | None:
        return next((v for v in self.snapshot(namespace) if holds(v.obj)), None)

    def stop(self) -> None:
        self.stopping.set()


def watched(kube: Kube, *paths: str) -> list[Versions]:
    """Versions of each collection, started and listed (a new CRD's first list may take a moment)."""
    watches = [Versions(kube, path) for path in paths]
    for w in watches:
        w.start()
    for w in watches:
        assert w.listed.wait(60), f"{w.path}: never listed"
    return watches


# --- the waiters beside crashwatch --------------------------------------------------------------------------


class HelmRun:
    """The real helm (v4) in the background on one namespace, with homes of its own, its output in a file;
    `exited` is the monotonic time its exit was seen. Killed by `stop` if still running."""

    def __init__(self, helm: Path, kubeconfig: Path, namespace: str, home: Path, *args: str) -> None:
        from helm import helm_env

        home.mkdir(parents=True, exist_ok=True)
        self.log = home / f"{args[0]}.log"
        self.started = time.monotonic()
        self.exited: float | None = None
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [str(helm), *args, "--namespace", namespace, "--debug"],
                env=helm_env(home, kubeconfig),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        threading.Thread(target=self._reap, daemon=True).start()

    def _reap(self) -> None:
        self.process.wait()
        self.exited = time.monotonic()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=15)


def waiters() -> Path | None:
    """CRASHWATCH_WAITERS_BIN's folder (helm, kstatus), or scripts/build-waiters'; None where it cannot be
    had here (tests/waiters_bin.py says why)."""
    import pytest
    from waiters_bin import waiters_bin

    try:
        return waiters_bin()
    except pytest.skip.Exception:
        return None


def kstatus(folder: Path, *objects: dict[str, Any]) -> list[dict[str, str]]:
    """kstatus's verdict on each object (`status.Compute`, through the waiters' helper)."""
    done = subprocess.run(
        [str(folder / "kstatus")], input=json.dumps(list(objects)).encode(), capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr.decode()
    return [json.loads(line) for line in done.stdout.decode().splitlines()]


class WaitRun:
    """wait_for_graph() in the background: `synced` once it has listed what it waits on (what it says on
    stderr), its exit code and document (its stderr where it printed none) once it exits, and the monotonic
    time its exit was seen."""

    def __init__(self, namespace: str, kubeconfig: Path, timeout: str, *flags: str) -> None:
        self.process = wait_for_graph(namespace, kubeconfig, timeout, *flags)
        self.exited: float | None = None
        self.result: tuple[int, dict[str, Any]] = (0, {})
        self.synced = threading.Event()
        self._stderr: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._reap, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stderr is not None
        with self.process.stderr:
            for line in self.process.stderr:
                self._stderr.append(line)
                if "synced in" in line:
                    self.synced.set()

    def _reap(self) -> None:
        assert self.process.stdout is not None
        with self.process.stdout:
            out = self.process.stdout.read()
        self.process.wait()
        exited = time.monotonic()
        self.result = (self.process.returncode, json.loads(out) if out.strip() else {"stderr": self.stderr})
        self.exited = exited  # last: whoever sees it set finds the result

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=15)


def pod_ready(kube: Kube, namespace: str) -> bool:
    """The namespace holds one Pod (not being deleted), and it is Ready."""
    pods = [
        p for p in kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"] if "deletionTimestamp" not in p["metadata"]
    ]
    ready = [c for c in pods[0].get("status", {}).get("conditions", []) if c["type"] == "Ready"] if pods else []
    return len(pods) == 1 and bool(ready) and ready[0]["status"] == "True"


def play_the_operator(kube: Kube, namespace: str) -> None:
    """What the Dynamo operator writes once make_component()'s Deployment is available (no operator runs
    here): the DCD `Available=True`, the DGD `successful`; every other condition kept as it is."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for path, kind, extra in (
        (f"{dcds(namespace)}/llm-worker", "Available", {}),
        (f"{dgds(namespace)}/llm", "Ready", {"state": "successful"}),
    ):
        obj = kube.get(path)
        ready = {
            "type": kind,
            "status": "True",
            "reason": "DeploymentReady" if kind == "Available" else "all_resources_are_ready",
            "message": "Deployment is ready" if kind == "Available" else "All resources are ready",
            "lastTransitionTime": now,
            "observedGeneration": obj["metadata"]["generation"],
        }
        kept = [c for c in obj.get("status", {}).get("conditions", []) if c["type"] != kind]
        kube.merge_patch(f"{path}/status", {"status": {**extra, "conditions": [*kept, ready]}})
