"""What the tests of ``deploy/`` share: Debian's Prometheus tools, the metric names the bot exposes,
and the dashboard's queries as Prometheus receives them from Grafana.

Not a test module: ``tests/deploy/`` and ``tests/e2e/test_observe.py`` import it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from framecast.ops import BudgetReading, Metrics
from framecast.values import JobKind, JobState

__all__ = [
    "ALERTS",
    "ALERTS_TEST",
    "DASHBOARD",
    "DEPLOY",
    "PROMETHEUS_CONFIG",
    "PanelQuery",
    "exposed_metric_names",
    "load_dashboard",
    "metric_names_in",
    "panel_queries",
    "prometheus_tool",
]

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
ALERTS_TEST = DEPLOY / "prometheus" / "alerts_test.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "framecast.json"

#: What Grafana puts for ``$__rate_interval`` here (it computes one from the scrape interval).
RATE_INTERVAL = "1m"


def prometheus_tool(name: str) -> str:
    """The path of `name` (``promtool``, ``prometheus``): Debian's ``prometheus`` package.

    Missing, the test skips and says how to install it, except in CI (``CI=true``), where ``.ci/run``
    installs it: there the test fails, so a broken install never passes as skipped tests.
    """
    path = shutil.which(name)
    if path is not None:
        return path
    why = f"{name} is not installed (apt-get install --no-install-recommends prometheus)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{why}; CI installs it in .ci/run, so that step failed")
    pytest.skip(why)


def exposed_metric_names() -> set[str]:
    """Every sample name a Framecast process can expose (a counter ``x`` as ``x_total``, a histogram
    as ``x_bucket``, ``x_count`` and ``x_sum``), read from :class:`Metrics` itself."""
    metrics = Metrics()
    # The live families only show samples once their owners are tracked; names come from the families.
    metrics.track_jobs(lambda: {(JobState.QUEUED, JobKind.VIDEO): 1})
    metrics.track_queue(lambda: 1, lambda: {0: 1})
    metrics.track_budget("operator", lambda: BudgetReading(used=1, limit=2, allowed=2, waiting=1))
    metrics.track_planner("operator", lambda: 1)
    names: set[str] = set()
    for family in metrics.registry.collect():
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names.update(family.name + suffix for suffix in ("_bucket", "_count", "_sum"))
        else:
            names.add(family.name)
    return names


def metric_names_in(expr: str) -> set[str]:
    """The ``framecast_*`` metric names a PromQL expression reads."""
    return set(re.findall(r"\bframecast_[a-z0-9_]+\b", expr))


def load_dashboard() -> dict[str, Any]:
    """``deploy/grafana/dashboards/framecast.json``."""
    return dict(json.loads(DASHBOARD.read_text(encoding="utf-8")))


@dataclass(frozen=True)
class PanelQuery:
    """One query of one dashboard panel, with Grafana's variables replaced as Grafana would."""

    panel: str  # the panel's title
    ref_id: str
    expr: str  # as written in the dashboard
    promql: str  # as Prometheus receives it (every variable "All", $__rate_interval = RATE_INTERVAL)


def panel_queries(dashboard: dict[str, Any]) -> list[PanelQuery]:
    """Every query of every panel (rows hold none), variables substituted."""
    values = {"__rate_interval": RATE_INTERVAL}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            values[variable["name"]] = variable["allValue"]

    def substitute(expr: str) -> str:
        def one(match: re.Match[str]) -> str:
            name = match.group(1) or match.group(2)
            if name not in values:
                raise AssertionError(f"{expr!r} uses ${name}, which the dashboard does not define")
            return values[name]

        return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, expr)

    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target.get("expr", "")
            out.append(PanelQuery(panel["title"], target.get("refId", ""), expr, substitute(expr)))
    return out
