"""The plant's data on a real MQTT broker (PRODUCT.md, "Northbound: MQTT and
Sparkplug B"; issue 52): ``linectl up`` with ``LINECTL_MQTT_URL`` runs the
publisher (``uns``), and a Sparkplug host application written from the
specification (tests/support/sparkplug_host.py) watches a real mosquitto.

Most tests share one ``linectl up`` and its broker (``uns_stack``): each proves its
own fact with a host of its own that joins the running node (asks for its
births), and leaves the line idle with every process running again. The primary
host's and the TLS broker's settings are the publisher's start-up settings: those
two have stacks of their own."""

from __future__ import annotations

import importlib.util
import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from services.uns.proto import sparkplug_b_pb2 as pb
from tests.ops.stack import Stack
from tests.support.mosquitto import Broker
from tests.support.sparkplug_host import SparkplugHost
from tests.support.waiting import wait_for

GROUP = "test-plant"
LINE = "demo-cell"
DEVICES = {"MC1", "MC2", "WASH1", "INSP1", "ROBOT", "BUFFER", "DOCK"}

pytestmark = pytest.mark.slow


@pytest.fixture
def mqtt_broker(tmp_path):
    broker = Broker(tmp_path / "mosquitto").start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def plant_broker(tmp_path_factory):
    """The shared stack's broker, persistent: a host's session (clean session off) outlives
    its restart, as a plant's broker keeps them."""
    broker = Broker(tmp_path_factory.mktemp("uns-broker") / "mosquitto", persistent=True).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def uns_stack(tmp_path_factory, plant_broker):
    """One ``linectl up`` publishing to ``plant_broker``, for the tests that prove independent
    facts on it (on ``pgsql://``, the suite's transport)."""
    if importlib.util.find_spec("shared.transport.pgsql") is None:
        pytest.skip("the shared stack runs on pgsql://")
    stack = Stack(tmp_path_factory.mktemp("uns-stack") / "data", {}, extra_env=mqtt_env(plant_broker)).up()
    try:
        stack.wait_line("linectl: ready", 180)
        yield stack
    finally:
        stack.cleanup()


@pytest.fixture
def host(plant_broker):
    """A Sparkplug host of the test's own, born into by the shared stack's node."""
    host = SparkplugHost(plant_broker.url, GROUP)
    yield host
    host.stop()


def mqtt_env(broker: Broker, **extra: str) -> dict[str, str]:
    # Tries 0.5 s apart while a broker is away, not up to 5 s: a restarted broker is met at once.
    return {"LINECTL_MQTT_URL": broker.url, "LINECTL_SPARKPLUG_GROUP": GROUP,
            "LINECTL_MQTT_RECONNECT_MAX_SECONDS": "0.5", **extra}


def run_order(stack, token, quantity: int = 2) -> dict:
    code, order = stack.request("POST", "/api/work-orders", {"productId": "BRACKET-A", "quantity": quantity}, token)
    assert code == 201, order
    assert stack.request("POST", f"/api/work-orders/{order['id']}/start", {}, token)[0] == 200
    return order


def completed(stack, token, order_id: int) -> bool:
    return stack.get(f"/api/work-orders/{order_id}", token)[1].get("status") == "COMPLETED"


def uns_output(stack) -> str:
    return "\n".join(line for line in stack.lines if "uns" in line)[-3000:]


