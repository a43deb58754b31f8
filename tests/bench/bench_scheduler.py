"""Scheduling-round time vs line size (10, 50, 200 machines): p50 / p99.

Two parts, each beside a reference run in the same process:

1. plan: ``default_scheduler().choose(state)`` on a prepared in-memory
   snapshot (fresh per round, so no index is cached), against a single-pass
   greedy scheduler written as one function (the shape the three layers
   replace): the ratio is the price of the pluggable layers.
2. build: ``build_system_state`` on a real PostgreSQL (the test suite's
   embedded server, ``tests/support/db.py``), against the same SELECTs
   replayed on a raw psycopg2 cursor with no snapshot built: the ratio is
   the price of SQLAlchemy plus building the frozen snapshot.

The line: N machines (60 % machining with 2 slots, 25 % batch washers with 4,
15 % inspection with 1), the 8-slot buffer full of work in progress (pieces
on the buffer and on machines), two running orders with 1000 pieces waiting
at the dock. Run: ``.venv/bin/python tests/bench/bench_scheduler.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy import event  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from services.line_controller.scheduler import (  # noqa: E402
    EquipmentView,
    JobView,
    Load,
    OrderView,
    SlotView,
    Step,
    SystemState,
    Unload,
    build_system_state,
    default_scheduler,
)
from shared.db.engine import make_engine  # noqa: E402
from shared.db.models import Equipment, EquipmentSlot, Job, WorkOrder  # noqa: E402
from shared.layout import parse_layout  # noqa: E402
from tests.support.timing import durations  # noqa: E402

SIZES = (10, 50, 200)
T0 = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)
ROUTE = (Step("scan"), Step("process", "machining"), Step("process", "washing"),
         Step("inspect", "inspection"), Step("mark"))
ROUTE_JSON = [{"op": s.op, **({"equipmentKind": s.equipment_kind} if s.equipment_kind else {})}
              for s in ROUTE]


def machines(n: int) -> list[tuple[str, str, int, bool]]:
    out = []
    for i in range(n):
        if i < 0.6 * n:
            out.append((f"MC{i:03d}", "machining", 2, False))
        elif i < 0.85 * n:
            out.append((f"WS{i:03d}", "washing", 4, True))
        else:
            out.append((f"IN{i:03d}", "inspection", 1, False))
    return out


def line_rows(n: int):
    """The same line as plain rows: orders, jobs, slot contents.

    Buffer slots 1..8: pieces 1-3 on machines (one DONE, one loaded and not
    started, one processing), pieces 4-8 waiting on the buffer at various
    steps; 1000 pieces per order at the dock."""
    eqs = machines(n)
    mc = [e for e in eqs if e[1] == "machining"]
    ws = [e for e in eqs if e[1] == "washing"]
    orders = [(1, 3, T0 - timedelta(hours=1)), (2, 1, T0)]
    jobs = []  # id, order, status, position, ref, temp, step
    slots = {}  # (eq, slot) -> (status, job)
    jobs.append((1, 1, "WAITING_UNLOAD", "ON_EQUIPMENT", f"{mc[0][0]}:1", 1, 1))
    slots[(mc[0][0], 1)] = ("DONE", 1)
    jobs.append((2, 1, "QUEUED", "ON_EQUIPMENT", f"{ws[0][0]}:1", 2, 2))
    slots[(ws[0][0], 1)] = ("OCCUPIED", 2)
    jobs.append((3, 2, "PROCESSING", "ON_EQUIPMENT", f"{mc[-1][0]}:2", 3, 1))
    slots[(mc[-1][0], 2)] = ("OCCUPIED", 3)
    for jid, step in zip(range(4, 9), (0, 1, 1, 2, 4), strict=True):
        jobs.append((jid, 1 + jid % 2, "QUEUED", "ON_BUFFER", str(jid), jid, step))
    next_id = 9
    for order_id, _, _ in orders:
        for _ in range(1000):
            jobs.append((next_id, order_id, "PENDING", "ON_DOCK", None, None, 0))
            next_id += 1
    return eqs, orders, jobs, slots


def memory_state(n: int) -> SystemState:
    eqs, orders, jobs, slots = line_rows(n)
    order_views = tuple(OrderView(id=o, status="RUNNING", priority=p, created_at=at, route=ROUTE)
                        for o, p, at in orders)
    # Only the dock's head, as build_system_state reads it.
    live = [j for j in jobs if j[2] != "PENDING"]
    dock = sorted((j for j in jobs if j[2] == "PENDING"), key=lambda j: (j[1] != 2, j[0]))[:8]
    job_views = tuple(
        JobView(id=j, order_id=o, seq_no=j, status=s, position_type=p, position_ref_id=r,
                temp_slot_no=t, step_index=step, created_at=T0, next_step=ROUTE[step])
        for j, o, s, p, r, t, step in (*live, *dock)
    )
    eq_views = tuple(
        EquipmentView(id=e, kind=k, batch=b, status="IDLE", slots=tuple(
            SlotView(e, s, *slots.get((e, s), ("EMPTY", None))) for s in range(1, c + 1)))
        for e, k, c, b in eqs
    )
    return SystemState(now=T0, buffer_size=8, orders=order_views, jobs=job_views, equipment=eq_views)


def greedy_reference(state: SystemState):
    """One function, no layers, no early exit: look at every slot and every
    waiting piece once, keep the best unload (else the best load) by order
    priority, order age and piece number."""
    jobs = {j.id: j for j in state.jobs}
    orders = {o.id: o for o in state.orders}
    held = {j.temp_slot_no for j in state.jobs if j.temp_slot_no is not None}

    def rank(job):
        order = orders[job.order_id]
        return (order.priority, order.created_at, job.seq_no)

    best_unload = best_load = None
    empty_by_kind = {}
    for eq in state.equipment:
        if eq.status in ("FAULT", "OFFLINE"):
            continue
        for s in eq.slots:
            if s.status == "DONE":
                job = jobs[s.current_job_id]
                if best_unload is None or rank(job) < best_unload[0]:
                    best_unload = (rank(job), Unload(job.id, eq.id, s.slot_no, job.temp_slot_no))
            elif s.status == "EMPTY" and not (eq.batch and eq.status == "RUNNING"):
                empty_by_kind.setdefault(eq.kind, (eq.id, s.slot_no))
    for job in state.jobs:
        if (job.status == "QUEUED" and job.position_type == "ON_BUFFER" and job.temp_slot_no in held
                and job.next_step.on_equipment and job.next_step.equipment_kind in empty_by_kind):
            if best_load is None or rank(job) < best_load[0]:
                eq_id, slot_no = empty_by_kind[job.next_step.equipment_kind]
                best_load = (rank(job), Load(job.id, job.temp_slot_no, eq_id, slot_no))
    best = best_unload or best_load
    return best[1] if best else None


def pct(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1] * 1000


def bench_plan(rounds: int) -> list[tuple]:
    scheduler = default_scheduler()
    rows = []
    for n in SIZES:
        base = memory_state(n)
        chosen = scheduler.choose(base)
        assert chosen, "the benchmark line has work to do"
        ours = durations(lambda base=base: scheduler.choose(dataclasses.replace(base)), rounds)
        ref = durations(lambda base=base: greedy_reference(dataclasses.replace(base)), rounds)
        rows.append((n, len(scheduler.candidates(base)), pct(ours, 50), pct(ours, 99),
                     pct(ref, 50), pct(ref, 99)))
    return rows


def seed_db(session: Session, n: int) -> None:
    eqs, orders, jobs, slots = line_rows(n)
    for e, k, c, b in eqs:
        session.add(Equipment(id=e, name=e, kind=k, batch=b, slot_count=c))
    for o, p, at in orders:
        session.add(WorkOrder(id=o, code=f"WO-{o}", product_id="P", route=ROUTE_JSON, quantity=1000,
                              priority=p, status="RUNNING", created_at=at))
    session.flush()
    for j, o, s, p, r, t, step in jobs:
        session.add(Job(id=j, work_order_id=o, seq_no=j, status=s, position_type=p,
                        position_ref_id=r, temp_slot_no=t, step_index=step, created_at=T0))
    session.flush()
    for e, _, c, _ in eqs:
        for s in range(1, c + 1):
            status, job = slots.get((e, s), ("EMPTY", None))
            session.add(EquipmentSlot(equipment_id=e, slot_no=s, status=status, current_job_id=job,
                                      occupied_at=T0 if job else None))
    session.commit()


def bench_build(rounds: int) -> list[tuple]:
    from tests.support.db import TestDatabases

    dbs = TestDatabases()
    rows = []
    try:
        for n in SIZES:
            url = dbs.fresh()
            engine = make_engine(url, pool_size=1)
            layout = parse_layout({
                "line": {"bufferSlots": 8},
                "equipment": [{"id": e, "kind": k, "slots": c, "batch": b} for e, k, c, b in machines(n)],
                "products": [{"id": "P", "route": [{"op": "process", "equipmentKind": "machining"}]}],
            })
            with Session(engine) as session:
                seed_db(session, n)
            with engine.connect() as conn:
                conn.exec_driver_sql("ANALYZE")
                conn.commit()

            statements = []

            def capture(conn, cursor, sql, params, context, executemany, statements=statements):
                statements.append((sql, params))

            with Session(engine) as session:
                event.listen(engine, "before_cursor_execute", capture)
                state = build_system_state(session, layout, T0)
                event.remove(engine, "before_cursor_execute", capture)
                assert len(state.jobs) == 16 and len(state.equipment) == n

                def build(session=session, layout=layout):
                    build_system_state(session, layout, T0)
                    session.rollback()  # as the loop: one short read transaction per round

                ours = durations(build, rounds)

            raw = engine.raw_connection()
            try:
                def replay(raw=raw, statements=statements):
                    with raw.cursor() as cur:
                        for sql, params in statements:
                            cur.execute(sql, params)
                            cur.fetchall()
                    raw.rollback()

                ref = durations(replay, rounds)
            finally:
                raw.close()
            engine.dispose()
            dbs.drop(url)
            rows.append((n, len(statements), pct(ours, 50), pct(ours, 99), pct(ref, 50), pct(ref, 99)))
    finally:
        dbs.close()
    return rows


def print_table(title: str, head: tuple[str, str, str], rows: list[tuple]) -> None:
    ours, ref, extra = head
    print(f"\n{title}")
    print(f"{'machines':>8} {extra:>10} | {ours + ' p50':>14} {'p99':>8} | "
          f"{ref + ' p50':>14} {'p99':>8} | {'ratio p50':>9} {'p99':>6}")
    for n, x, p50, p99, r50, r99 in rows:
        print(f"{n:>8} {x:>10} | {p50:>11.3f} ms {p99:>8.3f} | {r50:>11.3f} ms {r99:>8.3f} | "
              f"{p50 / r50:>8.1f}x {p99 / r99:>5.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan-rounds", type=int, default=2000)
    parser.add_argument("--build-rounds", type=int, default=300)
    parser.add_argument("--no-db", action="store_true", help="skip the PostgreSQL part")
    args = parser.parse_args()

    print_table("Scheduling round, in memory: choose(state) vs a one-function greedy scheduler",
                ("choose", "greedy", "candidates"), bench_plan(args.plan_rounds))
    if not args.no_db:
        print_table("Snapshot from PostgreSQL: build_system_state vs the same SELECTs on raw psycopg2",
                    ("build", "raw SQL", "statements"), bench_build(args.build_rounds))


if __name__ == "__main__":
    main()
