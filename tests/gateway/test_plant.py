"""A plant of three lines behind one gateway (issue 38): demo-cell (the default
line, ``public``'s tables), cell-b and cell-c (schemas of their own). demo-cell
and cell-b have stand-in services (cell-b's named ``line_controller@cell-b``);
cell-c has none: its controller is down.

Each line's paths, objects, events and streams are its own; another line's
object under a line's path is 404, an unknown line too; /api/lines and
/api/plant/stats sum up the lines; a user limited to lines sees only theirs."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import eventlet
import pytest
import requests
import websocket
from nameko.rpc import rpc
from sqlalchemy import select

from services.identity.passwords import Passwords
from services.identity.users import UserStore
from shared.db.engine import make_engine
from shared.db.models import Alarm, Job, LoopMessage, MachineStateInterval, ManualAction, WorkOrder
from shared.plant import load_plant
from tests.gateway.conftest import ADMIN, AUTH, OPERATOR, gateway_app
from tests.gateway.standin import (
    EventWriter,
    StandInLineController,
    open_plant_lines,
    stand_ins_of_line,
    write_plant_file,
)
from tests.identity.conftest import CONSOLE, FAST_ARGON2, PASSWORD
from tests.support.metrics import missing_series

pytestmark = pytest.mark.timeout(180)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
LINES = ("demo-cell", "cell-b", "cell-c")


@pytest.fixture
def plant_file(tmp_path):
    return write_plant_file(tmp_path / "plant.yaml", DEPLOY, "test-plant")


@pytest.fixture
def lines(db_url, writable, plant_file):
    """Every line's tables, seeded as its controller would: {line id: (read-write sessions, schema)}."""
    sessions, schemas, engines = open_plant_lines(db_url, writable, load_plant(plant_file))
    assert schemas[LINES[0]] == "public"
    yield {line_id: (sessions[line_id], schemas[line_id]) for line_id in LINES}
    for engine in engines:
        engine.dispose()


@pytest.fixture
def cell_b(container_factory, nameko_config, lines, standin):
    """cell-b's stand-in line_controller@cell-b and hardware@cell-b (the default line's run too)."""
    for service in stand_ins_of_line("cell-b", lines["cell-b"][1], DEPLOY / "lines" / "cell-b.yaml"):
        container_factory(service, nameko_config).start()


@pytest.fixture
def plant_env(gateway_env, plant_file):
    return {**gateway_env, **FAST_ARGON2, "LINECTL_PLANT_FILE": str(plant_file)}


@pytest.fixture
def app(plant_env, cell_b):
    """The plant's gateway (conftest's ``client`` asks it)."""
    with gateway_app(plant_env) as app:
        yield app


def error_of(r) -> str:
    return r.get_json()["error"]["code"]


def create(client, root: str, product: str, quantity: int = 1, **headers):
    return client.post(f"{root}/work-orders", json={"productId": product, "quantity": quantity},
                       headers={**AUTH, **headers})


# -- one gateway, a line per path ---------------------------------------------------------


def test_each_line_has_its_own_paths_and_objects(client):
    here = create(client, "/api", "BRACKET-A")
    there = create(client, "/api/lines/cell-b", "SHAFT-B", 2)
    assert (here.status_code, there.status_code) == (201, 201)
    here, there = here.get_json(), there.get_json()
    assert (here["lineId"], there["lineId"]) == ("demo-cell", "cell-b")
    assert here["id"] != there["id"]  # ids are unique across the plant
    # PIN-C is made on cell-b only.
    assert create(client, "/api", "PIN-C").status_code == 400
    assert create(client, "/api/lines/cell-b", "PIN-C").status_code == 201

    b_orders = client.get("/api/lines/cell-b/work-orders", headers=AUTH).get_json()["items"]
    assert there["id"] in [o["id"] for o in b_orders] and {o["lineId"] for o in b_orders} == {"cell-b"}
    default_orders = client.get("/api/work-orders", headers=AUTH).get_json()
    assert default_orders == client.get("/api/lines/demo-cell/work-orders", headers=AUTH).get_json()
    assert [o["id"] for o in default_orders["items"]] == [here["id"]]

    # Another line's object under a line's path is not there.
    for path in (f"/api/lines/cell-b/work-orders/{here['id']}", f"/api/work-orders/{there['id']}",
                 f"/api/lines/demo-cell/work-orders/{there['id']}"):
        r = client.get(path, headers=AUTH)
        assert (r.status_code, error_of(r)) == (404, "NOT_FOUND"), path
    r = client.post(f"/api/work-orders/{there['id']}/start", headers=AUTH)
    assert (r.status_code, error_of(r)) == (404, "NOT_FOUND")
    r = client.post(f"/api/lines/cell-b/work-orders/{there['id']}/start", headers=AUTH)
    assert r.status_code == 200 and r.get_json()["lineId"] == "cell-b"
    jobs = client.get("/api/lines/cell-b/jobs", headers=AUTH).get_json()["items"]
    assert len(jobs) == 2 and {j["lineId"] for j in jobs} == {"cell-b"}
    assert client.get("/api/jobs", headers=AUTH).get_json()["items"] == []
    route = client.get(f"/api/lines/cell-b/jobs/{jobs[0]['id']}/route", headers=AUTH).get_json()
    assert route["lineId"] == "cell-b"
    assert client.get(f"/api/jobs/{jobs[0]['id']}/route", headers=AUTH).status_code == 404