def since_a_month() -> str:
    return (datetime.now(UTC) - timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")


def newest_seq(stack, token) -> int:
    items, after = [], 0
    while True:
        code, page = stack.get(f"/api/events?after={after}&limit=500", token)
        assert code == 200, page
        items += page["items"]
        if not page["nextCursor"]:
            return items[-1]["seq"] if items else 0
        after = page["nextCursor"]


def events_of(stack, token, kind: str) -> list[dict]:
    items, after = [], 0
    while True:
        code, page = stack.get(f"/api/events?after={after}&limit=500", token)
        assert code == 200, page
        items += [e for e in page["items"] if e["type"] == kind]
        if not page["nextCursor"]:
            return items
        after = page["nextCursor"]


def finished_pieces(stack, token, order_id: int) -> dict[int, dict]:
    """The order's finished pieces' records, by job id, with the seq of the JobFinished that ended each."""
    code, page = stack.get(f"/api/pieces?workOrderId={order_id}&limit=100", token)
    assert code == 200, page
    ended = {e["payload"]["id"]: e["seq"] for e in events_of(stack, token, "JobFinished")
             if e["payload"]["status"] in ("COMPLETED", "SCRAPPED")}
    out = {}
    for item in page["items"]:
        code, record = stack.get(f"/api/pieces/{item['serial']}", token)
        assert code == 200, record
        out[item["jobId"]] = {**record, "endedAtSeq": ended[item["jobId"]]}
    return out


def piece_summary(record: dict) -> dict:
    """What the line's events say of a finished piece (docs/uns.md): its summary and its steps."""
    keys = ("serial", "jobId", "workOrderId", "workOrderCode", "productId", "status", "createdAt", "finishedAt")
    return {"lineId": LINE, **{k: record[k] for k in keys}, "steps": record["steps"]}


def test_a_line_is_a_sparkplug_edge_node_whose_host_sees_every_seq(uns_stack, host):
    stack = uns_stack
    assert stack.process("uns"), stack.ps()
    token = stack.token("operator")
    host.join(LINE, DEVICES)
    assert {m.device for m in host.of(LINE, "DBIRTH")} >= DEVICES
    birth = host.of(LINE, "NBIRTH")[-1]
    names = {m["name"] for m in birth.metrics}
    assert {"/bdSeq", "/Node Control/Rebirth", "/Line/EventSeq", "/Line/Completed"} <= names
    first = host.nodes[LINE].birth_event_seq
    order = run_order(stack, token)
    wait_for(lambda: completed(stack, token, order["id"]), 120, 0.2, "the order completing")
    last = newest_seq(stack, token)
    wait_for(lambda: not host.missing_event_seqs(LINE, first + 1, last), 30, 0.05,
             lambda: f"every seq up to {last}; missing {host.missing_event_seqs(LINE, first + 1, last)[:20]}"
             f"\n{uns_output(stack)}")
    code, stats = stack.get(f"/api/plant/stats?from={since_a_month()}", token)
    assert code == 200, stats
    line = stats["lines"][0]
    wait_for(lambda: host.nodes[LINE].live.get("/Line/Completed") == line["completed"], 10, 0.05,
             lambda: f"Completed {host.nodes[LINE].live.get('/Line/Completed')} == {line}")
    assert host.nodes[LINE].live.get("/Line/Scrapped") == line["scrapped"] and line["completed"] + line["scrapped"] >= 2
    assert not host.errors, host.errors[:10]
    assert all(not historical for _s, historical in host.event_seqs[LINE])
    # Each piece finishing: its summary as Line/LastPiece, in the NDATA with its JobFinished's seq.
    pieces = finished_pieces(stack, token, order["id"])
    # (a piece scrapped at its inspection, as linectl up's simulator does one in twenty, is finished too)
    assert len(pieces) == 2 and all(p["status"] in ("COMPLETED", "SCRAPPED") and p["steps"] for p in pieces.values())
    said_pieces = {}
    for seen in host.of(LINE, "NDATA"):
        seqs = {m["value"] for m in seen.metrics if m["name"] == "/Line/EventSeq"}
        for m in seen.metrics:
            if m["name"] == "/Line/LastPiece":
                assert m["datatype"] == pb.String and not m["historical"]
                said = json.loads(m["value"])
                said_pieces[said["jobId"]] = (said, seqs)
    for job_id, record in pieces.items():
        said, seqs = said_pieces[job_id]
        assert said == piece_summary(record), (said, record)
        assert record["endedAtSeq"] in seqs
        assert [(s["equipmentId"], s["result"]) for s in said["steps"]] == \
            [(s["equipmentId"], s["result"]) for s in record["steps"]]
    last_piece = max(pieces, key=lambda job_id: pieces[job_id]["endedAtSeq"])
    assert json.loads(host.nodes[LINE].live["/Line/LastPiece"])["jobId"] == last_piece
    # The current shift's OEE and its factors (Double), the shift's as the API computes it.
    born = {m["name"]: m for m in birth.metrics}
    assert all(born[f"/Line/OEE{n}"]["datatype"] == pb.Double for n in ("", "/Availability", "/Performance",
                                                                         "/Quality"))
    code, oee = stack.get("/api/oee?by=shift", token)
    assert code == 200 and oee["items"], oee
    shift = oee["items"][-1]
    assert shift["produced"] >= 2 and shift["quality"] is not None, shift
    wait_for(lambda: host.nodes[LINE].live.get("/Line/OEE/Quality") == shift["quality"], 15, 0.05,
             lambda: f"Line/OEE/Quality {host.nodes[LINE].live.get('/Line/OEE/Quality')} vs {shift}")
    live = host.nodes[LINE].live
    assert live["/Line/Shift"] == shift["shift"] and all(
        isinstance(live[f"/Line/OEE{n}"], float) for n in ("", "/Availability", "/Performance")), live
    # What the broker acknowledged, as the gateway tells an admin (and no one else).
    assert stack.get("/api/plant/uns", token)[0] == 403
    admin = stack.token("admin")

    def caught_up():
        code, uns = stack.get("/api/plant/uns", admin)
        assert code == 200, uns
        return uns["lines"][0]["backlog"] == 0 and uns
    uns = wait_for(caught_up, 15, 0.1, "the broker acknowledging the whole log")
    assert uns["connected"] is True and uns["format"] == "sparkplug"
    assert uns["lines"] == [{"id": LINE, "publishedSeq": uns["lines"][0]["logSeq"],
                             "logSeq": uns["lines"][0]["logSeq"], "backlog": 0}]
    assert uns["lines"][0]["logSeq"] >= last


OUTAGE_SECONDS = 30.0  # issue 52: "the broker is killed mid-order and restarted 30 s later"


@pytest.mark.timeout(240)  # the outage's 30 s and the order around it: about 35 s alone
def test_a_broker_outage_of_30_s_mid_order_is_forwarded_as_history_after_new_births(uns_stack, plant_broker):
    """The broker killed mid-order and started again 30 s later (persistent, as a plant's: the
    host's session outlives it). The node tries again all along (each CONNECT its own bdSeq),
    is born again with a new bdSeq, then forwards the outage as history: the host has every
    ``Line/EventSeq``, and no historical value overwrites a live one. (No NDEATH comes: a
    killed broker sends no Will, then or after its restart; the new bdSeq ends the session.)"""
    stack = uns_stack
    host = SparkplugHost(plant_broker.url, GROUP, persistent=True)
    try:
        token = stack.token("operator")
        host.join(LINE, DEVICES)
        first = host.nodes[LINE].birth_event_seq
        bd_before = host.nodes[LINE].bd_seq
        order = run_order(stack, token, quantity=3)
        wait_for(lambda: newest_seq(stack, token) > first + 5, 60, 0.05, "the order under way")
        wait_for(lambda: plant_broker.saved_after(host.subscribed_at), 10, 0.05,
                 "the broker's store written with the host's session in it")
        plant_broker.kill()
        killed_at = time.monotonic()
        during = newest_seq(stack, token)

        def tries() -> int:
            return (bd_seq_kept(stack) - bd_before) % 256

        # 30 s away, the line going on meanwhile and the node trying again all along (a node
        # whose first try failed once stayed unconnected for good).
        wait_for(lambda: time.monotonic() - killed_at >= OUTAGE_SECONDS and newest_seq(stack, token) > during + 10
                 and tries() >= 3, OUTAGE_SECONDS + 60, 0.5,
                 lambda: f"30 s, the line going on, the node trying: {tries()} tries\n{uns_output(stack)}")
        assert stack.ready()  # a broker outage is nothing to /readyz
        births = len(host.of(LINE, "NBIRTH"))
        plant_broker.start()
        wait_for(lambda: len(host.of(LINE, "NBIRTH")) > births, 60, 0.05,
                 lambda: f"births after the broker is back:\n{host.errors[:3]}\n" + "\n".join(host.trace[-15:]))
        rebirth = host.of(LINE, "NBIRTH")[births]
        born_at = {m["name"]: m["value"] for m in rebirth.metrics}
        assert born_at["/bdSeq"] != bd_before
        wait_for(lambda: completed(stack, token, order["id"]), 120, 0.2, "the order completing")
        last = newest_seq(stack, token)
        wait_for(lambda: not host.missing_event_seqs(LINE, first + 1, last), 60, 0.05,
                 lambda: f"every seq up to {last}; missing {host.missing_event_seqs(LINE, first + 1, last)[:20]}"
                 f"\n{uns_output(stack)}")
        birth_seq = born_at["/Line/EventSeq"]
        live = {seq for seq, historical in host.event_seqs[LINE] if not historical}
        history = {seq for seq, historical in host.event_seqs[LINE] if historical}
        # What happened while the broker was away came as history, all of it already in the births'
        # values; nothing live from the outage.
        assert set(range(during + 1, birth_seq + 1)) <= history, sorted(set(range(during + 1, birth_seq + 1)) - history)
        assert all(s > birth_seq for s in live if s > during)
        # Every message after the births is all history or all live; the history would have
        # overwritten live values (it differs from them: the premise), and the host kept the live.
        with host.lock:  # one moment's view: what came, and the live values it left
            seen_all = [m for m in host.messages if m.node == LINE]
            live_now = dict(host.nodes[LINE].live)
        after_birth = seen_all[seen_all.index(rebirth):]
        running, would_overwrite = {}, 0
        for seen in after_birth:
            kinds = {m["historical"] for m in seen.metrics}
            assert len(kinds) <= 1, (seen.kind, seen.device, seen.metrics)
            for m in seen.metrics:
                if not m["historical"]:
                    running[m["name"]] = m["value"]
                elif m["name"] in running and running[m["name"]] != m["value"]:
                    would_overwrite += 1
        assert would_overwrite > 0
        assert {name: live_now.get(name) for name in running} == running
        code, stats = stack.get(f"/api/plant/stats?from={since_a_month()}", token)
        assert code == 200, stats
        wait_for(lambda: host.nodes[LINE].live.get("/Line/Completed") == stats["lines"][0]["completed"], 10, 0.05,
                 lambda: f"live Completed {host.nodes[LINE].live.get('/Line/Completed')} vs {stats['lines'][0]}")
        assert not host.errors, host.errors[:10]
        assert stack.ready()
        print(f"outage {OUTAGE_SECONDS:.0f} s: {tries()} tries; {len(history)} events forwarded as history")
    finally:
        host.stop()
        if plant_broker.proc.poll() is not None:
            plant_broker.start()  # for the module's other tests


def bd_seq_kept(stack) -> int:
    """The line's node's bdSeq as the publisher keeps it (``uns_node``): one more per CONNECT."""
    import psycopg2

    with psycopg2.connect(stack.database_url()) as conn, conn.cursor() as cur:
        cur.execute("SELECT bd_seq FROM uns_node WHERE line_id = %s", (LINE,))
        return cur.fetchone()[0]


def audited_refusals(stack) -> list[tuple]:
    import psycopg2

    with psycopg2.connect(stack.database_url()) as conn, conn.cursor() as cur:
        cur.execute("SELECT line_id, target_id, outcome, detail FROM people_audit"
                    " WHERE action = 'MQTT_COMMAND_REFUSED' ORDER BY id")
        return cur.fetchall()


def test_commands_rebirth_only_every_other_refused_audited_and_hostile_input_ignored(uns_stack, host):
    stack = uns_stack
    token = stack.token("operator")
    host.join(LINE, DEVICES)
    publisher, bd = stack.process("uns"), host.nodes[LINE].bd_seq
    births, refused, said = len(host.of(LINE, "NBIRTH")), len(audited_refusals(stack)), len(stack.lines)
    host.request_rebirth(LINE)
    wait_for(lambda: len(host.of(LINE, "NBIRTH")) == births + 1, 30, 0.05, "a rebirth")
    again = host.of(LINE, "NBIRTH")[births]
    assert again.seq == 0 and {m["name"]: m["value"] for m in again.metrics}["/bdSeq"] == bd
    events_before = newest_seq(stack, token)
    host.command(LINE, [("Slot/1/Status", pb.String, "EMPTY")], device="MC1")  # a write: refused
    wait_for(lambda: audited_refusals(stack)[refused:], 30, 0.05, "the refusal in the audit")
    (line_id, kind, outcome, detail), = audited_refusals(stack)[refused:]
    assert (line_id, kind, outcome) == (LINE, "DCMD", "REFUSED") and detail["device"] == "MC1", detail
    for _ in range(3):
        host.raw(LINE, b"\xff\x00garbage")  # not a Sparkplug payload
    host.raw(LINE, b"\x0a" * (2 * 1024 * 1024), device="MC1")  # 2 MiB
    unknown = pb.Payload(timestamp=1)
    unknown.metrics.add(alias=987654, datatype=pb.Boolean, boolean_value=True)
    host.raw(LINE, unknown.SerializeToString())
    wait_for(lambda: len(audited_refusals(stack)) == refused + 6, 30, 0.05, "every refusal audited")
    garbage = [line for line in stack.lines[said:] if "not a Sparkplug B payload" in line]
    assert len(garbage) == 1, garbage  # logged once
    # Still the same publisher, still publishing; nothing on the line moved for it.
    host.request_rebirth(LINE)
    wait_for(lambda: len(host.of(LINE, "NBIRTH")) == births + 2, 30, 0.05, "the publisher answering after it all")
    assert stack.process("uns") == publisher and newest_seq(stack, token) == events_before
    assert not host.errors, host.errors[:10]


def device_values(host: SparkplugHost, device: str) -> list[dict]:
    """The live (not historical) values a device's births and data said, in order."""
    return [m for seen in host.of(LINE) if seen.device == device and seen.kind in ("DBIRTH", "DDATA")
            for m in seen.metrics if not m["historical"]]


def said(host: SparkplugHost, device: str, name: str, value) -> bool:
    return any(m["name"] == f"{device}/{name}" and m["value"] == value for m in device_values(host, device))


def test_a_machine_s_fault_code_the_plc_away_and_the_controller_down_as_a_host_sees_them(uns_stack, host):
    """A machine's ``Fault Code`` follows its PLC's fault; while the line's PLC is away every
    device is dead (DDEATH) and born again (DBIRTH) when it is back; while the line's
    controller is down ``Line/Controller`` is false and every machine's State is ``DOWN``."""
    import os
    import signal
    from pathlib import Path

    from services.hardware.sim.control import sim_control
    from services.hardware.sim.faults import MACHINE_FAULT
    from shared.layout import load_layout

    stack = uns_stack
    control = None
    try:
        host.join(LINE, DEVICES)
        born = {m["name"] for m in host.of(LINE, "NBIRTH")[0].metrics}
        assert {"/Line/Controller", "/Line/PLC Connected"} <= born
        wait_for(lambda: host.nodes[LINE].live.get("/Line/Controller") is True, 30, 0.05, "the controller up")
        assert said(host, "MC1", "Fault Code", None)
        layout = load_layout(Path(__file__).resolve().parents[2] / "deploy" / "line.yaml")
        control = sim_control(layout, f"127.0.0.1:{stack.sim_port}")

        control.machine_fault("MC1")
        wait_for(lambda: said(host, "MC1", "Fault Code", MACHINE_FAULT) and said(host, "MC1", "State", "FAULT"),
                 30, 0.05, lambda: f"MC1's fault: {device_values(host, 'MC1')[-6:]}\n{uns_output(stack)}")
        control.clear()
        wait_for(lambda: device_values(host, "MC1")[-1:] and [m["value"] for m in device_values(host, "MC1")
                                                                if m["name"] == "MC1/Fault Code"][-1] is None,
                 30, 0.05, "MC1's fault cleared")

        births = len(host.of(LINE, "DBIRTH"))
        control.drop(3.0)  # the PLC goes away for 3 s
        wait_for(lambda: {m.device for m in host.of(LINE, "DDEATH")} == DEVICES, 30, 0.05,
                 lambda: f"every device dead while the PLC is away\n{uns_output(stack)}")
        assert host.nodes[LINE].live.get("/Line/PLC Connected") is False
        wait_for(lambda: {m.device for m in host.of(LINE, "DBIRTH")[births:]} == DEVICES, 60, 0.05,
                 "every device born again when the PLC is back")
        assert host.nodes[LINE].devices_online == DEVICES and host.nodes[LINE].live["/Line/PLC Connected"] is True

        os.kill(stack.process("line_controller"), signal.SIGKILL)
        wait_for(lambda: host.nodes[LINE].live.get("/Line/Controller") is False, 30, 0.05,
                 lambda: f"the controller down\n{uns_output(stack)}")
        wait_for(lambda: all(said(host, m, "State", "DOWN") for m in ("MC1", "MC2", "WASH1", "INSP1")), 10, 0.05,
                 "every machine DOWN")
        # linectl up starts it again: the controller up, the machines' tracked states again.
        wait_for(lambda: host.nodes[LINE].live.get("/Line/Controller") is True, 90, 0.1, "the controller back")
        wait_for(lambda: host.nodes[LINE].live.get("MC1/State") not in (None, "DOWN"), 10, 0.05,
                 lambda: f"MC1's tracked state again: {host.nodes[LINE].live.get('MC1/State')}")
        assert not host.errors, host.errors[:10]
    finally:
        if control is not None:
            control.close()


def test_json_and_sparkplug_over_tls_with_a_login(stack_factory, tmp_path):
    """The settings' CA file, user and password file work end to end on a TLS broker that
    refuses anonymous clients; ``both``: Sparkplug, and the JSON topics (retained current
    values, every event on the line's events topic)."""
    import threading

    import paho.mqtt.client as mqtt

    broker = Broker(tmp_path / "tls-mosquitto", tls=True, users={"linectl": "s3cret", "scada": "h0st"}).start()
    password = tmp_path / "mqtt.password"
    password.write_text("s3cret\n")
    login = {"tls_set": (str(broker.tls["ca"]),), "username_pw_set": ("scada", "h0st")}
    host = SparkplugHost(broker.url, GROUP, client_kwargs=login)
    retained, events, lock = {}, [], threading.Lock()

    def on_message(_c, _u, msg):
        with lock:
            if msg.topic.endswith("/events"):
                events.append(json.loads(msg.payload))
            else:
                retained[msg.topic] = json.loads(msg.payload)

    reader = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="test-json-reader")
    reader.tls_set(str(broker.tls["ca"]))
    reader.username_pw_set("scada", "h0st")
    reader.on_connect = lambda c, *_a: c.subscribe("linectl/#", qos=1)
    reader.on_message = on_message
    reader.connect("127.0.0.1", broker.port, keepalive=5)
    reader.loop_start()
    stack = stack_factory(extra_env=mqtt_env(
        broker, LINECTL_MQTT_FORMAT="both", LINECTL_MQTT_USERNAME="linectl",
        LINECTL_MQTT_PASSWORD_FILE=str(password), LINECTL_MQTT_CA_FILE=str(broker.tls["ca"]))).up()
    try:
        stack.wait_line("linectl: ready", 180)
        token = stack.token("operator")
        wait_for(lambda: {m.device for m in host.of(LINE, "DBIRTH")} >= DEVICES, 60, 0.05,
                 lambda: f"births over TLS\n{uns_output(stack)}")
        order = run_order(stack, token, quantity=1)
        wait_for(lambda: completed(stack, token, order["id"]), 120, 0.2, "the order completing")
        last = newest_seq(stack, token)
        with lock:
            first = min((e["seq"] for e in events), default=last)
        wait_for(lambda: [e["seq"] for e in list(events) if e["seq"] <= last][-1:] == [last], 30, 0.05,
                 "every event on the events topic")
        (job_id, record), = finished_pieces(stack, token, order["id"]).items()
        wait_for(lambda: any(e["type"] == "PieceFinished" for e in list(events)), 30, 0.05, "the piece finished")
        with lock:
            seqs = [e["seq"] for e in events]
            assert seqs == sorted(seqs) and set(range(first, last + 1)) <= set(seqs)
            assert all(e["lineId"] == LINE and {"seq", "txId", "type", "at", "payload"} <= set(e) for e in events)
            # The piece's summary right after the JobFinished that ended it, with its seq and txId.
            (i, piece), = [(i, e) for i, e in enumerate(events) if e["type"] == "PieceFinished"]
            assert piece["payload"] == piece_summary(record) and piece["seq"] == record["endedAtSeq"]
            assert events[i - 1]["type"] == "JobFinished" and events[i - 1]["payload"]["id"] == job_id
            assert (events[i - 1]["seq"], events[i - 1]["txId"]) == (piece["seq"], piece["txId"])
        wait_for(lambda: retained.get(f"linectl/{LINE}/Line/LastPiece", {}).get("value") == piece_summary(record),
                 30, 0.05, lambda: f"Line/LastPiece retained: {retained.get(f'linectl/{LINE}/Line/LastPiece')}")
        # The retained current values: what the REST API says, with the seq they include.
        # (the one piece completed, or scrapped at its inspection: the simulator fails some)
        count = f"linectl/{LINE}/Line/{'Completed' if record['status'] == 'COMPLETED' else 'Scrapped'}"
        wait_for(lambda: retained.get(count, {}).get("value") == 1, 30, 0.05,
                 lambda: f"{count} retained: {retained.get(count)}; the piece {record['status']}")
        assert retained[f"linectl/{LINE}/Line/EventSeq"]["value"] >= retained[count]["seq"]
        assert {"value", "at", "seq"} == set(retained[f"linectl/{LINE}/MC1/State"])
        # A late subscriber gets the current values from the broker alone (retained).
        late = {}
        again = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="test-json-late")
        again.tls_set(str(broker.tls["ca"]))
        again.username_pw_set("scada", "h0st")
        again.on_connect = lambda c, *_a: c.subscribe(f"linectl/{LINE}/Line/#", qos=1)
        again.on_message = lambda _c, _u, msg: late.__setitem__(msg.topic, json.loads(msg.payload))
        again.connect("127.0.0.1", broker.port, keepalive=5)
        again.loop_start()
        wait_for(lambda: late.get(count, {}).get("value") == 1, 15, 0.05,
                 "the retained value for a late subscriber")
        again.disconnect()
        again.loop_stop()
        assert not host.errors, host.errors[:10]
    finally:
        reader.disconnect()
        reader.loop_stop()
        host.stop()
        broker.stop()


