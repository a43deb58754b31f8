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

    python tests/bench/bench_event_loop.py [--pieces 1000] [--rounds 5] [--fast] [--database-url URL]

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
from services.stack.migrate import upgrade  # noqa: E402
from shared.db.embedded import EmbeddedPostgres  # noqa: E402
from shared.db.engine import make_engine  # noqa: E402
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


def run_loop(loop, msgs) -> float:
    start = time.perf_counter()
    pendings = [loop.submit(m) for m in msgs]
    for p in pendings:
        p.wait(600)
    return len(msgs) / (time.perf_counter() - start)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pieces", type=int, default=1000)
    ap.add_argument("--fast", action="store_true", help="fsync off (both sides)")
    ap.add_argument("--database-url")
    ap.add_argument("--ceiling-seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=5)
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
        msgs = stream(stage(engine, layout, args.pieces))
        published = []
        loop = EventLoop(engine, layout, publish=lambda tx, frames: published.append(len(frames)))
        loop.start()
        # Alternate the two sides in rounds: a machine shared with other work
        # slows both alike within a round, so the per-round ratio is the fair one.
        chunk = -(-len(msgs) // args.rounds)
        rounds = []
        for i in range(args.rounds):
            ceil = ceiling(url, args.ceiling_seconds)
            rate = run_loop(loop, msgs[i * chunk:(i + 1) * chunk])
            rounds.append((ceil, rate))
        status = loop.status()
        loop.stop()
        engine.dispose()
    finally:
        if server is not None:
            server.stop()
            tmp.cleanup()

    print(f"event loop benchmark ({'fsync off' if args.fast else 'fsync on'}; {len(msgs)} messages, "
          f"{status['duplicatesTotal']} of them duplicates; {sum(published)} events in "
          f"{len(published)} transactions)")
    print(f"{'round':>5}{'ceiling commits/s':>20}{'loop messages/s':>18}{'ratio':>8}")
    for i, (ceil, rate) in enumerate(rounds, 1):
        print(f"{i:>5}{ceil:>20.0f}{rate:>18.0f}{rate / ceil:>8.2f}")
    ratios = sorted(rate / ceil for ceil, rate in rounds)
    median = ratios[len(ratios) // 2]
    print(f"median ratio {median:.2f} (target >= 0.50: {'met' if median >= 0.5 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
