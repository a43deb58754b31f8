"""Crash soak (not part of the suite, not a ``bench_*`` script): ``linectl up``
on a temp data directory runs an order on the simulator while this script
kills real processes at random moments — ``kill -9`` of the line_controller
and of the hardware service, and an immediate (crash-like) PostgreSQL stop and
start — then answers the recovery questions as an operator looking at the
cell would, and checks at the end: the order finished, completed + scrapped =
quantity exactly, no piece counted twice, no job in two slots, no buffer slot
held twice, event_log seq without gaps.

    .venv/bin/python tests/bench/soak_crash.py [--kills 20] [--quantity 12] [--seed N]

``--quantity 0`` runs the kill/restart/readiness cycle without an order.
Bounded: each restart must be ready within 120 s, the order must finish
within ``--finish-seconds``.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shared.db.embedded import EmbeddedPostgres  # noqa: E402
from tests.ops.invariants import line_invariants  # noqa: E402
from tests.ops.operator import resolve_open_recovery  # noqa: E402
from tests.ops.stack import Stack  # noqa: E402

VICTIMS = (("line_controller", 0.6), ("hardware", 0.25), ("postgres", 0.15))


def restart_postgres(stack: Stack) -> None:
    # immediate: like a crash, no checkpoint; WAL replay on start
    EmbeddedPostgres(stack.data_dir / "pg").restart("immediate")


def _asked(db_url: str) -> dict[tuple[str, str], int]:
    """Manual actions by kind and status."""
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url)
    try:
        with engine.connect() as c:
            return {(k, s): n for k, s, n in c.execute(text(
                "SELECT kind, status, count(*) FROM manual_action GROUP BY kind, status"))}
    finally:
        engine.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--quantity", type=int, default=12)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--sim-speed", type=float, default=100.0)
    parser.add_argument("--finish-seconds", type=float, default=900.0)
    args = parser.parse_args()
    # SIGTERM (e.g. `timeout`) ends the run through the cleanup below, not around it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="linectl-soak-") as tmp:
        stack = Stack(Path(tmp) / "data", {}, sim_speed=args.sim_speed,
                      extra_env={"LINECTL_LOG_LEVEL": "WARNING"})
        try:
            return run(stack, args, rng)
        finally:
            stack.cleanup()


def run(stack: Stack, args, rng: random.Random) -> int:
    t0 = time.monotonic()
    stack.up()
    stack.wait_line("linectl: ready", 180)
    db_url, amqp = stack.database_url(), stack.amqp_uri()
    token = stack.token("operator")
    order_id = None
    if args.quantity:
        code, order = stack.request("POST", "/api/work-orders",
                                    {"productId": "SHAFT-B", "quantity": args.quantity}, token)
        assert code == 201, order
        order_id = order["id"]
        assert stack.request("POST", f"/api/work-orders/{order_id}/start", {}, token)[0] == 200
    kills = {name: 0 for name, _ in VICTIMS}
    answered = 0
    schedule = [name for name, _ in VICTIMS if name != "line_controller"]  # each kind at least once
    schedule += rng.choices([n for n, _ in VICTIMS], [w for _, w in VICTIMS], k=args.kills - len(schedule))
    rng.shuffle(schedule)
    for n, victim in enumerate(schedule, 1):
        time.sleep(rng.uniform(0.5, 4.0))  # a random moment of the running order
        if victim == "postgres":
            restart_postgres(stack)
        else:
            pid = stack.process(victim)
            if pid is None:
                continue
            os.kill(pid, signal.SIGKILL)
        kills[victim] += 1
        t_kill = time.monotonic()
        try:
            stack.wait_ready(120)
        except AssertionError:
            print(f"kill {n}: {victim}: not ready again: {stack.get('/readyz')}\n"
                  + "\n".join(stack.lines[-40:]), flush=True)
            raise
        answered += resolve_open_recovery(stack, token, amqp)
        print(f"kill {n:2}: {victim:<16} ready again after {time.monotonic() - t_kill:5.1f}s", flush=True)
    finished = True
    if order_id is not None:
        deadline = time.monotonic() + args.finish_seconds
        while True:
            answered += resolve_open_recovery(stack, token, amqp)
            status = stack.get(f"/api/work-orders/{order_id}", token)[1].get("status")
            if status == "COMPLETED":
                break
            if time.monotonic() > deadline:
                finished = False
                break
            time.sleep(1.0)
    broken = line_invariants(db_url, order_id)
    asked = _asked(db_url)
    if order_id is not None and finished:
        open_actions = sum(n for (kind, status), n in asked.items() if status == "OPEN")
        if open_actions:
            broken.append(f"{open_actions} manual actions still open")
    order = stack.get(f"/api/work-orders/{order_id}", token)[1] if order_id else {}
    print()
    print(f"{'kills':<28}{sum(kills.values())} ({', '.join(f'{k} {v}' for k, v in kills.items())})")
    print(f"{'recovery answers':<28}{answered}")
    for (kind, status), n in sorted(asked.items()):
        print(f"{'  ' + kind + ' ' + status:<48}{n}")
    if order_id:
        print(f"{'order':<28}{order.get('status')} completed {order.get('completedQty')} + scrapped "
              f"{order.get('scrappedQty')} of {order.get('quantity')}")
    print(f"{'invariants':<28}{'all hold' if not broken else '; '.join(broken)}")
    print(f"{'wall time':<28}{time.monotonic() - t0:.0f}s")
    assert stack.terminate() == 0
    return 0 if finished and not broken else 1


if __name__ == "__main__":
    sys.exit(main())
