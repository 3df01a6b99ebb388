"""How crashwatch is packaged: our import packages are ours alone, and its version is written in one
place, pyproject.toml, that the package, the image and the watcher manifest all follow."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import yaml

import crashwatch

PACKAGES = ("crashwatch", "stream", "pipeline", "sinks")
ROOT = Path(__file__).resolve().parents[2]


def test_no_other_distribution_ships_our_packages() -> None:
    owners = importlib.metadata.packages_distributions()
    for package in PACKAGES:
        claimed = set(owners.get(package, ["crashwatch"]))
        assert claimed == {"crashwatch"}, f"{package} is also shipped by {sorted(claimed - {'crashwatch'})}"


def project_version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as file:
        version: str = tomllib.load(file)["project"]["version"]
    return version


def test_the_package_says_the_version_pyproject_gives() -> None:
    assert crashwatch.__version__ == project_version(), (
        "crashwatch --version would say another version than pyproject.toml: reinstall the package "
        "(pip install -e .) so that its metadata follows"
    )


def test_the_image_is_built_and_labelled_with_this_version() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.findall(r"^ARG VERSION=(\S*)$", dockerfile, re.MULTILINE) == [project_version()]
    assert 'org.opencontainers.image.version="$VERSION"' in dockerfile
    # and the build checks that the package it installed says the same
    assert 'test "$(/opt/crashwatch/bin/crashwatch --version)" = "crashwatch $VERSION"' in dockerfile


def test_the_watcher_manifest_runs_the_image_of_this_version() -> None:
    watcher = ROOT / "k8s" / "watcher"
    kustomization = yaml.safe_load((watcher / "kustomization.yaml").read_text())
    (image,) = [entry for entry in kustomization["images"] if entry["name"] == "crashwatch"]
    assert image["newTag"] == project_version()  # a string: a tag like 1.10 unquoted would read as 1.1
    deployment = yaml.safe_load((watcher / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "crashwatch"  # untagged, so that the kustomization's tag is the only one


def _locked() -> dict[str, tuple[str, list[str]]]:
    """requirements.lock: each pinned name (normalized) with its version and hashes."""
    pins: dict[str, tuple[str, list[str]]] = {}
    text = (ROOT / "requirements.lock").read_text().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        requirement, *options = line.split()
        name, version = requirement.split("==")
        hashes = [o.removeprefix("--hash=") for o in options if o.startswith("--hash=sha256:")]
        pins[re.sub(r"[-_.]+", "-", name).lower()] = (version, hashes)
    return pins


def test_every_dependency_is_pinned_with_hashes_at_a_version_pyproject_allows() -> None:
    from packaging.requirements import Requirement

    with (ROOT / "pyproject.toml").open("rb") as file:
        wanted = [Requirement(r) for r in tomllib.load(file)["project"]["dependencies"]]
    pins = _locked()
    assert all(hashes for _, hashes in pins.values())  # --require-hashes refuses a pin without one
    for requirement in wanted:
        version, _ = pins[re.sub(r"[-_.]+", "-", requirement.name).lower()]
        assert requirement.specifier.contains(version), (requirement, version)
    # the server-side advisories fixed in aiohttp 3.10.11 (CVE-2024-52304) and 3.12.14 (CVE-2025-53643)
    (aiohttp,) = [r for r in wanted if r.name == "aiohttp"]
    assert not aiohttp.specifier.contains("3.12.13") and aiohttp.specifier.contains("3.12.14")


def test_the_image_builds_from_a_base_pinned_by_digest_and_the_lock() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    (base,) = re.findall(r"^ARG BASE=(\S+)$", dockerfile, re.MULTILINE)
    assert re.fullmatch(r"[\w./:-]+@sha256:[0-9a-f]{64}", base), base
    assert "--require-hashes --requirement requirements.lock" in dockerfile
    assert dockerfile.count("--no-deps") == 2  # crashwatch brings no dependency the lock did not pin
    assert "!requirements.lock" in (ROOT / ".dockerignore").read_text().splitlines()