def test_a_line_is_laid_out_as_its_layout_says(client):
    equipment = client.get("/api/lines/cell-b/equipment", headers=AUTH).get_json()["items"]
    assert [(e["id"], e["lineId"]) for e in equipment] == [("INSP1", "cell-b"), ("MC1", "cell-b")]
    assert client.get("/api/lines/cell-b/line", headers=AUTH).get_json()["id"] == "cell-b"
    products = client.get("/api/lines/cell-b/products", headers=AUTH).get_json()["items"]
    assert [p["id"] for p in products] == ["SHAFT-B", "PIN-C"]
    assert len(client.get("/api/equipment", headers=AUTH).get_json()["items"]) == 4
    timeline = client.get("/api/lines/cell-b/stats/timeline?equipmentId=MC2", headers=AUTH)
    assert (timeline.status_code, error_of(timeline)) == (404, "NOT_FOUND")  # MC2 is demo-cell's
    assert client.get("/api/lines/cell-b/stats", headers=AUTH).status_code == 200


def test_an_unknown_line_is_not_found(client):
    for method, path in (("get", "/api/lines/nope"), ("get", "/api/lines/nope/work-orders"),
                         ("get", "/api/lines/nope/stats"), ("post", "/api/lines/nope/recovery/confirm"),
                         ("get", "/api/lines/cell-b/work-orders/1"), ("get", "/api/lines/cell-d/line")):
        r = getattr(client, method)(path, headers=AUTH)
        assert (r.status_code, error_of(r)) == (404, "NOT_FOUND"), path
    assert client.get("/api/lines/ce%00ll/jobs", headers=AUTH).status_code in (400, 404)


def test_commands_outcomes_and_audit_are_per_line(client, lines):
    with lines["cell-b"][0].begin() as s:
        s.add(LoopMessage(id="cmd-of-b", type="PauseOrder", category="command", payload={}, status="HANDLED"))
    r = client.get("/api/lines/cell-b/commands/cmd-of-b", headers=AUTH)
    assert r.status_code == 200 and r.get_json()["lineId"] == "cell-b"
    assert client.get("/api/commands/cmd-of-b", headers=AUTH).status_code == 404
    # One Idempotency-Key on two lines is two commands: command ids are unique across the plant.
    key = {"Idempotency-Key": "the same key"}
    here, there = create(client, "/api", "SHAFT-B", **key), create(client, "/api/lines/cell-b", "SHAFT-B", **key)
    assert (here.status_code, there.status_code) == (201, 201)
    ids = [{m.id for m in sessions().scalars(select(LoopMessage))} for sessions in (lines["demo-cell"][0],
                                                                                  lines["cell-b"][0])]
    assert ids[0] and ids[1] - {"cmd-of-b"} and not ids[0] & ids[1]
    audit = client.get("/api/audit?action=CreateOrder", headers={"Authorization": f"Bearer {ADMIN}"})
    assert {(i["targetId"], i["lineId"]) for i in audit.get_json()["items"]} == {
        (str(here.get_json()["id"]), "demo-cell"), (str(there.get_json()["id"]), "cell-b")}


