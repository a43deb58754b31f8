"""Crash soak (not part of the suite, not a ``bench_*`` script): ``linectl up``
on a temp data directory runs orders on the simulator, one after another (a
new one whenever the last has completed, so every kill lands while an order
runs), while this script kills real processes at random moments — ``kill -9``
of the line_controller and of the hardware service, and an immediate
(crash-like) PostgreSQL stop and start — then answers the recovery questions
as an operator looking at the cell would, and checks at the end: every order
finished, completed + scrapped = quantity exactly, no piece counted twice, no
job in two slots, no buffer slot held twice, event_log seq without gaps, no
question left open.

Beside the kills it injects ``--faults`` floor faults (a machine fault in the
middle of a cycle, or an emergency stop of the whole cell), clears each after
a moment, and answers their questions as a scripted operator with a random
allowed choice (RESTART_CYCLE / RETURN_TO_BUFFER / SCRAP; RETRY for a failed
robot action). The same invariants must hold, and the cell must be empty.

Beside the kills it restarts the hardware service cleanly (SIGTERM, as systemd
does) ``--clean-restarts`` times, and checks that no clean stop caused an
operator question (manual actions counted before each SIGTERM and once the
stack is ready again).

    .venv/bin/python tests/bench/soak_crash.py [--kills 20] [--faults 10] [--clean-restarts 5]
        [--quantity 12] [--seed N] [--protocol modbus|opcua]

``--protocol opcua`` runs the simulator as an OPC UA server (LINECTL_SIM_PROTOCOL)
and the hardware service speaks OPC UA to it; faults go through its SimControl methods.

``--failover`` runs the stack on a primary and its synchronous standby
(tests/support/replica_pair.py) named by one multi-host URL, and adds a fourth
victim: ``failover``, a ``kill -9`` of the primary's server that the standby
takes over from (promoted as an HA manager would; the old primary then rejoins
as the new one's standby, so the next failover goes back). The ``postgres``
victim stays a crash of the primary that comes back in place: kills of the
primary alternate with failovers. A failover must ask nothing and lose nothing.

``--plant`` runs the plant soak instead (tests/bench/soak_plant.py; its own options).

``--quantity 0`` runs the kill/restart/readiness cycle without an order.
Bounded: each restart must be ready within 120 s, the orders must finish
within ``--finish-seconds`` after the last kill.
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

from services.hardware.sim.control import sim_control  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.db.embedded import EmbeddedPostgres  # noqa: E402
from shared.db.engine import sqlalchemy_url  # noqa: E402
from shared.layout import load_layout  # noqa: E402
from tests.ops.invariants import line_invariants  # noqa: E402
from tests.ops.operator import resolve_open_faults, resolve_open_recovery  # noqa: E402
from tests.ops.stack import Stack  # noqa: E402

VICTIMS = (("line_controller", 0.6), ("hardware", 0.25), ("postgres", 0.15))
FAILOVER = "failover"
# --failover: failovers beside crashes of the primary that come back in place (issue 40)
VICTIMS_FAILOVER = (("line_controller", 0.45), ("hardware", 0.2), ("postgres", 0.15), (FAILOVER, 0.2))
CLEAN = "hardware (SIGTERM)"
MACHINES = ("MC1", "MC2", "WASH1", "INSP1")
ESTOP = "e-stop"


def restart_postgres(stack: Stack) -> None:
    if PAIR:  # the primary's server dies and comes back in place; its standby stays
        PAIR[0].kill_primary()
        PAIR[0].restart_primary()
        return
    # immediate: like a crash, no checkpoint; WAL replay on start
    EmbeddedPostgres(stack.data_dir / "pg").restart("immediate")


PAIR: list = []  # --failover: the ReplicaPair the stack runs on


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


def _question_texts(db_url: str) -> list[tuple[str, int]]:
    import sqlalchemy as sa
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as c:
            rows = c.execute(sa.text(
                "SELECT regexp_replace(text, '[0-9]+', 'N', 'g') AS t, count(*) AS n FROM manual_action "
                "GROUP BY 1 ORDER BY 2 DESC")).fetchall()
    finally:
        engine.dispose()
    return [(r[0][:140], r[1]) for r in rows]


def _last_seq(db_url: str) -> int:
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url)
    try:
        with engine.connect() as c:
            return c.execute(text("SELECT coalesce(max(seq), 0) FROM event_log")).scalar()
    finally:
        engine.dispose()


def _wait_recovery_checked(db_url: str, after_seq: int, timeout: float = 60.0) -> None:
    """Until the loop has handled a RecoveryCheck after ``after_seq`` (a new
    hardware instance's start is checked once)."""
    from sqlalchemy import create_engine, text

    from tests.support.waiting import wait_for

    engine = create_engine(db_url)
    try:
        def checked():
            with engine.connect() as c:
                return c.execute(text("SELECT 1 FROM event_log WHERE seq > :s AND type = 'RecoveryChecked'"),
                                 {"s": after_seq}).first() is not None
        wait_for(checked, timeout, 0.2, "the new hardware instance's recovery check")
    finally:
        engine.dispose()


def main() -> int:
    if "--plant" in sys.argv[1:]:  # a plant of several lines, one of them hit: tests/bench/soak_plant.py
        from tests.bench.soak_plant import main as plant_main
        return plant_main([arg for arg in sys.argv[1:] if arg != "--plant"])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--clean-restarts", type=int, default=5, help="SIGTERMs of the hardware service")
    parser.add_argument("--faults", type=int, default=10, help="machine faults mid-cycle and e-stops")
    parser.add_argument("--quantity", type=int, default=12, help="pieces per order (orders follow each other)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--sim-speed", type=float, default=20.0)
    parser.add_argument("--finish-seconds", type=float, default=900.0)
    parser.add_argument("--protocol", choices=("modbus", "opcua"), default="modbus",
                        help="what the simulator serves and the hardware service speaks")
    parser.add_argument("--failover", action="store_true",
                        help="a primary and its synchronous standby; kills of the primary alternate with failovers")
    args = parser.parse_args()
    args.victims = VICTIMS_FAILOVER if args.failover else VICTIMS
    # SIGTERM (e.g. `timeout`) ends the run through the cleanup below, not around it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="linectl-soak-") as tmp:
        stack = Stack(Path(tmp) / "data", {}, sim_speed=args.sim_speed,
                      extra_env={"LINECTL_LOG_LEVEL": "WARNING", "LINECTL_SIM_PROTOCOL": args.protocol})
        if args.failover:
            from tests.support.replica_pair import ReplicaPair

            PAIR.append(ReplicaPair().start())
            stack.env["LINECTL_DATABASE_URL"] = PAIR[0].url
        try:
            return run(stack, args, rng)
        finally:
            stack.cleanup()
            for pair in PAIR:
                pair.stop()


PRODUCTS = ("SHAFT-B", "BRACKET-A")  # in turn: BRACKET-A's route has the washer's batches


def start_order(stack: Stack, token: str, quantity: int, product: str = "SHAFT-B") -> int:
    deadline = time.monotonic() + 120
    while True:  # a kill just before may not have shown in /readyz yet: 503 until it is back
        code, order = stack.request("POST", "/api/work-orders", {"productId": product, "quantity": quantity},
                                    token, timeout=30)
        if code != 503 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert code == 201, order
    code, body = stack.request("POST", f"/api/work-orders/{order['id']}/start", {}, token, timeout=30)
    assert code == 200, body
    return order["id"]


def order_status(stack: Stack, token: str, order_id: int) -> str | None:
    return stack.get(f"/api/work-orders/{order_id}", token)[1].get("status")


def kill_schedule(args, rng: random.Random) -> list[str]:
    """What to stop, in order: each kind at least once, the rest by weight, and the clean restarts."""
    victims = args.victims
    schedule = [name for name, _ in victims if name != "line_controller"]  # each kind at least once
    schedule += rng.choices([n for n, _ in victims], [w for _, w in victims], k=args.kills - len(schedule))
    schedule += [CLEAN] * args.clean_restarts
    schedule += [ESTOP if rng.random() < 0.3 else f"fault {rng.choice(MACHINES)}" for _ in range(args.faults)]
    rng.shuffle(schedule)
    return schedule


def wait_mid_cycle(db_url: str, victim: str, seconds: float = 30.0) -> bool:
    """Wait (up to ``seconds``) until the fault would stop a cycle: its machine
    RUNNING (an e-stop: any machine). Whether it came."""
    from sqlalchemy import create_engine, text

    machine = None if victim == ESTOP else victim.split()[1]
    engine = create_engine(db_url, pool_size=1)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            with engine.connect() as c:
                running = set(c.execute(text("SELECT id FROM equipment WHERE status = 'RUNNING'")).scalars())
            if running if machine is None else machine in running:
                return True
            time.sleep(0.1)  # the pace of the look at the DB
        return False
    finally:
        engine.dispose()


def _sim_control(stack: Stack):
    protocol = stack.env.get("LINECTL_SIM_PROTOCOL", "modbus")
    address = f"{'opc.tcp://' if protocol == 'opcua' else ''}127.0.0.1:{stack.sim_port}"
    return sim_control(load_layout(Settings().line_file), address)


def take_out_finished_pieces(stack: Stack, token: str, answers: dict) -> int:
    """As a person at the cell: a finished piece the robot could not take out (its
    BUFFER_TO_DOCK failed, as in an e-stop) is taken off its buffer slot by hand,
    and the action answered DONE. How many."""
    code, body = stack.get("/api/manual-actions?status=OPEN&limit=500", token)
    actions = [a for a in body.get("items", []) if a["kind"] == "REMOVE_FINISHED_PIECE"] if code == 200 else []
    if not actions:
        return 0
    control = _sim_control(stack)
    taken = 0
    try:
        for action in actions:
            control.take_from_buffer(int(action["facts"]["bufferSlot"]))
            code, reply = stack.request("POST", f"/api/manual-actions/{action['id']}/resolve",
                                        {"resolution": "DONE"}, token, timeout=30)
            assert code == 200, (code, reply)
            taken += 1
            answers[(action["kind"], "DONE")] = answers.get((action["kind"], "DONE"), 0) + 1
    finally:
        control.close()
    return taken


def inject_fault(stack: Stack, victim: str, rng: random.Random) -> None:
    """A machine fault (or the whole cell's e-stop) now, cleared 0.5..2 s later."""
    play_fault(_sim_control(stack), victim, rng)


def play_fault(control, victim: str, rng: random.Random) -> None:
    """``victim`` (ESTOP or ``fault <machine>``) on a simulator's control, cleared
    0.5..2 s later; the control is closed afterwards."""
    try:
        if victim == ESTOP:
            control.emergency_stop()
        else:
            control.machine_fault(victim.split()[1])
        time.sleep(rng.uniform(0.5, 2.0))  # how long the fault lasts on the floor
        control.clear()
    finally:
        control.close()


def _process_of(victim: str) -> str:
    """The stack's process a (non-PostgreSQL) victim names."""
    return "hardware" if victim == CLEAN else victim


def stop_victim(stack: Stack, victim: str) -> int | None:
    """kill -9 (postgres: a restart; CLEAN: SIGTERM to hardware, waited for). The
    stopped process's pid (0 for PostgreSQL); None if it is not running."""
    if victim == "postgres":
        restart_postgres(stack)
        return 0
    if victim == FAILOVER:
        PAIR[0].fail_over()
        return 0
    pid = stack.process(_process_of(victim))
    if pid is None:
        return None
    if victim == CLEAN:
        os.kill(pid, signal.SIGTERM)
        mark = len(stack.lines)
        stack.wait_line("hardware exited", after=mark, timeout=60)
    else:
        os.kill(pid, signal.SIGKILL)
    return pid


def wait_restarted(stack: Stack, db_url: str, victim: str, pid: int, seq_before: int) -> None:
    """Until the stopped process's successor runs, the stack is ready, and (for a
    service) the loop has checked the line against it: what the stop caused is
    asked before anything else happens, and is not laid at the next stop's door."""
    if victim in ("postgres", FAILOVER):
        stack.wait_ready(120)
        if victim == FAILOVER:  # the old primary back as a standby, for the next failover
            PAIR[0].rejoin()
        return
    from tests.support.waiting import wait_for

    name = _process_of(victim)
    wait_for(lambda: stack.process(name) not in (None, pid), 60, 0.05, f"{name} restarted")
    stack.wait_ready(120)
    _wait_recovery_checked(db_url, seq_before)


def finish_orders(stack: Stack, token: str, amqp: str, orders: list[int], seconds: float,
                  answer_faults=lambda: 0) -> tuple[bool, int]:
    """Wait for every order to complete, answering recovery questions; whether they all
    did within `seconds`, and how many answers that took."""
    finished, answered = True, 0
    deadline = time.monotonic() + seconds
    for order_id in orders:
        while True:
            answered += resolve_open_recovery(stack, token, amqp) + answer_faults()
            if order_status(stack, token, order_id) == "COMPLETED":
                break
            if time.monotonic() > deadline:
                finished = False
                break
            time.sleep(1.0)
    return finished, answered


def broken_rules(db_url: str, orders: list[int], clean_questions: int, finished: bool, asked: dict) -> list[str]:
    broken = [b for order_id in orders or [None] for b in line_invariants(db_url, order_id)]
    broken = list(dict.fromkeys(broken))  # the line-wide rules are checked once per order
    if clean_questions:
        broken.append(f"{clean_questions} operator question(s) caused by clean hardware stops")
    if finished:
        open_actions = sum(n for (kind, status), n in asked.items() if status == "OPEN")
        if open_actions:
            broken.append(f"{open_actions} manual actions still open")
    return broken


def report(stack: Stack, token: str, kills: dict, during_order: int, answered: int, asked: dict,
           orders: list[int], broken: list[str]) -> None:
    print()
    print(f"{'kills':<28}{sum(kills.values())} ({', '.join(f'{k} {v}' for k, v in kills.items())}); "
          f"{during_order} while an order ran")
    print(f"{'recovery answers':<28}{answered}")
    for (kind, status), n in sorted(asked.items()):
        print(f"{'  ' + kind + ' ' + status:<48}{n}")
    for order_id in orders:
        order = stack.get(f"/api/work-orders/{order_id}", token)[1]
        print(f"{'order ' + str(order_id):<28}{order.get('status')} completed {order.get('completedQty')} "
              f"+ scrapped {order.get('scrappedQty')} of {order.get('quantity')}")
    print(f"{'invariants':<28}{'all hold' if not broken else '; '.join(broken)}")


def stack_cell(amqp: str) -> str | None:
    """What the PLC still holds at the end (None: the cell is empty)."""
    from tests.ops.operator import plc_state
    plc = plc_state(amqp)
    if not plc or not plc.get("connected"):
        return "the PLC could not be read at the end"
    pieces = [f"buffer {b['slotNo']}" for b in plc["buffer"] if b["occupied"]]
    pieces += [f"{m['id']}:{s['slotNo']}" for m in plc["equipment"] for s in m["slots"] if s["occupied"]]
    return f"pieces left in the cell: {', '.join(pieces)}" if pieces else None


def run(stack: Stack, args, rng: random.Random) -> int:
    t0 = time.monotonic()
    stack.up()
    stack.wait_line("linectl: ready", 180)
    db_url, amqp = sqlalchemy_url(stack.database_url()), stack.amqp_uri()
    token = stack.token("operator")
    orders: list[int] = []
    kills = {name: 0 for name, _ in args.victims}
    answered = during_order = 0
    schedule = kill_schedule(args, rng)
    kills[CLEAN] = 0
    clean_questions = 0
    faults: dict[str, int] = {}
    answers: dict[tuple[str, str], int] = {}
    faults_during_order = faults_mid_cycle = fault_answers = 0

    def answer_faults() -> int:  # the scripted operator at the cell
        return resolve_open_faults(stack, token, rng, answers) + take_out_finished_pieces(stack, token, answers)

    for n, victim in enumerate(schedule, 1):
        # Every kill lands while an order runs: a new one starts when the last has finished.
        if args.quantity and (not orders or order_status(stack, token, orders[-1]) == "COMPLETED"):
            orders.append(start_order(stack, token, args.quantity, PRODUCTS[len(orders) % len(PRODUCTS)]))
        time.sleep(rng.uniform(0.5, 4.0))  # a random moment of the running order
        if victim == ESTOP or victim.startswith("fault"):
            # A floor fault matters mid-cycle: wait for its machine to run (not for ever).
            mid_cycle = wait_mid_cycle(db_url, victim)
            inject_fault(stack, victim, rng)
            faults[victim] = faults.get(victim, 0) + 1
            faults_mid_cycle += mid_cycle
            running = order_status(stack, token, orders[-1]) == "RUNNING" if orders else False
            faults_during_order += running
            fault_answers += answer_faults()
            print(f"fault {n:2}: {victim:<16} injected and cleared"
                  f"{' mid-cycle' if mid_cycle else ''}{'' if running else '  (between orders)'}", flush=True)
            continue
        running = bool(orders) and order_status(stack, token, orders[-1]) == "RUNNING"
        asked_before = sum(_asked(db_url).values()) if victim == CLEAN else 0
        seq_before = _last_seq(db_url)
        stopped = stop_victim(stack, victim)
        for _ in range(3):  # not running (still restarting from the last kill): again once it is up
            if stopped is not None:
                break
            stack.wait_ready(120)
            stopped = stop_victim(stack, victim)
        if stopped is None:
            print(f"kill {n:2}: {victim} was never running to be stopped", flush=True)
            continue
        kills[victim] += 1
        during_order += running
        t_kill = time.monotonic()
        try:
            wait_restarted(stack, db_url, victim, stopped, seq_before)
        except AssertionError:
            print(f"kill {n}: {victim}: not ready again: {stack.get('/readyz')}\n"
                  + "\n".join(stack.lines[-40:]), flush=True)
            raise
        if victim == CLEAN:
            new_questions = sum(_asked(db_url).values()) - asked_before
            clean_questions += new_questions
            if new_questions:
                print(f"kill {n:2}: a clean stop caused {new_questions} question(s)", flush=True)
        answered += resolve_open_recovery(stack, token, amqp)
        fault_answers += answer_faults()
        print(f"kill {n:2}: {victim:<16} ready again after {time.monotonic() - t_kill:5.1f}s"
              f"{'' if running else '  (between orders)'}", flush=True)
    finished, finish_answers = finish_orders(stack, token, amqp, orders, args.finish_seconds,
                                             answer_faults)
    answered += finish_answers
    asked = _asked(db_url)
    broken = broken_rules(db_url, orders, clean_questions, finished, asked)
    cell = stack_cell(amqp)
    if cell:
        broken.append(cell)
    stops, asked_for = sum(kills.values()) - kills[CLEAN], args.kills
    if stops < asked_for or kills[CLEAN] < args.clean_restarts or sum(faults.values()) < args.faults:
        broken.append(f"fewer than asked: {stops} of {asked_for} kills, {kills[CLEAN]} of {args.clean_restarts}"
                      f" clean restarts, {sum(faults.values())} of {args.faults} faults")
    report(stack, token, kills, during_order, answered, asked, orders, broken)
    for text_, k in _question_texts(db_url)[:8]:  # what was asked most: the first thing to read on failure
        print(f"  {k:>5} × {text_}")
    print(f"{'faults':<28}{sum(faults.values())} ({', '.join(f'{k} {v}' for k, v in sorted(faults.items()))}); "
          f"{faults_during_order} while an order ran, {faults_mid_cycle} mid-cycle")
    print(f"{'fault answers':<28}{fault_answers}")
    for (kind, choice), k in sorted(answers.items()):
        print(f"{'  ' + kind + ' ' + choice:<48}{k}")
    print(f"{'wall time':<28}{time.monotonic() - t0:.0f}s")
    assert stack.terminate() == 0
    return 0 if finished and not broken else 1

if __name__ == "__main__":
    sys.exit(main())
