"""What the alert rules and the dashboard read (deploy/prometheus/alerts.yml,
deploy/grafana/linectl.json) is what /metrics exports: every metric they name
is in a real scrape, and the figures added for them (the newest event's age,
open manual actions, unfinished orders, the AI queue's age and outcomes, the
database's reachability) say what the rows say."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from tests.gateway.conftest import gateway_app
from tests.gateway.standin import StandInLineController

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
METRIC_NAME = re.compile(r"\blinectl_[a-z0-9_]+")


def samples(client) -> dict[str, float]:
    r = client.get("/metrics")
    assert r.status_code == 200
    found = {}
    for family in text_string_to_metric_families(r.get_data(as_text=True)):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            found[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
            found.setdefault(s.name, s.value)
    return found


def named_by_rules_and_dashboard() -> set[str]:
    rules = (DEPLOY / "prometheus" / "alerts.yml").read_text()
    queries = [t["expr"] for p in json.loads((DEPLOY / "grafana" / "linectl.json").read_text())["panels"]
               for t in p.get("targets", [])]
    return set(METRIC_NAME.findall(rules)) | {n for q in queries for n in METRIC_NAME.findall(q)}


@pytest.fixture
def figures(writable, events):
    """Rows whose figures are known: an old event, orders, manual actions, AI jobs."""
    events.write([("OLD_EVENT", {})], publish=False)
    with writable.begin() as s:
        s.execute(text("UPDATE event_log SET at = now() - interval '700 seconds'"))
        for code, status in (("WO-R", "RUNNING"), ("WO-P", "PAUSED"), ("WO-C", "COMPLETED")):
            s.execute(text("INSERT INTO work_order (code, product_id, route, quantity, status)"
                           " VALUES (:c, 'BRACKET-A', '[]', 1, :s)"), {"c": code, "s": status})
        for status, age in (("OPEN", 1200), ("OPEN", 60), ("RESOLVED", 7200)):
            s.execute(text("INSERT INTO manual_action (kind, status, text, created_at)"
                           " VALUES ('TEST', :s, 'x', now() - make_interval(secs => :a))"), {"s": status, "a": age})
        for status, created, finished in (("pending", 600, None), ("pending", 30, None),
                                          ("failed", 900, 300), ("succeeded", 800, 120),
                                          ("succeeded", 7200, 3600), ("cancelled", 100, 50)):
            s.execute(text(
                "INSERT INTO ai_runtime_job (id, user_id, job_type, target_type, target_id,"
                " output_schema_version, status, created_at, finished_at)"
                " VALUES (gen_random_uuid()::text, 'u1', 'quiz_generation', 'user', 't1', '1', :s,"
                " now() - make_interval(secs => :c),"
                " CASE WHEN :f IS NULL THEN NULL ELSE now() - make_interval(secs => :f) END)"),
                {"s": status, "c": created, "f": finished})


@pytest.fixture
def loop_with_handling(monkeypatch):
    """The stand-in loop reports message timings, as the real one does once it handled some."""
    plain = StandInLineController.status

    def status(self):
        return {**plain(self), "handling": {"le": [0.01, 0.1], "series": {
            "StartOrder": {"count": 3, "sum": 0.05, "failures": 1, "buckets": [2, 3]}}}}

    monkeypatch.setattr(StandInLineController, "status", status)


def test_every_metric_the_rules_and_the_dashboard_name_is_exported(client, figures, loop_with_handling):
    named = named_by_rules_and_dashboard()
    assert {"linectl_last_event_age_seconds", "linectl_ai_jobs_finished_15m", "linectl_database_up"} <= named
    client.get("/healthz")  # a request before the scrape: the request counters have a series
    assert named - set(samples(client)) == set()


def test_the_scrape_reports_what_the_rows_say(client, figures):
    got = samples(client)
    assert got["linectl_database_up"] == 1
    assert got['linectl_work_orders{status="RUNNING"}'] == 1
    assert got['linectl_work_orders{status="PAUSED"}'] == 1
    assert got['linectl_work_orders{status="CREATED"}'] == 0  # COMPLETED ones are not counted
    assert 700 <= got["linectl_last_event_age_seconds"] < 760
    assert got["linectl_manual_actions_open"] == 2
    assert 1200 <= got["linectl_manual_action_oldest_open_seconds"] < 1260
    assert 600 <= got["linectl_ai_oldest_pending_seconds"] < 660
    assert got['linectl_ai_jobs_finished_15m{state="failed"}'] == 1
    assert got['linectl_ai_jobs_finished_15m{state="succeeded"}'] == 1  # the one an hour ago is out
    assert got['linectl_ai_jobs_finished_15m{state="cancelled"}'] == 1
    assert got['linectl_ai_jobs{state="pending"}'] == 2


def test_an_idle_line_reports_zero_ages_not_missing_figures(client):
    got = samples(client)
    assert got["linectl_manual_action_oldest_open_seconds"] == 0
    assert got["linectl_ai_oldest_pending_seconds"] == 0
    assert got['linectl_work_orders{status="RUNNING"}'] == 0


def test_an_unreachable_database_is_a_figure_not_a_failed_scrape(gateway_env, standin):
    with gateway_app({**gateway_env, "LINECTL_DATABASE_URL": "postgresql://u@127.0.0.1:1/none"}) as app:
        got = samples(app.test_client())
        assert got["linectl_database_up"] == 0
        assert "linectl_manual_actions_open" not in got and "linectl_ai_oldest_pending_seconds" not in got
