"""The real node's kubelet and kube-scheduler (tests/node, built by scripts/build-node) come from the same
k8s.io/kubernetes as the control plane (tests/controlplane): a kubelet of another version than its API
server would show statuses the tests cannot vouch for. The two Go modules pin it apart (the control plane's
key must not change when the node's tools do), so this keeps the pins, and the staging modules' replaces,
equal."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def pins(module: str) -> dict[str, str]:
    text = (ROOT / "tests" / module / "go.mod").read_text()
    found = dict(re.findall(r"^\s*(k8s\.io/kubernetes) (v\S+)", text, re.MULTILINE))
    found.update(re.findall(r"^\s*(k8s\.io/\S+) => k8s\.io/\S+ (v\S+)", text, re.MULTILINE))
    return found


def test_the_node_pins_the_control_planes_kubernetes_and_staging_modules() -> None:
    node, plane = pins("node"), pins("controlplane")
    assert node["k8s.io/kubernetes"] == plane["k8s.io/kubernetes"]
    shared = set(node) & set(plane)
    assert {name: node[name] for name in shared} == {name: plane[name] for name in shared}
    assert len(shared) > 20, sorted(shared)


def test_the_node_module_builds_the_kubelet_and_the_scheduler() -> None:
    text = (ROOT / "tests" / "node" / "go.mod").read_text()
    tools = re.search(r"^tool \((.*?)^\)", text, re.MULTILINE | re.DOTALL)
    assert tools is not None
    assert set(tools.group(1).split()) == {"k8s.io/kubernetes/cmd/kubelet", "k8s.io/kubernetes/cmd/kube-scheduler"}
