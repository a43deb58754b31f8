"""The whole stack for flow tests: the line simulator (Modbus, or OPC UA where a
module parametrizes ``protocol``) in-process on a free port at high speed, the
real hardware service pointed at it, and the real line_controller (scheduler
wired) on the test's database and transport.
Commands go through the real ``command`` RPC."""

from __future__ import annotations

import pytest
from nameko.standalone.rpc import ServiceRpcProxy

from services.hardware.service import HardwareService
from services.hardware.sim.model import SimOptions
from services.hardware.sim.opcua_server import OpcUaLineSimulator
from services.hardware.sim.server import LineSimulator
from services.line_controller.service import LineControllerService
from shared import events as ev
from shared.config import Settings
from shared.layout import load_layout
from tests.support.db import RowQueries
from tests.support.ports import free_port
from tests.support.waiting import wait_for

SIM_SPEED = 1000.0  # a 12 s machining cycle takes 12 ms; the transport dominates
# The (transport, protocol) pairs a module runs a whole order on: each transport once
# and each field protocol once, not their cross product (nothing in an order's path
# depends on the two together).
TRANSPORT_PROTOCOL = pytest.mark.parametrize(("transport", "protocol"),
                                             [("pgsql", "modbus"), ("rabbitmq", "opcua")])


@pytest.fixture
def transport():
    """The message transport: pgsql:// (the default), or ``rabbitmq`` where a test
    parametrizes it, the way a plant that outgrows one box runs it (skipped without
    RabbitMQ locally, required in CI)."""
    return "pgsql"


@pytest.fixture
def nameko_config(request, db_url, amqp_uri, transport):
    uri = request.getfixturevalue("rabbit_uri") if transport == "rabbitmq" else amqp_uri
    return {"AMQP_URI": uri, "serializer": "json", "LINECTL_DATABASE_URL": db_url, "max_workers": 20}


@pytest.fixture(scope="session")
def layout():
    return load_layout(Settings().line_file)


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
        return "\n".join(parts)


@pytest.fixture
def sim_options():
    # A large pallet: the snapshot does not know how many pieces the dock holds
    # (see docs/scheduler.md), so the dock must not run dry under a refill.
    return SimOptions(speed=SIM_SPEED, scrap_rate=0.25, seed=11, pallet_size=500, pallet_seconds=1.0)


@pytest.fixture
def protocol():
    """What the simulator speaks (a module parametrizes it over tests.hardware.conftest.PROTOCOLS)."""
    return "modbus"


@pytest.fixture
def line(container_factory, nameko_config, engine, layout, sim_options, protocol):
    port = free_port()
    if protocol == "opcua":
        simulator = OpcUaLineSimulator(layout, sim_options, "127.0.0.1", port).start()
    else:
        simulator = LineSimulator(layout, sim_options, "127.0.0.1", port).start()
    config = {**nameko_config, "LINECTL_PLC_ADDRESS": simulator.address,
              "LINECTL_HW_ACTION_TIMEOUT": 20.0, "LINECTL_HW_MODBUS_TIMEOUT": 5.0,
              "LINECTL_STEP_TIMEOUT": 30.0}
    containers = [container_factory(HardwareService, config),
                  container_factory(LineControllerService, config)]
    for container in containers:
        container.start()
    try:
        with ServiceRpcProxy(ev.HARDWARE, config, timeout=30) as hw, \
                ServiceRpcProxy(ev.LINE_CONTROLLER, config, timeout=60) as proxy:
            wait_for(lambda: hw.plc_state()["connected"], 30, interval=0.1, message="the PLC")
            yield Line(engine, proxy, hw)
    finally:
        for container in containers:  # before the simulator goes away
            container.stop()
        simulator.stop()
