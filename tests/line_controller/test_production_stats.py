"""Production figures from a hand-written sequence of loop transactions at
known times: the rollup the loop keeps (machine states, cycles) and the
figures /api/stats computes from it, checked against values worked out by
hand below (docs/stats.md has the definitions)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from services.line_controller.dbstate import DBState
from shared import production_stats as ps

T0 = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)  # after the loop's start-up


def at(engine, seconds: float, change) -> list[tuple[str, dict]]:
    """One loop transaction at T0 + ``seconds``; its events."""
    with engine.begin() as conn:
        db = DBState(conn, now=T0 + timedelta(seconds=seconds))
        change(db)
        seq, tx = db.last_seq_and_tx()
        db.close_transaction(None, status="HANDLED", first_seq=seq + 1, tx_id=tx + 1)
        return db.events


def onto(db, job_id, equipment_id, slot_no):
    db.place_job(job_id, ("PENDING", "QUEUED"), "QUEUED", "ON_ROBOT", None, None)
    db.move_job_to_equipment(job_id, "ON_ROBOT", equipment_id, slot_no, "QUEUED")


def window(start: float, end: float) -> ps.Window:
    return ps.Window(T0 + timedelta(seconds=start), T0 + timedelta(seconds=end),
                     now=T0 + timedelta(seconds=1000))


def figures(engine, layout, w):
    with engine.connect() as conn:
        result = ps.production_figures(conn, layout, w)
    return result, {e["id"]: e for e in result["equipment"]}


def play_the_known_sequence(harness, engine) -> None:
    """Three pieces through MC1 over [0, 100), a fault among them."""
    _, (j1, j2, j3) = harness.started_order("SHAFT-B", quantity=3)
    at(engine, 0, lambda db: (onto(db, j1, "MC1", 1), onto(db, j2, "MC1", 2)))
    # One start for both pieces; MC1 runs them one after the other.
    events = at(engine, 10, lambda db: [db.claim_job_for_action(j, "QUEUED", "PROCESSING") for j in (j1, j2)])
    assert ("MachineStateChanged", {"equipmentId": "MC1", "state": "PROCESSING",
                                    "since": (T0 + timedelta(seconds=10)).isoformat().replace("+00:00", "Z")}) in events
    at(engine, 11, lambda db: db.set_equipment_status("MC1", "RUNNING"))
    at(engine, 22, lambda db: db.slot_done("MC1", 1, j1))
    at(engine, 37, lambda db: (db.slot_done("MC1", 2, j2), db.set_equipment_status("MC1", "IDLE")))
    at(engine, 40, lambda db: db.move_job_to_buffer(j1, 1))
    at(engine, 45, lambda db: db.move_job_to_buffer(j2, 2))
    at(engine, 50, lambda db: db.set_equipment_status("MC1", "FAULT"))
    at(engine, 60, lambda db: db.finish_job(j1, "COMPLETED"))
    at(engine, 70, lambda db: db.finish_job(j2, "SCRAPPED"))
    at(engine, 80, lambda db: (db.set_equipment_status("MC1", "IDLE"), onto(db, j3, "MC1", 1)))
    # Its start's result never came back before the piece was done (the machine
    # never showed RUNNING): the piece's own state still makes it PROCESSING.
    at(engine, 85, lambda db: db.claim_job_for_action(j3, "QUEUED", "PROCESSING"))
    at(engine, 95, lambda db: db.slot_done("MC1", 1, j3))


def test_figures_from_a_known_sequence_agree_with_the_hand_worked_values(harness, engine, layout):
    play_the_known_sequence(harness, engine)
    result, by_id = figures(engine, layout, window(0, 100))
    mc1 = by_id["MC1"]
    # MC1 over [0, 100): IDLE 0-10, PROCESSING 10-37, WAITING_UNLOAD 37-45, IDLE 45-50,
    # FAULT 50-80, IDLE 80-85, PROCESSING 85-95, WAITING_UNLOAD 95-100.
    assert mc1["secondsByState"] == {"FAULT": 30.0, "IDLE": 20.0, "PROCESSING": 37.0, "WAITING_UNLOAD": 13.0}
    assert mc1["observedSeconds"] == 100.0
    assert mc1["utilization"] == pytest.approx(37 / 100)
    assert mc1["availability"] == pytest.approx(70 / 100)
    # Cycles: j1 10→22 (12 s), j2 from j1's end 22→37 (15 s), j3 85→95 (10 s).
    assert mc1["cycles"] == 3
    assert mc1["meanCycleSeconds"] == pytest.approx((12 + 15 + 10) / 3, abs=1e-3)
    assert mc1["p95CycleSeconds"] == 15.0  # nearest rank: the ceil(0.95 × 3) = 3rd smallest
    # performance = ideal (11 s in deploy/line.yaml) × cycles ÷ run time
    assert mc1["performance"] == pytest.approx(11 * 3 / 37, abs=1e-4)
    assert mc1["quality"] == 0.5  # j1 good, j2 scrapped, j3 not finished: not counted
    assert mc1["oee"] == pytest.approx(0.7 * (33 / 37) * 0.5, abs=1e-4)

    assert result["line"]["completed"] == 1 and result["line"]["scrapped"] == 1
    assert result["line"]["scrapRate"] == 0.5
    assert result["line"]["throughputPerHour"] == pytest.approx(1 / (100 / 3600), abs=1e-3)
    assert sum(h["completed"] for h in result["hourly"]) == 1

    # A machine that did nothing: all IDLE, no cycles, ratios that need cycles are null.
    mc2 = by_id["MC2"]
    assert (mc2["utilization"], mc2["availability"], mc2["cycles"]) == (0.0, 1.0, 0)
    assert mc2["performance"] is None and mc2["quality"] is None and mc2["oee"] is None

    with engine.connect() as conn:
        items = ps.timeline(conn, window(0, 100), "MC1")["items"]
    assert [(i["state"], _t(i["from"]), _t(i["to"])) for i in items] == [
        ("IDLE", 0, 10), ("PROCESSING", 10, 37), ("WAITING_UNLOAD", 37, 45), ("IDLE", 45, 50),
        ("FAULT", 50, 80), ("IDLE", 80, 85), ("PROCESSING", 85, 95), ("WAITING_UNLOAD", 95, 100)]

    # A window that starts inside an interval clips it: [30, 60) is PROCESSING 30-37,
    # WAITING_UNLOAD 37-45, IDLE 45-50, FAULT 50-60.
    _, by_id = figures(engine, layout, window(30, 60))
    assert by_id["MC1"]["secondsByState"] == {"FAULT": 10.0, "IDLE": 5.0, "PROCESSING": 7.0,
                                              "WAITING_UNLOAD": 8.0}
    assert by_id["MC1"]["cycles"] == 1  # j2's, which ended at 37
    with engine.connect() as conn:
        items = ps.timeline(conn, window(30, 60), "MC1")["items"]
    assert [(i["state"], _t(i["from"]), _t(i["to"])) for i in items] == [
        ("PROCESSING", 30, 37), ("WAITING_UNLOAD", 37, 45), ("IDLE", 45, 50), ("FAULT", 50, 60)]


def test_a_batch_run_is_one_cycle_of_all_its_pieces(harness, engine, layout):
    _, (j1, j2) = harness.started_order("SHAFT-B", quantity=2)
    at(engine, 0, lambda db: (onto(db, j1, "WASH1", 1), onto(db, j2, "WASH1", 2)))
    at(engine, 5, lambda db: [db.claim_job_for_action(j, "QUEUED", "PROCESSING") for j in (j1, j2)])
    at(engine, 25, lambda db: (db.slot_done("WASH1", 1, j1), db.slot_done("WASH1", 2, j2)))
    at(engine, 30, lambda db: (db.move_job_to_buffer(j1, 1), db.move_job_to_buffer(j2, 2),
                               db.finish_job(j1, "COMPLETED"), db.finish_job(j2, "COMPLETED")))
    _, by_id = figures(engine, layout, window(0, 40))
    wash = by_id["WASH1"]
    assert wash["cycles"] == 1 and wash["meanCycleSeconds"] == 20.0
    assert wash["quality"] == 1.0
    assert wash["performance"] == pytest.approx(18 / 20)  # one 18 s ideal batch in 20 s of run time
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT job_ids FROM machine_cycle WHERE equipment_id = 'WASH1'")).all()
    assert [sorted(r.job_ids) for r in rows] == [sorted([j1, j2])]


def test_a_piece_taken_off_before_it_is_done_is_no_cycle(harness, engine, layout):
    _, (j1,) = harness.started_order("SHAFT-B", quantity=1)
    at(engine, 0, lambda db: onto(db, j1, "MC2", 1))
    at(engine, 5, lambda db: db.claim_job_for_action(j1, "QUEUED", "PROCESSING"))
    at(engine, 8, lambda db: db.move_job_to_buffer(j1, 1, "SUSPENDED"))  # an operator took it off
    _, by_id = figures(engine, layout, window(0, 10))
    assert by_id["MC2"]["cycles"] == 0
    assert by_id["MC2"]["secondsByState"]["PROCESSING"] == 3.0
    with engine.connect() as conn:
        assert conn.execute(text("SELECT aborted FROM machine_cycle")).scalars().all() == [True]


def test_a_transaction_that_changes_no_machine_state_writes_no_interval(harness, engine):
    with engine.connect() as conn:
        before = conn.execute(text("SELECT count(*) FROM machine_state_interval")).scalar()
    _, (j1,) = harness.started_order("SHAFT-B", quantity=1)
    events = at(engine, 0, lambda db: onto(db, j1, "MC1", 1))  # loaded, not started: still IDLE
    assert not [e for e in events if e[0] == "MachineStateChanged"]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM machine_state_interval")).scalar() == before
        # one open interval per machine, opened when the loop started
        assert conn.execute(text("SELECT count(*) FROM machine_state_interval "
                                 "WHERE ended_at IS NULL")).scalar() == 4


def _t(value: str) -> float:
    return (datetime.fromisoformat(value.replace("Z", "+00:00")) - T0).total_seconds()
