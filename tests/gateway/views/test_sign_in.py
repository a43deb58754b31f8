"""The page's sign-in (issue 39) in headless Chromium: the form first (both
languages, axe-core clean), a wrong password said plainly, an operator who
signs in runs an order under their own name, is told when their session
ends (disabled while the page is open), and signs out."""

from __future__ import annotations

import os

import pytest
import requests

from tests.gateway.cdp import CHROMIUM
from tests.gateway.conftest import ADMIN
from tests.gateway.test_people import CONSOLE, PASSWORD, people  # noqa: F401 - the fixture
from tests.gateway.views.pages import catalog, message, open_page, page_errors, visible
from tests.gateway.views.test_languages import axe_findings, axe_source  # noqa: F401 - the fixture
from tests.identity.conftest import FAST_ARGON2
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM),
                       reason=f"{CHROMIUM} is absent (Debian package `chromium`); the page test needs it"),
    pytest.mark.timeout(180),
]


def sign_in(browser, name: str, password: str) -> None:
    browser.evaluate(f"document.getElementById('signin-user').value = {name!r};"
                     f"document.getElementById('signin-password').value = {password!r};"
                     "document.querySelector('#signin-form button[type=submit]').click()")


def conn_badge(browser) -> tuple[str, str]:
    return tuple(browser.evaluate("[document.getElementById('conn').dataset.state,"
                                  " document.getElementById('conn').textContent]"))


def the_form(browser, base: str, language: str) -> None:
    browser.navigate(f"{base}/?lang={language}")
    wait_for(lambda: visible(browser, "#signin-section"), timeout=30, message="the sign-in form")


def test_an_operator_signs_in_runs_an_order_is_told_the_session_ended_and_signs_out(
        gateway_server, people, browser, axe_source):  # noqa: F811
    base = gateway_server(**FAST_ARGON2).base
    for language in ("zh-CN", "en"):
        the_form(browser, base, language)
        assert browser.evaluate("document.getElementById('signin-title').textContent") == \
            catalog(language)["signin.title"]
        assert not visible(browser, "#line-section") and not visible(browser, "#sign-out")
        # Signed out, said as such: not a red "offline", as if the system were down.
        wait_for(lambda language=language: conn_badge(browser) == ("out", catalog(language)["conn.out"]), timeout=10,
                 message=lambda: f"the badge to say signed out, not {conn_badge(browser)}")
        assert axe_findings(browser, axe_source, ["#signin-section"]) == []
    words = catalog("en")

    sign_in(browser, "alice", "not her password")
    wait_for(lambda: message(browser)["text"] == words["error.INVALID_CREDENTIALS"], timeout=10,
             message="the refusal said")
    sign_in(browser, "alice", PASSWORD)
    wait_for(lambda: browser.check("document.body.dataset.loaded === 'true'"
                                   " && document.getElementById('conn').dataset.state === 'on'"), timeout=30,
             message="the line drawn and live after signing in")
    # Her display name (people.add's "Alice"), the role after it; her user name in the tooltip.
    assert browser.evaluate("document.getElementById('who').textContent") == \
        words["who"].format(name="Alice", role=words["role.operator"])
    assert browser.evaluate("document.getElementById('who').title") == "alice"
    assert not visible(browser, "#signin-section") and visible(browser, "#sign-out")

    browser.evaluate("document.getElementById('quantity').value = '2';"
                     "document.querySelector('#create-order button').click()")
    wait_for(lambda: browser.check("!!document.querySelector('#orders tbody tr[data-order-id]')"), timeout=30,
             message="the new order row")
    audit = requests.get(base + "/api/audit?action=CreateOrder", headers={"Authorization": f"Bearer {ADMIN}"},
                         timeout=10).json()["items"]
    assert [(a["actor"], a["role"], a["outcome"]) for a in audit] == [("alice", "operator", "HANDLED")]

    people.set_disabled("alice", True, CONSOLE)  # its stream closes 4401: the page says so
    wait_for(lambda: visible(browser, "#signin-section") and visible(browser, "#signin-ended"), timeout=10,
             message="the page to say the session ended")
    assert not visible(browser, "#line-section")

    people.set_disabled("alice", False, CONSOLE)
    sign_in(browser, "alice", PASSWORD)
    wait_for(lambda: visible(browser, "#sign-out"), timeout=30, message="signed in again")
    browser.evaluate("document.getElementById('sign-out').click()")
    wait_for(lambda: visible(browser, "#signin-section") and message(browser)["text"] == words["signin.signedOut"],
             timeout=10, message="signed out")
    assert not visible(browser, "#signin-ended")
    assert conn_badge(browser) == ("out", words["conn.out"])  # not "live" with every stream closed
    assert browser.evaluate("fetch('/api/session').then(r => r.status)") == 401
    assert page_errors(browser) == []

    for language in ("zh-CN", "en"):  # the audit view, for an admin: each step under alice's name
        open_page(browser, base, ADMIN, language)
        browser.evaluate("document.getElementById('audit-details').open = true")
        wait_for(lambda: browser.check("document.body.dataset.auditLoaded === 'true'"), timeout=10,
                 message="the audit view")
        rows = browser.evaluate("[...document.querySelectorAll('#audit tbody tr')]"
                                ".filter(r => r.dataset.actor === 'alice').map(r => r.dataset.action)")
        assert rows[0] == "SignOut" and {"SignIn", "CreateOrder"} <= set(rows), rows  # newest first
        words = catalog(language)
        assert words["auditAction.CreateOrder"] in browser.evaluate("document.getElementById('audit').textContent")
        assert axe_findings(browser, axe_source, ["#audit-section"]) == []
    assert page_errors(browser) == []