# -- a line down stops only that line ------------------------------------------------


def test_a_line_whose_controller_is_down_answers_503_and_the_others_run_on(client):
    r = create(client, "/api/lines/cell-c", "SHAFT-B")
    assert (r.status_code, error_of(r)) == (503, "UNAVAILABLE") and "line_controller@cell-c" in r.get_json()[
        "error"]["message"]
    assert client.get("/api/lines/cell-c/work-orders", headers=AUTH).get_json()["items"] == []  # reads work
    assert create(client, "/api/lines/cell-b", "SHAFT-B").status_code == 201
    ready = client.get("/readyz")
    message = ready.get_json()["error"]["message"]
    assert ready.status_code == 503 and "line cell-c: line_controller@cell-c (not running)" in message
    assert "line cell-c: hardware@cell-c (not running)" in message and "cell-b" not in message
    metrics = client.get("/metrics").get_data(as_text=True)
    assert not missing_series(metrics, 'linectl_service_up{line="cell-b",service="line_controller"} 1.0',
                              'linectl_service_up{line="cell-c",service="line_controller"} 0.0',
                              'linectl_line_controller_up{line="demo-cell"} 1.0',
                              'linectl_plc_connected{line="cell-b"} 1.0',
                              'linectl_work_orders{line="cell-b",status="CREATED"} 1.0')


class FrozenCellC(StandInLineController):
    """cell-c's controller, alive (its queue consumed) but answering no command until released."""
    name = "line_controller@cell-c"
    release = eventlet.Event()

    @rpc
    def command(self, type, payload, actor, command_id=None, wait_seconds=None):
        FrozenCellC.release.wait()
        return {"commandId": command_id, "status": "QUEUED", "result": None, "error": None}


def test_a_frozen_line_holds_none_of_another_lines_rpc_clients(client, container_factory, nameko_config, app):
    FrozenCellC.release = eventlet.Event()
    container_factory(FrozenCellC, nameko_config).start()
    blocked = [app.test_client() for _ in range(10)]  # more than a line's pool of 8
    with ThreadPoolExecutor(len(blocked)) as pool:
        stuck = [pool.submit(create, c, "/api/lines/cell-c", "SHAFT-B") for c in blocked]
        try:
            for _ in range(3):  # meanwhile cell-b's commands are answered as ever
                started = datetime.now(UTC)
                assert create(client, "/api/lines/cell-b", "SHAFT-B").status_code == 201
                assert datetime.now(UTC) - started < timedelta(seconds=3)
            assert not any(f.done() for f in stuck)  # cell-c's were held all the while
        finally:
            FrozenCellC.release.send()
        assert {f.result(timeout=30).status_code for f in stuck} <= {202, 503}


class MuteCellC(StandInLineController):
    """cell-c's controller, running (its queue consumed) but slow to answer ``status()``."""
    name = "line_controller@cell-c"
    release = eventlet.Event()

    @rpc
    def status(self):
        MuteCellC.release.wait()
        return {}


def test_a_running_controller_slow_to_answer_its_status_is_up(client, container_factory, nameko_config,
                                                               monkeypatch):
    # Its card agrees with its commands (which are sent): the line is not shown DOWN;
    # /readyz still says it does not answer.
    monkeypatch.setattr("gateway.lines.STATUS_RPC_TIMEOUT", 0.3)
    MuteCellC.release = eventlet.Event()
    container_factory(MuteCellC, nameko_config).start()
    try:
        assert client.get("/api/lines/cell-c", headers=AUTH).get_json()["controller"] == "UP"
        assert "line cell-c: line_controller@cell-c (not answering)" in \
            client.get("/readyz").get_json()["error"]["message"]
    finally:
        MuteCellC.release.send()


# -- the plant's own views ------------------------------------------------------------


