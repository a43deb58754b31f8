"""Each of the seed's start-up consistency checks finds its case, and a
consistent state yields nothing."""

from services.line_controller import consistency_checks as r
from services.line_controller.consistency_checks import (
    JobRow,
    SlotRow,
    TaskRow,
    find_inconsistencies,
)
from shared.wire import camel_facts

PLC_IDLE = {"connected": True, "equipment": [
    {"id": "MC1", "running": False, "fault": False, "slots": [{"slotNo": 1, "done": False}]},
]}
PLC_RUNNING = {"connected": True, "equipment": [
    {"id": "MC1", "running": True, "fault": False, "slots": [{"slotNo": 1, "done": False}]},
]}


def kinds(found):
    return sorted(i.kind for i in found)


def test_a_consistent_line_has_no_inconsistency():
    jobs = [JobRow(1, "PROCESSING", "ON_EQUIPMENT", "MC1:1", 3), JobRow(2, "QUEUED", "ON_BUFFER", "4", 4)]
    slots = [SlotRow("MC1", 1, "OCCUPIED", 1), SlotRow("MC1", 2, "EMPTY", None)]
    assert find_inconsistencies(jobs, slots, [], PLC_RUNNING, 8) == []


def test_job_on_equipment_but_slot_disagrees():
    jobs = [JobRow(1, "WAITING_UNLOAD", "ON_EQUIPMENT", "MC1:1", 3)]
    slots = [SlotRow("MC1", 1, "EMPTY", None)]
    found = find_inconsistencies(jobs, slots, [], PLC_IDLE, 8)
    assert kinds(found) == [r.SLOT_MISMATCH]
    assert found[0].job_ids == (1,)
    assert "PIECE_REMOVED" in found[0].choices
    # What fills the text, for the page to say it in its reader's language.
    assert found[0].facts == {"case": "JOB_SLOT_DIFFERS", "job_id": 1, "position_ref_id": "MC1:1",
                              "slot_status": "EMPTY", "slot_job_id": None}


def test_slot_holds_a_job_recorded_elsewhere():
    jobs = [JobRow(1, "QUEUED", "ON_BUFFER", "3", 3)]
    slots = [SlotRow("MC1", 1, "DONE", 1)]
    found = find_inconsistencies(jobs, slots, [], PLC_IDLE, 8)
    assert kinds(found) == [r.SLOT_MISMATCH]
    assert found[0].facts == {"case": "SLOT_JOB_ELSEWHERE", "equipment_id": "MC1", "slot_no": 1, "slot_job_id": 1,
                              "position_type": "ON_BUFFER", "position_ref_id": "3"}


def test_two_live_jobs_in_one_buffer_slot_and_an_out_of_range_slot():
    jobs = [JobRow(1, "QUEUED", "ON_BUFFER", "2", 2), JobRow(2, "QUEUED", "ON_BUFFER", "2", 2),
            JobRow(3, "QUEUED", "ON_BUFFER", "9", 9), JobRow(4, "COMPLETED", "OUT", None, 2)]
    found = find_inconsistencies(jobs, [], [], PLC_IDLE, 8)
    assert kinds(found) == [r.BUFFER_SLOT_OUT_OF_RANGE, r.DUPLICATE_BUFFER_SLOT]
    dup = next(i for i in found if i.kind == r.DUPLICATE_BUFFER_SLOT)
    assert dup.job_ids == (1, 2)
    assert dup.facts == {"job_ids": [1, 2], "buffer_slot": 2}
    out = next(i for i in found if i.kind == r.BUFFER_SLOT_OUT_OF_RANGE)
    assert out.facts == {"job_id": 3, "buffer_slot": 9, "buffer_slots": 8}


def test_running_tasks_have_an_unknown_outcome():
    tasks = [TaskRow(7, "LOAD", "RUNNING", 1, "MC1"), TaskRow(8, "LOAD", "SUCCEEDED", 1, "MC1")]
    found = find_inconsistencies([], [], tasks, PLC_IDLE, 8)
    assert kinds(found) == [r.TASK_OUTCOME_UNKNOWN]
    assert found[0].task_id == 7
    assert found[0].facts == {"task_id": 7, "task_kind": "LOAD", "job_id": 1, "equipment_id": "MC1"}


def test_db_says_running_plc_shows_nothing_and_the_reverse():
    jobs = [JobRow(1, "PROCESSING", "ON_EQUIPMENT", "MC1:1", 3)]
    slots = [SlotRow("MC1", 1, "OCCUPIED", 1)]
    assert kinds(find_inconsistencies(jobs, slots, [], PLC_IDLE, 8)) == [r.MACHINE_IDLE_BUT_DB_RUNNING]
    assert kinds(find_inconsistencies([], [SlotRow("MC1", 1, "EMPTY", None)], [], PLC_RUNNING, 8)) == [
        r.MACHINE_RUNNING_BUT_DB_IDLE
    ]


def test_machine_that_finished_while_we_were_down_is_consistent():
    jobs = [JobRow(1, "PROCESSING", "ON_EQUIPMENT", "MC1:1", 3)]
    slots = [SlotRow("MC1", 1, "OCCUPIED", 1)]
    plc = {"connected": True, "equipment": [
        {"id": "MC1", "running": False, "slots": [{"slotNo": 1, "done": True}]}]}
    assert find_inconsistencies(jobs, slots, [], plc, 8) == []


def test_unreachable_plc_puts_processing_jobs_before_an_operator():
    jobs = [JobRow(1, "PROCESSING", "ON_EQUIPMENT", "MC1:1", 3)]
    slots = [SlotRow("MC1", 1, "OCCUPIED", 1)]
    assert kinds(find_inconsistencies(jobs, slots, [], None, 8)) == [r.PLC_UNREACHABLE]


def test_facts_are_in_the_apis_camel_case_and_do_not_identify_a_finding():
    assert camel_facts({"job_ids": [1], "slot_no": 2, "jobs": [{"job_id": 5, "slot_no": 1}], "case": "X"}) == \
        {"jobIds": [1], "slotNo": 2, "jobs": [{"jobId": 5, "slotNo": 1}], "case": "X"}
    one = r.Inconsistency(r.PLC_UNREACHABLE, "text", facts={"job_ids": [1]})
    assert one == r.Inconsistency(r.PLC_UNREACHABLE, "text", facts={"job_ids": [2]})
