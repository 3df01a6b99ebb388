"""The watcher image, built from the repository's Dockerfile by scripts/build-image (podman, offline, on a
base made from Debian packages) and run as k8s/watcher runs it: uid 10001, a read-only root filesystem,
every capability dropped, no new privileges. It answers --version, replays a bundled example as the
installed package does, and `run` against the real control plane becomes ready and writes status."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import envtest
import pytest
from dynamo import crash_loop_written, labelled_pod, make_graph
from kube import Kube, crash_loop, eventually
from watcher import http_get

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "scripts" / "build-image"
EXAMPLES = ROOT / "examples"
ENABLE = "run as root (scripts/build-image installs podman, runc and mmdebstrap with apt-get) or install them"
# as k8s/watcher/deployment.yaml's securityContext has it
HARDENED = ("--user", "10001:10001", "--read-only", "--cap-drop=ALL", "--security-opt", "no-new-privileges")


def project_version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return str(tomllib.load(file)["project"]["version"])


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    """The image reference (CRASHWATCH_IMAGE, as scripts/test exports it, or built here), with podman's
    environment (the build's containers.conf and storage) set for this module."""
    env = subprocess.run([str(BUILD), "--print-env"], capture_output=True, text=True, check=True).stdout
    saved = dict(os.environ)
    os.environ.update(dict(line.split("=", 1) for line in env.splitlines() if "=" in line))
    try:
        ref = os.environ.get("CRASHWATCH_IMAGE")
        if not ref:
            done = subprocess.run([str(BUILD)], stdout=subprocess.PIPE, stderr=sys.stderr, text=True, check=False)
            if done.returncode == 3:
                if os.environ.get("CI"):
                    pytest.fail(f"the image tests must run under CI, but its tools are missing: {ENABLE}")
                pytest.skip(f"the image tests need podman, runc and mmdebstrap: {ENABLE}")
            assert done.returncode == 0, f"scripts/build-image exited with {done.returncode}"
            ref = done.stdout.strip().splitlines()[-1]
        yield ref
    finally:
        os.environ.clear()
        os.environ.update(saved)


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=False)


def in_image(image: str, *args: str, volumes: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    mounts = [flag for volume in volumes for flag in ("--volume", volume)]
    return podman("run", "--rm", "--network", "none", *HARDENED, *mounts, image, *args)


def shell(image: str, script: str) -> subprocess.CompletedProcess[str]:
    return podman("run", "--rm", "--network", "none", *HARDENED, "--entrypoint", "sh", image, "-c", script)


def test_it_says_the_projects_version_and_runs_as_uid_10001(image: str) -> None:
    done = in_image(image, "--version")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"crashwatch {project_version()}\n", "")
    user = podman("image", "inspect", "--format", "{{.Config.User}}", image)
    assert user.stdout.strip() == "10001:10001"
    who = shell(image, "id -u; touch /opt/crashwatch/x 2>/dev/null && echo writable || echo read-only")
    assert who.stdout.split() == ["10001", "read-only"], who.stderr


def test_it_replays_a_bundled_example_as_the_package_does(image: str) -> None:
    done = in_image(image, "replay", "/examples/rollout-recovers.jsonl", volumes=(f"{EXAMPLES}:/examples:ro",))
    assert done.returncode == 0, done.stderr
    assert done.stdout == (EXAMPLES / "rollout-recovers.expected.txt").read_text()
    summary = "crashwatch: read 24 records from /examples/rollout-recovers.jsonl: 1 graph, 2 components; nothing fails"
    assert done.stderr == summary + " at the end\n"  # what it read and found, and nothing else


# compilers on the PATH, a pip cache, pip itself, a test suite: each found is printed
LEFTOVERS = (
    "ls /usr/bin /usr/local/bin /opt/crashwatch/bin 2>/dev/null"
    " | grep -E '(^|-)(gcc|cc|c\\+\\+|g\\+\\+|clang|tcc)(-|$)';"
    "find / -xdev \\( -path '*/.cache/pip' -o -name pip -path '*/bin/*' -o -type d -name tests"
    " -o -type d -name test -o -name conftest.py \\) -print 2>/dev/null; true"
)


def test_it_holds_no_compilers_no_pip_cache_and_no_tests(image: str, tmp_path: Path) -> None:
    """Looked for as root, which can read root's home (uid 10001 cannot)."""
    found = podman("run", "--rm", "--network", "none", "--user", "0:0", "--entrypoint", "sh", image, "-c", LEFTOVERS)
    assert (found.returncode, found.stdout, found.stderr) == (0, "", "")
    # the same check, with a compiler, a pip cache and a tests folder mounted in, finds all three
    (tmp_path / "gcc").write_text("")
    planted = ("/usr/bin/gcc", "/root/.cache/pip", "/opt/crashwatch/tests")
    mounts = [f"--volume={tmp_path / ('gcc' if path.endswith('gcc') else '')}:{path}:ro" for path in planted]
    found = podman(
        "run", "--rm", "--network", "none", "--user", "0:0", *mounts, "--entrypoint", "sh", image, "-c", LEFTOVERS
    )
    assert sorted(found.stdout.split()) == ["/opt/crashwatch/tests", "/root/.cache/pip", "gcc"], found.stderr


def test_run_against_the_real_control_plane_becomes_ready_and_writes_status(
    image: str, control_plane: envtest.ControlPlane, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    """Host networking reaches the loopback API server; the kubeconfig and its certificates are mounted
    read-only (world-readable copies: uid 10001 reads them)."""
    mounted = tmp_path / "kube"
    mounted.mkdir()
    mounted.chmod(0o755)
    for name in ("ca.crt", "admin.crt", "admin.key"):
        shutil.copy(control_plane.certs[name], mounted / name)
        (mounted / name).chmod(0o644)
    inside = Path("/kube")
    envtest.write_kubeconfig(
        mounted / "config", control_plane.url, inside / "ca.crt", inside / "admin.crt", inside / "admin.key"
    ).chmod(0o644)
    make_graph(kube, namespace, deployments=False)
    labelled_pod(kube, namespace, "llm-worker-0", "llm", "worker")
    port = envtest.free_port()
    name = f"crashwatch-{uuid.uuid4().hex[:8]}"
    stderr = tmp_path / "stderr"
    with stderr.open("wb") as err:
        process = subprocess.Popen(
            [
                "podman", "run", "--rm", "--name", name, "--network", "host", *HARDENED,
                "--volume", f"{mounted}:/kube:ro", image,
                "run", "-n", namespace, "--kubeconfig", "/kube/config", "--http-address", f"127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            assert process.poll() is None, stderr.read_text()
            try:
                return http_get(f"{url}/readyz") == (200, "ok\n")
            except OSError:
                return False

        eventually(ready, 60, "/readyz answering ok", step=0.2)
        crash_loop(kube, namespace, "llm-worker-0")
        eventually(
            lambda: crash_loop_written(kube, namespace),
            30,
            "status written",
        )
        stopped = podman("stop", "--time", "15", name, timeout=60)
        assert stopped.returncode == 0, stopped.stderr
        assert process.wait(timeout=30) == 0, stderr.read_text()
    finally:
        if process.poll() is None:
            podman("rm", "--force", name)
            process.wait(timeout=30)
    log = stderr.read_text()
    assert "synced in" in log and "wrote " in log, log