def test_lines_at_a_glance(client, lines):
    with lines["cell-b"][0].begin() as s:
        s.add(Alarm(code="DOOR_OPEN", severity="WARNING", message="door", equipment_id="MC1"))
        s.add(Alarm(code="DOOR_OPEN", severity="WARNING", message="door", status="CLEARED"))
        s.add(ManualAction(kind="RECOVERY", text="piece on MC1?", choices=["CONFIRMED"]))
    create(client, "/api/lines/cell-b", "SHAFT-B")
    body = client.get("/api/lines", headers=AUTH).get_json()
    assert body["nextCursor"] is None
    assert [(i["id"], i["controller"], i["plc"]) for i in body["items"]] == [
        ("demo-cell", "UP", "CONNECTED"), ("cell-b", "UP", "CONNECTED"), ("cell-c", "DOWN", "DISCONNECTED")]
    cell_b = client.get("/api/lines/cell-b", headers=AUTH).get_json()
    assert cell_b == body["items"][1]
    assert cell_b == {"id": "cell-b", "name": cell_b["name"], "controller": "UP", "plc": "CONNECTED",
                      "plcIdentity": "cell-b", "activeOrders": 1, "openAlarms": 1, "openManualActions": 1}
    assert (body["items"][2]["activeOrders"], body["items"][2]["plcIdentity"]) == (0, None)  # its hardware is down


def _finished(sessions, completed: int, scrapped: int, now: datetime) -> None:
    """Pieces finished within the last hour, on a line observed for two hours."""
    with sessions.begin() as s:
        order = WorkOrder(code=f"WO-{completed}-{scrapped}", product_id="SHAFT-B", route=[],
                          quantity=completed + scrapped, status="RUNNING")
        s.add(order)
        s.flush()
        s.add_all([Job(work_order_id=order.id, seq_no=n + 1, status="SCRAPPED" if n < scrapped else "COMPLETED",
                       position_type="OUT", finished_at=now - timedelta(minutes=30 + n))
                   for n in range(completed + scrapped)])
        s.add(MachineStateInterval(equipment_id="MC1", state="IDLE", started_at=now - timedelta(hours=2)))


