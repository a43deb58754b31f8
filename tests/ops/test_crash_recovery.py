"""Crash safety, the short version of ``tests/bench/soak_crash.py``: ``linectl
up`` runs an order on the simulator while the test kills real processes with
``kill -9`` at chosen moments — the line_controller during the first refill,
the hardware service while the robot carries a piece, the line_controller
again while a machine runs. After each restart an automated operator answers
the recovery questions by looking at the cell (``tests/ops/operator.py``).
The order must finish with exact counts and every invariant must hold, on
both field protocols: the simulator over Modbus TCP and over OPC UA.

Over OPC UA the session is secured as a plant would run it (PRODUCT.md, "Field
protocols"): Basic256Sha256 with SignAndEncrypt, the hardware service's client
certificate generated once into the data directory (and reused by each restarted
instance), a user name and password. That ``linectl up`` runs an order to the end
over such a session was a test of its own (test_up_opcua, a 20-piece order on a
stack of its own); this order proves it, killed processes and all."""

import pytest
from sqlalchemy import text

from tests.ops.crashing import CARRYING, completes_exactly, kill, line_up, reported, start_order
from tests.ops.operator import resolve_open_recovery

QUANTITY = 6
SECURED = {"LINECTL_OPCUA_SECURITY": "sign-and-encrypt", "LINECTL_OPCUA_USER": "cell-integrator",
           "LINECTL_OPCUA_PASSWORD": "a-long-cell-password-42"}


@pytest.mark.parametrize("protocol", ["modbus", "opcua"])
def test_three_kills_during_an_order_lose_and_duplicate_nothing(stack_factory, protocol):
    secured = SECURED if protocol == "opcua" else {}
    stack, token, line = line_up(stack_factory, sim_speed=40.0, protocol=protocol, extra_env=secured)
    if secured:
        assert f"OPC UA on opc.tcp://127.0.0.1:{stack.sim_port}, security sign-and-encrypt" in stack.output()
        # the hardware service's client certificate, generated once into the data directory
        assert (stack.data_dir / "opcua" / "linectl-hardware.der").is_file()
    answered = 0

    def answer():
        nonlocal answered
        answered += resolve_open_recovery(stack, token, stack.amqp_uri())

    with reported(stack, line):
        order = start_order(stack, token, "SHAFT-B", QUANTITY)

        # 1. The line_controller, while the hardware holds a refill it sent.
        refill, mark = kill(stack, "line_controller", lambda: line.held_task(["DOCK_TO_BUFFER"], every=True),
                            "a refill held by the hardware")
        stack.wait_line("recovery check:", after=mark)
        answer()
        # 2. The hardware service, while it holds a piece being carried to or from a machine.
        carried, mark = kill(stack, "hardware", lambda: line.held_task(CARRYING), "a piece being carried")
        # the new instance's check asks about the carried piece: answer once it has
        # (a secured OPC UA session takes a while to open on a loaded machine)
        stack.wait_line("recovery check:", after=mark, timeout=60)
        answer()
        # 3. The line_controller again, while a machine runs its cycle.
        _, mark = kill(stack, "line_controller", line.running_machine, "a machine cycle")
        stack.wait_line("recovery check:", after=mark)
        completes_exactly(stack, token, line, order, QUANTITY, answer)
        # The refill the surviving hardware held needed nobody: its own result concluded it.
        assert (line.task(refill).status, line.actions_about(refill)) == ("SUCCEEDED", [])
        # The carried piece's action died with the hardware: an operator was asked, never silence
        # (unless its result got out just before the kill).
        lost = line.task(carried)
        assert lost.status == "SUCCEEDED" or (
            lost.error_code == "RECOVERY_OUTCOME_UNKNOWN"
            and [a.status for a in line.actions_about(carried)] == ["RESOLVED"]), lost
        print("\n".join(out for out in stack.lines if "recovery check:" in out or "exited" in out))
        print(f"recovery answers: {answered}; carried task: {lost.status} {lost.error_code}")
        with line.engine.connect() as c:
            for a in c.execute(text("SELECT kind, text, resolution FROM manual_action ORDER BY id")):
                print(f"asked: {a.kind}: {a.text[:160]} -> {a.resolution}")
        assert stack.terminate() == 0
