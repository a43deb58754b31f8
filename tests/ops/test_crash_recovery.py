"""Crash safety, the short version of ``tests/bench/soak_crash.py``: ``linectl
up`` runs an order on the simulator while the test kills real processes with
``kill -9`` at chosen moments — the line_controller during the first refill,
the hardware service while the robot carries a piece, the line_controller
again while a machine runs. After each restart an automated operator answers
the recovery questions by looking at the cell (``tests/ops/operator.py``).
The order must finish with exact counts and every invariant must hold."""

import os
import signal

from sqlalchemy import create_engine, text

from tests.ops.invariants import line_invariants
from tests.ops.operator import resolve_open_recovery
from tests.support.waiting import wait_for

QUANTITY = 6
CARRYING = ("BUFFER_TO_EQUIPMENT", "EQUIPMENT_TO_BUFFER", "SWAP")


class Line:
    """Reads the stack's database directly: the moment to kill at."""

    def __init__(self, url):
        self.engine = create_engine(url, pool_size=1)

    def running_task(self, kinds):
        with self.engine.connect() as c:
            return c.execute(text("SELECT id, kind FROM task WHERE status = 'RUNNING' AND kind = ANY(:k) "
                                  "ORDER BY id LIMIT 1"), {"k": list(kinds)}).first()

    def running_machine(self):
        with self.engine.connect() as c:
            return c.execute(text("SELECT id FROM equipment WHERE status = 'RUNNING' LIMIT 1")).scalar()

    def open_tasks(self):
        with self.engine.connect() as c:
            return c.execute(text("SELECT count(*) FROM task WHERE status IN ('PENDING', 'RUNNING')")).scalar()


def kill(stack, name, moment, what):
    """``kill -9`` process ``name`` as soon as ``moment()`` is true, and wait until
    its successor is up and the stack is ready again."""
    wait_for(moment, 90, 0.01, what)
    pid = stack.process(name)
    os.kill(pid, signal.SIGKILL)
    mark = len(stack.lines)
    stack.wait_line(f"{name} exited", after=mark)
    wait_for(lambda: stack.process(name) not in (None, pid), 60, 0.05, f"{name} restarted")
    stack.wait_ready(120)
    return mark


def test_three_kills_during_an_order_lose_and_duplicate_nothing(stack_factory):
    stack = stack_factory(sim_speed=20.0).up()
    stack.wait_line("linectl: ready", 180)
    token = stack.token("operator")
    line = Line(stack.database_url())
    answered = 0

    def answer():
        nonlocal answered
        answered += resolve_open_recovery(stack, token, stack.amqp_uri())

    try:
        code, order = stack.request("POST", "/api/work-orders",
                                    {"productId": "SHAFT-B", "quantity": QUANTITY}, token)
        assert code == 201, order
        assert stack.request("POST", f"/api/work-orders/{order['id']}/start", {}, token)[0] == 200

        # 1. The line_controller, while the robot brings the first pieces in.
        mark = kill(stack, "line_controller", lambda: line.running_task(["DOCK_TO_BUFFER"]),
                    "a refill on the robot")
        stack.wait_line("recovery check:", after=mark)
        answer()
        # 2. The hardware service, while the robot carries a piece to or from a machine.
        kill(stack, "hardware", lambda: line.running_task(CARRYING), "the robot carrying a piece")
        answer()
        # 3. The line_controller again, while a machine runs its cycle.
        mark = kill(stack, "line_controller", line.running_machine, "a machine cycle")
        stack.wait_line("recovery check:", after=mark)

        def finished():
            answer()
            return stack.get(f"/api/work-orders/{order['id']}", token)[1].get("status") == "COMPLETED"
        wait_for(finished, 180, 0.5, "the order to complete")
        wait_for(lambda: line.open_tasks() == 0, 60, 0.1, "every take-out done")

        done = stack.get(f"/api/work-orders/{order['id']}", token)[1]
        assert done["completedQty"] + done["scrappedQty"] == QUANTITY, done
        assert line_invariants(stack.database_url(), order["id"]) == []
        code, actions = stack.get("/api/manual-actions?status=OPEN&limit=500", token)
        assert code == 200 and actions["items"] == [], actions
        assert stack.terminate() == 0
    finally:
        line.engine.dispose()
