"""deploy/grafana/: the Framecast dashboard and its provisioning.

The dashboard shows what the issue asks operators to look at, every panel has a query, every
query reads metrics the bot exposes and parses as PromQL (Debian's promtool, as recording rules).
tests/e2e/test_observe.py then runs every query on a real Prometheus scraping the bot.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.deploy.promstack import (
    DEPLOY,
    exposed_metric_names,
    load_dashboard,
    metric_names_in,
    panel_queries,
    prometheus_tool,
)

#: What an operator must find on the dashboard, as panel titles.
REQUIRED_PANELS = (
    "Jobs by state",
    "Queue depth",
    "Budget use per key",
    "429s from the service",
    "Completion-to-file delay",
    "Re-encodes",
    "Event loop lag",
)


def test_the_dashboard_has_the_panels_operators_need_each_with_a_query() -> None:
    dashboard = load_dashboard()
    assert dashboard["uid"] == "framecast" and dashboard["title"] == "Framecast"
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    titles = [p["title"] for p in panels]
    for title in REQUIRED_PANELS:
        assert title in titles, f"no panel {title!r}"
    assert len(set(titles)) == len(titles), "two panels share a title"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(set(ids)) == len(ids), "two panels share an id"
    for panel in panels:
        targets = panel.get("targets", [])
        assert targets, f"{panel['title']}: no query"
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        ref_ids = [t["refId"] for t in targets]
        assert len(set(ref_ids)) == len(ref_ids), panel["title"]
        for target in targets:
            assert target["expr"].strip(), f"{panel['title']} {target['refId']}: empty query"
            assert panel.get("description"), f"{panel['title']}: no description"


def test_the_panels_do_not_overlap() -> None:
    taken: dict[tuple[int, int], str] = {}
    for panel in load_dashboard()["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in taken, f"{panel['title']} overlaps {taken[(x, y)]}"
                taken[(x, y)] = panel["title"]


def test_every_query_reads_metrics_the_bot_exposes_of_the_chosen_processes() -> None:
    exposed = exposed_metric_names()
    used: set[str] = set()
    for query in panel_queries(load_dashboard()):
        names = metric_names_in(query.expr)
        assert not names - exposed, f"{query.panel}: {names - exposed} are not in framecast/ops/metrics.py"
        used |= names
        # Each selector picks the framecast job and the processes chosen at the top of the dashboard.
        selectors = re.findall(r"\b(?:framecast_[a-z0-9_]+|up)\{([^}]*)\}", query.expr)
        assert selectors, query.expr
        for selector in selectors:
            assert 'job="framecast"' in selector and 'instance=~"$instance"' in selector, query.expr
        if "rate(" in query.expr:
            assert "[$__rate_interval]" in query.expr and not re.search(r"\[\d+[smh]\]", query.expr), (
                query.expr
            )
    readme = (DEPLOY.parent / "README.md").read_text(encoding="utf-8")
    for name in used:  # the operators' metrics table names each (without its prefix and suffix)
        short = re.sub(r"_(bucket|count|sum)$", "", name.removeprefix("framecast_"))
        assert f"`{short}" in readme or f"{short}`" in readme, f"{name} is not in the README's metrics table"


def test_every_query_parses_as_promql(tmp_path: Path) -> None:
    # promtool has no "check expression": each query becomes a recording rule it checks.
    rules = [
        {"record": f"dashboard:panel_{i}", "expr": query.promql}
        for i, query in enumerate(panel_queries(load_dashboard()))
    ]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))  # JSON is YAML
    done = subprocess.run(
        [prometheus_tool("promtool"), "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(rules)} rules found" in done.stdout


def test_grafana_is_provisioned_with_the_prometheus_source_and_the_dashboard_folder() -> None:
    source = (DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    assert "type: prometheus" in source and "url: http://prometheus:9090" in source
    provider = (DEPLOY / "grafana" / "provisioning" / "dashboards" / "framecast.yml").read_text()
    # The path the compose file mounts deploy/grafana/dashboards at.
    assert "path: /etc/grafana/dashboards" in provider
    compose = (DEPLOY.parent / "docker-compose.yml").read_text()
    assert "./deploy/grafana/dashboards:/etc/grafana/dashboards:ro" in compose
