"""Faults as a real floor has them (PRODUCT.md, "Faults on the floor"), on the
real stack: a PLC (Modbus or OPC UA), the hardware service, the line_controller and the
gateway, the operator answering over HTTP as the page does. Each case ends
with the order complete, exact counts, and the database and the PLC agreeing
that the cell is empty.

The cases run on both field protocols (but two, below): over Modbus on ``RegisterMapPlc``, written
from deploy/REGISTER_MAP.md alone, so the map, not the simulator, is what the host
relies on; over OPC UA on this project's simulator (faults injected through its
SimControl methods). The simulator over Modbus (its control registers, as any Modbus
tool would) runs the one case the independent PLC cannot (a dropped connection): the
host's Modbus path is the same whichever PLC answers, and the simulator's own faults
are proven on both protocols by tests/hardware/test_floor_faults.py.

What the line_controller makes of a fault it has been told about (a stopped batch
washed again, a machining centre's pieces scrapped and counted once) does not depend
on the protocol that told it: those two cases run once, on the independent PLC
(Modbus). The fault's way up from an OPC UA PLC to the question, and the answer's
way back, are proven by the cases that stay on both (the fault mid-cycle, the
overdue cycle's abort, the emergency stop, the restart)."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.flow.stack import SPEED, simulator_cell
from tests.support.ports import free_port
from tests.support.register_map_plc import RegisterMapPlc
from tests.support.waiting import wait_for


def _start_cell(kind, layout):
    if kind in ("simulator", "simulator-opcua"):
        return simulator_cell("opcua" if kind == "simulator-opcua" else "modbus", layout)
    # The PLC written from the map injects its faults under the same names as SimulatorCell.
    return RegisterMapPlc(layout, "127.0.0.1", free_port(), speed=SPEED, pallet_size=500, pallet_seconds=1.0).start()


@pytest.fixture
def cycle_overdue_factor():
    """INSP1's 4 s cycle (40 ms here) is overdue after 8 s without progress: no cycle
    a test holds is asked about before the test acts, however loaded the machine.
    The overdue case parametrizes a shorter bound."""
    return 2.0


@pytest.fixture(params=["independent", "simulator-opcua"])
def floor(request, floor_on, layout, monkeypatch, cycle_overdue_factor):
    monkeypatch.setenv("LINECTL_CYCLE_OVERDUE_FACTOR", str(cycle_overdue_factor))
    with floor_on(_start_cell(request.param, layout)) as floor:
        yield floor


def assert_in_history(floor, job_ids, action, resolution, by, equipment_id):
    """Each piece's record (GET /api/pieces/{serial}) holds the answer, by the person
    signed in, and its cycle the fault stopped as an ABORTED step on that machine."""
    for job_id in job_ids:
        piece = floor.piece(job_id)
        answers = [(a["manualActionId"], a["kind"], a["resolution"], a["by"]) for a in piece["answers"]]
        assert (action["id"], "MACHINE_FAULT_DURING_CYCLE", resolution, by) in answers, piece
        stopped = [s for s in piece["steps"] if s["equipmentId"] == equipment_id and s["result"] == "ABORTED"]
        assert len(stopped) == 1, piece["steps"]
        if resolution == "SCRAP":
            assert piece["status"] == "SCRAPPED" and piece["steps"][-1] == stopped[0]
        else:  # the step ran again (on that machine, or another of its kind) and the piece went on
            again = [s for s in piece["steps"] if s["stepIndex"] == stopped[0]["stepIndex"] and s != stopped[0]]
            assert piece["status"] == "COMPLETED" and again and again[0]["startedAt"] >= stopped[0]["endedAt"]


def test_a_fault_mid_cycle_asks_once_refuses_a_restart_until_clear_then_restarts(floor):
    floor.sign_in("erika")
    order = floor.order("SHAFT-B", 3)
    floor.processing_on("INSP1")  # a single-slot station mid-inspection
    floor.cell.fault("INSP1")
    action = floor.open_action("MACHINE_FAULT_DURING_CYCLE")
    assert action["equipmentId"] == "INSP1"
    assert action["choices"] == ["RESTART_CYCLE", "RETURN_TO_BUFFER", "SCRAP"]

    refused = floor.answer(action, "RESTART_CYCLE")
    assert refused.status_code == 409 and refused.get_json()["error"]["code"] == "EQUIPMENT_FAULTED"
    assert floor.equipment_status("INSP1") == "FAULT"
    floor.cell.clear()
    wait_for(lambda: floor.equipment_status("INSP1") == "IDLE", 10, 0.05, "INSP1 IDLE after the clear")
    assert floor.row("SELECT count(*) AS n FROM job WHERE status = 'SUSPENDED'").n == 1  # nothing by itself

    assert floor.answer(action, "RESTART_CYCLE").status_code == 200
    done = floor.finished_exactly(order["id"], 3)
    assert (done.completed_qty, done.scrapped_qty) == (3, 0)
    cycles = floor.rows("SELECT aborted FROM machine_cycle WHERE equipment_id = 'INSP1'")
    assert Counter(c.aborted for c in cycles) == {False: 3, True: 1}, cycles  # the stopped one is void
    assert_in_history(floor, action_jobs(floor, action), action, "RESTART_CYCLE", "erika", "INSP1")


# Once (see the module's docstring): the batch's return is the line_controller's.
@pytest.mark.parametrize("floor", ["independent"], indirect=True)
def test_a_fault_stopping_a_full_batch_returns_the_pieces_to_do_the_wash_again(floor):
    floor.sign_in("farid")
    order = floor.order("BRACKET-A", 4)
    washing = floor.processing_on("WASH1")  # the batch as the scheduler filled it
    floor.cell.fault("WASH1")
    action = floor.open_action("MACHINE_FAULT_DURING_CYCLE")
    stopped = action_jobs(floor, action)
    assert action["equipmentId"] == "WASH1" and set(stopped) == set(washing)
    assert action["text"].count("job ") == len(stopped)
    assert floor.answer(action, "RETURN_TO_BUFFER").status_code == 200  # allowed while in fault
    floor.cell.clear()
    done = floor.finished_exactly(order["id"], 4)
    assert (done.completed_qty, done.scrapped_qty) == (4, 0)
    starts = floor.rows("SELECT params FROM task WHERE kind = 'START_MACHINE' AND equipment_id = 'WASH1' "
                        "AND status = 'SUCCEEDED'")
    # every piece washed once, and those of the stopped batch once more
    assert sum(len(t.params["jobs"]) for t in starts) == 4 + len(stopped)
    assert_in_history(floor, stopped, action, "RETURN_TO_BUFFER", "farid", "WASH1")


# Once (see the module's docstring): the scrap and its count are the line_controller's.
@pytest.mark.parametrize("floor", ["independent"], indirect=True)
def test_a_fault_on_a_machining_centre_scraps_its_pieces_counted_once(floor):
    floor.sign_in("grace")
    order = floor.order("SHAFT-B", 4)
    jobs = floor.processing_on("MC1")
    floor.cell.fault("MC1")
    action = floor.open_action("MACHINE_FAULT_DURING_CYCLE")
    scrapped = set(action_jobs(floor, action))
    assert set(jobs) <= scrapped
    assert floor.answer(action, "SCRAP").status_code == 200
    floor.cell.clear()
    floor.answer_robot_failures()
    done = floor.finished_exactly(order["id"], 4)
    assert (done.completed_qty, done.scrapped_qty) == (4 - len(scrapped), len(scrapped))
    assert_in_history(floor, scrapped, action, "SCRAP", "grace", "MC1")


def action_jobs(floor, action):
    row = floor.row("SELECT context FROM manual_action WHERE id = :id", id=action["id"])
    return row.context["jobIds"]


# The independent PLC drops its connections only by restarting (the restart case).
@pytest.mark.parametrize("floor", ["simulator", "simulator-opcua"], indirect=True)
def test_a_dropped_connection_asks_nobody_and_the_order_completes(floor):
    order = floor.order("SHAFT-B", 3)
    floor.processing_on("MC1")
    # Nothing on its way to the PLC when the link drops: every piece done or in MC1's
    # held cycle. (A command written as the link drops is rightly asked about: it may
    # have run. On a loaded machine the line was often still sending.)
    wait_for(lambda: floor.row(
        "SELECT count(*) AS n FROM job j LEFT JOIN equipment_slot s ON s.current_job_id = j.id"
        " WHERE j.work_order_id = :o AND j.status <> 'COMPLETED'"
        " AND NOT (j.status = 'PROCESSING' AND s.equipment_id = 'MC1')", o=order["id"]).n == 0,
        30, 0.05, "every piece done or in MC1's held cycle")
    floor.cell.drop(2.5)  # longer than the hardware's reconnect grace (1 s): NOT_SENT, put back
    # A drop asked over the wire happens once its answer is out: the clear waits until
    # the line has seen the link go down (cleared at once, the held cycle ended first,
    # and its take-out was sent as the link went down: rightly asked about).
    wait_for(lambda: floor.rows("SELECT id FROM alarm WHERE code = 'PLC_DISCONNECTED'"), 10, 0.05,
             "the PLC_DISCONNECTED alarm")
    floor.cell.clear()  # no longer held: the cycle ends while the link is down (or just after)
    done = floor.finished_exactly(order["id"], 3)
    assert (done.completed_qty, done.scrapped_qty) == (3, 0)
    assert floor.rows("SELECT kind FROM manual_action") == []  # no question
    # the drop is one PLC_DISCONNECTED, cleared (over OPC UA a connect attempt made while
    # the server was down may time out instead of being refused: a second, also cleared)
    statuses = [a.status for a in floor.rows("SELECT status FROM alarm")]
    assert statuses and set(statuses) == {"CLEARED"}, statuses
    assert floor.rows("SELECT DISTINCT code FROM alarm") == [("PLC_DISCONNECTED",)]


# Overdue after 2 s on INSP1, still 50 times its cycle here: the question comes without
# waiting out the loose default bound.
@pytest.mark.parametrize("cycle_overdue_factor", [0.5])
def test_a_cycle_that_never_ends_is_asked_about_and_its_answer_aborts_it(floor):
    order = floor.order("SHAFT-B", 2)
    floor.processing_on("INSP1")  # and it never ends
    action = floor.open_action("CYCLE_OVERDUE", timeout=30)
    assert floor.rows("SELECT id FROM alarm WHERE code = 'CYCLE_OVERDUE' AND status = 'RAISED'")
    assert floor.answer(action, "RESTART_CYCLE").status_code == 200
    floor.cell.clear()  # the hang is over: the restarted cycle ends
    done = floor.finished_exactly(order["id"], 2)
    assert (done.completed_qty, done.scrapped_qty) == (2, 0)
    aborts = floor.rows("SELECT status FROM task WHERE kind = 'ABORT_CYCLE'")
    assert [a.status for a in aborts] == ["SUCCEEDED"]


def test_an_emergency_stop_asks_one_question_per_stopped_machine_and_the_action_in_flight(floor):
    order = floor.order("SHAFT-B", 4)
    floor.processing_on("MC1")
    floor.wait_robot_busy()
    floor.cell.emergency_stop()
    action = floor.open_action("MACHINE_FAULT_DURING_CYCLE")
    wait_for(lambda: floor.rows("SELECT id FROM alarm WHERE code = 'ROBOT_FAULT' AND status = 'RAISED'"),
             10, 0.05, "the robot's fault alarm")
    # while stopped the host sends nothing new: no action fails into the stop
    asked = floor.rows("SELECT kind, equipment_id FROM manual_action ORDER BY id")
    floor.cell.clear()
    for question in floor.rows("SELECT id, kind FROM manual_action WHERE status = 'OPEN' ORDER BY id"):
        answer = "RESTART_CYCLE" if question.kind == "MACHINE_FAULT_DURING_CYCLE" else "RETRY"
        reply = floor.answer({"id": question.id}, answer)
        if reply.status_code == 409:  # the PLC's clear not seen yet
            wait_for(lambda q=question, a=answer: floor.answer({"id": q.id}, a).status_code == 200, 10, 0.1)
    done = floor.finished_exactly(order["id"], 4)
    assert (done.completed_qty, done.scrapped_qty) == (4, 0)
    kinds = Counter(r.kind for r in floor.rows("SELECT kind FROM manual_action"))
    stopped = {a.equipment_id for a in asked if a.kind == "MACHINE_FAULT_DURING_CYCLE"}
    assert "MC1" in stopped and action["equipmentId"] in stopped
    # one question per machine that had a cycle running, at most one for the robot's action
    assert kinds["MACHINE_FAULT_DURING_CYCLE"] == len(stopped)
    # ... plus the actions in flight: the robot's, and a machine start the PLC refused
    assert kinds["ACTION_FAILED"] <= 1 and kinds["EQUIPMENT_FAULT"] <= 1, kinds
    assert set(kinds) <= {"MACHINE_FAULT_DURING_CYCLE", "ACTION_FAILED", "EQUIPMENT_FAULT"}, kinds


def test_a_plc_restart_mid_cycle_is_checked_on_reconnect_and_the_order_completes(floor):
    order = floor.order("SHAFT-B", 3)
    floor.processing_on("MC1")
    floor.cell.restart(2.0)
    action = floor.open_action("RECOVERY_MACHINE_IDLE_BUT_DB_RUNNING")
    assert action["equipmentId"] == "MC1"
    # nothing goes onto MC1 from the moment it is in question until the operator has
    # said what happened to its cycle (work sent before, e.g. MC1's next slot loaded
    # or a start on its way back to the loop, is not the question's to hold)
    assert floor.rows("SELECT t.id FROM task t JOIN manual_action a ON a.id = :a"
                      " WHERE t.equipment_id = 'MC1' AND t.created_at >= a.created_at"
                      " AND t.kind IN ('BUFFER_TO_EQUIPMENT', 'SWAP', 'START_MACHINE')", a=action["id"]) == []
    assert floor.answer(action, "CONFIRM").status_code == 200  # not finished: run it again
    # The robot's action in flight, if the restart caught one, is asked about once the
    # PLC is back, maybe after this answer: the operator answers it when it comes.
    done = floor.finished_exactly(order["id"], 3, recovery=True)
    assert (done.completed_qty, done.scrapped_qty) == (3, 0)
