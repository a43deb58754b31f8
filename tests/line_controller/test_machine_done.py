"""Every MachineDone branch of the seed."""


def _slots(h, equipment_id):
    return {r.slot_no: (r.status, r.current_job_id)
            for r in h.rows("SELECT * FROM equipment_slot WHERE equipment_id = :e", e=equipment_id)}


def test_batch_equipment_marks_every_occupied_slot_done(harness):
    _, jobs = harness.started_order(product="BRACKET-A", quantity=3)
    harness.on_equipment(jobs[0], "WASH1", 1, 1, start=False)
    harness.on_equipment(jobs[1], "WASH1", 3, 2, start=False)
    harness.start("WASH1")  # one batch
    harness.on_buffer(jobs[2], 3)
    harness.ok("MachineDone", {"machineId": "WASH1", "slotNo": 3})  # slotNo means nothing here
    assert _slots(harness, "WASH1") == {1: ("DONE", jobs[0]), 2: ("EMPTY", None), 3: ("DONE", jobs[1]),
                                        4: ("EMPTY", None)}
    assert [harness.job(j).status for j in jobs] == ["WAITING_UNLOAD", "WAITING_UNLOAD", "QUEUED"]


def test_single_slot_equipment_ignores_a_missing_slot_no(harness):
    _, jobs = harness.started_order(quantity=1)
    harness.on_equipment(jobs[0], "INSP1", 1, 1)
    harness.ok("MachineDone", {"machineId": "INSP1"})
    assert _slots(harness, "INSP1") == {1: ("DONE", jobs[0])}
    assert harness.job(jobs[0]).status == "WAITING_UNLOAD"


def test_multi_slot_equipment_uses_the_slot_no(harness):
    _, jobs = harness.started_order(quantity=2)
    harness.on_equipment(jobs[0], "MC1", 1, 1)
    harness.on_equipment(jobs[1], "MC1", 2, 2)
    harness.ok("MachineDone", {"machineId": "MC1", "slotNo": 2})
    assert _slots(harness, "MC1") == {1: ("OCCUPIED", jobs[0]), 2: ("DONE", jobs[1])}


def test_multi_slot_without_a_usable_slot_no_takes_the_earliest_occupied(harness):
    _, jobs = harness.started_order(quantity=2)
    harness.on_equipment(jobs[0], "MC2", 2, 1)  # loaded first, into slot 2
    harness.on_equipment(jobs[1], "MC2", 1, 2)
    harness.ok("MachineDone", {"machineId": "MC2"})
    assert _slots(harness, "MC2") == {1: ("OCCUPIED", jobs[1]), 2: ("DONE", jobs[0])}
    harness.ok("MachineDone", {"machineId": "MC2", "slotNo": 1})  # <= 1 also means FIFO
    assert _slots(harness, "MC2") == {1: ("DONE", jobs[1]), 2: ("DONE", jobs[0])}


def test_a_job_id_that_does_not_match_changes_nothing_and_asks_an_operator(harness):
    _, jobs = harness.started_order(quantity=2)
    harness.on_equipment(jobs[0], "MC1", 2, 1)
    harness.ok("MachineDone", {"machineId": "MC1", "slotNo": 2, "jobId": jobs[1]})
    assert _slots(harness, "MC1")[2] == ("OCCUPIED", jobs[0])
    assert harness.job(jobs[0]).status == "PROCESSING"
    (alarm,) = harness.alarms("SIGNAL_JOB_MISMATCH")
    (action,) = harness.manual_actions("SIGNAL_MISMATCH")
    assert (action.alarm_id, action.equipment_id, action.status) == (alarm.id, "MC1", "OPEN")
    # The operator decides the slot's own job is done.
    harness.ok("ResolveManualAction", {"manualActionId": action.id, "resolution": "MARK_DONE"})
    assert _slots(harness, "MC1")[2] == ("DONE", jobs[0])
    assert harness.alarms("SIGNAL_JOB_MISMATCH")[0].status == "CLEARED"


def test_batch_job_id_mismatch_changes_nothing(harness):
    _, jobs = harness.started_order(product="BRACKET-A", quantity=2)
    harness.on_equipment(jobs[0], "WASH1", 1, 1)
    harness.ok("MachineDone", {"machineId": "WASH1", "jobId": jobs[1]})
    assert _slots(harness, "WASH1")[1] == ("OCCUPIED", jobs[0])
    assert len(harness.manual_actions("SIGNAL_MISMATCH")) == 1


def test_done_with_nothing_loaded_raises_a_warning_only(harness):
    harness.ok("MachineDone", {"machineId": "MC1", "slotNo": 2})
    (alarm,) = harness.alarms("SIGNAL_UNEXPECTED")
    assert alarm.severity == "WARNING"
    assert set(_slots(harness, "MC1").values()) == {("EMPTY", None)}


def test_unknown_machine_or_slot_is_rejected(harness):
    assert harness.send("MachineDone", {"machineId": "NOPE"}).error["code"] == "NOT_FOUND"
    assert harness.send("MachineDone", {"machineId": "MC1", "slotNo": 9}).error["code"] == "VALIDATION_ERROR"
    assert harness.send("MachineDone", {}).error["code"] == "VALIDATION_ERROR"
