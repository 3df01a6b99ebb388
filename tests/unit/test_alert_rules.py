"""The alert rules file (k8s/monitoring/crashwatch.rules.yaml) as a user meets it, without promtool
(tests/e2e/test_alerts.py runs them in promtool): every alert the issue asks for is there, with a
severity, a summary, a description and a runbook that is a section of docs/running.md, and every
expression names only metrics that a scrape of the real metrics module has."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from scrapes import METRIC, Watcher, duration_seconds, names

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "k8s" / "monitoring" / "crashwatch.rules.yaml"
RUNBOOKS = "https://github.com/crashwatch/crashwatch/blob/main/docs/running.md#"


def alerts() -> list[dict[str, Any]]:
    (group,) = yaml.safe_load(RULES.read_text())["groups"]
    rules: list[dict[str, Any]] = group["rules"]
    return rules


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", markdown, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_every_alert_has_a_severity_a_text_and_a_runbook_section_in_running_md() -> None:
    sections = anchors((ROOT / "docs" / "running.md").read_text())
    for rule in alerts():
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert {"summary", "description", "runbook_url"} <= rule["annotations"].keys(), rule["alert"]
        url = rule["annotations"]["runbook_url"]
        assert url.startswith(RUNBOOKS), url
        assert url.removeprefix(RUNBOOKS) == rule["alert"].lower() in sections, f"{url}: no such section"
        duration_seconds(rule["for"])


def test_the_alerts_cover_crash_loops_and_the_watchers_health() -> None:
    by_metric: dict[str, set[str]] = {}
    for rule in alerts():
        for metric in METRIC.findall(rule["expr"]):
            by_metric.setdefault(metric, set()).add(rule["alert"])
    # a graph failed, not synced, no leader, status writes failing or conflicting, Events dropped
    for metric in (
        "crashwatch_crash_looping_components",
        "crashwatch_synced",
        "crashwatch_leader",
        "crashwatch_status_writes_total",
        "crashwatch_status_write_conflicts_total",
        "crashwatch_events_dropped_total",
        "crashwatch_admission_trusted",  # the API server cannot call the webhook
    ):
        assert metric in by_metric, f"no alert on {metric}"
    (crash,) = by_metric["crashwatch_crash_looping_components"]
    # the graph is named in what pages
    rule = next(r for r in alerts() if r["alert"] == crash)
    assert "{{ $labels.namespace }}/{{ $labels.graph }}" in rule["annotations"]["summary"]
    # no leader for longer than the lease (15 s, k8s/watcher's) and a 30 s scrape
    (leader,) = by_metric["crashwatch_leader"]
    assert duration_seconds(next(r for r in alerts() if r["alert"] == leader)["for"]) > 15 + 30


def test_every_expression_names_only_metrics_a_real_scrape_has() -> None:
    w = Watcher(trusted=True)  # with the webhook's registration checked (--admission-configuration)
    w.crash_loop("dynamo", "llm", "worker")
    scraped = names(w.scrape())
    for rule in alerts():
        used = set(METRIC.findall(rule["expr"]))
        assert used and used <= scraped, f"{rule['alert']}: {used - scraped} is not in /metrics"
        queried = {m for text in rule["annotations"].values() for m in METRIC.findall(text)}
        assert queried <= scraped, f"{rule['alert']}'s annotations: {queried - scraped} is not in /metrics"


def test_the_crash_loop_alert_says_the_finding_from_the_diagnosed_series_of_its_own_graph() -> None:
    (rule,) = [r for r in alerts() if "crashwatch_crash_looping_components" in r["expr"]]
    (query,) = re.findall(r"\{\{- range printf \"(.*?)\" ", rule["annotations"]["description"])
    assert METRIC.findall(query) == ["crashwatch_component_diagnosed"]
    # the graph's alert reads its own graph's crash loops: the reason as the metrics sink writes it for one
    crash = Watcher()
    crash.crash_loop("dynamo", "llm", "worker")
    (series,) = [s for s in crash.scrape().splitlines() if s.startswith("crashwatch_component_diagnosed{")]
    reason = re.search(r'reason="(\w+)"', series)
    assert reason is not None
    assert f'reason=\\"{reason.group(1)}\\"' in query
    for label in ("job", "namespace", "graph"):
        assert f"{label}=%q" in query
    # each finding's words: the labels the series has
    said = set(re.findall(r"\{\{ \.Labels\.(\w+) \}\}", rule["annotations"]["description"]))
    assert said == {"component", "container", "pod", "exit_code"}
    assert said <= set(re.findall(r'(\w+)="', series))
