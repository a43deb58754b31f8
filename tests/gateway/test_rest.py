"""Every REST endpoint and its error paths, through the Flask test client,
against the stand-in line_controller on the real transport."""

from __future__ import annotations

from sqlalchemy import select

from shared.db.models import Alarm, LoopMessage, ManualAction, WorkOrder
from tests.gateway.conftest import ADMIN, AUTH, RUNTIME
from tests.gateway.standin import StandInLineController
from tests.support.metrics import missing_series


def create(client, **body):
    body = {"productId": "BRACKET-A", "quantity": 3, **body}
    r = client.post("/api/work-orders", json=body, headers=AUTH)
    assert r.status_code == 201, r.get_json()
    return r.get_json()


def error_of(r):
    return r.get_json()["error"]["code"]


def test_create_order_returns_201_with_the_order(client, writable):
    order = create(client, priority=2, code="WO-1")
    assert order["status"] == "CREATED" and order["quantity"] == 3 and order["priority"] == 2
    assert order["code"] == "WO-1" and order["productId"] == "BRACKET-A"
    with writable() as s:
        assert s.get(WorkOrder, order["id"]).status == "CREATED"
    r = client.get(f"/api/work-orders/{order['id']}", headers=AUTH)
    assert r.status_code == 200 and r.get_json() == order


def test_create_order_validation_changes_nothing(client, writable):
    bad = [
        ({"productId": "BRACKET-A", "quantity": 0}, "quantity"),
        ({"productId": "BRACKET-A", "quantity": 10001}, "quantity"),
        ({"productId": "BRACKET-A", "quantity": "3"}, "quantity"),
        ({"productId": "BRACKET-A", "quantity": 1, "priority": 10}, "priority"),
        ({"productId": "BRACKET-A", "quantity": 1, "code": "x" * 201}, "code"),
        ({"quantity": 1}, "productId"),
        ({"productId": "NOPE", "quantity": 1}, "productId"),
        ({"productId": "BRACKET-A", "quantity": 1, "extra": 1}, "extra"),
    ]
    for body, field in bad:
        r = client.post("/api/work-orders", json=body, headers=AUTH)
        assert r.status_code == 400, (body, r.get_json())
        assert error_of(r) == "VALIDATION_ERROR" and field in r.get_json()["error"]["message"]
    for raw in ("[1, 2]", "null", "42", "{not json"):
        r = client.post("/api/work-orders", data=raw, content_type="application/json", headers=AUTH)
        assert r.status_code == 400 and error_of(r) == "VALIDATION_ERROR", raw
    r = client.post("/api/work-orders", data=b"x" * (1024 * 1024 + 1),
                    content_type="application/json", headers=AUTH)
    assert r.status_code == 413
    with writable() as s:
        assert s.scalars(select(WorkOrder)).all() == []


def test_order_lifecycle_and_invalid_transitions(client):
    order = create(client)
    oid = order["id"]
    r = client.post(f"/api/work-orders/{oid}/pause", headers=AUTH)
    assert r.status_code == 409 and error_of(r) == "INVALID_TRANSITION"
    r = client.post(f"/api/work-orders/{oid}/start", headers=AUTH)  # no body at all
    assert r.status_code == 200 and r.get_json()["status"] == "RUNNING"
    r = client.post(f"/api/work-orders/{oid}/pause", json={"note": "lunch"}, headers=AUTH)
    assert r.get_json()["status"] == "PAUSED"
    r = client.post(f"/api/work-orders/{oid}/resume", json={}, headers=AUTH)
    assert r.get_json()["status"] == "RUNNING"
    r = client.post(f"/api/work-orders/{oid}/cancel", headers=AUTH)
    assert r.get_json()["status"] == "CANCELLED"
    r = client.post(f"/api/work-orders/{oid}/start", headers=AUTH)
    assert r.status_code == 409
    r = client.post("/api/work-orders/999999/start", headers=AUTH)
    assert r.status_code == 404 and error_of(r) == "NOT_FOUND"
    r = client.post(f"/api/work-orders/{2**70}/start", headers=AUTH)
    assert r.status_code == 404
    r = client.post(f"/api/work-orders/{oid}/start", json={"note": "n" * 201}, headers=AUTH)
    assert r.status_code == 400 and "note" in r.get_json()["error"]["message"]


def test_command_outcome_is_queryable(client, writable):
    order = create(client)
    with writable() as s:
        command_id = s.scalars(select(LoopMessage.id)).one()
    r = client.get(f"/api/commands/{command_id}", headers=AUTH)
    body = r.get_json()
    assert r.status_code == 200 and body["status"] == "HANDLED" and body["type"] == "CreateOrder"
    assert body["result"]["id"] == order["id"]
    assert client.get("/api/commands/nope", headers=AUTH).status_code == 404


def test_queued_command_answers_202_with_its_id(client):
    order = create(client)
    StandInLineController.answer_queued = True
    r = client.post(f"/api/work-orders/{order['id']}/start", headers=AUTH)
    assert r.status_code == 202 and len(r.get_json()["commandId"]) == 32


