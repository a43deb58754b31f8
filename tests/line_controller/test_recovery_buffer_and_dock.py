"""The start-up checks compare the buffer slots and the dock with the PLC (issue 37),
after a restore (the loop starts on a database older than the cell) and after a
PLC restart (the reconnect's picture). The cell is a PLC written from
deploy/REGISTER_MAP.md alone (tests/support/register_map_plc.py), moved by a host
over Modbus; the loop reads it as the hardware service does (``read_state``).
Each case: a piece the records have on a slot whose sensor is empty, a sensor
showing a piece no job holds, and fewer pieces at the dock than recorded."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy.orm import Session

from services.hardware.device.modbus import read_state
from services.hardware.plc import CMD_BUFFER_TO_DOCK as BUFFER_TO_DOCK
from services.hardware.plc import PlcUnavailable
from services.line_controller import consistency_checks as r
from services.line_controller.scheduler.build_state import build_system_state
from tests.line_controller.scripted import Refill
from tests.line_controller.test_recovery import restart  # noqa: F401 (fixture)
from tests.support.plc_host import PlcHost
from tests.support.ports import free_port
from tests.support.register_map_plc import RegisterMapPlc
from tests.support.waiting import wait_for

PALLET = 8
FINDINGS = (r.BUFFER_PIECE_MISSING, r.BUFFER_PIECE_UNKNOWN, r.DOCK_COUNT_MISMATCH)


@pytest.fixture
def cell(layout):
    """The independent PLC (a pallet of 8 at the dock, no other) and a host moving its robot."""
    plc = RegisterMapPlc(layout, "127.0.0.1", free_port(), speed=1000.0, pallet_size=PALLET,
                         pallet_seconds=3600.0).start()
    host = PlcHost(layout, plc.host, plc.port)
    yield plc, host
    host.close()
    plc.stop()


def picture(host, layout):
    """What the PLC holds now, in the hardware's ``plc_state()`` shape (once it answers)."""
    def read():
        try:
            return read_state(host.link, layout)
        except PlcUnavailable:
            return None
    return wait_for(read, 10, 0.05, "the PLC answering")


def two_pieces_on_the_buffer(harness, host, layout):
    """Jobs 1 and 2 of a started order refilled to buffer slots 1 and 2, in the
    records and in the cell; the records then read the PLC once (nothing to ask)."""
    _oid, jobs = harness.started_order(quantity=4)
    for job_id, slot in zip(jobs, (1, 2), strict=False):
        host.ok(host.dock_to_buffer(slot))
        harness.on_buffer(job_id, slot)
    assert harness.ok("PlcConnection", {"connected": True, "plcState": picture(host, layout)}) == \
        {"inconsistencies": 0, "manualActionIds": []}
    assert harness.row("SELECT pieces_waiting FROM dock").pieces_waiting == PALLET - 2
    return jobs


def the_cell_moves_on(host, job_id):
    """What the records do not see: job 2's piece goes onto MC1, and a new piece
    from the dock onto buffer slot 3."""
    host.ok(host.buffer_to_machine(2, "MC1", 1, job_id))
    host.ok(host.dock_to_buffer(3))


def findings(h, jobs):
    actions = {a.kind: a for a in h.manual_actions() if a.status == "OPEN"}
    assert set(actions) == set(FINDINGS), sorted(actions)
    missing, unknown, dock = (actions[k] for k in FINDINGS)
    assert (missing.job_id, missing.context["tempSlotNo"], missing.choices) == \
        (jobs[1], 2, ["CONFIRM", "PIECE_REMOVED", "SCRAP"])
    assert h.job(jobs[1]).status == "SUSPENDED" and h.job(jobs[0]).status == "QUEUED"
    assert (unknown.context["bufferSlot"], unknown.choices, unknown.job_id) == (3, ["CONFIRM"], None)
    assert (dock.facts["plcPieces"], dock.facts["dbPieces"], dock.choices) == \
        (PALLET - 3, PALLET - 2, ["CONFIRM"])
    assert h.row("SELECT pieces_waiting FROM dock").pieces_waiting == PALLET - 3  # it follows the PLC
    return missing, unknown, dock


def free_slots(h, layout):
    """The buffer slots the scheduler may refill, in its snapshot of the records."""
    with Session(h.engine) as session:
        return build_system_state(session, layout, datetime.now(UTC)).free_buffer_slots