# docs/uns.md: the standby asks every 0.5 s, waits out the 1.5 s fence, then births: about
# 2 s (1.7 to 2.3 s measured; 5.3 s once, beside the plant test and other work on 2 cores)
TAKEOVER_BOUND_SECONDS = 8.0


def lock_takings(stack) -> int:
    """How often ``linectl up``'s publisher has taken the plant's lock."""
    return sum("publisher lock taken" in line for line in list(stack.lines))


def test_kill_9_of_the_publisher_mid_order_a_standby_takes_over_and_the_host_misses_no_seq(uns_stack, host,
                                                                                           tmp_path):
    import os
    import signal
    import subprocess
    import sys

    stack = uns_stack
    standby, killed, taken = None, False, lock_takings(stack)
    try:
        token = stack.token("operator")
        host.join(LINE, DEVICES)
        first = host.nodes[LINE].birth_event_seq
        publisher = stack.process("uns")
        # A standby on "another host": the same settings, its own process.
        env = dict(line.split("=", 1) for line in open(f"/proc/{publisher}/environ").read().split("\0") if "=" in line)
        standby = subprocess.Popen([sys.executable, "-m", "services.uns", "--name", "uns-standby"], env=env,
                                   stdout=(tmp_path / "standby.log").open("w"), stderr=subprocess.STDOUT)
        wait_for(lambda: "waiting for the plant's publisher lock" in (tmp_path / "standby.log").read_text(), 60,
                 0.05, "the standby waiting for the lock")
        order = run_order(stack, token, quantity=3)
        wait_for(lambda: newest_seq(stack, token) > first + 5, 60, 0.05, "the order under way")
        births = len(host.of(LINE, "NBIRTH"))
        killed_at = time.time()
        os.kill(publisher, signal.SIGKILL)
        killed = True
        wait_for(lambda: len(host.of(LINE, "NBIRTH")) > births, 30, 0.01, "a new birth")
        takeover = host.of(LINE, "NBIRTH")[births].at - killed_at
        print(f"takeover: {takeover:.3f} s from kill -9 to the new NBIRTH")
        assert takeover < TAKEOVER_BOUND_SECONDS, (f"{takeover:.2f} s after the kill at {killed_at:.3f}; the standby:\n"
                                                   + (tmp_path / "standby.log").read_text()[-1500:])
        wait_for(lambda: completed(stack, token, order["id"]), 120, 0.2, "the order completing")
        last = newest_seq(stack, token)
        wait_for(lambda: not host.missing_event_seqs(LINE, first + 1, last), 30, 0.05,
                 lambda: f"every seq up to {last}; missing {host.missing_event_seqs(LINE, first + 1, last)[:20]}")
        assert not host.errors, host.errors[:10]
        assert standby.poll() is None  # it publishes now; linectl up's uns, started again, waits
    finally:
        if standby is not None and standby.poll() is None:
            standby.terminate()
            standby.wait(15)
        if killed:
            # linectl up's uns, started again after the kill, takes the lock back: the module's
            # next test finds the plant as it was
            wait_for(lambda: lock_takings(stack) > taken, 30, 0.1, "linectl up's uns publishing again")


