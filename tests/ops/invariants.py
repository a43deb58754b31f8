"""What must hold after any number of crashes, read straight from PostgreSQL."""

from __future__ import annotations

from sqlalchemy import create_engine, text


def line_invariants(db_url: str, order_id: int | None = None) -> list[str]:
    """Every broken rule, as text (empty: all hold)."""
    broken = []
    engine = create_engine(db_url)
    try:
        with engine.connect() as c:
            one = lambda sql, **p: c.execute(text(sql), p).first()  # noqa: E731
            if order_id is not None:
                o = one("SELECT * FROM work_order WHERE id = :id", id=order_id)
                counts = one("SELECT count(*) FILTER (WHERE status = 'COMPLETED') AS done, "
                             "count(*) FILTER (WHERE status = 'SCRAPPED') AS scrap, count(*) AS n "
                             "FROM job WHERE work_order_id = :id", id=order_id)
                if o.completed_qty + o.scrapped_qty != o.quantity:
                    broken.append(f"order {o.id}: {o.completed_qty} completed + {o.scrapped_qty} "
                                  f"scrapped != {o.quantity}")
                if (counts.done, counts.scrap, counts.n) != (o.completed_qty, o.scrapped_qty, o.quantity):
                    broken.append(f"order {o.id}: jobs {counts.done} completed / {counts.scrap} scrapped "
                                  f"/ {counts.n} in all disagree with the order's counts")
            dup = c.execute(text("SELECT current_job_id FROM equipment_slot WHERE current_job_id IS NOT NULL "
                                 "GROUP BY current_job_id HAVING count(*) > 1")).fetchall()
            if dup:
                broken.append(f"jobs in two slots: {[r[0] for r in dup]}")
            buf = c.execute(text("SELECT temp_slot_no FROM job WHERE temp_slot_no IS NOT NULL AND status "
                                 "NOT IN ('COMPLETED','SCRAPPED','CANCELLED') GROUP BY temp_slot_no "
                                 "HAVING count(*) > 1")).fetchall()
            if buf:
                broken.append(f"buffer slots held twice: {[r[0] for r in buf]}")
            seq = one("SELECT count(*) AS n, COALESCE(min(seq), 1) AS lo, COALESCE(max(seq), 0) AS hi "
                      "FROM event_log")
            if seq.n and (seq.lo, seq.hi) != (1, seq.n):
                broken.append(f"event_log seq has gaps: {seq.n} rows, {seq.lo}..{seq.hi}")
    finally:
        engine.dispose()
    return broken