def test_jobs_suspend_resume_rework_and_lists(client):
    order = create(client, quantity=2)
    client.post(f"/api/work-orders/{order['id']}/start", headers=AUTH)
    jobs = client.get(f"/api/jobs?workOrderId={order['id']}", headers=AUTH).get_json()
    assert [j["seqNo"] for j in jobs["items"]] == [1, 2] and jobs["nextCursor"] is None
    jid = jobs["items"][0]["id"]
    r = client.post(f"/api/jobs/{jid}/suspend", json={"note": "check"}, headers=AUTH)
    assert r.status_code == 200 and r.get_json()["status"] == "SUSPENDED"
    assert client.post(f"/api/jobs/{jid}/suspend", headers=AUTH).status_code == 409
    r = client.post(f"/api/jobs/{jid}/resume", headers=AUTH)
    assert r.get_json()["status"] == "QUEUED"
    r = client.post(f"/api/jobs/{jid}/rework", json={"stepIndex": 1}, headers=AUTH)
    assert r.status_code == 200 and r.get_json()["stepIndex"] == 1
    r = client.post(f"/api/jobs/{jid}/rework", json={"stepIndex": -1}, headers=AUTH)
    assert r.status_code == 400 and "stepIndex" in r.get_json()["error"]["message"]
    assert client.get(f"/api/jobs/{jid}", headers=AUTH).get_json()["stepIndex"] == 1
    assert client.get("/api/jobs/424242", headers=AUTH).status_code == 404
    assert client.post("/api/jobs/424242/resume", headers=AUTH).status_code == 404
    r = client.get("/api/jobs?status=SUSPENDED", headers=AUTH)
    assert r.get_json()["items"] == []
    r = client.get("/api/jobs?status=FLYING", headers=AUTH)
    assert r.status_code == 400 and "status" in r.get_json()["error"]["message"]
    r = client.get("/api/tasks?status=PENDING,RUNNING", headers=AUTH)
    assert r.status_code == 200 and r.get_json() == {"items": [], "nextCursor": None}