def test_primary_host_offline_the_nodes_die_and_store_online_births_then_the_backlog(stack_factory, mqtt_broker):
    host = SparkplugHost(mqtt_broker.url, GROUP, host_id="scada-1")
    stack = stack_factory(extra_env=mqtt_env(mqtt_broker, LINECTL_SPARKPLUG_PRIMARY_HOST="scada-1")).up()
    try:
        stack.wait_line("linectl: ready", 180)
        token = stack.token("operator")
        wait_for(lambda: host.of(LINE, "NBIRTH"), 60, 0.05, "births while the primary host is online")
        first = host.nodes[LINE].birth_event_seq
        host.set_online(False)
        wait_for(lambda: host.of(LINE, "NDEATH") and not host.nodes[LINE].online, 30, 0.05, "the node's NDEATH")
        offline = newest_seq(stack, token)
        order = run_order(stack, token, quantity=1)
        wait_for(lambda: completed(stack, token, order["id"]), 120, 0.2, "the order completing while offline")
        stored = newest_seq(stack, token)
        assert stored > offline and len(host.of(LINE, "NBIRTH")) == 1  # nothing born while the host is away
        host.set_online(True)
        wait_for(lambda: len(host.of(LINE, "NBIRTH")) == 2, 30, 0.05, "births when the host is back")
        wait_for(lambda: not host.missing_event_seqs(LINE, first + 1, stored), 30, 0.05,
                 lambda: f"the stored events; missing {host.missing_event_seqs(LINE, first + 1, stored)[:20]}")
        born_at = {m["name"]: m["value"] for m in host.of(LINE, "NBIRTH")[1].metrics}["/Line/EventSeq"]
        history = {seq for seq, historical in host.event_seqs[LINE] if historical}
        assert set(range(offline + 1, born_at + 1)) <= history  # what was stored came after the births, as history
        assert not host.errors, host.errors[:10]
    finally:
        host.stop()


