"""Stops, reasons, planned downtime and OEE over HTTP against the REAL
line_controller (PRODUCT.md, "Shifts, downtime and OEE"): the operator's
commands go through the loop and are audited; the reads (JSON and CSV) come
from what the loop recorded."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from gateway.app import create_app
from gateway.rpc import RpcPool
from services.line_controller.service import LineControllerService
from shared.config import load_settings
from shared.wire import iso

TOKEN = "op-token-oee-000001"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NOW = datetime.now(UTC).replace(microsecond=0)
# The stops and the planned downtime lie in the whole hour before NOW's: by=hour
# counts a stop in every hour it overlaps, so one across an hour's start would
# be counted twice in the hours' sum (NOW in the last 5 minutes of an hour did).
HOUR = NOW.replace(minute=0, second=0) - timedelta(hours=1)


@pytest.fixture
def client(container_factory, nameko_config, db_url):
    container_factory(LineControllerService, nameko_config).start()
    settings = load_settings({"LINECTL_DATABASE_URL": db_url, "LINECTL_TOKENS": f"operator:ann:{TOKEN}",
                              "LINECTL_COMMAND_WAIT_SECONDS": "10"})
    pool = RpcPool(nameko_config, size=2, timeout=30)
    yield create_app(settings, rpc_pool=pool).test_client()
    pool.close()


@pytest.fixture
def stop_id(engine, client):
    """A stop of 5 minutes at the last hour's start, then running until the test began, as the loop records them."""
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO line_state_interval (state, started_at, ended_at, seen_at) "
                          "VALUES ('RUNNING', :a, :b, :b)"), {"a": HOUR + timedelta(minutes=5), "b": NOW})
        return conn.execute(text(
            "INSERT INTO line_state_interval (state, cause, equipment_id, started_at, ended_at, seen_at) "
            "VALUES ('DOWN', 'EQUIPMENT_FAULT', 'MC1', :a, :b, :b) RETURNING id"),
            {"a": HOUR, "b": HOUR + timedelta(minutes=5)}).scalar()


def test_reasons_splits_and_planned_downtime_go_through_the_loop(client, engine, stop_id):
    window = {"from": iso(NOW - timedelta(hours=2)), "to": iso(NOW + timedelta(minutes=1))}
    stops = client.get("/api/stops", query_string={**window, "unassigned": "true"}, headers=AUTH).get_json()
    assert [(s["id"], s["cause"], s["seconds"], s["lineId"]) for s in stops["items"]] == [
        (stop_id, "EQUIPMENT_FAULT", 300, "demo-cell")]
    r = client.post(f"/api/stops/{stop_id}/split", json={"at": iso(HOUR + timedelta(minutes=2))}, headers=AUTH)
    assert r.status_code == 200, r.get_json()
    first, second = r.get_json()["stops"]
    r = client.post(f"/api/lines/demo-cell/stops/{second['id']}/reason",
                    json={"reasonCode": "ELECTRICAL", "comment": "drive tripped"}, headers=AUTH)
    assert r.status_code == 200 and r.get_json()["assignedBy"] == "ann", r.get_json()
    r = client.post(f"/api/stops/{first['id']}/reason", json={"reasonCode": "NO_SUCH"}, headers=AUTH)
    assert (r.status_code, r.get_json()["error"]["code"]) == (400, "VALIDATION_ERROR")
    r = client.post("/api/stops/999999/reason", json={"reasonCode": "OTHER"}, headers=AUTH)
    assert (r.status_code, r.get_json()["error"]["code"]) == (404, "NOT_FOUND")
    r = client.post(f"/api/stops/{first['id']}/split", json={"at": iso(NOW)}, headers=AUTH)
    assert (r.status_code, r.get_json()["error"]["code"]) == (400, "VALIDATION_ERROR")
    r = client.post("/api/planned-downtime", json={"from": iso(HOUR + timedelta(minutes=30)),
                                                   "to": iso(HOUR + timedelta(minutes=40)),
                                                   "reason": "changeover"}, headers=AUTH)
    assert r.status_code == 200 and r.get_json()["createdBy"] == "ann", r.get_json()
    r = client.post("/api/planned-downtime", json={"from": iso(NOW), "to": iso(NOW - timedelta(hours=1)),
                                                   "reason": "x"}, headers=AUTH)
    assert (r.status_code, r.get_json()["error"]["code"]) == (400, "VALIDATION_ERROR")

    pareto = client.get("/api/stops/pareto", query_string=window, headers=AUTH).get_json()["items"]
    assert [(p["reasonCode"], p["seconds"], p["stops"]) for p in pareto] == [
        ("ELECTRICAL", 180, 1), ("UNASSIGNED", 120, 1)]
    unassigned = client.get("/api/stops", query_string={**window, "unassigned": "true"}, headers=AUTH)
    assert [s["id"] for s in unassigned.get_json()["items"]] == [first["id"]]
    with engine.connect() as conn:
        audit = [tuple(r) for r in conn.execute(text(
            "SELECT actor, action FROM audit_log WHERE outcome = 'HANDLED' ORDER BY id"))]
    assert audit == [("ann", "SplitStop"), ("ann", "AssignStopReason"), ("ann", "AddPlannedDowntime")]

    r = client.get("/api/oee", query_string={**window, "by": "hour"}, headers=AUTH)
    assert r.status_code == 200, r.get_json()
    body = r.get_json()
    assert body["timezone"] == "UTC" and body["items"]
    total = {k: sum(i[k] for i in body["items"]) for k in ("plannedDowntimeSeconds", "downSeconds", "stops")}
    assert total == {"plannedDowntimeSeconds": 600, "downSeconds": 300, "stops": 2}
    r = client.get("/api/oee", query_string={**window, "by": "hour"}, headers={**AUTH, "Accept": "text/csv"})
    assert r.mimetype == "text/csv"
    rows = list(csv.DictReader(io.StringIO(r.get_data(as_text=True))))
    assert len(rows) == len(body["items"]) and float(rows[0]["shiftSeconds"]) == body["items"][0]["shiftSeconds"]
    r = client.get("/api/stops", query_string=window, headers={**AUTH, "Accept": "text/csv"})
    assert [row["reasonCode"] for row in csv.DictReader(io.StringIO(r.get_data(as_text=True)))] == ["", "ELECTRICAL"]
    plant = client.get("/api/plant/oee", query_string={**window, "by": "day"}, headers=AUTH).get_json()
    assert [p["downSeconds"] for p in plant["plant"]] == [i["downSeconds"] for i in plant["items"]]
    states = client.get("/api/states", query_string=window, headers=AUTH).get_json()["items"]
    assert {"DOWN", "PLANNED_DOWN"} <= {s["state"] for s in states}


def test_the_plant_s_shifts_and_reasons(client):
    r = client.get("/api/plant/shifts", query_string={"from": "2026-03-28T12:00:00Z", "to": "2026-03-29T12:00:00Z"},
                   headers=AUTH)
    assert r.status_code == 200
    assert [(i["name"], i["from"], i["to"]) for i in r.get_json()["items"]] == [
        ("day", "2026-03-28T00:00:00Z", "2026-03-29T00:00:00Z"),
        ("day", "2026-03-29T00:00:00Z", "2026-03-30T00:00:00Z")]
    reasons = client.get("/api/plant/downtime-reasons", headers=AUTH).get_json()["items"]
    assert {"MECHANICAL", "CHANGEOVER"} <= {r["code"] for r in reasons}
    assert client.get("/api/oee?by=week", headers=AUTH).status_code == 400
