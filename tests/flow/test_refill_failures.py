"""A refill the robot fails (a gripper fault, PLC error 3: nothing moved) is
refilled once the operator has answered, on the real stack and each field
protocol (issue 41): the dock holds one pallet of 4 and the order needs more, so
a piece lost from the loop's dock count would wait for a pallet the PLC has no
reason to bring. Each answer once, one per protocol: RETRY over Modbus, SCRAP
over OPC UA (what each answer does to the count is proven for every case, timeout
and e-stop included, by tests/line_controller/test_refill_failures.py)."""

from __future__ import annotations

import pytest
from nameko.standalone.rpc import ServiceRpcProxy

from gateway.app import create_app
from gateway.rpc import RpcPool
from services.hardware.service import HardwareService
from services.hardware.sim.model import SimOptions
from services.hardware.sim.opcua_server import OpcUaLineSimulator
from services.hardware.sim.server import LineSimulator
from services.line_controller.service import LineControllerService
from shared import events as ev
from shared.config import load_settings
from tests.flow.test_faults_on_the_floor import SPEED, TOKEN, Floor, SimulatorCell
from tests.support.ports import free_port
from tests.support.waiting import wait_for

PALLET = 4


@pytest.fixture
def floor(request, container_factory, nameko_config, engine, layout, db_url):
    """The stack on the simulator (``request.param``: its protocol) with pallets of 4."""
    server = OpcUaLineSimulator if request.param == "opcua" else LineSimulator
    options = SimOptions(speed=SPEED, scrap_rate=0.0, seed=3, pallet_size=PALLET, pallet_seconds=1.0)
    cell = SimulatorCell(layout, server(layout, options, "127.0.0.1", free_port()).start())
    config = {**nameko_config, "LINECTL_PLC_ADDRESS": cell.address, "LINECTL_HW_ACTION_TIMEOUT": 20.0,
              "LINECTL_HW_MODBUS_TIMEOUT": 2.0, "LINECTL_STEP_TIMEOUT": 60.0}
    containers = [container_factory(HardwareService, config), container_factory(LineControllerService, config)]
    for container in containers:
        container.start()
    settings = load_settings({"LINECTL_DATABASE_URL": db_url, "LINECTL_TOKENS": f"operator:{TOKEN}",
                              "LINECTL_COMMAND_WAIT_SECONDS": "10"})
    pool = RpcPool(config, size=2, timeout=30)
    try:
        with ServiceRpcProxy(ev.HARDWARE, config, timeout=30) as hw, \
                ServiceRpcProxy(ev.LINE_CONTROLLER, config, timeout=60) as proxy:
            wait_for(lambda: hw.plc_state()["connected"], 30, interval=0.05, message="the PLC")
            yield Floor(engine, proxy, hw, create_app(settings, rpc_pool=pool).test_client(), cell)
    finally:
        pool.close()
        for container in containers:
            container.stop()
        cell.stop()


@pytest.mark.parametrize(("floor", "answer"), [("modbus", "RETRY"), ("opcua", "SCRAP")], indirect=["floor"])
def test_a_refill_the_robot_failed_is_answered_and_the_order_completes_exactly(floor, answer):
    # The loop knows the first pallet before the order: the count limits the refills.
    wait_for(lambda: floor.row("SELECT pieces_waiting FROM dock").pieces_waiting == PALLET, 10, 0.05,
             "the first pallet counted")
    floor.cell.control.robot_error(3)  # the next robot command, the first refill, fails
    order = floor.order("SHAFT-B", PALLET + 2)

    action = floor.open_action("ACTION_FAILED")
    failed = floor.row("SELECT * FROM task WHERE status = 'FAILED'")
    assert (failed.kind, failed.error_code) == ("DOCK_TO_BUFFER", "PLC_ERROR")
    assert floor.answer(action, answer).status_code == 200

    done = floor.finished_exactly(order["id"], PALLET + 2)
    scrapped = 1 if answer == "SCRAP" else 0
    assert (done.completed_qty, done.scrapped_qty) == (PALLET + 2 - scrapped, scrapped)
    assert floor.rows("SELECT kind FROM manual_action") == [("ACTION_FAILED",)]  # the one question
    # the count may be high (a reading that still held pieces a refill was taking), never low
    plc = floor.hardware.plc_state()
    assert floor.row("SELECT pieces_waiting FROM dock").pieces_waiting >= plc["dock"]["pieces"]
