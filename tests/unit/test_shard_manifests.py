"""k8s/shards as shipped: its Pods' arguments are ones `crashwatch run` takes, each ordinal a shard of its own
with a Lease of its own, as many shards as Pods, and no grant it does not use."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import yaml

from crashwatch.cli import _leader_settings, build_parser

ROOT = Path(__file__).resolve().parents[2]
SHARDS = ROOT / "k8s" / "shards"


def manifest(name: str) -> Any:
    return yaml.safe_load((SHARDS / name).read_text())


def container() -> dict[str, Any]:
    (only,) = manifest("statefulset.yaml")["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = only
    return result


def args_of(ordinal: int) -> list[str]:
    """The container's args as Kubernetes expands them for the Pod of this ordinal."""
    env = {e["name"]: e for e in container()["env"]}
    assert env["SHARD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    return [arg.replace("$(SHARD_INDEX)", str(ordinal)) for arg in container()["args"]]


def test_every_ordinal_is_a_shard_of_its_own_and_there_are_as_many_shards_as_pods() -> None:
    statefulset = manifest("statefulset.yaml")
    replicas = statefulset["spec"]["replicas"]
    parser = build_parser()
    leases = set()
    for ordinal in range(replicas):
        args = parser.parse_args(args_of(ordinal))
        assert args.command == "run" and args.all_namespaces
        assert (args.shard_index, args.shard_count) == (ordinal, replicas)
        settings = _leader_settings(parser, args)
        assert settings is not None and settings.namespace is None  # the Pod's namespace, where the Role is
        leases.add(settings.name)
    assert leases == {f"crashwatch-{n}" for n in range(replicas)}
    # and the Role's patch names exactly those Leases (k8s/watcher's names the single watcher's)
    (named,) = [p for p in manifest("kustomization.yaml")["patches"] if p.get("target", {}).get("kind") == "Role"]
    (op,) = yaml.safe_load(named["patch"])
    assert (op["op"], op["path"], set(op["value"])) == ("replace", "/rules/0/resourceNames", leases)
    spec = statefulset["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"] == labels
    assert spec["serviceName"] == manifest("service.yaml")["metadata"]["name"]
    assert manifest("service.yaml")["spec"]["selector"] == labels
    assert manifest("poddisruptionbudget.yaml")["spec"]["selector"]["matchLabels"] == labels
    # the watcher Deployment's labels are not the shards': neither selects the other's Pods
    assert (
        labels
        != yaml.safe_load((ROOT / "k8s" / "watcher" / "deployment.yaml").read_text())["spec"]["selector"]["matchLabels"]
    )


def test_the_pods_wait_longer_than_the_watcher_spends_finishing_its_writes() -> None:
    spec = manifest("statefulset.yaml")["spec"]["template"]["spec"]
    assert spec["terminationGracePeriodSeconds"] > build_parser().parse_args(args_of(0)).grace_period
    ports = {p["name"]: p["containerPort"] for p in container()["ports"]}
    assert build_parser().parse_args(args_of(0)).http_address == (None, ports["http"])


def test_the_shards_run_the_image_of_this_version_and_reuse_the_watchers_rbac() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    kustomization = manifest("kustomization.yaml")
    (image,) = [entry for entry in kustomization["images"] if entry["name"] == "crashwatch"]
    assert image["newTag"] == version and container()["image"] == "crashwatch"
    assert "../watcher" in kustomization["resources"]
    deleted = {yaml.safe_load(p["patch"])["kind"] for p in kustomization["patches"] if "target" not in p}
    assert deleted == {"Deployment", "PodDisruptionBudget"}  # the watcher's, replaced by the shards'


def test_namespaces_are_read_only_when_a_namespace_selector_asks_for_it() -> None:
    uses_selector = build_parser().parse_args(args_of(0)).namespace_selector is not None
    included = "namespace-selector-rbac.yaml" in manifest("kustomization.yaml")["resources"]
    assert uses_selector == included
    role, binding = yaml.safe_load_all((SHARDS / "namespace-selector-rbac.yaml").read_text())
    assert role["rules"] == [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    clusterrole = yaml.safe_load((ROOT / "k8s" / "watcher" / "clusterrole.yaml").read_text())
    assert all("namespaces" not in rule["resources"] for rule in clusterrole["rules"])
