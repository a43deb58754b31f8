"""Piece records written by the loop (PRODUCT.md, "Piece traceability"), on the
real stack (simulator, hardware service, line_controller): every finished piece
has a record under its serial (the code its SCAN read, the text its MARK
marked) whose steps follow its order's route on machines of the right kind, in
time order, with the verdict the inspection event gave; and the records outlive
the event log's retention, until their own (``LINECTL_PIECE_RETENTION_DAYS``)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from services.hardware.sim.model import SimOptions
from shared.config import load_settings
from shared.db.retention import RetentionPolicy, purge
from shared.layout import load_layout
from tests.flow.conftest import SIM_SPEED


@pytest.fixture
def sim_options():
    # Half the pieces fail inspection: both ends of the route are recorded.
    return SimOptions(speed=SIM_SPEED, scrap_rate=0.5, seed=11, pallet_size=500, pallet_seconds=1.0)


def _records(line) -> dict[int, dict]:
    out = {}
    for p in line.rows("SELECT * FROM piece ORDER BY job_id"):
        steps = line.rows("SELECT * FROM piece_step WHERE job_id = :j ORDER BY started_at, id", j=p.job_id)
        entries = line.rows("SELECT * FROM piece_entry WHERE job_id = :j ORDER BY id", j=p.job_id)
        out[p.job_id] = {"piece": p, "steps": steps, "entries": entries}
    return out


def _verdicts_in_the_log(line) -> dict[int, bool]:
    """Each job's inspection verdict as its InspectionResult put it in the event log."""
    verdicts = {}
    for r in line.rows("SELECT payload FROM event_log WHERE type = 'JobContextChanged' ORDER BY seq"):
        inspection = (r.payload.get("context") or {}).get("inspection")
        if inspection is not None:
            verdicts[r.payload["id"]] = inspection["pass"]
    return verdicts


def test_every_finished_piece_has_its_record_and_it_outlives_the_event_log(line, engine):
    layout = load_layout(load_settings().line_file)
    kinds = {e.id: e.kind for e in layout.equipment}
    order = line.order("BRACKET-A", 6)
    assert line.wait_finished(order["id"]) == "COMPLETED"
    line.wait_idle()
    route = line.row("SELECT route FROM work_order WHERE id = :o", o=order["id"]).route
    jobs = line.rows("SELECT * FROM job WHERE work_order_id = :o ORDER BY id", o=order["id"])
    records, verdicts = _records(line), _verdicts_in_the_log(line)
    assert {j.id for j in jobs} <= set(records)
    for job in jobs:
        rec = records[job.id]
        piece, steps = rec["piece"], rec["steps"]
        assert (piece.serial, piece.status, piece.work_order_code, piece.product_id) == (
            job.context["barcode"], job.status, order["code"], "BRACKET-A")
        assert job.serial == piece.serial
        assert piece.created_at <= steps[0].started_at and steps[-1].ended_at <= piece.finished_at
        for before, after in zip(steps, steps[1:], strict=False):
            assert before.ended_at <= after.started_at, (before, after)  # one step after another
        done = [s for s in steps if s.result != "ABORTED"]
        expected = route[:len(done)]
        assert [s.step_index for s in done] == list(range(len(done)))
        for s, step in zip(done, expected, strict=True):
            assert s.kind == step.get("equipmentKind", step["op"])
            if "equipmentKind" in step:  # on a machine of the step's kind, in one of its slots
                assert kinds[s.equipment_id] == step["equipmentKind"] and s.slot_no >= 1
        inspection = next(s for s in done if s.kind == "inspection")
        assert inspection.result == {True: "PASS", False: "FAIL"}[verdicts[job.id]]
        if job.status == "COMPLETED":
            assert len(done) == len(route) and done[-1].values == {"text": piece.serial}  # MARK marked the serial
            assert inspection.result == "PASS"
        else:
            assert job.status == "SCRAPPED" and inspection.result == "FAIL" and len(done) == 4
        categories = [e.category for e in rec["entries"]]
        assert categories.count("scan") == 1 and categories.count("move") >= 3
        assert rec["entries"][categories.index("scan")].detail["code"] == piece.serial
    assert {j.status for j in jobs} == {"COMPLETED", "SCRAPPED"}  # both ends of the route ran
    assert len({records[j.id]["piece"].serial for j in jobs}) == len(jobs)

    # The event log's retention purges every event (made old here); the records stay as they were.
    with engine.begin() as conn:
        conn.execute(text("UPDATE event_log SET at = at - interval '40 days'"))
    before = {k: (tuple(v["piece"]), [tuple(s) for s in v["steps"]], [tuple(e) for e in v["entries"]])
              for k, v in records.items()}
    counts = purge(engine, RetentionPolicy(event_days=30))
    assert counts["event_log"] > 0 and counts["piece"] == 0
    assert line.row("SELECT count(*) AS n FROM event_log").n == 1  # the newest stays (seq goes on)
    after = {k: (tuple(v["piece"]), [tuple(s) for s in v["steps"]], [tuple(e) for e in v["entries"]])
             for k, v in _records(line).items()}
    assert after == before
    # Their own retention, years later, takes a piece with its steps and entries.
    first = jobs[0].id
    with engine.begin() as conn:
        conn.execute(text("UPDATE piece SET finished_at = finished_at - interval '11 years' WHERE job_id = :j"),
                     {"j": first})
    assert purge(engine, RetentionPolicy(event_days=30))["piece"] == 1
    left = _records(line)
    assert first not in left and set(left) == set(records) - {first}
    assert line.row("SELECT count(*) AS n FROM piece_step WHERE job_id = :j", j=first).n == 0
