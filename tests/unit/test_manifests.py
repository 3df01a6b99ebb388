"""k8s/watcher as shipped: its arguments are ones the CLI takes, and its probes and grace period fit them.
A manifest the CLI refused would make the watcher itself crash-loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from crashwatch.cli import build_parser

WATCHER = Path(__file__).resolve().parents[2] / "k8s" / "watcher"


def pod_spec() -> dict[str, Any]:
    deployment = yaml.safe_load((WATCHER / "deployment.yaml").read_text())
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def test_the_watchers_arguments_parse_and_its_probes_ask_the_port_it_serves() -> None:
    spec = pod_spec()
    (container,) = spec["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.command == "run"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert args.http_address == (None, ports["http"])
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}


def test_the_pod_waits_longer_than_the_watcher_spends_finishing_its_writes() -> None:
    spec = pod_spec()
    args = build_parser().parse_args(spec["containers"][0]["args"])
    assert spec["terminationGracePeriodSeconds"] > args.grace_period
