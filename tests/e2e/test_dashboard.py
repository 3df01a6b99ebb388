"""Every query of the Grafana dashboard is PromQL the real promtool parses (Grafana's variables replaced as
Grafana replaces them), checked as recording rules by `promtool check rules`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml
from promtool_bin import promtool

DASHBOARD = Path(__file__).resolve().parents[2] / "k8s" / "monitoring" / "crashwatch-dashboard.json"
# what Grafana puts in place of its variables: an interval, and the job variable's All value (.*)
GRAFANA = {"$__rate_interval": "2m", "$job": ".*"}


def test_every_dashboard_query_is_promql_promtool_parses(tmp_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    queries.append(next(v for v in dashboard["templating"]["list"] if v["name"] == "job")["query"]["query"])
    queries = [q for q in queries if not q.startswith("label_values(")]  # Grafana's own, not PromQL
    rules = []
    for index, query in enumerate(queries):
        for variable, value in GRAFANA.items():
            query = query.replace(variable, value)
        assert "$" not in query, query
        rules.append({"record": f"dashboard:query_{index}", "expr": query})
    path = tmp_path / "dashboard.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run([str(promtool()), "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout
    # and promtool does refuse a broken one, so the check above means something
    path.write_text(
        yaml.safe_dump({"groups": [{"name": "d", "rules": [{"record": "x:y", "expr": "sum(rate(x[5m])"}]}]})
    )
    assert subprocess.run([str(promtool()), "check", "rules", str(path)], capture_output=True).returncode != 0