def test_after_a_restore_the_buffer_and_the_dock_are_compared_with_the_cell(harness, restart, cell,  # noqa: F811
                                                                          layout):
    plc, host = cell
    jobs = two_pieces_on_the_buffer(harness, host, layout)
    # The backup is taken here; the cell goes on; the restored database is the backup's.
    the_cell_moves_on(host, jobs[1])
    h = restart(lambda: picture(host, layout))
    assert h.recover()["inconsistencies"] == 3
    missing, unknown, dock = findings(h, jobs)

    assert free_slots(h, layout) == (4, 5, 6, 7, 8), "nothing is put on slot 3 while its piece is in question"
    again = restart(lambda: picture(host, layout))  # a second restart does not ask again
    assert again.recover()["manualActionIds"] == []

    assert again.resolve(missing, "PIECE_REMOVED").status == "HANDLED"
    assert again.job(jobs[1]).status == "SCRAPPED"
    host.ok(host.send(BUFFER_TO_DOCK, (layout.plc.buffer_station, 3), (layout.plc.dock_station, 0)))
    assert again.ok("ConfirmRecovery", {})["confirmed"] == [unknown.id, dock.id]
    assert restart(lambda: picture(host, layout)).recover()["inconsistencies"] == 0


def test_a_plc_restart_compares_the_buffer_and_the_dock_with_the_records(harness, cell, layout):
    plc, host = cell
    jobs = two_pieces_on_the_buffer(harness, host, layout)
    harness.ok("PlcConnection", {"connected": False, "error": "connection lost"})
    the_cell_moves_on(host, jobs[1])  # while the link is down
    plc.restart(0.2)
    result = harness.ok("PlcConnection", {"connected": True, "plcState": picture(host, layout)})
    assert result["inconsistencies"] == 3
    missing, unknown, _dock = findings(harness, jobs)

    harness.ok("ResolveManualAction", {"manualActionId": unknown.id, "resolution": "CONFIRM"})
    assert free_slots(harness, layout)[0] == 3, "confirmed: the slot is free again"
    harness.ok("ResolveManualAction", {"manualActionId": missing.id, "resolution": "CONFIRM"})
    job = harness.job(jobs[1])
    assert (job.status, job.position_type, job.temp_slot_no) == ("QUEUED", "ON_BUFFER", 2)


def test_a_dock_count_may_be_high_by_the_refills_it_may_still_hold():
    # The reading (8) still counted the piece of a refill claimed before it; it has left since.
    assert r.dock_count_disagrees(r.DockRecord(8, may_have_left=1), 7) == []
    assert r.dock_count_disagrees(r.DockRecord(8), 12) == []  # a pallet came: no question
    assert r.dock_count_disagrees(r.DockRecord(None), 0) == []  # never read: nothing to compare
    (finding,) = r.dock_count_disagrees(r.DockRecord(8, may_have_left=1), 5)
    assert finding.facts == {"plc_pieces": 5, "db_pieces": 8, "missing": 2}


def test_a_reading_taken_while_a_refill_was_under_way_is_no_disagreement(harness, layout):
    _oid, jobs = harness.started_order(quantity=2)
    refill = harness.act(Refill(jobs[0], 1))
    # The PLC counts 8 while the robot is on its way to the dock: the record is 8 again
    harness.ok("PalletArrived", {"count": PALLET, "observedAt": datetime.now(UTC).isoformat()})
    assert harness.succeed(refill).status == "HANDLED"  # ... and the piece has left since
    cell = {"connected": True, "observedAt": datetime.now(UTC).isoformat(), "equipment": [],
            "buffer": [{"slotNo": n, "occupied": n == 1} for n in range(1, 9)], "dock": {"pieces": PALLET - 1}}
    assert harness.ok("PlcConnection", {"connected": True, "plcState": cell})["inconsistencies"] == 0
    assert harness.row("SELECT pieces_waiting FROM dock").pieces_waiting == PALLET - 1


def test_a_slot_whose_piece_is_on_its_way_or_held_elsewhere_is_not_compared():
    sensors = {"connected": True, "equipment": [],
               "buffer": [{"slotNo": n, "occupied": n in (2, 4)} for n in range(1, 9)]}
    jobs = [r.JobRow(1, "QUEUED", "ON_BUFFER", "1", 1),  # a scan on its way there: slot 1 busy
            r.JobRow(2, "MOVING", "ON_ROBOT", None, 2),  # a refill not reported yet
            r.JobRow(3, "PROCESSING", "ON_EQUIPMENT", "MC1:1", 3)]  # its slot waits for it, empty
    slots = [r.SlotRow("MC1", 1, "OCCUPIED", 3)]
    # slot 4: a finished piece's take-out (its job terminal) is under way
    assert r.find_inconsistencies(jobs, slots, [], sensors, 8, equipment_running=[], buffer_busy={1, 4}) == []
    found = r.find_inconsistencies(jobs, slots, [], sensors, 8, equipment_running=[])
    assert sorted((i.kind, i.context.get("tempSlotNo") or i.context.get("bufferSlot")) for i in found) == [
        (r.BUFFER_PIECE_MISSING, 1), (r.BUFFER_PIECE_UNKNOWN, 4)]