def test_pagination_is_stable_and_validated(client):
    ids = [create(client, quantity=1)["id"] for _ in range(5)]
    seen, cursor = [], None
    while True:
        url = "/api/work-orders?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = client.get(url, headers=AUTH).get_json()
        seen += [o["id"] for o in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == ids
    for q in ("limit=0", "limit=501", "limit=x", "cursor=abc", "cursor=-1", "status=NOPE"):
        r = client.get(f"/api/work-orders?{q}", headers=AUTH)
        assert r.status_code == 400 and error_of(r) == "VALIDATION_ERROR", q
    r = client.get("/api/work-orders?status=created", headers=AUTH)
    assert [o["id"] for o in r.get_json()["items"]] == ids


def test_alarms_list_and_acknowledge(client, writable):
    with writable.begin() as s:
        s.add(Alarm(code="MACHINE_FAULT", message="MC1 fault", equipment_id="MC1"))
    alarms = client.get("/api/alarms?status=RAISED", headers=AUTH).get_json()["items"]
    assert len(alarms) == 1 and alarms[0]["equipmentId"] == "MC1"
    aid = alarms[0]["id"]
    r = client.post(f"/api/alarms/{aid}/acknowledge", json={"note": "seen"},
                    headers={**AUTH, "X-Actor": "ann"})
    assert r.status_code == 200 and r.get_json()["status"] == "ACKNOWLEDGED"
    # Who acted is the token's holder; the self-asserted X-Actor is only a note.
    assert r.get_json()["acknowledgedBy"] == "operator"
    assert client.post(f"/api/alarms/{aid}/acknowledge", headers=AUTH).status_code == 409
    assert client.post("/api/alarms/777/acknowledge", headers=AUTH).status_code == 404


def test_manual_actions_resolve_and_recovery_confirm(client, writable):
    with writable.begin() as s:
        s.add(ManualAction(kind="SCRAP_OR_REWORK", text="inspect fail", choices=["SCRAP", "REWORK"],
                           facts={"jobId": 4, "equipmentId": "INSP1"}))
        s.add(ManualAction(kind="RECOVERY", text="piece on MC1?", choices=["CONFIRMED"]))
        s.add(ManualAction(kind="RECOVERY", text="piece on MC2?", choices=["CONFIRMED"]))
    items = client.get("/api/manual-actions?status=OPEN", headers=AUTH).get_json()["items"]
    assert [m["kind"] for m in items] == ["SCRAP_OR_REWORK", "RECOVERY", "RECOVERY"]
    # The English text stays; the facts that fill it come beside it (none for an older row).
    assert [(m["text"], m["facts"]) for m in items[:2]] == [
        ("inspect fail", {"jobId": 4, "equipmentId": "INSP1"}), ("piece on MC1?", {})]
    first = items[0]["id"]
    r = client.post(f"/api/manual-actions/{first}/resolve", json={"resolution": "MELT"}, headers=AUTH)
    assert r.status_code == 400
    r = client.post(f"/api/manual-actions/{first}/resolve", json={}, headers=AUTH)
    assert r.status_code == 400 and "resolution" in r.get_json()["error"]["message"]
    r = client.post(f"/api/manual-actions/{first}/resolve",
                    json={"resolution": "SCRAP", "note": "cracked"}, headers=AUTH)
    assert r.status_code == 200 and r.get_json()["status"] == "RESOLVED"
    assert r.get_json()["resolution"] == "SCRAP"
    r = client.post("/api/recovery/confirm", json={"manualActionIds": [items[1]["id"]]}, headers=AUTH)
    assert r.get_json() == {"confirmed": [items[1]["id"]]}
    r = client.post("/api/recovery/confirm", json={"manualActionIds": ["x"]}, headers=AUTH)
    assert r.status_code == 400 and "manualActionIds" in r.get_json()["error"]["message"]
    r = client.post("/api/recovery/confirm", headers=AUTH)
    assert r.get_json() == {"confirmed": [items[2]["id"]]}
    assert client.get("/api/manual-actions?status=OPEN", headers=AUTH).get_json()["items"] == []


def test_line_products_equipment_buffer(client):
    line = client.get("/api/line", headers=AUTH).get_json()
    assert line["bufferSlots"] == 8 and [e["id"] for e in line["equipment"]] == [
        "MC1", "MC2", "WASH1", "INSP1"]
    products = client.get("/api/products", headers=AUTH).get_json()["items"]
    assert {p["id"] for p in products} == {"BRACKET-A", "SHAFT-B"}
    equipment = client.get("/api/equipment", headers=AUTH).get_json()["items"]
    wash = next(e for e in equipment if e["id"] == "WASH1")
    assert wash["batch"] is True and [s["slotNo"] for s in wash["slots"]] == [1, 2, 3, 4]
    assert wash["slots"][0] == {"slotNo": 1, "status": "EMPTY", "currentJobId": None}
    buffer = client.get("/api/buffer", headers=AUTH).get_json()
    assert buffer == {"slots": [{"slotNo": n, "jobId": None} for n in range(1, 9)]}
    order = create(client, quantity=2)
    client.post(f"/api/work-orders/{order['id']}/start", headers=AUTH)
    slots = client.get("/api/buffer", headers=AUTH).get_json()["slots"]
    assert slots[0]["jobId"] is not None and all(s["jobId"] is None for s in slots[1:])
    client.post(f"/api/work-orders/{order['id']}/cancel", headers=AUTH)
    assert client.get("/api/buffer", headers=AUTH).get_json()["slots"][0]["jobId"] is None


def test_events_query(client, events):
    frames = events.write([("A", {"n": 1}), ("B", {"n": 2}), ("C", {"n": 3})], publish=False)
    r = client.get("/api/events?after=0&limit=2", headers=AUTH).get_json()
    assert r["items"] == frames[:2] and r["nextCursor"] == str(frames[1]["seq"])
    r = client.get(f"/api/events?after={r['nextCursor']}", headers=AUTH).get_json()
    assert r["items"] == frames[2:] and r["nextCursor"] is None
    assert client.get("/api/events?after=-1", headers=AUTH).status_code == 400


def test_roles(client):
    assert client.get("/api/work-orders").status_code == 401
    r = client.get("/api/work-orders", headers={"Authorization": f"Bearer {RUNTIME}"})
    assert r.status_code == 403 and error_of(r) == "FORBIDDEN"
    r = client.get("/api/work-orders", headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 200
    r = client.post("/api/work-orders", json={"productId": "BRACKET-A", "quantity": 1},
                    headers={"Authorization": f"Bearer {RUNTIME}"})
    assert r.status_code == 403


def test_health_ready_metrics(client):
    assert client.get("/healthz").get_json() == {"status": "ok"}
    assert client.get("/readyz").get_json() == {"status": "ready"}
    client.get("/api/line", headers=AUTH)
    text = client.get("/metrics").get_data(as_text=True)
    assert not missing_series(text, 'linectl_http_requests_total{endpoint="/api/line",method="GET",status="200"} 1.0',
                              "linectl_line_controller_up 1.0", "linectl_loop_lag_seconds 0.0",
                              "linectl_websocket_clients 0.0",
                              # The line's own figures, gathered from the services' status() and the database.
                              'linectl_service_up{service="hardware"} 1.0',
                              'linectl_hardware_action_seconds_bucket{action="DOCK_TO_BUFFER",le="0.5"} 1.0',
                              'linectl_hardware_action_failures_total{action="DOCK_TO_BUFFER"} 1.0',
                              "linectl_plc_connected 1.0")


def test_page_is_served(client):
    r = client.get("/")
    assert r.status_code == 200 and b"<script" in r.data
