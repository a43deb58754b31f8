"""How many messages per second the production event loop sustains, against
the ceiling of the same PostgreSQL server: single-row-update commits per
second on one psycopg2 connection.

The stream is realistic: per piece a RobotActionSucceeded (the load onto a
machine: task SUCCEEDED, job ON_EQUIPMENT, slot OCCUPIED) then a MachineDone
(slot DONE, job WAITING_UNLOAD), with every tenth message a redelivered
duplicate, a stale result or a ScheduleTick. Every message goes through the
real path: inbox → consumer → one transaction (inbox record, reads,
conditional updates, event_log rows, outcome) → publish. The pieces' load
tasks are staged beforehand (not timed).

    python tests/bench/bench_event_loop.py [--pieces 600] [--fast] [--database-url URL]

Without ``--database-url`` it starts its own embedded PostgreSQL with
production settings (fsync on); ``--fast`` turns fsync off for both sides.
"""

import eventlet

eventlet.monkey_patch()

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import psycopg2  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from services.line_controller.dbstate import DBState  # noqa: E402
from services.line_controller.loop import EventLoop  # noqa: E402
from services.line_controller.messages import new_message  # noqa: E402
from shared.db.embedded import EmbeddedPostgres  # noqa: E402
from shared.db.engine import make_engine  # noqa: E402
from shared.db.migrate import upgrade  # noqa: E402
from shared.layout import parse_layout  # noqa: E402


def bench_layout(machines: int):
    return parse_layout({
        "line": {"id": "bench", "bufferSlots": 8},
        "equipment": [{"id": f"M{i}", "kind": "machining", "slots": 1} for i in range(machines)],
        "products": [{"id": "P", "route": [{"op": "process", "equipmentKind": "machining"}]}],
    })


def ceiling(url: str, seconds: float) -> float:
    conn = psycopg2.connect(url)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS bench_counter (id int PRIMARY KEY, n bigint)")
        cur.execute("INSERT INTO bench_counter VALUES (1, 0) ON CONFLICT DO NOTHING")
    conn.commit()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        with conn.cursor() as cur:
            cur.execute("UPDATE bench_counter SET n = n + 1 WHERE id = 1")
        conn.commit()
        n += 1
    elapsed = time.perf_counter() - start
    conn.close()
    return n / elapsed


def stage(engine, layout, pieces: int):
    """An order of ``pieces`` jobs, each held by the robot under a RUNNING load task."""
    loop = EventLoop(engine, layout)
    loop.start(consume=False)
    order = loop.handle(new_message("CreateOrder", {"productId": "P", "quantity": pieces}, actor="bench"))
    loop.handle(new_message("StartOrder", {"workOrderId": order.result["id"]}, actor="bench"))
    tasks = []
    with engine.begin() as conn:
        db = DBState(conn)
        for i, job in enumerate(db.jobs_of_order(order.result["id"])):
            task = db.create_task("BUFFER_TO_EQUIPMENT", job_id=job.id, work_order_id=job.work_order_id,
                                  equipment_id=f"M{i}", slot_no=1, params={"jobIds": [job.id]})
            db.start_task(task.id)
            db.claim_job_for_action(job.id, "PENDING", "MOVING", "ON_ROBOT", None)
            tasks.append((task.id, job.id, f"M{i}"))
    return tasks


def stream(tasks):
    msgs, n = [], 0
    for task_id, job_id, machine in tasks:
        for msg in (new_message("RobotActionSucceeded", {"correlationId": str(task_id)},
                                correlation_id=str(task_id)),
                    new_message("MachineDone", {"machineId": machine, "jobId": job_id})):
            msgs.append(msg)
            n += 1
            if n % 30 == 10:
                msgs.append(dataclasses.replace(msgs[-2]))  # a redelivery: same id
            elif n % 30 == 20:
                msgs.append(new_message("ToolActionSucceeded", {"correlationId": "999999999"}))  # stale
            elif n % 30 == 0:
                msgs.append(new_message("ScheduleTick"))
    return msgs


def run_loop(engine, layout, msgs) -> tuple[float, dict]:
    published = []
    loop = EventLoop(engine, layout, publish=lambda tx, frames: published.append(len(frames)))
    loop.start()
    start = time.perf_counter()
    pendings = [loop.submit(m) for m in msgs]
    outcomes = [p.wait(600) for p in pendings]
    elapsed = time.perf_counter() - start
    loop.stop()
    kinds = {}
    for o in outcomes:
        kinds[o.status] = kinds.get(o.status, 0) + 1
    kinds["DUPLICATE"] = loop.duplicates_total  # a redelivery's waiter shares the first outcome
    return len(msgs) / elapsed, {"outcomes": kinds, "events": sum(published)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pieces", type=int, default=600)
    ap.add_argument("--fast", action="store_true", help="fsync off (both sides)")
    ap.add_argument("--database-url")
    ap.add_argument("--ceiling-seconds", type=float, default=5.0)
    args = ap.parse_args(argv)

    tmp = server = None
    if args.database_url:
        url = args.database_url
    else:
        tmp = tempfile.TemporaryDirectory(prefix="linectl-bench-")
        server = EmbeddedPostgres(Path(tmp.name) / "pg", fast=args.fast)
        url = server.start()
    try:
        upgrade(url)
        engine = make_engine(url, pool_size=3)
        layout = bench_layout(args.pieces)
        with engine.begin() as conn:
            DBState(conn).sync_equipment(layout)
        tasks = stage(engine, layout, args.pieces)
        msgs = stream(tasks)
        ceil = ceiling(url, args.ceiling_seconds)
        rate, info = run_loop(engine, layout, msgs)
        engine.dispose()
    finally:
        if server is not None:
            server.stop()
            tmp.cleanup()

    print(f"event loop benchmark ({'fsync off' if args.fast else 'fsync on'}; {len(msgs)} messages: "
          f"{info['outcomes']}, {info['events']} events)")
    print(f"{'':44}{'per second':>12}{'ratio':>8}")
    print(f"{'ceiling: 1-row UPDATE + COMMIT, one psycopg2':44}{ceil:>12.0f}{1:>8.2f}")
    print(f"{'event loop: messages (one transaction each)':44}{rate:>12.0f}{rate / ceil:>8.2f}")
    print(f"target: >= 0.50 of the ceiling -> {'met' if rate / ceil >= 0.5 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