def node_message(seq: int, metrics: list[dict], timestamp: int = 1000) -> bytes:
    """A Sparkplug payload as an edge node writes it (names in a birth, aliases after)."""
    payload = pb.Payload(timestamp=timestamp, seq=seq)
    for m in metrics:
        metric = payload.metrics.add(datatype=pb.UInt64, long_value=m["value"], timestamp=timestamp,
                                     is_historical=m.get("historical", False))
        metric.alias = m["alias"]
        if "name" in m:
            metric.name = m["name"]
    return payload.SerializeToString()


def test_the_host_takes_a_new_session_s_message_that_repeats_an_old_session_s_bytes(mqtt_broker):
    """A node born again (a takeover that forwards its backlog again from the same saved
    acknowledgement) sends the same historical metrics with the same seq: the same bytes as
    the old session's. They are the new session's messages; only a copy within one session
    is a duplicate. (The test host dropped them as copies and saw "NDATA seq 40 after 5".)"""
    import paho.mqtt.client as mqtt

    host = SparkplugHost(mqtt_broker.url, GROUP)
    node = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="test-edge-node")
    node.connect("127.0.0.1", mqtt_broker.port, keepalive=5)
    node.loop_start()
    try:
        assert host.subscribed.wait(10)

        def send(kind: str, data: bytes) -> None:
            node.publish(f"spBv1.0/{GROUP}/{kind}/n1", data, qos=1).wait_for_publish(5)

        history = node_message(1, [{"alias": 2, "value": 41, "historical": True}])
        for bd_seq in (1, 2):  # two sessions, each: a birth, then the same backlog message
            send("NBIRTH", node_message(0, [{"name": "bdSeq", "alias": 1, "value": bd_seq},
                                            {"name": "Line/EventSeq", "alias": 2, "value": 50}]))
            send("NDATA", history)
        send("NDATA", history)  # a true copy (QoS 1 is at least once): dropped
        send("NDATA", node_message(2, [{"alias": 2, "value": 51}]))
        wait_for(lambda: len(host.trace) == 6, 10, 0.02, lambda: "\n".join(host.trace))
        assert not host.errors, host.errors
        assert [s.seq for s in host.of("n1", "NDATA")] == [1, 1, 2] and host.redelivered == 1
        assert host.event_seqs["n1"] == [(41, True), (41, True), (51, False)]
        assert host.nodes["n1"].live["/Line/EventSeq"] == 51
    finally:
        node.disconnect()
        node.loop_stop()
        host.stop()
