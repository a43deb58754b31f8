"""The running stack as the flow tests drive it: :class:`Line` (the hardware
service and the line_controller on the simulator, commands through the real
``command`` RPC) and :class:`Floor` (the same with the gateway's operator client
and the PLC's fault injection), and :func:`floor_on`, which starts a floor on a
cell and stops it all again."""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager

from nameko.standalone.rpc import ServiceRpcProxy

from gateway.app import create_app
from gateway.rpc import RpcPool
from services.hardware.service import HardwareService
from services.hardware.sim.control import sim_control
from services.hardware.sim.model import SimOptions
from services.hardware.sim.opcua_server import OpcUaLineSimulator
from services.hardware.sim.server import LineSimulator
from services.identity.passwords import Passwords
from services.identity.users import Actor, UserStore
from services.line_controller.service import LineControllerService
from shared import events as ev
from shared.config import load_settings
from tests.flow.invariants import assert_line_clear, replay
from tests.ops.operator import answer_for
from tests.support.db import RowQueries
from tests.support.ports import free_port
from tests.support.waiting import wait_for

# A 12 s machining cycle takes 0.12 s on a floor: a fault lands mid-cycle because the
# cycle is held first (the station hangs until the fault, which aborts it), not by timing.
SPEED = 100.0
TOKEN = "op-token-faults-0001"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class Line(RowQueries):
    """The running stack and what the tests ask of it."""

    def __init__(self, engine, proxy, hardware):
        self.engine = engine
        self.proxy = proxy
        self.hardware = hardware

    def wait_idle(self, timeout=30.0):
        """No hardware action open (the last finished piece is out of the cell)."""
        wait_for(lambda: self.row("SELECT count(*) AS n FROM task WHERE status IN ('PENDING','RUNNING')").n == 0,
                 timeout, interval=0.05, message="no open task")

    def plc_buffer(self) -> list[bool]:
        """What the PLC says lies on each buffer slot."""
        return [s["occupied"] for s in self.hardware.plc_state()["buffer"]]

    def command(self, type_, payload, actor="tester"):
        reply = self.proxy.command(type_, payload, actor, wait_seconds=30)
        assert reply["status"] in ("HANDLED", "REJECTED"), reply
        return reply

    def ok(self, type_, payload):
        reply = self.command(type_, payload)
        assert reply["status"] == "HANDLED", reply
        return reply["result"]

    def order(self, product, quantity, priority=5):
        order = self.ok("CreateOrder", {"productId": product, "quantity": quantity, "priority": priority})
        return self.ok("StartOrder", {"workOrderId": order["id"]})

    def wait_finished(self, order_id, timeout=90.0):
        def finished():
            row = self.row("SELECT status FROM work_order WHERE id = :id", id=order_id)
            return row.status if row.status in ("COMPLETED", "CANCELLED") else None
        try:
            return wait_for(finished, timeout, interval=0.1, message=f"work order {order_id} finished")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.describe()}") from None

    def describe(self) -> str:
        """The state, for a failure message."""
        parts = ["jobs:"]
        parts += [f"  {tuple(r)}" for r in self.rows(
            "SELECT id, status, held_status, position_type, position_ref_id, temp_slot_no, step_index "
            "FROM job WHERE status NOT IN ('COMPLETED','SCRAPPED','CANCELLED') ORDER BY id")]
        parts.append("slots: " + ", ".join(f"{r.equipment_id}:{r.slot_no}={r.status}/{r.current_job_id}"
                                           for r in self.rows("SELECT * FROM equipment_slot ORDER BY 1, 2")))
        parts.append("equipment: " + ", ".join(f"{r.id}={r.status}" for r in self.rows("SELECT * FROM equipment")))
        parts += [f"task {tuple(r)}" for r in self.rows(
            "SELECT id, kind, status, job_id, equipment_id, slot_no, error_code FROM task "
            "WHERE status <> 'SUCCEEDED' ORDER BY id")]
        parts += [f"alarm {r.code}: {r.message}" for r in self.rows("SELECT * FROM alarm ORDER BY id")]
        parts += [f"message {tuple(r)}" for r in self.rows(
            "SELECT type, status, error_code, error_message FROM loop_message "
            "WHERE status NOT IN ('HANDLED') ORDER BY created_at DESC LIMIT 10")]
        try:  # the hardware's side: whether its watcher sees the PLC, and why not
            parts.append(f"hardware: {self.hardware.status()}")
        except Exception as exc:  # noqa: BLE001 - a failure message is being written; say what failed
            parts.append(f"hardware: no answer ({type(exc).__name__}: {exc})")
        return "\n".join(parts)


