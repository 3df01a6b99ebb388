"""crashwatch's alerts (k8s/monitoring/crashwatch.rules.yaml, the chart's PrometheusRule) run by the real
promtool (`promtool check rules`, `promtool test rules`), on series scraped from the real metrics module
(tests/scrapes.py): each alert fires when its condition has held for its `for`, not before, with the
labels and annotations a user sees, and stays quiet in the normal course of things (a failover within
the lease, a follower leaving Events to the leader, a conflict now and then). tests/e2e/test_chart.py
runs them on the series of a live watcher installed by the chart."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from promtool_bin import promtool
from scrapes import Target, Watcher, duration_seconds, input_series, render_annotation

from pipeline.findings import IMAGE_PULL, Finding

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "k8s" / "monitoring" / "crashwatch.rules.yaml"
INTERVAL = 30  # seconds: the evaluation and scrape interval of these tests (the ServiceMonitor's default)
# the crash loop scrapes.Watcher.crash_loop makes, as the crash-loop alert's annotation names it
WORKER = {"component": "worker", "container": "main", "pod": "llm-worker-0", "exit_code": "1"}
LEADER: Target = {"job": "crashwatch", "namespace": "crashwatch", "instance": "10.0.0.1:8080", "pod": "crashwatch-a"}
FOLLOWER: Target = {**LEADER, "instance": "10.0.0.2:8080", "pod": "crashwatch-b"}


def rules() -> dict[str, dict[str, Any]]:
    (group,) = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule for rule in group["rules"]}


def for_of(alert: str) -> int:
    return duration_seconds(rules()[alert]["for"])


def rendered_annotations(
    alert: str, labels: dict[str, str], value: str = "", found: Sequence[dict[str, str]] = ()
) -> dict[str, str]:
    """The rule's annotations as Prometheus renders them (scrapes.render_annotation); `found`: the series the
    annotation's query returns."""
    return {key: render_annotation(text, labels, value, found) for key, text in rules()[alert]["annotations"].items()}