def test_plant_figures_are_the_sums_of_the_lines(client, lines):
    now = datetime.now(UTC)
    _finished(lines["demo-cell"][0], 6, 2, now)
    _finished(lines["cell-b"][0], 3, 1, now)
    start = (now - timedelta(hours=4)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = client.get(f"/api/plant/stats?from={start}", headers=AUTH).get_json()
    by_line = {line["id"]: line for line in body["lines"]}
    assert list(by_line) == list(LINES)
    assert (by_line["demo-cell"]["completed"], by_line["demo-cell"]["scrapped"]) == (6, 2)
    assert (by_line["cell-b"]["completed"], by_line["cell-b"]["scrapped"]) == (3, 1)
    assert by_line["cell-c"] == {"id": "cell-c", "completed": 0, "scrapped": 0, "throughputPerHour": None,
                                 "scrapRate": None}
    plant = body["plant"]
    assert (plant["completed"], plant["scrapped"], plant["scrapRate"]) == (9, 3, 0.25)
    assert plant["throughputPerHour"] == pytest.approx(
        by_line["demo-cell"]["throughputPerHour"] + by_line["cell-b"]["throughputPerHour"], abs=0.002)
    line_stats = client.get(f"/api/lines/cell-b/stats?from={start}", headers=AUTH).get_json()["line"]
    assert line_stats["completed"] == 3 and body["from"] == start
    r = client.get("/api/plant/stats?from=yesterday", headers=AUTH)
    assert (r.status_code, error_of(r)) == (400, "VALIDATION_ERROR")


def test_openapi_documents_the_line_paths_and_the_plant(client):
    paths = client.get("/openapi.json").get_json()["paths"]
    for path in ("/api/lines", "/api/lines/{lineId}", "/api/plant/stats", "/api/lines/{lineId}/work-orders",
                 "/api/lines/{lineId}/commands/{command_id}", "/api/lines/{lineId}/recovery/confirm",
                 "/api/lines/{lineId}/stats/timeline", "/api/lines/{lineId}/events"):
        assert path in paths, path
    listed = paths["/api/lines/{lineId}/work-orders"]
    assert "404" in listed["get"]["responses"] and listed["parameters"][0]["name"] == "lineId"
    assert "404" not in paths["/api/work-orders"]["get"]["responses"]


# -- events: each line its own log and its own seq ----------------------------------------------


def test_each_line_pages_its_own_events(client, lines, nameko_config):
    b_events = EventWriter(lines["cell-b"][0], nameko_config, service="line_controller@cell-b", line_id="cell-b")
    written = b_events.write([("B1", {}), ("B2", {})], publish=False)
    assert [f["seq"] for f in written] == [1, 2]
    assert client.get("/api/lines/cell-b/events?after=0", headers=AUTH).get_json()["items"] == written
    assert client.get("/api/events?after=0", headers=AUTH).get_json()["items"] == []


def _stream(base: str, line: str | None, after: int | None = None):
    query = "&".join(part for part in (line and f"line={line}", after is not None and f"after={after}") if part)
    return websocket.create_connection(base.replace("http://", "ws://") + "/ws" + (f"?{query}" if query else ""),
                                       header=[f"Authorization: Bearer {OPERATOR}"], timeout=30)


def _frames_until(ws, seq: int) -> list[dict]:
    frames = [json.loads(ws.recv())]
    while frames[-1].get("seq") != seq:
        frames.append(json.loads(ws.recv()))
    return frames


def test_a_stream_per_line(gateway_server, plant_env, lines, cell_b, events, nameko_config):
    served = gateway_server(LINECTL_PLANT_FILE=plant_env["LINECTL_PLANT_FILE"])
    b_events = EventWriter(lines["cell-b"][0], nameko_config, service="line_controller@cell-b", line_id="cell-b")
    backlog = b_events.write([("B1", {}), ("B2", {})], publish=False)
    of_b, of_default = _stream(served.base, "cell-b", after=0), _stream(served.base, None)
    try:
        assert _frames_until(of_b, 2) == backlog
        live = b_events.write([("B3", {"n": 3})])
        assert _frames_until(of_b, 3) == live and live[0]["lineId"] == "cell-b"
        mine = events.write([("D1", {})])  # the default line's, seq 1 of its own log
        assert _frames_until(of_default, mine[0]["seq"]) == mine and mine[0]["lineId"] == "demo-cell"
        after = b_events.write([("B4", {})])
        assert _frames_until(of_b, 4) == after  # nothing of the default line came between
    finally:
        of_b.close()
        of_default.close()
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        _stream(served.base, "nope")
    assert refused.value.status_code == 400
    assert requests.get(served.base + "/api/lines/cell-b/events?after=3", headers=AUTH,
                        timeout=10).json()["items"] == after


# -- people limited to lines -----------------------------------------------------------------


@pytest.fixture
def bea(db_url):
    """A user limited to cell-b."""
    engine = make_engine(db_url, pool_size=1)
    UserStore(engine, Passwords(1, 1024)).add("bea", "operator", PASSWORD, CONSOLE, lines=["cell-b"])
    engine.dispose()


def test_a_user_limited_to_a_line_sees_and_uses_only_that_line(client, bea):
    signed_in = client.post("/api/session", json={"username": "bea", "password": PASSWORD}).get_json()
    assert [i["id"] for i in client.get("/api/lines").get_json()["items"]] == ["cell-b"]
    assert client.get("/api/lines/cell-b").status_code == 200
    for path in ("/api/lines/demo-cell", "/api/work-orders", "/api/lines/demo-cell/work-orders",
                 "/api/lines/cell-c/alarms", "/api/events"):
        r = client.get(path)
        assert (r.status_code, error_of(r)) == (403, "FORBIDDEN"), path
    assert client.get("/api/lines/cell-b/work-orders").status_code == 200
    csrf = {"X-CSRF-Token": signed_in["csrfToken"]}
    r = client.post("/api/lines/cell-b/work-orders", json={"productId": "SHAFT-B", "quantity": 1}, headers=csrf)
    assert r.status_code == 201 and r.get_json()["lineId"] == "cell-b"
    assert [line["id"] for line in client.get("/api/plant/stats").get_json()["lines"]] == ["cell-b"]
    upgrade = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
    assert client.get("/ws?line=demo-cell", headers=upgrade).status_code == 403
    assert client.get("/ws", headers=upgrade).status_code == 403  # the default line is not hers


def test_a_user_limited_to_a_line_gives_reasons_and_reads_oee_only_there(client, bea):
    """Issue 53: an operator of cell-b cannot give another line's stop a reason (403, before
    any line hears of it), and the plant's OEE holds only her line."""
    csrf = {"X-CSRF-Token": client.post("/api/session", json={"username": "bea", "password": PASSWORD})
            .get_json()["csrfToken"]}
    for root in ("/api", "/api/lines/demo-cell", "/api/lines/cell-c"):
        for path, body in (("/stops/1/reason", {"reasonCode": "OTHER"}),
                           ("/stops/1/split", {"at": "2026-01-01T00:00:00Z"})):
            r = client.post(root + path, json=body, headers=csrf)
            assert (r.status_code, error_of(r)) == (403, "FORBIDDEN"), root + path
    r = client.post("/api/lines/cell-b/stops/999999/reason", json={"reasonCode": "NO_SUCH"}, headers=csrf)
    assert (r.status_code, error_of(r)) == (400, "VALIDATION_ERROR")  # her own line: checked, then refused
    assert client.get("/api/lines/demo-cell/oee").status_code == 403
    assert client.get("/api/lines/cell-b/oee").status_code == 200
    items = client.get("/api/plant/oee").get_json()["items"]
    assert {i["lineId"] for i in items} <= {"cell-b"}


def test_without_a_broker_the_plants_uns_says_so_per_line(client):
    """GET /api/plant/uns (issue 52) with no LINECTL_MQTT_URL: nothing is published."""
    r = client.get("/api/plant/uns", headers={"Authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 200, r.get_json()
    body = r.get_json()
    assert body["connected"] is False and body["format"] is None
    assert [line["id"] for line in body["lines"]][:2] == ["demo-cell", "cell-b"]
    assert all(line["publishedSeq"] is None and line["backlog"] is None for line in body["lines"])
    assert client.get("/api/plant/uns", headers=AUTH).status_code == 403


@pytest.fixture
def broker_app(plant_env, cell_b):
    """The plant's gateway with a broker named (it never connects to it: the publisher does)."""
    with gateway_app({**plant_env, "LINECTL_MQTT_URL": "mqtt://127.0.0.1:1883"}) as app:
        yield app


def test_the_publisher_s_state_per_line_in_plant_uns_and_metrics(broker_app, lines):
    """/api/plant/uns and /metrics (issue 52) from each line's ``uns_node`` row: demo-cell's
    node connected and caught up, cell-b's away with a backlog and events retention had to
    purge, cell-c never published."""
    from sqlalchemy import text

    for sessions, _schema in lines.values():
        with sessions.begin() as s:
            s.execute(text("INSERT INTO event_log (seq, tx_id, type, at, payload)"
                           " SELECT g, g, 'E', now(), '{}' FROM generate_series(1, 12) g"))
    with lines["demo-cell"][0].begin() as s:
        s.execute(text("INSERT INTO public.uns_node (line_id, schema_name, acked_seq, connected, messages,"
                       " heartbeat_at) VALUES ('demo-cell', 'public', 12, true, 40, now()),"
                       " ('cell-b', :b, 5, false, 9, now() - interval '1 minute')"), {"b": lines["cell-b"][1]})
        s.execute(text("UPDATE public.uns_node SET purged_unpublished = 2 WHERE line_id = 'cell-b'"))
    client = broker_app.test_client()
    body = client.get("/api/plant/uns", headers={"Authorization": f"Bearer {ADMIN}"}).get_json()
    assert body["connected"] is False and body["format"] == "sparkplug"
    assert body["lines"] == [{"id": "demo-cell", "publishedSeq": 12, "logSeq": 12, "backlog": 0},
                             {"id": "cell-b", "publishedSeq": 5, "logSeq": 12, "backlog": 7},
                             {"id": "cell-c", "publishedSeq": None, "logSeq": 12, "backlog": None}]
    metrics = client.get("/metrics").get_data(as_text=True)
    assert not missing_series(metrics, 'linectl_uns_connected{line="demo-cell"} 1.0',
                              'linectl_uns_connected{line="cell-b"} 0.0',
                              'linectl_uns_backlog_events{line="demo-cell"} 0.0',
                              'linectl_uns_backlog_events{line="cell-b"} 7.0',
                              'linectl_uns_published_seq{line="cell-b"} 5.0',
                              'linectl_uns_messages_published_total{line="demo-cell"} 40.0',
                              'linectl_uns_purged_unpublished_total{line="cell-b"} 2.0')
    assert 'linectl_uns_connected{line="cell-c"}' not in metrics  # no publisher ever: no series
