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
