"""The release's shape: `python -m build` makes the sdist and the wheel from the repository's sources, both
pass `twine check --strict` (the README renders as their description), and their metadata is complete
(license file and expression, project URLs, classifiers, both console scripts) with the version from its
one place, pyproject.toml. Built offline, without build isolation (setuptools is in the test extras)."""

from __future__ import annotations

import email.parser
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "crashwatch", "stream", "pipeline", "sinks")
PACKAGES = ("crashwatch", "stream", "pipeline", "sinks")


def pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        project: dict[str, Any] = tomllib.load(file)["project"]
    return project


def test_the_sdist_and_wheel_carry_full_metadata_and_pass_twine_check(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a copy: the build leaves its egg-info and build folders behind
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy(ROOT / name, source / name)
    dist = tmp_path / "dist"
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    project = pyproject()
    version = project["version"]
    (sdist,) = dist.glob("*.tar.gz")
    (wheel,) = dist.glob("*.whl")
    assert sdist.name == f"crashwatch-{version}.tar.gz" and wheel.name == f"crashwatch-{version}-py3-none-any.whl"
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2, done.stdout

    with zipfile.ZipFile(wheel) as archive:
        files = archive.namelist()
        info = f"crashwatch-{version}.dist-info"
        metadata = email.parser.Parser().parsestr(archive.read(f"{info}/METADATA").decode())
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert tuple(map(int, metadata["Metadata-Version"].split("."))) >= (2, 4) and metadata["Version"] == version
    assert metadata["License-Expression"] == project["license"] and f"{info}/licenses/LICENSE" in files
    assert metadata["Requires-Python"] == project["requires-python"]
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert str(metadata.get_payload()).startswith("# crashwatch")  # the README, whole
    urls = {name: url for name, _, url in (line.partition(", ") for line in metadata.get_all("Project-URL", []))}
    assert urls == project["urls"]
    assert set(metadata.get_all("Classifier", [])) == set(project["classifiers"])
    for name, target in project["scripts"].items():
        assert f"{name} = {target}" in entry_points
    assert "kubectl-crashwatch" in project["scripts"]
    # only the four import packages, no tests or benchmarks, and every module of them (a subpackage left out
    # of pyproject's explicit list installs nothing, which an editable install would never show)
    assert {f.split("/")[0] for f in files if not f.startswith(info)} == {"crashwatch", "stream", "pipeline", "sinks"}
    modules = {p.relative_to(ROOT).as_posix() for name in PACKAGES for p in (ROOT / name).rglob("*.py")}
    assert modules - set(files) == set()
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    assert {"LICENSE", "README.md", "pyproject.toml", "PKG-INFO"} <= names
