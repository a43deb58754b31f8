"""The operator's page in headless Chromium against a served gateway: it loads
and draws the line, an order created and started from the page changes state
on screen (its first piece appears on the buffer), an alarm is acknowledged."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import select

from shared.db.models import Alarm
from tests.gateway.cdp import CHROMIUM, Browser
from tests.gateway.conftest import OPERATOR
from tests.support.waiting import wait_for

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM),
                       reason=f"{CHROMIUM} is absent (Debian package `chromium`); the page test needs it"),
    pytest.mark.timeout(180),
]


@pytest.fixture
def browser(tmp_path):
    b = Browser(tmp_path / "chromium-profile")
    yield b
    b.close()


def test_operator_runs_the_line_from_the_page(served_gateway, writable, browser):
    with writable.begin() as s:
        s.add(Alarm(code="MACHINE_FAULT", severity="ERROR", message="MC2 spindle fault",
                    equipment_id="MC2"))
    browser.navigate(served_gateway + "/")
    wait_for(lambda: browser.check(f"location.origin === '{served_gateway}'"
                                   " && document.readyState === 'complete'"), timeout=30)
    browser.evaluate(f"localStorage.setItem('linectl.token', '{OPERATOR}')")
    browser.navigate(served_gateway + "/")

    def drawn():
        return browser.check(
            "document.body.dataset.loaded === 'true'"
            " && document.querySelectorAll('.buffer-slot').length === 8"
            " && document.querySelectorAll('.machine').length === 4"
            " && document.querySelectorAll('#machine-WASH1 .machine-slot').length === 4"
            " && document.getElementById('conn').textContent === 'live'")

    wait_for(drawn, timeout=30, message="the page to draw the line")

    browser.evaluate("document.getElementById('quantity').value = '3';"
                     "document.querySelector('#create-order button').click()")
    order_id = wait_for(lambda: browser.evaluate(
        "(r => r && r.querySelector('.status').dataset.status === 'CREATED' && r.dataset.orderId)"
        "(document.querySelector('#orders tbody tr[data-order-id]'))"), timeout=30, message="the new order row")

    browser.evaluate(f"document.querySelector('tr[data-order-id=\"{order_id}\"] "
                     "button[data-action=start]').click()")
    wait_for(lambda: browser.check(
        f"document.querySelector('tr[data-order-id=\"{order_id}\"] .status').dataset.status"
        " === 'RUNNING'"
        f" && !!document.querySelector('.buffer-slot[data-slot=\"1\"] .piece[data-order-id=\"{order_id}\"]')"
        f" && document.querySelectorAll('#dock .piece[data-order-id=\"{order_id}\"]').length === 2"),
        timeout=30, message="the started order and its pieces on screen")
    assert browser.evaluate("document.querySelectorAll('#feed li').length") >= 2

    browser.evaluate("document.querySelector('#alarms li[data-alarm-id] button.ack').click()")
    wait_for(lambda: browser.check(
        "document.querySelector('#alarms li[data-alarm-id] .status').dataset.status === 'ACKNOWLEDGED'"
        " && !document.querySelector('#alarms button.ack')"), timeout=30,
        message="the alarm acknowledged on screen")
    with writable() as s:
        assert s.scalars(select(Alarm.status)).one() == "ACKNOWLEDGED"
    assert browser.evaluate("document.getElementById('message').textContent") == ""
    browser.screenshot(ARTIFACTS / "operator-page.png")
