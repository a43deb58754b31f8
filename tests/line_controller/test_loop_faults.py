"""Faults at the loop's edges: a COMMIT whose answer is lost, a failing
scheduling round after a committed command. Each injects the fault at the
DBAPI boundary (the driver's commit) or in the scheduler, on a real database."""

import psycopg2
import pytest

ORDER = {"productId": "SHAFT-B", "quantity": 1}


def _seqs_and_txs(h):
    rows = h.rows("SELECT seq, tx_id FROM event_log ORDER BY seq")
    return [r.seq for r in rows], [r.tx_id for r in rows]


def _assert_gapless(h):
    seqs, txs = _seqs_and_txs(h)
    assert seqs == list(range(1, len(seqs) + 1))
    assert txs == sorted(txs) and set(txs) == set(range(1, max(txs) + 1))


@pytest.fixture
def drop_at_commit(harness, monkeypatch):
    """Arms a one-shot fault: the next COMMIT of the loop's engine is (``land=True``)
    done on the server, or (``land=False``) not, and either way the connection
    then breaks before the client hears the answer."""
    dialect = harness.loop.engine.dialect
    real = dialect.do_commit

    def arm(land: bool):
        fired = []

        def commit_then_drop(dbapi_conn):
            if fired:
                return real(dbapi_conn)
            fired.append(True)
            if land:
                real(dbapi_conn)
            dbapi_conn.close()
            raise psycopg2.OperationalError("server closed the connection unexpectedly")

        monkeypatch.setattr(dialect, "do_commit", commit_then_drop)
        return fired

    return arm


def test_a_commit_that_landed_but_whose_answer_was_lost_is_the_outcome(harness, drop_at_commit):
    harness.ok("CreateOrder", ORDER)
    fired = drop_at_commit(land=True)
    out = harness.send("CreateOrder", {**ORDER, "code": "LOST-ANSWER"})
    assert fired
    assert out.status == "HANDLED" and out.result["code"] == "LOST-ANSWER"
    # The frames of the landed transaction were published as usual.
    assert any(f["payload"].get("code") == "LOST-ANSWER" for _, frames in harness.published for f in frames)
    # The loop is not wedged: the next message commits with the next seq.
    after = harness.send("CreateOrder", {**ORDER, "code": "NEXT"})
    assert after.status == "HANDLED", after
    _assert_gapless(harness)
    assert harness.row("SELECT count(*) AS n FROM work_order").n == 3


def test_a_commit_that_did_not_land_fails_and_the_next_message_still_commits(harness, drop_at_commit):
    harness.ok("CreateOrder", ORDER)
    drop_at_commit(land=False)
    out = harness.send("CreateOrder", {**ORDER, "code": "NEVER"})
    assert out.status == "FAILED" and out.error["code"] == "UNAVAILABLE"  # not recorded: handled when it comes again
    after = harness.send("CreateOrder", {**ORDER, "code": "NEXT"})
    assert after.status == "HANDLED", after
    _assert_gapless(harness)
    codes = {r.code for r in harness.rows("SELECT code FROM work_order")}
    assert "NEVER" not in codes and "NEXT" in codes


def test_a_scheduling_round_that_lands_but_loses_its_answer_sends_its_requests(harness, drop_at_commit):
    from tests.line_controller.scripted import Refill

    _, (job_id, _) = harness.started_order(quantity=2)
    harness.scheduler.queued.append(Refill(job_id, 1))
    drop_at_commit(land=True)
    harness.loop.schedule()
    assert [r.rpc for r in harness.hardware.requests] == ["dock_to_buffer"]
    assert harness.ok("CreateOrder", ORDER)
    _assert_gapless(harness)


def test_a_failing_scheduling_round_never_rewrites_a_committed_command(harness):
    def broken_round(state):
        raise psycopg2.OperationalError("the database went away during the round")

    harness.scheduler.queued.append(broken_round)
    out = harness.send("CreateOrder", {**ORDER, "code": "COMMITTED"})
    assert out.status == "HANDLED" and out.result["code"] == "COMMITTED"
    recorded = harness.row("SELECT status FROM loop_message WHERE id = :id", id=out.message_id)
    assert recorded.status == "HANDLED"
    # The next tick runs a round again, and the log stays gapless.
    from tests.line_controller.scripted import Refill
    order_id = out.result["id"]
    harness.ok("StartOrder", {"workOrderId": order_id})
    (job,) = harness.rows("SELECT id FROM job WHERE work_order_id = :o", o=order_id)
    harness.scheduler.queued.append(Refill(job.id, 1))
    assert harness.send("ScheduleTick").status == "HANDLED"
    assert [r.rpc for r in harness.hardware.requests] == ["dock_to_buffer"]
    _assert_gapless(harness)


