"""charts/crashwatch as shipped, without Helm (tests/e2e/test_chart.py renders it with the real one): its
version is crashwatch's, its monitoring files are k8s/monitoring's, and every value it takes is
documented in its README and described by its values.schema.json."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "crashwatch"


def project_version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as file:
        version: str = tomllib.load(file)["project"]["version"]
    return version


def test_the_chart_and_its_app_are_crashwatchs_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["version"] == chart["appVersion"] == project_version()
    assert isinstance(chart["appVersion"], str)  # quoted: 1.10 must not read as 1.1


def test_the_charts_monitoring_files_are_k8s_monitorings() -> None:
    for name in ("crashwatch.rules.yaml", "crashwatch-dashboard.json"):
        copy, original = CHART / "files" / name, ROOT / "k8s" / "monitoring" / name
        assert copy.read_bytes() == original.read_bytes(), f"copy k8s/monitoring/{name} to charts/crashwatch/files/"


def leaves(values: dict[str, Any], prefix: str = "") -> Iterator[str]:
    """Every key path of values.yaml, down to a leaf or to an empty or free-form map."""
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and path not in FREE_FORM:
            yield from leaves(value, f"{path}.")
        else:
            yield path


# maps whose keys are the user's (Kubernetes fields, labels), not the chart's
FREE_FORM = {"resources", "podSecurityContext", "securityContext", "grafanaDashboard.labels"}


def schema_node(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for part in path.split("."):
        assert "properties" in node and part in node["properties"], f"{path}: not in values.schema.json"
        node = node["properties"][part]
    return node


def test_every_value_is_in_the_schema_and_the_readme_and_the_schema_has_nothing_more() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    readme = (CHART / "README.md").read_text()
    documented = set(re.findall(r"^\| `([^`|]+)`(?:, `([^`|]+)`)? \|", readme, re.MULTILINE))
    in_readme = {key for pair in documented for key in pair if key}
    paths = list(leaves(values))
    assert len(paths) > 30
    for path in paths:
        schema_node(schema, path)
        assert path in in_readme, f"{path}: not in charts/crashwatch/README.md's table"
    assert in_readme <= set(paths), f"documented but not a value: {in_readme - set(paths)}"

    def schema_paths(node: dict[str, Any], prefix: str = "") -> Iterator[str]:
        for key, sub in node.get("properties", {}).items():
            if sub.get("properties"):
                yield from schema_paths(sub, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}"

    assert set(schema_paths(schema)) == set(paths)
    # closed, so that a misspelt key is an error and not a value silently ignored
    assert schema["additionalProperties"] is False


def test_the_alerts_the_schema_lets_a_user_retime_are_the_rules_files_alerts() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    allowed = schema_node(schema, "prometheusRule.for")["propertyNames"]["enum"]
    rules = yaml.safe_load((CHART / "files" / "crashwatch.rules.yaml").read_text())
    assert sorted(allowed) == sorted(rule["alert"] for group in rules["groups"] for rule in group["rules"])


def test_the_default_resources_are_the_sizing_guides() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    watcher = yaml.safe_load((ROOT / "k8s" / "watcher" / "deployment.yaml").read_text())
    (container,) = watcher["spec"]["template"]["spec"]["containers"]
    assert values["resources"] == container["resources"]
    guide = (ROOT / "docs" / "benchmarks.md").read_text()
    limit = values["resources"]["limits"]["memory"]
    assert f"limits memory to {limit}" in guide  # the figure the sizing guide sizes
