"""The event loop: ordering, replies, timeouts, durability, duplicates, stale results."""

from services.line_controller.loop import EventLoop
from services.line_controller.messages import new_message
from tests.line_controller.scripted import Load, Refill
from tests.support.waiting import wait_for


def _seqs(h):
    return [r.seq for r in h.rows("SELECT seq FROM event_log ORDER BY seq")]


def test_messages_are_handled_in_order_and_replied(harness):
    harness.loop.start()  # with its consumer
    pendings = [harness.loop.submit(new_message("CreateOrder", {"productId": "SHAFT-B", "quantity": 1,
                                                                "code": f"WO-{i}"}, actor="op"))
                for i in range(5)]
    outcomes = [p.wait(20) for p in pendings]
    assert [o.status for o in outcomes] == ["HANDLED"] * 5
    assert [o.result["code"] for o in outcomes] == [f"WO-{i}" for i in range(5)]
    ids = [o.result["id"] for o in outcomes]
    assert ids == sorted(ids)
    created = harness.rows("SELECT payload->>'code' AS code, tx_id FROM event_log "
                           "WHERE type = 'WorkOrderCreated' ORDER BY seq")
    assert [r.code for r in created] == [f"WO-{i}" for i in range(5)]
    assert [r.tx_id for r in created] == sorted({r.tx_id for r in created})


def test_event_log_is_gapless_and_published_per_transaction(harness):
    harness.started_order(quantity=3)
    harness.send("PauseOrder", {"workOrderId": 999})  # rejected: writes no event
    harness.ok("CreateOrder", {"productId": "SHAFT-B", "quantity": 1})
    seqs = _seqs(harness)
    assert seqs == list(range(1, len(seqs) + 1))
    published = [f["seq"] for _, frames in harness.published for f in frames]
    assert published == seqs
    for tx_id, frames in harness.published:
        assert {f["txId"] for f in frames} == {tx_id}


def test_wait_times_out_as_queued_and_the_command_still_runs(engine, layout):
    loop = EventLoop(engine, layout)  # not started: nothing consumes yet
    msg = new_message("CreateOrder", {"productId": "SHAFT-B", "quantity": 2}, actor="op")
    assert loop.persist(msg) is None
    pending = loop.submit(msg)
    assert pending.wait(0.05) is None  # → the RPC answers QUEUED
    loop.start()
    try:
        outcome = pending.wait(20)
        assert outcome.status == "HANDLED" and outcome.result["quantity"] == 2
    finally:
        loop.stop()


def test_a_persisted_command_survives_a_restart(engine, layout):
    crashed = EventLoop(engine, layout)
    msg = new_message("CreateOrder", {"productId": "SHAFT-B", "quantity": 4, "code": "SURVIVOR"}, actor="op")
    crashed.persist(msg)
    crashed.submit(msg)  # enqueued in memory only, then the process "dies"
    restarted = EventLoop(engine, layout)
    restarted.start()
    try:
        from sqlalchemy import text
        def handled():
            with engine.connect() as c:
                return c.execute(text("SELECT status FROM loop_message WHERE id = :id"),
                                 {"id": msg.id}).scalar() == "HANDLED"
        wait_for(handled, timeout=20)
        with engine.connect() as c:
            assert c.execute(text("SELECT count(*) FROM work_order WHERE code = 'SURVIVOR'")).scalar() == 1
    finally:
        restarted.stop()


def test_a_repeated_message_id_is_a_duplicate_and_changes_nothing(harness):
    oid, jobs = harness.started_order(quantity=1)
    req = harness.act(Refill(jobs[0], 1))
    first = harness.succeed(req)
    assert first.status == "HANDLED"
    before = (_seqs(harness), harness.job(jobs[0]))
    again = harness.loop.handle(new_message("RobotActionSucceeded",
                                            {"correlationId": str(req.task_id)}, id=first.message_id))
    assert again.status == "DUPLICATE"
    assert (_seqs(harness), harness.job(jobs[0])) == before
    assert harness.loop.status()["duplicatesTotal"] == 1


def test_a_repeated_command_id_returns_the_recorded_outcome(harness):
    first = harness.send("CreateOrder", {"productId": "SHAFT-B", "quantity": 1}, id="cmd-1")
    second = harness.send("CreateOrder", {"productId": "SHAFT-B", "quantity": 1}, id="cmd-1")
    assert second.status == "HANDLED" and second.result == first.result
    assert harness.row("SELECT count(*) AS n FROM work_order").n == 1


def test_worker_results_advance_the_job(harness):
    oid, jobs = harness.started_order(quantity=1)
    j = jobs[0]
    harness.succeed(harness.act(Refill(j, 5)))
    assert (harness.job(j).status, harness.job(j).temp_slot_no) == ("QUEUED", 5)
    req = harness.act(Load(j, "MC2", 1))
    assert harness.job(j).status == "MOVING"
    assert harness.row("SELECT status FROM task WHERE id = :id", id=req.task_id).status == "RUNNING"
    assert (req.rpc, req.kwargs["slot_no"], req.kwargs["equipment_id"]) == ("buffer_to_equipment", 5, "MC2")
    harness.succeed(req)
    job = harness.job(j)
    assert (job.status, job.position_type, job.position_ref_id, job.temp_slot_no) == \
        ("QUEUED", "ON_EQUIPMENT", "MC2:1", 5)  # loaded; the cycle starts with StartMachine
    assert (harness.slot("MC2", 1).status, harness.slot("MC2", 1).current_job_id) == ("OCCUPIED", j)
    assert harness.row("SELECT status FROM task WHERE id = :id", id=req.task_id).status == "SUCCEEDED"
    assert job.version > 3


def test_a_result_for_a_task_not_running_is_stale(harness):
    oid, jobs = harness.started_order(quantity=1)
    req = harness.act(Refill(jobs[0], 2))
    harness.ok("CancelOrder", {"workOrderId": oid})  # cancels the running task
    state = harness.job(jobs[0])
    late = harness.succeed(req)
    assert late.status == "STALE"
    assert harness.job(jobs[0]) == state
    assert harness.row("SELECT status FROM loop_message WHERE id = :id", id=late.message_id).status == "STALE"
    assert harness.row("SELECT count(*) AS n FROM event_log WHERE type = 'WorkerResultStale'").n == 1
    unknown = harness.send("ToolActionSucceeded", {"correlationId": "424242"})
    assert unknown.status == "STALE"


def test_bad_payloads_are_rejected_and_audited(harness):
    out = harness.send("CreateOrder", {"productId": "SHAFT-B", "quantity": 0})
    assert out.status == "REJECTED" and out.error["code"] == "VALIDATION_ERROR"
    assert "quantity" in out.error["message"]
    assert harness.row("SELECT count(*) AS n FROM work_order").n == 0
    audit = harness.row("SELECT * FROM audit_log")
    assert (audit.actor, audit.action, audit.outcome) == ("op1", "CreateOrder", "REJECTED")
    assert harness.send("StartOrder", {"workOrderId": 77}).error["code"] == "NOT_FOUND"


def test_equipment_rows_follow_the_layout(harness, layout):
    rows = harness.rows("SELECT id, batch, slot_count FROM equipment ORDER BY id")
    assert {(r.id, r.batch, r.slot_count) for r in rows} == {(e.id, e.batch, e.slots) for e in layout.equipment}
    assert harness.row("SELECT count(*) AS n FROM equipment_slot").n == sum(e.slots for e in layout.equipment)
