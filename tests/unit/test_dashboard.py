"""The Grafana dashboard (k8s/monitoring/crashwatch-dashboard.json) as Grafana loads it: its structure
(panels on the 24-column grid without overlap, unique ids, targets on the dashboard's data source), and
every query naming only metrics that a scrape of the real metrics module has. tests/e2e/test_alerts.py
parses each query with promtool; tests/e2e/test_chart.py checks the names on a live watcher's scrape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scrapes import METRIC, Watcher, names

DASHBOARD = Path(__file__).resolve().parents[2] / "k8s" / "monitoring" / "crashwatch-dashboard.json"
PANEL_TYPES = {"timeseries", "stat", "gauge", "table", "bargauge", "text", "row", "heatmap"}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def exprs(panel: dict[str, Any]) -> list[str]:
    return [target["expr"] for target in panel.get("targets", [])]


def a_full_scrape() -> str:
    w = Watcher()
    w.crash_loop("dynamo", "llm", "worker")
    return w.scrape()


def test_the_dashboard_is_one_grafana_loads() -> None:
    d = dashboard()
    assert isinstance(d["title"], str) and d["title"] and isinstance(d["uid"], str) and len(d["uid"]) <= 40
    assert isinstance(d["schemaVersion"], int) and d["schemaVersion"] >= 36  # the datasource-object era
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert METRIC.findall(variables["job"]["query"]["query"])[0] in names(a_full_scrape())
    ids: set[int] = set()
    cells: set[tuple[int, int]] = set()
    for panel in d["panels"]:
        assert panel["type"] in PANEL_TYPES and panel["title"]
        assert panel["id"] not in ids
        ids.add(panel["id"])
        grid = panel["gridPos"]
        assert all(isinstance(grid[k], int) and grid[k] >= 0 for k in ("x", "y", "w", "h"))
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] + grid["w"] <= 24
        mine = {
            (x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not mine & cells, f"panel {panel['title']!r} overlaps another"
        cells |= mine
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)) and refs
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            assert '{job=~"$job"' in target["expr"], target["expr"]  # the job variable filters every query


def test_every_query_names_only_metrics_a_real_scrape_has() -> None:
    scraped = names(a_full_scrape())
    asked = set()
    for panel in dashboard()["panels"]:
        for expr in exprs(panel):
            found = set(METRIC.findall(expr))
            assert found, expr
            assert found <= scraped, f"{panel['title']}: {found - scraped} is not in /metrics"
            asked |= found
    # and the dashboard shows what it promises: failed graphs, crash-looping components, the verdict
    # latency histogram, watch health, the leader, write outcomes
    assert {
        "crashwatch_failed_graphs",
        "crashwatch_crash_looping_components",
        "crashwatch_status_write_delay_seconds_bucket",
        "crashwatch_synced",
        "crashwatch_watch_errors_total",
        "crashwatch_leader",
        "crashwatch_status_writes_total",
        "crashwatch_status_write_conflicts_total",
    } <= asked


def test_the_latency_panel_reads_the_histogram_as_quantiles() -> None:
    (panel,) = [p for p in dashboard()["panels"] if "crashwatch_status_write_delay_seconds_bucket" in str(exprs(p))]
    quantiles = [e for e in exprs(panel) if e.startswith("histogram_quantile(")]
    assert len(quantiles) >= 2 and all("sum by (le)" in e and "rate(" in e for e in quantiles)
    assert panel["fieldConfig"]["defaults"]["unit"] == "s"
