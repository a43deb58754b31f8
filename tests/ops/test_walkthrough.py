"""The README's walkthrough, done by a browser: ``linectl up`` as real
processes, the operator page in headless Chromium. Create and start the demo
order on the page; the line_controller is killed mid-order (nothing to
answer: the hardware kept its actions); then the hardware service is killed
while it carries a piece, and every question that raises (about whichever
action the dead instance had taken: under load the piece seen carried may have
arrived already and the next move be the one lost) appears on the page and is
answered there by what the cell shows; the order reaches 4/4 on screen with
exact counts and nothing left open."""

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


def answer_on_the_page(browser, stack, token) -> list[str]:
    """Every recovery question open now, on the page, answered there by what the cell
    shows, whatever task it names; what was answered (none: nothing was open)."""
    page = browser.check
    code, body = stack.get("/api/manual-actions?status=OPEN&limit=500", token)
    questions = [a for a in body.get("items", []) if a["kind"].startswith("RECOVERY")] if code == 200 else []
    if not questions:
        return []
    def on_page(action):
        return f"#manual li[data-manual-action-id=\"{action['id']}\"]"
    wait_for(lambda: all(page(f"!!document.querySelector('{on_page(a)}')") for a in questions), 30,
             message="the recovery questions on the page")
    assert page("!document.getElementById('confirm-recovery').hidden")
    # Like a person: wait for the robot to stop, look at the cell, answer on the page.
    plc = wait_for(lambda: (s := plc_state(stack.amqp_uri())) and s.get("connected")
                   and s["robot"].get("state") != "BUSY" and s, ROBOT_IDLE_WAIT, 0.2)
    tasks = {t["id"]: t for t in stack.get("/api/tasks?status=FAILED&limit=500", token)[1]["items"]}
    answered = []
    for action in questions:
        task = tasks.get((action.get("context") or {}).get("taskId"))
        choice = answer_for(action, task, plc)
        browser.evaluate(f"document.querySelector('{on_page(action)} button[data-resolution=\"{choice}\"]').click()")
        wait_for(lambda action=action: page(f"!document.querySelector('{on_page(action)}')"), 30,
                 message="the question answered on the page")
        answered.append(f"{action['kind']} (task {task and task['id']} {task and task['kind']}) -> {choice}")
        print(f"answered on the page: {answered[-1]}")
    return answered


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

        # The hardware service dies while it carries a piece. What it had taken and not
        # reported is in question: asked by the line_controller's check of the new instance,
        # or (a request the dead one took before replying) by the new one's answer. Every
        # question, whatever task it names, is answered on the page by what the cell shows.
        _, mark = kill(stack, "hardware", lambda: line.held_task(CARRYING), "a piece being carried")
        stack.wait_line("recovery check:", after=mark)
        answered: list[str] = []

        def completed():  # the order finishes on screen: QUANTITY of QUANTITY, completed + scrapped
            answered.extend(answer_on_the_page(browser, stack, token))
            return page(f"document.querySelector('{row} .status').dataset.status === 'COMPLETED'"
                        f" && document.querySelector('{row} progress').value === {QUANTITY}")
        wait_for(completed, 180, 0.5, lambda: f"the order completed on the page (answered {answered})")
        assert page("document.getElementById('message').textContent === ''")
        assert stack.get("/api/manual-actions?status=OPEN&limit=500", token)[1]["items"] == []
        done = stack.get(f"/api/work-orders/{order_id}", token)[1]
        assert done["completedQty"] + done["scrappedQty"] == QUANTITY, done
        assert line_invariants(stack.database_url(), int(order_id)) == []
        assert (line.task(refill).status, line.actions_about(refill)) == ("SUCCEEDED", [])
        assert stack.terminate() == 0
