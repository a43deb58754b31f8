"""The upgrade to piece records (migration 0012; PRODUCT.md, "Piece
traceability"): a database from before them gives its jobs records from what
its event log still holds, in every line's schema, and says how many finished
pieces it could not rebuild (their events were purged: they keep their own
facts, serial, order, status and times)."""

from __future__ import annotations

import json

from sqlalchemy import text

from services.stack.migrate import upgrade
from shared.db.engine import make_engine
from shared.db.lines import register_lines

T = "2026-01-05T10:00:{:02d}+00:00"


def _event(conn, seq: int, tx: int, type_: str, payload: dict) -> None:
    conn.execute(text("INSERT INTO event_log (seq, tx_id, type, at, payload) VALUES (:s, :t, :ty, :at, "
                      "CAST(:p AS jsonb))"), {"s": seq, "t": tx, "ty": type_, "at": T.format(tx),
                                              "p": json.dumps(payload)})


def _job(job_id: int, status: str, **more) -> dict:  # a job's payload as the loop wrote it before serials
    return {"id": job_id, "workOrderId": 1, "seqNo": job_id, "status": status, "positionType": "ON_BUFFER",
            "positionRefId": "1", "tempSlotNo": 1, "stepIndex": 0, "context": {}, **more}


def test_the_upgrade_rebuilds_records_from_the_log_and_counts_what_it_could_not(empty_db_url, capfd):
    upgrade(empty_db_url, "0011")
    engine = make_engine(empty_db_url, pool_size=1)
    try:
        with engine.begin() as conn:
            register_lines(conn, ["cell-x", "cell-y"], default="cell-x")
            for schema in ("public", '"line_cell-y"'):
                conn.execute(text(f"SET LOCAL search_path TO {schema}, public"))
                conn.execute(text(
                    "INSERT INTO work_order (id, code, product_id, route, quantity, status) VALUES (1, 'WO-7', "
                    "'SHAFT-B', '[{\"op\": \"process\", \"equipmentKind\": \"machining\"}]', 3, 'COMPLETED')"
                    if schema == "public" else
                    "INSERT INTO work_order (id, code, product_id, route, quantity, status) VALUES (2, 'WO-8', "
                    "'SHAFT-B', '[]', 1, 'COMPLETED')"))
            conn.execute(text("SET LOCAL search_path TO public"))
            conn.execute(text(
                "INSERT INTO job (id, work_order_id, seq_no, status, position_type, context, finished_at) VALUES "
                "(1, 1, 1, 'COMPLETED', 'OUT', '{}', now()), (2, 1, 2, 'COMPLETED', 'OUT', '{}', now()), "
                "(3, 1, 3, 'SCRAPPED', 'OUT', '{\"barcode\": \"SN-OLD-3\"}', now())"))
            # job 1's whole life is still in the log; job 3's beginning was purged; job 2's all of it
            _event(conn, 1, 1, "JobCreated", _job(1, "PENDING", positionType="ON_DOCK"))
            _event(conn, 2, 2, "JobClaimed", _job(1, "PROCESSING", positionType="ON_EQUIPMENT",
                                                  positionRefId="MC1:2"))
            _event(conn, 3, 3, "SlotChanged", {"equipmentId": "MC1", "slotNo": 2, "status": "DONE",
                                               "currentJobId": 1})
            _event(conn, 4, 4, "ManualActionResolved", {
                "id": 9, "kind": "ACTION_FAILED", "resolution": "RETRY", "resolvedBy": "ola",
                "resolvedAt": T.format(4), "jobId": 1, "context": {}})
            _event(conn, 5, 5, "JobFinished", _job(1, "COMPLETED", positionType="OUT", stepIndex=1))
            _event(conn, 6, 6, "JobFinished", _job(3, "SCRAPPED", positionType="OUT"))
            conn.execute(text("SET LOCAL search_path TO \"line_cell-y\", public"))
            conn.execute(text("INSERT INTO job (id, work_order_id, seq_no, status, position_type, finished_at) "
                              "VALUES (4, 2, 1, 'COMPLETED', 'OUT', now())"))
        capfd.readouterr()

        upgrade(empty_db_url)

        said = capfd.readouterr().err  # the count beside a command's answer, not in it
        assert ("line cell-x: 3 finished pieces, 1 records rebuilt from the event log, "
                "2 could not be rebuilt") in said, said
        assert "line cell-y: 1 finished pieces, 0 records rebuilt from the event log, 1 could not be rebuilt" in said
        with engine.connect() as conn:
            pieces = conn.execute(text("SELECT job_id, serial, status, work_order_code FROM piece ORDER BY 1")).all()
            assert [tuple(p) for p in pieces] == [(1, "cell-x-WO-7-1", "COMPLETED", "WO-7"),
                                                  (2, "cell-x-WO-7-2", "COMPLETED", "WO-7"),
                                                  (3, "SN-OLD-3", "SCRAPPED", "WO-7")]
            steps = conn.execute(text("SELECT job_id, step_index, kind, equipment_id, slot_no, result "
                                      "FROM piece_step")).all()
            assert [tuple(s) for s in steps] == [(1, 0, "machining", "MC1", 2, "DONE")]
            answers = conn.execute(text("SELECT job_id, detail->>'resolution', detail->>'by' FROM piece_entry "
                                        "WHERE category = 'answer'")).all()
            assert [tuple(a) for a in answers] == [(1, "RETRY", "ola")]
            assert conn.execute(text("SELECT serial FROM job ORDER BY id")).scalars().all() == [
                "cell-x-WO-7-1", "cell-x-WO-7-2", "SN-OLD-3"]
            other = conn.execute(text('SELECT job_id, serial FROM "line_cell-y".piece')).all()
            assert [tuple(p) for p in other] == [(4, "cell-y-WO-8-1")]
    finally:
        engine.dispose()
