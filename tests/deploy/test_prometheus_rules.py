"""deploy/prometheus/: the scrape config and the alert rules, checked and unit-tested by Debian's promtool.

One alert (or more) per item of the README's "What to alert on", each with ``for:``, a severity and
annotations that name nothing secret; ``alerts_test.yml`` has a case where each fires and one where
it does not. (tests/e2e/test_observe.py loads the same rules into a Prometheus scraping the bot.)
"""

from __future__ import annotations

import re
import subprocess

from tests.deploy.promstack import (
    ALERTS,
    ALERTS_TEST,
    PROMETHEUS_CONFIG,
    REPO,
    exposed_metric_names,
    metric_names_in,
    prometheus_tool,
)

#: Each README alert item (a phrase of it) and the alerts that cover it.
README_ITEMS = {
    "`/healthz` failing": {"FramecastDown", "FramecastEventLoopStalled"},
    "`/readyz` failing for more than a few minutes": {"FramecastNotReady"},
    "`rate(framecast_service_429_total[10m]) > 0` for long": {"FramecastServiceRateLimited"},
    '`framecast_jobs_failed_total{code="auth"}` rising': {"FramecastOperatorKeyRefused"},
    "`framecast_budget_waiting` high and `framecast_queue_depth` growing for an hour": {
        "FramecastKeyBottleneck"
    },
    "`histogram_quantile(0.9, framecast_completion_to_file_seconds)` over a few minutes": {
        "FramecastSlowDelivery"
    },
}

# The only values an annotation may show: where (instance), which check, which key label (an HMAC).
ALLOWED_TEMPLATE_FIELDS = {"$labels.instance", "$labels.check", "$labels.key", "$value"}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [prometheus_tool("promtool"), *args], capture_output=True, text=True, timeout=60, cwd=REPO
    )


def alert_blocks() -> dict[str, str]:
    """Each alert's text in alerts.yml, by name (comments left out)."""
    text = re.sub(r"^\s*#.*\n", "", ALERTS.read_text(encoding="utf-8"), flags=re.MULTILINE)
    parts = re.split(r"^      - alert: ", text, flags=re.MULTILINE)[1:]
    return {part.split("\n", 1)[0].strip(): part for part in parts}


def test_promtool_accepts_the_scrape_config_and_its_rules() -> None:
    done = promtool("check", "config", str(PROMETHEUS_CONFIG))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 rule files found" in done.stdout
    done = promtool("check", "rules", str(ALERTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(alert_blocks())} rules found" in done.stdout


def test_the_alerts_unit_tests_pass() -> None:
    done = promtool("test", "rules", str(ALERTS_TEST))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    tests = ALERTS_TEST.read_text(encoding="utf-8")
    cases = re.findall(r"alertname: (\w+)\n\s+exp_alerts:(.*)", tests)
    for name in alert_blocks():
        outcomes = [rest.strip() for alert, rest in cases if alert == name]
        assert "[]" in outcomes, f"{name}: no case where it stays quiet"
        assert "" in outcomes, f"{name}: no case where it fires"


def test_every_readme_alert_item_has_its_alerts() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("**What to alert on**", 1)[1].split("\n\n", 1)[0]
    items = [line for line in section.splitlines() if line.startswith("- ")]
    assert len(items) == len(README_ITEMS), "a README alert item has no rule here (or one went away)"
    for phrase, alerts in README_ITEMS.items():
        assert any(phrase in item for item in items), phrase
        assert alerts <= set(alert_blocks()), alerts - set(alert_blocks())
    assert set().union(*README_ITEMS.values()) == set(alert_blocks())
    for name in alert_blocks():  # README says which alert stands for which item
        assert name in readme, f"{name} is not named in the README"


def test_each_alert_waits_has_a_severity_and_shows_nothing_secret() -> None:
    exposed = exposed_metric_names() | {"up"}
    for name, block in alert_blocks().items():
        assert re.search(r"^        for: \d+[smh]$", block, re.MULTILINE), f"{name}: no for:"
        assert re.search(r"^          severity: (critical|warning)$", block, re.MULTILINE), name
        assert "summary:" in block and "description:" in block, name
        assert 'job="framecast"' in block, f"{name} does not select the framecast job"
        fields = set(re.findall(r"\{\{\s*(\$[\w.]+)", block))
        assert fields <= ALLOWED_TEMPLATE_FIELDS, f"{name} shows {fields - ALLOWED_TEMPLATE_FIELDS}"
        missing = metric_names_in(block) - exposed
        assert not missing, f"{name} reads metrics the bot does not expose: {missing}"
