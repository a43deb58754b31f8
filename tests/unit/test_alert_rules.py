"""The shipped alert rules and dashboard (deploy/prometheus, deploy/grafana) as
Prometheus sees them: ``promtool check rules``, ``promtool test rules`` with the
series in deploy/prometheus/alerts_test.yml, and every dashboard query parsed
by promtool too. Which metrics they name is checked against a real scrape in
tests/gateway/test_alert_metrics.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"
RULES_TEST = DEPLOY / "prometheus" / "alerts_test.yml"
DASHBOARD = DEPLOY / "grafana" / "linectl.json"


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found:
        return found
    why = "promtool is not installed (Debian: apt-get install prometheus)"
    if os.environ.get("CI") == "true":
        pytest.fail(why + "; CI must run these checks")
    pytest.skip(why)


def run(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=cwd)


def dashboard_queries() -> list[str]:
    return [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p.get("targets", [])]


def test_promtool_accepts_the_rules(promtool):
    result = run(promtool, "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_rules_fire_on_their_series_and_only_then(promtool):
    result = run(promtool, "test", "rules", RULES_TEST.name, cwd=RULES_TEST.parent)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_test_that_shows_it_firing():
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    fired = {case["alertname"] for test in yaml.safe_load(RULES_TEST.read_text())["tests"]
             for case in test.get("alert_rule_test", []) if case.get("exp_alerts")}
    assert alerts == fired


def test_every_dashboard_query_parses(promtool, tmp_path):
    # promtool parses a query only inside a rule: each one as a recording rule.
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query{i}", "expr": q} for i, q in enumerate(dashboard_queries())]}]}
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump(rules))
    result = run(promtool, "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_dashboard_uses_a_chosen_prometheus_datasource():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "linectl"
    assert [v["name"] for v in dashboard["templating"]["list"] if v["type"] == "datasource"] == ["datasource"]
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            assert panel["targets"], panel["title"]