def test_a_lost_answer_is_asked_after_until_the_database_answers_again(harness, drop_at_commit, monkeypatch):
    """A failover: the COMMIT landed (the synchronous standby has it), then the
    server died, and the promoted standby answers only a moment later. The loop
    asks until it can tell, and its round's move is sent exactly once."""
    from services.line_controller import unit_of_work
    from tests.line_controller.scripted import Refill

    _, (job_id, _) = harness.started_order(quantity=2)
    harness.scheduler.queued.append(Refill(job_id, 1))
    engine = harness.loop.engine
    real_connect, refused = engine.connect, []

    def away_for_a_moment():
        if len(refused) < 3:
            refused.append(True)
            raise psycopg2.OperationalError("connection refused: the standby is being promoted")
        return real_connect()

    monkeypatch.setattr(unit_of_work, "LANDED_RETRY_SECONDS", 0.01)
    drop_at_commit(land=True)
    monkeypatch.setattr(engine, "connect", away_for_a_moment)
    harness.loop.schedule()
    monkeypatch.setattr(engine, "connect", real_connect)
    assert len(refused) == 3
    assert [r.rpc for r in harness.hardware.requests] == ["dock_to_buffer"]
    assert harness.ok("CreateOrder", ORDER)
    _assert_gapless(harness)


def test_a_message_the_database_failed_is_not_recorded_and_is_handled_when_it_comes_again(harness, monkeypatch):
    """The database went away under the handler (a restart, a failover) and is
    back at once: the message is not recorded as FAILED, or its redelivery would
    be acknowledged as a duplicate and the event lost (a stalled line)."""
    from sqlalchemy.exc import OperationalError

    from services.line_controller import handlers
    from services.line_controller.messages import new_message

    real, calls = handlers.HANDLERS, []

    class Away(dict):
        def __getitem__(self, key):
            handler = real[key]
            if calls:
                return handler

            def fails(*args):
                calls.append(key)
                raise OperationalError("SELECT 1", {}, Exception("server closed the connection unexpectedly"))
            return fails

    monkeypatch.setattr("services.line_controller.loop.HANDLERS", Away(real))
    msg = new_message("CreateOrder", {**ORDER, "code": "AGAIN"}, actor="op")
    first = harness.loop.handle(msg)
    assert (first.status, first.error["code"]) == ("FAILED", "UNAVAILABLE")
    assert harness.rows("SELECT id FROM loop_message WHERE id = :id", id=msg.id) == []
    pictures = []
    harness.loop._plc_state = lambda: pictures.append(1) or {"connected": True}
    again = harness.loop.handle(msg)
    assert again.status == "HANDLED", again
    assert harness.row("SELECT code FROM work_order").code == "AGAIN"
    _assert_gapless(harness)
    # back after a loss: the line is checked against the PLC as after a start, and
    # nothing is scheduled until that check has run
    assert harness.loop.recovering and pictures == [1]
    queued = [harness.loop.inbox.get() for _ in range(harness.loop.inbox.qsize())]
    assert [q.type for q in queued] == ["RecoveryCheck"]


def test_the_time_the_database_was_away_makes_no_cycle_overdue(harness):
    """INSP1 ran its cycle through a 15 s failover: its end is still on its way
    (the hardware offers it again once the transport is back). Neither a tick that
    meets the database first, nor one before the check against the PLC, nor one
    just after it judges the cycle overdue (the drill asked CYCLE_OVERDUE so);
    only time the loop could hear the end counts."""
    from datetime import timedelta

    from sqlalchemy import text

    harness.loop.cycle_overdue_factor = 1.0  # INSP1's 4 s cycle
    _, (job,) = harness.started_order(quantity=1)
    harness.on_equipment(job, "INSP1", 1, buffer_slot=1)
    with harness.loop.engine.begin() as conn:
        conn.execute(text("UPDATE machine_cycle SET requested_at = requested_at - interval '15 seconds'"))
    harness.loop._plc_state = lambda: None  # the hardware does not answer yet
    harness.loop.uow.database_was_away = True  # as a message that met the failover leaves it
    harness.ok("ScheduleTick")
    assert harness.alarms("CYCLE_OVERDUE") == [] and harness.loop.recovering
    harness.ok("ScheduleTick")  # the check against the PLC is still queued behind it
    assert harness.alarms("CYCLE_OVERDUE") == []
    now = harness.row("SELECT now() AS at").at.isoformat()
    harness.send("RecoveryCheck", {"plcState": None, "hardwareStartedAt": now, "acceptedByEarlier": []})
    harness.ok("ScheduleTick")
    assert harness.alarms("CYCLE_OVERDUE") == []
    harness.loop.heard_since -= timedelta(seconds=5)  # heard for longer than the bound: overdue after all
    harness.ok("ScheduleTick")
    assert [a.code for a in harness.alarms("CYCLE_OVERDUE")] == ["CYCLE_OVERDUE"]
    assert harness.job(job).status == "SUSPENDED"