def promtool_test(tmp_path: Path, series: list[dict[str, str]], cases: Sequence[dict[str, Any]]) -> None:
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": f"{INTERVAL}s",
        "tests": [{"interval": f"{INTERVAL}s", "input_series": series, "alert_rule_test": list(cases)}],
    }
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    done = subprocess.run([str(promtool()), "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{path.read_text()}"


def fires(
    alert: str, at: int, *alerts: dict[str, str], value: str = "", found: Sequence[dict[str, str]] = ()
) -> dict[str, Any]:
    """At `at` seconds, exactly these alerts (their labels) are firing; `found`: what their annotations'
    query returns."""
    severity = rules()[alert]["labels"]["severity"]
    return {
        "eval_time": f"{at}s",
        "alertname": alert,
        "exp_alerts": [
            {
                "exp_labels": {**labels, "severity": severity},
                "exp_annotations": rendered_annotations(alert, labels, value, found),
            }
            for labels in alerts
        ],
    }


def steps(*parts: tuple[int, Callable[[], list[tuple[Target, str]]]]) -> list[list[tuple[Target, str]]]:
    """(intervals, a scrape of the targets) in turn; the scrape is taken at each interval."""
    return [scrape() for intervals, scrape in parts for _ in range(intervals)]


def test_the_rules_file_is_valid_and_lint_clean_to_promtool() -> None:
    done = subprocess.run(
        [str(promtool()), "check", "rules", "--lint=all", "--lint-fatal", str(RULES)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_a_crash_loop_pages_after_the_rules_for_with_the_graph_named_and_clears_on_recovery(tmp_path: Path) -> None:
    a, b = Watcher(leader=True), Watcher(leader=False)

    def both() -> list[tuple[Target, str]]:
        return [(LEADER, a.scrape()), (FOLLOWER, b.scrape())]

    def crash() -> list[tuple[Target, str]]:
        for w in (a, b):  # both replicas diagnose
            w.crash_loop("dynamo", "llm", "worker")
        return both()

    def recover() -> list[tuple[Target, str]]:
        for w in (a, b):
            w.crash_loop("dynamo", "llm", "worker", crashing=False)
        return both()

    wait = for_of("CrashwatchGraphCrashLooping")
    held = wait // INTERVAL + 4
    series = input_series(steps((4, both), (1, crash), (held - 1, both), (1, recover), (6, both)))
    start, recovered = 4 * INTERVAL, (4 + held) * INTERVAL
    # the watcher's namespace label (the target's) gives way to the graph's: honor_labels
    labels = {"namespace": "dynamo", "graph": "llm", "job": "crashwatch"}
    promtool_test(
        tmp_path,
        series,
        [
            fires("CrashwatchGraphCrashLooping", start + wait - INTERVAL),  # pending, not firing
            fires("CrashwatchGraphCrashLooping", start + wait, labels, value="1", found=[WORKER]),
            fires("CrashwatchGraphCrashLooping", recovered - INTERVAL, labels, value="1", found=[WORKER]),
            fires("CrashwatchGraphCrashLooping", recovered),  # the series went stale with the recovery
            # the watchers themselves were fine all along
            *(fires(alert, recovered) for alert in rules() if alert != "CrashwatchGraphCrashLooping"),
        ],
    )


def test_the_crash_loop_alert_names_each_crash_looping_components_finding_and_no_other_diagnosis(
    tmp_path: Path,
) -> None:
    a, b = Watcher(leader=True), Watcher(leader=False)
    oom = Finding("llm-prefill-7c9d5-x2q", "engine", 5, 137, "OOMKilled")
    pulling = Finding("llm-frontend-0", "main", 0, 0, "ImagePullBackOff", diagnosis=IMAGE_PULL)

    def both() -> list[tuple[Target, str]]:
        return [(LEADER, a.scrape()), (FOLLOWER, b.scrape())]

    def failing() -> list[tuple[Target, str]]:
        for w in (a, b):  # both replicas diagnose the same
            w.crash_loop("dynamo", "llm", "worker")
            w.diagnose("dynamo", "llm", "prefill", oom)
            w.diagnose("dynamo", "llm", "frontend", pulling)
        return both()

    def prefill_fixed() -> list[tuple[Target, str]]:
        for w in (a, b):
            w.diagnose("dynamo", "llm", "prefill", None)
        return both()

    wait = for_of("CrashwatchGraphCrashLooping")
    series = input_series(steps((2, both), (1, failing), (wait // INTERVAL + 1, both), (1, prefill_fixed), (2, both)))
    # one series per component and replica, the Pod the diagnosed one (honor_labels), the image pull among them
    assert sum("crashwatch_component_diagnosed{" in s["series"] for s in series) == 6
    assert any('pod="llm-prefill-7c9d5-x2q"' in s["series"] and 'exit_code="137"' in s["series"] for s in series)
    assert any('reason="ImagePullFailing"' in s["series"] for s in series)
    prefill = {"component": "prefill", "container": "engine", "pod": "llm-prefill-7c9d5-x2q", "exit_code": "137"}
    labels = {"namespace": "dynamo", "graph": "llm", "job": "crashwatch"}
    firing = (2 + 1 + wait // INTERVAL) * INTERVAL  # the scrape after the crash loops, plus the `for`
    (description,) = {
        rendered_annotations("CrashwatchGraphCrashLooping", labels, "2", [prefill, WORKER])["description"]
    }
    # what the page says: each crash loop's finding, by component; not the image pull, another diagnosis
    assert (
        "crash-loop: component prefill, container engine of Pod llm-prefill-7c9d5-x2q, down after exit code 137; "
        "component worker, container main of Pod llm-worker-0, down after exit code 1; the restarts"
    ) in description
    assert "frontend" not in description
    promtool_test(
        tmp_path,
        series,
        [
            fires("CrashwatchGraphCrashLooping", firing, labels, value="2", found=[prefill, WORKER]),
            # prefill fixed: the next evaluation names the one left
            fires("CrashwatchGraphCrashLooping", firing + 2 * INTERVAL, labels, value="1", found=[WORKER]),
        ],
    )


def test_no_leader_pages_only_when_none_takes_over_for_longer_than_the_lease(tmp_path: Path) -> None:
    a, b = Watcher(leader=True), Watcher(leader=False)
    wait = for_of("CrashwatchNoLeader")
    assert wait > 15 + INTERVAL, "the `for` must outlast the lease (15 s) and a scrape"

    def a_leads() -> list[tuple[Target, str]]:
        return [(LEADER, a.scrape()), (FOLLOWER, b.scrape())]

    def a_gone_b_leads() -> list[tuple[Target, str]]:  # a failover: the next scrape finds b leading
        b.leader = True
        return [(FOLLOWER, b.scrape())]

    def b_loses_it() -> list[tuple[Target, str]]:  # b cannot renew (an API server cut off), no one else
        b.leader = False
        return [(FOLLOWER, b.scrape())]

    def a_gone_b_follows() -> list[tuple[Target, str]]:  # a scrape between the leader's end and the takeover
        return [(FOLLOWER, b.scrape())]

    lost = 11 * INTERVAL
    series = input_series(
        steps((4, a_leads), (1, a_gone_b_follows), (6, a_gone_b_leads), (wait // INTERVAL + 4, b_loses_it))
    )
    labels = {"job": "crashwatch", "namespace": "crashwatch"}
    promtool_test(
        tmp_path,
        series,
        [
            fires("CrashwatchNoLeader", lost - INTERVAL),  # the failover paged no one
            fires("CrashwatchNoLeader", lost + wait - INTERVAL),
            fires("CrashwatchNoLeader", lost + wait, labels),
        ],
    )


def test_a_replica_that_never_syncs_is_reported_by_name(tmp_path: Path) -> None:
    a, b = Watcher(), Watcher(leader=False, synced=False)
    wait = for_of("CrashwatchNotSynced")
    series = input_series(steps((wait // INTERVAL + 2, lambda: [(LEADER, a.scrape()), (FOLLOWER, b.scrape())])))
    promtool_test(
        tmp_path,
        series,
        [
            fires("CrashwatchNotSynced", wait - INTERVAL),
            fires("CrashwatchNotSynced", wait, FOLLOWER),
        ],
    )


def test_no_watcher_scraped_at_all_is_reported(tmp_path: Path) -> None:
    wait = for_of("CrashwatchAbsent")
    a = Watcher()
    # scraped for a while, then gone (uninstalled, its namespace deleted, the ServiceMonitor not selected)
    series = input_series(steps((4, lambda: [(LEADER, a.scrape())]), (wait // INTERVAL + 4, lambda: [])))
    gone = 4 * INTERVAL
    promtool_test(
        tmp_path,
        series,
        [
            fires("CrashwatchAbsent", gone + wait - INTERVAL),
            fires("CrashwatchAbsent", gone + wait + INTERVAL, {}),
        ],
    )


def test_status_writes_given_up_again_and_again_page_and_writes_that_land_do_not(tmp_path: Path) -> None:
    a = Watcher()
    wait = for_of("CrashwatchStatusWritesFailing")

    def working() -> list[tuple[Target, str]]:
        a.writes.writes += 1
        a.writes.unchanged += 1
        return [(LEADER, a.scrape())]

    def failing() -> list[tuple[Target, str]]:
        a.writes.failures += 1
        return [(LEADER, a.scrape())]

    series = input_series(steps((20, working), (wait // INTERVAL + 4, failing)))
    started = 20 * INTERVAL
    labels = {"job": "crashwatch", "namespace": "crashwatch", "result": "failed"}
    promtool_test(
        tmp_path,
        series,
        [
            fires("CrashwatchStatusWritesFailing", started - INTERVAL),
            # the first failure raises the increase at once; then it holds for the `for`
            fires("CrashwatchStatusWritesFailing", started + wait - INTERVAL),
            fires("CrashwatchStatusWritesFailing", started + wait + INTERVAL, labels),
        ],
    )


def test_conflicts_page_when_they_outnumber_the_writes_that_land(tmp_path: Path) -> None:
    a = Watcher()
    wait = for_of("CrashwatchStatusWritesConflicting")
    tick = 0

    def now_and_then() -> list[tuple[Target, str]]:  # the operator between a read and a write, sometimes
        nonlocal tick
        tick += 1
        a.writes.writes += 1
        a.writes.conflicts += tick % 4 == 0
        return [(LEADER, a.scrape())]

    def fighting() -> list[tuple[Target, str]]:  # another writer rewrites every status crashwatch writes
        nonlocal tick
        tick += 1
        a.writes.conflicts += 2
        a.writes.writes += tick % 2
        return [(LEADER, a.scrape())]

    calm = 60
    series = input_series(steps((calm, now_and_then), (wait // INTERVAL * 2 + 4, fighting)))
    labels = {"job": "crashwatch", "namespace": "crashwatch"}
    at = calm * INTERVAL
    promtool_test(
        tmp_path,
        series,
        [
            fires("CrashwatchStatusWritesConflicting", at - INTERVAL),  # 15 conflicts in 30 min: quiet
            fires("CrashwatchStatusWritesConflicting", at + 2 * wait, labels),
        ],
    )


def test_events_left_unwritten_page_and_a_followers_deference_does_not(tmp_path: Path) -> None:
    a, b = Watcher(), Watcher(leader=False)
    wait = for_of("CrashwatchEventsDropped")

    def normal() -> list[tuple[Target, str]]:
        a.events.created += 1
        b.events.not_leader += 1
        return [(LEADER, a.scrape()), (FOLLOWER, b.scrape())]

    def refused() -> list[tuple[Target, str]]:
        a.events.refused += 1  # e.g. a 403: the ClusterRole lacks events
        b.events.not_leader += 1
        return [(LEADER, a.scrape()), (FOLLOWER, b.scrape())]

    series = input_series(steps((20, normal), (2, refused), (wait // INTERVAL + 4, normal)))
    at = 20 * INTERVAL
    labels = {"job": "crashwatch", "namespace": "crashwatch", "reason": "refused"}
    promtool_test(
        tmp_path,
        series,
        [
            fires("CrashwatchEventsDropped", at - INTERVAL),
            fires("CrashwatchEventsDropped", at + wait + 2 * INTERVAL, labels),
        ],
    )


def test_a_webhook_the_api_server_cannot_call_is_reported_and_a_render_the_pods_catch_up_with_is_not(
    tmp_path: Path,
) -> None:
    """Only the replica that answers checks the registration (a follower has no series); a render that
    changed the caBundle is healed once the Pods read the new Secret (a minute); a mismatch that stays
    pages, through a failover too."""
    a, b = Watcher(trusted=True), Watcher(leader=False)
    wait = for_of("CrashwatchAdmissionUntrusted")

    def checked(trusted: bool) -> Callable[[], list[tuple[Target, str]]]:
        def scrape() -> list[tuple[Target, str]]:
            a.trusted = trusted
            return [(LEADER, a.scrape()), (FOLLOWER, b.scrape())]

        return scrape

    def b_took_over() -> list[tuple[Target, str]]:  # a gone; b leads, checks, and finds the same
        b.leader, b.trusted = True, False
        return [(FOLLOWER, b.scrape())]

    render = ((2, checked(False)), (4, checked(True)))  # the caBundle changed, the Pods read the Secret a minute on
    lasting_mismatch = ((6, checked(False)), (wait // INTERVAL, b_took_over))
    series = input_series(steps((4, checked(True)), *render, *lasting_mismatch))
    assert sum("crashwatch_admission_trusted{" in s["series"] for s in series) == 2  # a's, then b's
    lasting = 10 * INTERVAL
    labels = {"job": "crashwatch", "namespace": "crashwatch", "configuration": "crashwatch-crashwatch"}
    promtool_test(
        tmp_path,
        series,
        [
            fires("CrashwatchAdmissionUntrusted", lasting - INTERVAL),  # the render the Pods caught up with
            fires("CrashwatchAdmissionUntrusted", lasting + wait - INTERVAL),
            fires("CrashwatchAdmissionUntrusted", lasting + wait, labels),  # the failover did not reset the `for`
        ],
    )
