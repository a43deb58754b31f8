"""``linectl up`` with ``LINECTL_SIM_PROTOCOL=opcua``: the simulator serves OPC UA
and the hardware service speaks it (PRODUCT.md, "Field protocols"). Secured as a
plant would run it: Basic256Sha256 with SignAndEncrypt, the client's certificate
generated into the data directory, a user name and password. A 20-piece order
runs to the end through the real processes, with exact counts."""

import pytest

from tests.ops.invariants import line_invariants
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

QUANTITY = 20
SECURED = {"LINECTL_SIM_PROTOCOL": "opcua", "LINECTL_OPCUA_SECURITY": "sign-and-encrypt",
           "LINECTL_OPCUA_USER": "cell-integrator", "LINECTL_OPCUA_PASSWORD": "a-long-cell-password-42"}


def test_linectl_up_runs_a_20_piece_order_over_a_secured_opc_ua_session(stack_factory):
    stack = stack_factory(extra_env=SECURED).up()
    stack.wait_ready()  # the factory's cleanup stops the stack
    assert f"OPC UA on opc.tcp://127.0.0.1:{stack.sim_port}, security sign-and-encrypt" in stack.output()
    # the hardware service's client certificate, generated once into the data directory
    assert (stack.data_dir / "opcua" / "linectl-hardware.der").is_file()
    token = stack.token("operator")
    code, order = stack.request("POST", "/api/work-orders", {"productId": "SHAFT-B", "quantity": QUANTITY}, token)
    assert code == 201, order
    code, started = stack.request("POST", f"/api/work-orders/{order['id']}/start", {}, token, timeout=30)
    assert code == 200, started

    def finished():
        status = stack.get(f"/api/work-orders/{order['id']}", token)[1]["status"]
        return status if status in ("COMPLETED", "CANCELLED") else None

    assert wait_for(finished, 300, 0.5, "the order finished") == "COMPLETED"
    done = stack.get(f"/api/work-orders/{order['id']}", token)[1]
    assert done["completedQty"] + done["scrappedQty"] == QUANTITY, done
    assert line_invariants(stack.database_url(), order["id"]) == []
    code, actions = stack.get("/api/manual-actions?status=OPEN&limit=500", token)
    assert code == 200 and actions["items"] == [], actions