class SimulatorCell:
    """Fault injection on the simulator (its control registers over Modbus, or its
    SimControl methods over OPC UA), under RegisterMapPlc's names."""

    RENAMED = {"fault": "machine_fault", "hang": "machine_hang", "restart": "restart_plc"}

    def __init__(self, layout, simulator):
        self.simulator = simulator
        self.address = simulator.address
        self.control = sim_control(layout, simulator.address)

    def __getattr__(self, name):  # fault, hang, emergency_stop, restart, drop
        return getattr(self.control, self.RENAMED.get(name, name))

    def clear(self):
        """In-process: a clear needs no connection, so it may come while the
        simulator refuses them (after a drop)."""
        self.simulator.clear()

    def stop(self):
        self.control.close()
        self.simulator.stop()


def simulator_cell(protocol, layout, pallet_size=500, **server_options) -> SimulatorCell:
    """The simulator speaking ``protocol`` ("modbus" or "opcua") at a floor's speed
    on a free port, started; ``server_options`` go to the OPC UA server."""
    options = SimOptions(speed=SPEED, scrap_rate=0.0, seed=3, pallet_size=pallet_size, pallet_seconds=1.0)
    if protocol == "opcua":
        server = OpcUaLineSimulator(layout, options, "127.0.0.1", free_port(), **server_options)
    else:
        server = LineSimulator(layout, options, "127.0.0.1", free_port())
    return SimulatorCell(layout, server.start())


class Floor(Line):
    """The running stack, the operator's HTTP client and the PLC's fault injection."""

    def __init__(self, engine, proxy, hardware, http, cell):
        super().__init__(engine, proxy, hardware)
        self.http = http
        self.cell = cell
        self.csrf = None  # a signed-in person's session (sign_in), else the operator's token

    def sign_in(self, name: str, password: str = "floor password 1") -> None:
        """The operator signs in as ``name`` (a user made as ``linectl users add`` makes
        one): their answers carry their name (the audit's, and the pieces' history)."""
        store = UserStore(self.engine, Passwords(1, 1024))
        store.add(name, "operator", password, Actor("test", "admin", "console"), display_name=name.title())
        reply = self.http.post("/api/session", json={"username": name, "password": password})
        assert reply.status_code == 200, reply.get_json()
        self.csrf = reply.get_json()["csrfToken"]

    def piece(self, job_id):
        """The piece record of ``job_id`` as GET /api/pieces/{serial} answers it."""
        serial = self.row("SELECT serial FROM job WHERE id = :j", j=job_id).serial
        reply = self.http.get(f"/api/pieces/{serial}", headers=AUTH)
        assert reply.status_code == 200, reply.get_json()
        return reply.get_json()

    def open_action(self, kind, timeout=60.0):  # bounds a failure; CI machines run 2-3x slower
        def found():
            items = self.http.get("/api/manual-actions?status=OPEN", headers=AUTH).get_json()["items"]
            return next((a for a in items if a["kind"] == kind), None)
        return self._wait(found, timeout, f"an open {kind} action")

    def _wait(self, predicate, timeout, what, steady=False):
        try:
            return wait_for(predicate, timeout, 0.02, what, steady=steady)
        except AssertionError as exc:  # the state as it is at the end, not the start
            raise AssertionError(f"{exc}\n{self.describe()}") from None

    def answer(self, action, resolution):
        headers = {"X-CSRF-Token": self.csrf} if self.csrf else AUTH  # the signed-in person's, or the token's
        return self.http.post(f"/api/manual-actions/{action['id']}/resolve", headers=headers,
                              json={"resolution": resolution})

    def wait_robot_busy(self):
        """A robot action is in flight (its task running)."""
        return self._wait(lambda: self.rows(
            "SELECT id FROM task WHERE status = 'RUNNING' AND kind NOT IN ('START_MACHINE', 'ABORT_CYCLE')"),
            30, "a robot action in flight", steady=True)

    def answer_robot_failures(self):
        """The actions in flight when a machine faulted (a load or a start the PLC
        refused: nothing moved): RETRY, the piece is where it was. A RETRY that
        needs the machine waits for the PLC's clear (409 until then)."""
        for question in self.rows("SELECT id FROM manual_action WHERE status = 'OPEN' "
                                  "AND kind IN ('ACTION_FAILED', 'EQUIPMENT_FAULT')"):
            reply = self.answer({"id": question.id}, "RETRY")
            assert reply.status_code in (200, 409), reply.get_json()

    def answer_recovery_questions(self):
        """The questions a PLC restart raises, answered as they open (the robot's action
        in flight comes back failed only once the PLC is back, maybe after the machine's
        question): the operator looks at the cell, as after a line controller restart."""
        for question in self.rows("SELECT * FROM manual_action WHERE status = 'OPEN' AND kind LIKE 'RECOVERY%'"):
            task = self.row("SELECT * FROM task WHERE id = :id", id=(question.context or {}).get("taskId") or 0)
            task = task and {"kind": task.kind, "params": task.params, "equipmentId": task.equipment_id,
                             "slotNo": task.slot_no}
            choice = answer_for({"kind": question.kind, "equipmentId": question.equipment_id,
                                 "context": question.context, "facts": question.facts}, task,
                                self.hardware.plc_state())
            assert self.answer({"id": question.id}, choice).status_code == 200

    def wait_finished(self, order_id, timeout=90.0, recovery=False):
        """As the operator would: any refused action in flight answered while waiting
        (and, ``recovery``, any question a PLC restart raised)."""
        def finished():
            self.answer_robot_failures()
            if recovery:
                self.answer_recovery_questions()
            row = self.row("SELECT status FROM work_order WHERE id = :id", id=order_id)
            return row.status if row.status in ("COMPLETED", "CANCELLED") else None
        return self._wait(finished, timeout, f"work order {order_id} finished")

    def equipment_status(self, equipment_id):
        return self.row("SELECT status FROM equipment WHERE id = :e", e=equipment_id).status

    def processing_on(self, equipment_id, count=1, hold=True):
        """Wait until ``count`` pieces are in a running cycle of the machine (DB and PLC
        agree); ``hold``: the machine's cycles hang (until a fault or the clear) so
        that they are still running when the test acts."""
        if hold:
            self.cell.hang(equipment_id)
        def running():
            jobs = self.rows("SELECT j.id FROM job j JOIN equipment_slot s ON s.current_job_id = j.id "
                             "WHERE s.equipment_id = :e AND j.status = 'PROCESSING'", e=equipment_id)
            # a look that found the PLC away (a read timed out on a loaded host) lists no machines: not yet
            plc = next((m for m in self.hardware.plc_state()["equipment"] if m["id"] == equipment_id), None)
            return len(jobs) >= count and plc is not None and plc["running"] and [j.id for j in jobs]
        return self._wait(running, 60, f"{count} piece(s) in a cycle on {equipment_id}")

    def finished_exactly(self, order_id, quantity, timeout=120.0, recovery=False):
        assert self.wait_finished(order_id, timeout, recovery) == "COMPLETED"
        self.wait_idle()
        order = self.row("SELECT * FROM work_order WHERE id = :id", id=order_id)
        jobs = Counter(r.status for r in self.rows("SELECT status FROM job WHERE work_order_id = :o",
                                                   o=order_id))
        assert order.completed_qty + order.scrapped_qty == quantity
        assert jobs == {k: v for k, v in (("COMPLETED", order.completed_qty),
                                          ("SCRAPPED", order.scrapped_qty)) if v}
        assert_line_clear(self.engine)
        plc = self.hardware.plc_state()
        assert [b["occupied"] for b in plc["buffer"]] == [False] * 8, plc["buffer"]
        assert not any(s["occupied"] for m in plc["equipment"] for s in m["slots"]), plc["equipment"]
        assert self.rows("SELECT id FROM manual_action WHERE status = 'OPEN'") == []
        replay(self.engine)
        return order


