"""A refill the robot fails (a gripper fault, PLC error 3: nothing moved) is
refilled once the operator has answered, on the real stack and each field
protocol (issue 41): the dock holds one pallet of 4 and the order needs more, so
a piece lost from the loop's dock count would wait for a pallet the PLC has no
reason to bring. Each answer once, one per protocol: RETRY over Modbus, SCRAP
over OPC UA (what each answer does to the count is proven for every case, timeout
and e-stop included, by tests/line_controller/test_refill_failures.py)."""

from __future__ import annotations

import pytest

from tests.flow.stack import simulator_cell
from tests.support.waiting import wait_for

PALLET = 4


@pytest.fixture
def floor(request, floor_on, layout):
    """The stack on the simulator (``request.param``: its protocol) with pallets of 4."""
    with floor_on(simulator_cell(request.param, layout, pallet_size=PALLET)) as floor:
        yield floor


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
