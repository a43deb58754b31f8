"""A clean restart of the hardware service (SIGTERM, as systemd or an operator
does it) in the middle of an order asks an operator nothing: the queued robot
actions come back NOT_EXECUTED and their jobs are put back, the executing one
finishes, no work is sent until the new instance is up, and the order ends
with exact counts. (A ``kill -9`` still asks: tests/ops/test_crash_recovery.py.)"""

import signal

from sqlalchemy import text

from tests.ops.crashing import CARRYING, completes_exactly, kill, line_up, reported, start_order

QUANTITY = 4


def test_clean_hardware_restarts_mid_order_ask_nobody(stack_factory):
    stack, token, line = line_up(stack_factory, sim_speed=10.0)
    with reported(stack, line):
        order = start_order(stack, token, "SHAFT-B", QUANTITY)

        # 1. While the robot runs a refill with more queued behind it.
        queued, _ = kill(stack, "hardware", lambda: line.held_robot_tasks(["DOCK_TO_BUFFER"], 3),
                         "refills queued at the hardware", sig=signal.SIGTERM)
        # 2. While it carries a piece to or from a machine.
        kill(stack, "hardware", lambda: line.held_task(CARRYING), "a piece being carried",
             sig=signal.SIGTERM)
        completes_exactly(stack, token, line, order, QUANTITY, timeout=240)  # nobody answering
        with line.engine.connect() as c:
            asked = c.execute(text("SELECT kind, text FROM manual_action")).fetchall()
            alarms = c.execute(text("SELECT code, message FROM alarm")).fetchall()
            outcomes = dict(c.execute(text(
                "SELECT coalesce(error_code, status), count(*) FROM task GROUP BY 1")).fetchall())
        assert asked == [], asked      # no operator question from a clean stop
        assert alarms == [], alarms
        assert "RECOVERY_OUTCOME_UNKNOWN" not in outcomes, outcomes
        # The refills queued behind the executing one never ran: put back, then done again.
        assert outcomes.get("NOT_EXECUTED", 0) >= 1, (outcomes, queued)
        print(f"task outcomes: {outcomes}")
        assert stack.terminate() == 0
