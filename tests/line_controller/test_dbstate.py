"""DBState on real PostgreSQL: conditional updates, cross-table transactions,
exactly-once terminal counting under repeated and concurrent delivery."""

import eventlet
import pytest
from sqlalchemy import text

from services.line_controller.dbstate import ConditionFailed, DBState
from tests.support.waiting import wait_for


@pytest.fixture
def order_with_jobs(harness):
    return harness.started_order(quantity=3)


def _count(engine, sql, **p):
    with engine.connect() as c:
        return c.execute(text(sql), p).scalar()


def test_a_condition_that_does_not_hold_changes_nothing(engine, order_with_jobs):
    _, jobs = order_with_jobs
    with engine.begin() as conn:
        db = DBState(conn)
        with pytest.raises(ConditionFailed):
            db.claim_job_for_action(jobs[0], "QUEUED", "MOVING")  # it is PENDING
        assert db.events == []
    assert _count(engine, "SELECT status FROM job WHERE id = :id", id=jobs[0]) == "PENDING"


def test_every_job_change_increments_its_version(engine, order_with_jobs):
    _, jobs = order_with_jobs
    v0 = _count(engine, "SELECT version FROM job WHERE id = :id", id=jobs[0])
    with engine.begin() as conn:
        db = DBState(conn)
        db.claim_job_for_action(jobs[0], "PENDING", "MOVING", "ON_ROBOT", None, temp_slot_no=1)
        db.move_job_to_buffer(jobs[0], 1)
    assert _count(engine, "SELECT version FROM job WHERE id = :id", id=jobs[0]) == v0 + 2


def test_job_and_slot_change_in_one_transaction_or_not_at_all(engine, order_with_jobs):
    _, jobs = order_with_jobs
    with engine.begin() as conn:
        db = DBState(conn)
        db.claim_job_for_action(jobs[0], "PENDING", "MOVING", "ON_ROBOT", None, temp_slot_no=1)
        db.claim_job_for_action(jobs[1], "PENDING", "MOVING", "ON_ROBOT", None, temp_slot_no=2)
        db.move_job_to_equipment(jobs[0], "ON_ROBOT", "MC1", 1)
    with pytest.raises(ConditionFailed):
        with engine.begin() as conn:
            DBState(conn).move_job_to_equipment(jobs[1], "ON_ROBOT", "MC1", 1)  # slot taken
    assert _count(engine, "SELECT position_type FROM job WHERE id = :id", id=jobs[1]) == "ON_ROBOT"
    assert _count(engine, "SELECT current_job_id FROM equipment_slot WHERE equipment_id='MC1' AND slot_no=1") == jobs[0]
    # The slot's CHECK: a non-empty slot always names its job.
    with pytest.raises(Exception, match="job_iff_not_empty"):
        with engine.begin() as conn:
            DBState(conn).set_equipment_slot("MC2", 1, "EMPTY", "OCCUPIED", None)


def test_a_buffer_slot_holds_one_live_job(engine, order_with_jobs):
    _, jobs = order_with_jobs
    with engine.begin() as conn:
        db = DBState(conn)
        for j, slot in ((jobs[0], 4), (jobs[1], 5)):
            db.claim_job_for_action(j, "PENDING", "MOVING", "ON_ROBOT", None, temp_slot_no=slot)
            db.move_job_to_buffer(j, slot)
        assert db.buffer_occupancy() == {4: jobs[0], 5: jobs[1]}
        with pytest.raises(ConditionFailed):
            db.move_job_to_buffer(jobs[1], 4)


def test_finishing_twice_counts_once(engine, order_with_jobs):
    oid, jobs = order_with_jobs
    with engine.begin() as conn:
        DBState(conn).finish_job(jobs[0], "COMPLETED")
    for terminal in ("COMPLETED", "SCRAPPED"):
        with pytest.raises(ConditionFailed):
            with engine.begin() as conn:
                DBState(conn).finish_job(jobs[0], terminal)
    row = _count(engine, "SELECT completed_qty || '/' || scrapped_qty FROM work_order WHERE id = :id", id=oid)
    assert row == "1/0"
    assert _count(engine, "SELECT temp_slot_no IS NULL AND position_type = 'OUT' FROM job WHERE id = :id",
                  id=jobs[0])


def test_concurrent_finishes_count_once(engine, order_with_jobs):
    oid, jobs = order_with_jobs
    first = engine.connect()
    tx = first.begin()
    DBState(first).finish_job(jobs[1], "SCRAPPED")  # holds the row lock, not committed yet

    def second():
        try:
            with engine.begin() as conn:
                DBState(conn).finish_job(jobs[1], "SCRAPPED")
            return "counted"
        except ConditionFailed:
            return "refused"

    racer = eventlet.spawn(second)
    wait_for(lambda: _count(engine, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                    "AND datname = current_database()") >= 1, timeout=20,
             message="the second finish to wait on the row lock")
    tx.commit()
    first.close()
    assert racer.wait() == "refused"
    assert _count(engine, "SELECT scrapped_qty FROM work_order WHERE id = :id", id=oid) == 1


def test_the_last_piece_completes_the_order(engine, order_with_jobs):
    oid, jobs = order_with_jobs
    with engine.begin() as conn:
        db = DBState(conn)
        db.finish_job(jobs[0], "COMPLETED")
        db.finish_job(jobs[1], "SCRAPPED")
        assert db.work_order(oid).status == "RUNNING"
        db.finish_job(jobs[2], "COMPLETED")
        order = db.work_order(oid)
        assert (order.status, order.completed_qty, order.scrapped_qty) == ("COMPLETED", 2, 1)
        assert [t for t, _ in db.events].count("WorkOrderCompleted") == 1
