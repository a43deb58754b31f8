"""A fault the machine's PLC reports: FAULT (nothing is scheduled onto it, its
time counts against availability) with an alarm, and back to IDLE when the PLC
says it is clear, unless an operator's manual action still holds the machine."""

from __future__ import annotations


def _states(harness, equipment_id):
    return [e["payload"]["state"] for _, frames in harness.published for e in frames
            if e["type"] == "MachineStateChanged" and e["payload"]["equipmentId"] == equipment_id]


def test_a_reported_fault_holds_the_machine_until_the_plc_clears_it(harness):
    harness.ok("MachineFault", {"machineId": "MC1", "fault": 6, "observedAt": "2026-12-01T10:00:00+00:00"})
    assert harness.row("SELECT status FROM equipment WHERE id = 'MC1'").status == "FAULT"
    (alarm,) = harness.alarms("EQUIPMENT_FAULT")
    assert (alarm.status, alarm.equipment_id, alarm.message) == ("RAISED", "MC1", "MC1 reports fault 6")
    assert _states(harness, "MC1") == ["FAULT"]
    harness.ok("MachineFault", {"machineId": "MC1", "fault": 7})  # another code: one alarm still
    assert len(harness.alarms("EQUIPMENT_FAULT")) == 1

    harness.ok("MachineFault", {"machineId": "MC1"})  # clear
    assert harness.row("SELECT status FROM equipment WHERE id = 'MC1'").status == "IDLE"
    assert harness.alarms("EQUIPMENT_FAULT")[0].status == "CLEARED"
    assert harness.alarms("EQUIPMENT_FAULT")[0].cleared_by == "plc"
    assert _states(harness, "MC1") == ["FAULT", "IDLE"]


def test_an_operator_decision_still_open_keeps_the_fault_after_the_plc_clears(harness):
    from tests.line_controller.scripted import StartMachine

    _, (job,) = harness.started_order(quantity=1)
    harness.on_equipment(job, "MC1", 1, buffer_slot=1, start=False)
    out = harness.fail(harness.act(StartMachine("MC1")), code="MACHINE_FAULT", type_="MachineStartFailed")
    assert out.status == "HANDLED"
    (question,) = harness.manual_actions("EQUIPMENT_FAULT")  # RETRY / SCRAP, on MC1
    harness.ok("MachineFault", {"machineId": "MC1", "fault": 6})
    harness.ok("MachineFault", {"machineId": "MC1"})
    assert harness.row("SELECT status FROM equipment WHERE id = 'MC1'").status == "FAULT"
    assert harness.alarms("EQUIPMENT_FAULT")[0].status == "CLEARED"
    harness.ok("ResolveManualAction", {"manualActionId": question.id, "resolution": "RETRY"})
    assert harness.row("SELECT status FROM equipment WHERE id = 'MC1'").status == "IDLE"


def test_a_clear_signal_leaves_a_fault_it_did_not_raise(harness):
    with harness.engine.begin() as conn:  # as a failed machine start leaves it
        from sqlalchemy import text
        conn.execute(text("UPDATE equipment SET status = 'FAULT' WHERE id = 'MC2'"))
    harness.ok("MachineFault", {"machineId": "MC2"})
    assert harness.row("SELECT status FROM equipment WHERE id = 'MC2'").status == "FAULT"


def test_bad_fault_signals_are_rejected(harness):
    assert harness.send("MachineFault", {"machineId": "NOPE", "fault": 1}).error["code"] == "NOT_FOUND"
    assert harness.send("MachineFault", {"machineId": "MC1", "fault": "x"}).error["code"] == "VALIDATION_ERROR"
    assert harness.row("SELECT status FROM equipment WHERE id = 'MC1'").status == "IDLE"
