"""The README's walkthrough, done by a browser: ``linectl up`` as real
processes, the operator page in headless Chromium. Create and start the demo
order on the page; the line_controller is killed mid-order (nothing to
answer: the hardware kept its actions); then the hardware service is killed
while it carries a piece, the question appears on the page and is answered
there by what the cell shows; the order reaches 4/4 on screen with exact
counts."""

from __future__ import annotations

import os

import pytest

from tests.gateway.cdp import CHROMIUM, Browser
from tests.ops.crashing import CARRYING, kill, line_up, reported
from tests.ops.invariants import line_invariants
from tests.ops.operator import ROBOT_IDLE_WAIT, answer_for, plc_state
from tests.support.waiting import wait_for

QUANTITY = 4

pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent (Debian package `chromium`); the page test needs it")


@pytest.fixture
def browser(tmp_path):
    b = Browser(tmp_path / "chromium-profile")
    yield b
    b.close()


def answer_on_the_page(browser, stack, token, carried: int) -> None:
    """The recovery question about the task ``carried``, on the page, answered
    there by what the cell shows."""
    page = browser.check
    selector = "#manual li[data-manual-action-id]"
    wait_for(lambda: page(f"!!document.querySelector('{selector}')"), 30,
             message="the recovery question on the page")
    assert page("!document.getElementById('confirm-recovery').hidden")
    # Like a person: wait for the robot to stop, look at the cell, answer on the page.
    plc = wait_for(lambda: (s := plc_state(stack.amqp_uri())) and s.get("connected")
                   and s["robot"].get("state") != "BUSY" and s, ROBOT_IDLE_WAIT, 0.2)
    (action,) = stack.get("/api/manual-actions?status=OPEN", token)[1]["items"]
    task = next(t for t in stack.get("/api/tasks?status=FAILED&limit=500", token)[1]["items"]
                if t["id"] == carried)
    choice = answer_for(action, task, plc)
    browser.evaluate(f"document.querySelector('#manual li[data-manual-action-id=\"{action['id']}\"]"
                     f" button[data-resolution=\"{choice}\"]').click()")
    wait_for(lambda: page(f"!document.querySelector('{selector}')"
                          " && document.getElementById('confirm-recovery').hidden"),
             30, message="the question answered on the page")
    print(f"answered on the page: {action['kind']} -> {choice}")


def test_the_readme_walkthrough_in_a_browser(stack_factory, browser):
    stack, token, line = line_up(stack_factory, sim_speed=20.0)
    page = browser.check
    with reported(stack, line):
        browser.navigate(stack.base + "/")
        wait_for(lambda: page("document.readyState === 'complete'"), 30)
        browser.evaluate(f"localStorage.setItem('linectl.token', '{token}')")
        browser.navigate(stack.base + "/")
        wait_for(lambda: page("document.body.dataset.loaded === 'true'"
                              " && document.getElementById('conn').dataset.state === 'on'"),
                 30, message="the page, live")

        # The demo order, created and started from the page.
        browser.evaluate(f"document.getElementById('product').value = 'SHAFT-B';"
                         f"document.getElementById('quantity').value = '{QUANTITY}';"
                         "document.querySelector('#create-order button').click()")
        order_id = wait_for(lambda: browser.evaluate(
            "(r => r && r.querySelector('.status').dataset.status === 'CREATED' && r.dataset.orderId)"
            "(document.querySelector('#orders tbody tr[data-order-id]'))"), 30, message="the new order row")
        row = f"tr[data-order-id=\"{order_id}\"]"
        browser.evaluate(f"document.querySelector('{row} button[data-action=start]').click()")

        # The line_controller dies while the hardware holds a refill: it asks nothing.
        refill, mark = kill(stack, "line_controller", lambda: line.held_task(["DOCK_TO_BUFFER"], every=True),
                            "a refill held by the hardware")
        stack.wait_line("recovery check: 0 inconsistencies", after=mark)

        # The hardware service dies while it carries a piece: a question on the page.
        carried, _ = kill(stack, "hardware", lambda: line.held_task(CARRYING), "a piece being carried")
        if line.task(carried).status != "SUCCEEDED":  # its result did not get out first
            answer_on_the_page(browser, stack, token, carried)

        # The order finishes on screen: QUANTITY of QUANTITY, completed + scrapped.
        wait_for(lambda: page(f"document.querySelector('{row} .status').dataset.status === 'COMPLETED'"
                              f" && document.querySelector('{row} progress').value === {QUANTITY}"),
                 180, 0.5, "the order completed on the page")
        assert page("document.getElementById('message').textContent === ''")
        done = stack.get(f"/api/work-orders/{order_id}", token)[1]
        assert done["completedQty"] + done["scrappedQty"] == QUANTITY, done
        assert line_invariants(stack.database_url(), int(order_id)) == []
        assert (line.task(refill).status, line.actions_about(refill)) == ("SUCCEEDED", [])
        assert stack.terminate() == 0