@contextmanager
def floor_on(cell, container_factory, nameko_config, engine, db_url):
    """The hardware service on ``cell`` (a started PLC with the fault injection's
    names), the line_controller and the gateway's operator client, once the PLC is
    connected; everything stops afterwards, the cell last."""
    try:
        config = {**nameko_config, "LINECTL_PLC_ADDRESS": cell.address,
                  # 5 s a PLC request, as tests/flow/conftest.py: the simulator answers from this
                  # process's green threads, and on a loaded CI machine a read past 2 s dropped
                  # the OPC UA session mid-test (a link loss the test did not play).
                  "LINECTL_HW_ACTION_TIMEOUT": 20.0, "LINECTL_HW_MODBUS_TIMEOUT": 5.0,
                  "LINECTL_HW_RECONNECT_GRACE": 1.0, "LINECTL_STEP_TIMEOUT": 60.0}
        containers = [container_factory(HardwareService, config), container_factory(LineControllerService, config)]
        for container in containers:
            container.start()
        settings = load_settings({"LINECTL_DATABASE_URL": db_url, "LINECTL_TOKENS": f"operator:{TOKEN}",
                                  "LINECTL_AMQP_URI": config["AMQP_URI"],  # the services' transport
                                  "LINECTL_COMMAND_WAIT_SECONDS": "10"})
        pool = RpcPool(config, size=4, timeout=30)
        try:
            with ServiceRpcProxy(ev.HARDWARE, config, timeout=30) as hw, \
                    ServiceRpcProxy(ev.LINE_CONTROLLER, config, timeout=60) as proxy:
                wait_for(lambda: hw.plc_state()["connected"], 30, interval=0.05, message="the PLC")
                yield Floor(engine, proxy, hw, create_app(settings, rpc_pool=pool).test_client(), cell)
        finally:
            pool.close()
            for container in containers:  # before the PLC goes away
                container.stop()
    finally:
        cell.stop()
