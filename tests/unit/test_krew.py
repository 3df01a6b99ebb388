"""The krew plugin index entry (krew/crashwatch.yaml) and what it installs: the manifest has the fields
krew requires, its version is crashwatch's, its sha256 is that of the archive scripts/build-krew makes from
the repository (byte for byte the same each time), and the launcher in it runs the wheel's
kubectl-crashwatch console script."""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
KREW = ROOT / "krew"


def pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        loaded: dict[str, Any] = tomllib.load(file)
    return loaded


def manifest() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((KREW / "crashwatch.yaml").read_text())
    return loaded


def build(into: Path) -> Path:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build-krew"), str(into)], capture_output=True, text=True, check=True
    )
    return Path(done.stdout.splitlines()[0])


def test_the_manifest_has_what_krew_requires_and_crashwatchs_version() -> None:
    m = manifest()
    assert (m["apiVersion"], m["kind"]) == ("krew.googlecontainertools.github.com/v1alpha2", "Plugin")
    name = m["metadata"]["name"]
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]*", name) and not name.startswith("kubectl")
    spec = m["spec"]
    version = pyproject()["project"]["version"]
    assert spec["version"] == f"v{version}"  # krew wants a v-prefixed semver
    assert spec["homepage"].startswith("https://")
    assert 0 < len(spec["shortDescription"]) <= 50 and spec["description"].strip()
    assert spec["platforms"]
    for platform in spec["platforms"]:
        assert platform["selector"]["matchExpressions"] or platform["selector"]["matchLabels"]
        assert platform["uri"].startswith("https://") and f"v{version}" in platform["uri"]
        assert re.fullmatch(r"[0-9a-f]{64}", platform["sha256"])
        # the binary krew links is the wheel's console script of the same name
        assert platform["bin"] == f"kubectl-{name}"
        assert platform["bin"] in pyproject()["project"]["scripts"]
        assert platform["bin"] in [f["from"] for f in platform["files"]]


def test_the_sha256_is_the_archive_built_from_this_repository(tmp_path: Path) -> None:
    first, second = build(tmp_path / "a"), build(tmp_path / "b")
    data = first.read_bytes()
    assert data == second.read_bytes()  # reproducible, so the manifest can be checked at all
    (platform,) = manifest()["spec"]["platforms"]
    assert platform["uri"].endswith("/" + first.name)
    assert platform["sha256"] == hashlib.sha256(data).hexdigest(), "run scripts/build-krew and update the sha256"
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {member.name: member for member in tar.getmembers()}
        assert {f["from"] for f in platform["files"]} <= members.keys()
        assert members[platform["bin"]].mode & 0o111


def test_the_launcher_runs_the_console_script_of_its_version(tmp_path: Path) -> None:
    version = pyproject()["project"]["version"]
    launcher = (KREW / "kubectl-crashwatch").read_text()
    assert re.findall(r"^version=(\S+)$", launcher, re.MULTILINE) == [version]
    # the virtual environment it would make on first use, already there: the installed console script
    script = shutil.which("kubectl-crashwatch", path=str(Path(sys.executable).parent))
    assert script is not None, "kubectl-crashwatch is not installed beside this Python"
    bin_dir = tmp_path / "cache" / "kubectl-crashwatch" / version / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "kubectl-crashwatch").symlink_to(script)
    (bin_dir.parent / ".installed").touch()
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run([str(KREW / "kubectl-crashwatch"), "--version"], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout.strip()) == (0, f"crashwatch {version}"), done.stderr
    done = subprocess.run([str(KREW / "kubectl-crashwatch"), "--help"], env=env, capture_output=True, text=True)
    assert done.stdout.startswith("usage: kubectl crashwatch"), done.stdout
    # without it, and without a Python it can use, it says what it needs
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "empty"), "CRASHWATCH_PYTHON": "false"}
    done = subprocess.run([str(KREW / "kubectl-crashwatch"), "--version"], env=env, capture_output=True, text=True)
    assert done.returncode == 1 and "needs Python 3.11 or later" in done.stderr


def test_the_launcher_installs_the_wheel_the_release_ships(tmp_path: Path) -> None:
    """Not `crashwatch==VERSION` from the package index, where crashwatch is not: the wheel on the release
    page beside the archive (its URL), or the one CRASHWATCH_WHEEL names, here one built from this
    repository, installed and run as krew's users run it (its dependencies found where this Python has
    them: the test does not reach the package index)."""
    version = pyproject()["project"]["version"]
    launcher = (KREW / "kubectl-crashwatch").read_text()
    assert "crashwatch==" not in launcher
    (platform,) = manifest()["spec"]["platforms"]
    release = platform["uri"].rsplit("/", 1)[0]
    assert re.findall(r"^release=(\S+)$", launcher, re.MULTILINE) == [release.replace(f"v{version}", "v$version")]
    assert "wheel=${CRASHWATCH_WHEEL:-$release/crashwatch-$version-py3-none-any.whl}" in launcher
    source = tmp_path / "src"
    for name in ("pyproject.toml", "README.md", "LICENSE", "crashwatch", "stream", "pipeline", "sinks"):
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        source.mkdir(exist_ok=True)
        copy(ROOT / name, source / name)
    dist = tmp_path / "dist"
    build = [sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(dist), str(source)]
    subprocess.run(build, capture_output=True, check=True, timeout=300)
    (wheel,) = dist.glob("*.whl")
    assert wheel.name == f"crashwatch-{version}-py3-none-any.whl"  # the name the launcher's URL ends with
    found = next(p for p in map(Path, sys.path) if p.name == "site-packages" and (p / "msgspec").is_dir())
    deps = tmp_path / "deps"  # the dependencies alone: where crashwatch is there too (CI installs the wheel),
    deps.mkdir()  # pip would find it on PYTHONPATH, call it installed and install nothing
    ours = {"crashwatch", "stream", "pipeline", "sinks"}
    for entry in found.iterdir():
        if entry.name not in ours and not entry.name.startswith("crashwatch-"):
            (deps / entry.name).symlink_to(entry)
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "CRASHWATCH_WHEEL": str(wheel),
        "PIP_NO_INDEX": "1",
        "PIP_NO_DEPS": "1",
        "PYTHONPATH": str(deps),
    }
    done = subprocess.run([str(KREW / "kubectl-crashwatch"), "--version"], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout.strip()) == (0, f"crashwatch {version}"), done.stderr
    assert f"installing crashwatch {version} from {wheel}" in done.stderr
    installed = tmp_path / "cache" / "kubectl-crashwatch" / version / "bin" / "kubectl-crashwatch"
    assert installed.exists()
    # a wheel that cannot be had says so, and leaves no half-made environment behind
    env |= {"XDG_CACHE_HOME": str(tmp_path / "other"), "CRASHWATCH_WHEEL": str(tmp_path / "none.whl")}
    done = subprocess.run([str(KREW / "kubectl-crashwatch"), "--version"], env=env, capture_output=True, text=True)
    assert done.returncode == 1 and "could not install" in done.stderr
    assert not (tmp_path / "other" / "kubectl-crashwatch" / version).exists()
    # the second run finds the environment made by the first and installs nothing
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    done = subprocess.run([str(KREW / "kubectl-crashwatch"), "--version"], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, f"crashwatch {version}", "")
