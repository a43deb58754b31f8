"""The operator's views over HTTP: alarm shelving and history, the production
figures, the machine timeline, a job's route, the AI queue's figures and
``/api/me``; every bad window or body a 400 that changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from shared.db.models import Alarm, Job, MachineStateInterval, Task, WorkOrder
from tests.gateway.conftest import ADMIN, AUTH, OPERATOR, RUNTIME


def error_of(r):
    return r.get_json()["error"]["code"]


def _alarm(writable, **kw) -> int:
    with writable.begin() as s:
        alarm = Alarm(**{"code": "MACHINE_FAULT", "severity": "ERROR", "message": "MC2 fault",
                         "equipment_id": "MC2", **kw})
        s.add(alarm)
        s.flush()
        return alarm.id


def test_shelve_hides_an_alarm_from_the_active_list_and_unshelve_brings_it_back(client, writable):
    alarm_id = _alarm(writable)
    r = client.post(f"/api/alarms/{alarm_id}/shelve", json={"minutes": 30, "reason": "sensor swap"},
                    headers=AUTH)
    assert r.status_code == 200, r.get_json()
    body = r.get_json()
    assert body["status"] == "SHELVED" and body["shelveReason"] == "sensor swap"
    until = datetime.fromisoformat(body["shelvedUntil"].replace("Z", "+00:00"))
    assert timedelta(minutes=29) < until - datetime.now(UTC) <= timedelta(minutes=30)
    active = client.get("/api/alarms?status=RAISED,ACKNOWLEDGED", headers=AUTH).get_json()["items"]
    assert alarm_id not in [a["id"] for a in active]
    r = client.post(f"/api/alarms/{alarm_id}/unshelve", headers=AUTH)
    assert r.status_code == 200 and r.get_json()["status"] == "RAISED"
    r = client.post(f"/api/alarms/{alarm_id}/unshelve", headers=AUTH)
    assert r.status_code == 409 and error_of(r) == "INVALID_TRANSITION"


def test_bad_shelve_requests_are_refused_and_change_nothing(client, writable):
    alarm_id = _alarm(writable)
    for body, field in [({"minutes": 0, "reason": "x"}, "minutes"),
                        ({"minutes": 1441, "reason": "x"}, "minutes"),
                        ({"minutes": "30", "reason": "x"}, "minutes"),
                        ({"minutes": 30}, "reason"),
                        ({"minutes": 30, "reason": ""}, "reason"),
                        ({"minutes": 30, "reason": "x" * 201}, "reason"),
                        ({"minutes": 30, "reason": "x", "extra": 1}, "extra")]:
        r = client.post(f"/api/alarms/{alarm_id}/shelve", json=body, headers=AUTH)
        assert r.status_code == 400 and field in r.get_json()["error"]["message"], (body, r.get_json())
    r = client.post(f"/api/alarms/{alarm_id}/shelve", headers=AUTH)
    assert r.status_code == 400
    r = client.post("/api/alarms/999999/shelve", json={"minutes": 5, "reason": "x"}, headers=AUTH)
    assert r.status_code == 404
    cleared = _alarm(writable, status="CLEARED")
    r = client.post(f"/api/alarms/{cleared}/shelve", json={"minutes": 5, "reason": "x"}, headers=AUTH)
    assert r.status_code == 409
    with writable() as s:
        assert s.get(Alarm, alarm_id).status == "RAISED"


def test_alarm_history_filters_and_counts_per_code(client, writable):
    now = datetime.now(UTC)
    old = _alarm(writable, code="DOOR_OPEN", severity="WARNING", equipment_id="MC1",
                 raised_at=now - timedelta(hours=30))
    a = _alarm(writable, code="DOOR_OPEN", severity="WARNING", equipment_id="MC1")
    b = _alarm(writable, code="DOOR_OPEN", severity="WARNING", equipment_id="MC1", status="CLEARED")
    c = _alarm(writable, code="SPINDLE", severity="CRITICAL", equipment_id="MC2")

    def ids(query):
        r = client.get(f"/api/alarms?{query}", headers=AUTH)
        assert r.status_code == 200, r.get_json()
        return [x["id"] for x in r.get_json()["items"]]

    assert ids("code=DOOR_OPEN") == [old, a, b]
    assert ids("equipmentId=MC2") == [c]
    assert ids("severity=critical") == [c]
    assert ids("code=DOOR_OPEN&status=CLEARED") == [b]
    since = (now - timedelta(hours=1)).isoformat()
    assert ids(f"code=DOOR_OPEN&from={since.replace('+', '%2B')}") == [a, b]
    assert ids("to=" + (now - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")) == [old]

    counts = client.get("/api/stats/alarms", headers=AUTH).get_json()
    assert counts["items"] == [
        {"code": "DOOR_OPEN", "count": 2, "open": 1, "lastRaisedAt": counts["items"][0]["lastRaisedAt"]},
        {"code": "SPINDLE", "count": 1, "open": 1, "lastRaisedAt": counts["items"][1]["lastRaisedAt"]}]
    for query in ("severity=LOUD", "from=yesterday", "from=2026-13-01", "status=NOPE",
                  "from=2026-12-02T00:00:00Z&to=2026-12-01T00:00:00Z"):
        r = client.get(f"/api/alarms?{query}", headers=AUTH)
        assert r.status_code == 400, query


def test_bad_windows_are_refused(client):
    for path in ("/api/stats", "/api/stats/timeline", "/api/stats/alarms"):
        for query in ("from=soon", "to=2026-01-01T00:00:00Z&from=2026-01-02T00:00:00Z",
                      "from=2026-01-01T00:00:00Z&to=2026-03-01T00:00:00Z", "from=0001-01-01",
                      "from=2026-01-01T00:00:00%2B25:00", "from=" + "9" * 70):
            r = client.get(f"{path}?{query}", headers=AUTH)
            assert r.status_code == 400 and error_of(r) == "VALIDATION_ERROR", (path, query, r.get_json())
    r = client.get("/api/stats/timeline?equipmentId=NOPE", headers=AUTH)
    assert r.status_code == 404
    r = client.get("/api/stats/timeline?limit=0", headers=AUTH)
    assert r.status_code == 400
    assert client.get("/api/stats").status_code == 401
    assert client.get("/api/stats", headers={"Authorization": f"Bearer {RUNTIME}"}).status_code == 403


def test_stats_and_timeline_read_the_rollup(client, writable):
    now = datetime.now(UTC).replace(microsecond=0)
    with writable.begin() as s:
        s.add_all([
            MachineStateInterval(equipment_id="MC1", state="IDLE", started_at=now - timedelta(hours=2),
                                 ended_at=now - timedelta(hours=1)),
            MachineStateInterval(equipment_id="MC1", state="PROCESSING", started_at=now - timedelta(hours=1)),
        ])
    stats = client.get("/api/stats", headers=AUTH).get_json()
    assert set(stats) >= {"from", "to", "line", "equipment", "hourly"}
    assert set(stats["line"]) >= {"completed", "scrapped", "throughputPerHour", "scrapRate"}
    mc1 = next(e for e in stats["equipment"] if e["id"] == "MC1")
    assert set(mc1) >= {"id", "utilization", "availability", "performance", "quality", "oee",
                        "cycles", "meanCycleSeconds", "p95CycleSeconds"}
    assert 0.49 < mc1["utilization"] < 0.51 and mc1["availability"] == 1.0
    assert len(stats["hourly"]) in (8, 9)
    r = client.get("/api/stats/timeline?equipmentId=MC1", headers=AUTH)
    items = r.get_json()["items"]
    assert [i["state"] for i in items] == ["IDLE", "PROCESSING"]
    assert items[0]["to"] == items[1]["from"] and not r.get_json()["truncated"]
    r = client.get("/api/stats/timeline?equipmentId=MC1&limit=1", headers=AUTH)
    assert len(r.get_json()["items"]) == 1 and r.get_json()["truncated"]


def test_a_jobs_route_shows_each_step_with_its_times(client, writable):
    now = datetime.now(UTC)
    with writable.begin() as s:
        order = WorkOrder(code="WO-R", product_id="SHAFT-B", quantity=1, status="RUNNING",
                          route=[{"op": "process", "equipmentKind": "machining"},
                                 {"op": "inspect", "equipmentKind": "inspection"}])
        s.add(order)
        s.flush()
        job = Job(work_order_id=order.id, seq_no=1, status="QUEUED", position_type="ON_BUFFER",
                  step_index=1)
        s.add(job)
        s.flush()

        def task(kind, step, start, end, equipment=None):
            s.add(Task(kind=kind, status="SUCCEEDED", job_id=job.id, work_order_id=order.id,
                       equipment_id=equipment, started_at=now + timedelta(seconds=start),
                       finished_at=now + timedelta(seconds=end),
                       params={"jobIds": [job.id], "before": {str(job.id): {"stepIndex": step}}}))
        task("DOCK_TO_BUFFER", 0, 0, 5)
        task("BUFFER_TO_EQUIPMENT", 0, 6, 10, "MC1")
        task("START_MACHINE", 0, 10, 11, "MC1")
        task("EQUIPMENT_TO_BUFFER", 0, 22, 26, "MC1")
        job_id = job.id
    r = client.get(f"/api/jobs/{job_id}/route", headers=AUTH)
    assert r.status_code == 200, r.get_json()
    route = r.get_json()
    assert [st["state"] for st in route["steps"]] == ["DONE", "CURRENT"]
    first = route["steps"][0]
    assert [t["kind"] for t in first["tasks"]] == ["BUFFER_TO_EQUIPMENT", "START_MACHINE",
                                                   "EQUIPMENT_TO_BUFFER"]
    assert first["equipmentIds"] == ["MC1"]
    started = datetime.fromisoformat(first["startedAt"].replace("Z", "+00:00"))
    finished = datetime.fromisoformat(first["finishedAt"].replace("Z", "+00:00"))
    assert round((finished - started).total_seconds()) == 20
    assert [t["kind"] for t in route["arrival"]] == ["DOCK_TO_BUFFER"]
    assert route["steps"][1]["tasks"] == [] and route["steps"][1]["startedAt"] is None
    assert client.get("/api/jobs/999999/route", headers=AUTH).status_code == 404


def test_me_names_the_tokens_role(client):
    for token, role in ((OPERATOR, "operator"), (ADMIN, "admin"), (RUNTIME, "runtime")):
        r = client.get("/api/me", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200 and r.get_json()["role"] == role
    assert client.get("/api/me").status_code == 401


def test_ai_queue_figures_show_depth_throughput_and_failures(client, writable):
    admin = {"Authorization": f"Bearer {ADMIN}"}
    r = client.get("/api/ai/stats", headers=admin)
    assert r.status_code == 200, r.get_json()
    body = r.get_json()
    assert set(body["byStatus"]) == {"pending", "locked", "running", "succeeded", "failed",
                                     "cancelled", "expired"}
    assert body["recentFailures"] == [] and len(body["hourly"]) in (8, 9)
    assert client.get("/api/ai/stats", headers=AUTH).status_code == 403  # operator
    with writable() as s:
        assert s.scalars(select(Alarm)).all() == []


def test_a_read_held_up_by_a_lock_is_cut_off_with_503_and_the_next_is_served(gateway_env, engine,
                                                                             monkeypatch):
    import gateway.app
    from gateway.app import create_app
    from shared.config import load_settings

    monkeypatch.setattr(gateway.app, "READ_STATEMENT_TIMEOUT_MS", 300)
    app = create_app(load_settings(gateway_env))
    client = app.test_client()
    try:
        with engine.connect() as blocker:  # e.g. a migration or a VACUUM FULL holding the table
            tx = blocker.begin()
            blocker.exec_driver_sql("LOCK TABLE machine_state_interval IN ACCESS EXCLUSIVE MODE")
            r = client.get("/api/stats", headers=AUTH)
            tx.rollback()
        assert r.status_code == 503 and error_of(r) == "UNAVAILABLE", r.get_json()
        assert "too long" in r.get_json()["error"]["message"]
        assert client.get("/api/stats", headers=AUTH).status_code == 200
    finally:
        app.extensions["linectl"].close()
