"""Issue 18's alarm and AI views of the page in headless Chromium, on a served
gateway: an alarm shelved and unshelved from the page; the alarm history; the
AI queue panel (an admin reruns a failed job); each role sees only what it may
use. The shelving runs in 简体中文 (a reason typed in Chinese kept and shown as typed)
and the AI panel in English: the page words both from its catalog by the same lookup,
so one language each proves the lookup; that both catalogs hold every key is
tests/gateway/test_catalogs.py's, and every view in both languages is
tests/gateway/views/test_languages.py's (issue 27)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import select

from services.ai_jobs.domain import output_hash
from shared.db.models import AiRuntimeJob, Alarm
from tests.gateway.conftest import ADMIN, OPERATOR, RUNTIME
from tests.gateway.views.pages import (
    ARTIFACTS,
    PAGE_MARKS,
    PLATFORM,
    RED,
    ai_finish,
    ai_job,
    catalog,
    chart_data,
    fetched,
    message,
    open_page,
    page_errors,
    visible,
)
from tests.gateway.views.seeding import seed_alarms
from tests.support.waiting import wait_for

pytestmark = PAGE_MARKS


# A reason as the operator would type it, in their language.
REASONS = {"en": "spindle sensor swap", "zh-CN": "更换主轴传感器"}


@pytest.mark.parametrize("language", ["zh-CN"])  # once (see the module's docstring)
def test_an_alarm_is_shelved_and_unshelved_from_the_page(served, writable, browser, language):
    now = datetime.now(UTC)
    ids = seed_alarms(writable, now)
    words = catalog(language)
    reason = REASONS[language]
    open_page(browser, served, OPERATOR, language)
    card = f"#alarms li[data-alarm-id=\"{ids['critical']}\"]"
    wait_for(lambda: browser.check(f"document.body.dataset.loaded === 'true' && !!document.querySelector('{card}')"),
             timeout=30, message="the active alarms")
    assert browser.evaluate("[...document.querySelectorAll('#alarms li[data-alarm-id]')].map(li => "
                            "[li.dataset.severity, li.classList.contains('sev-' + li.dataset.severity)])") == \
        [["CRITICAL", True], ["WARNING", True]]
    assert browser.check(f"getComputedStyle(document.querySelector('{card}')).borderLeftColor === 'rgb(122, 0, 0)'")

    browser.evaluate(f"document.querySelector('{card} button.shelve').click()")
    wait_for(lambda: visible(browser, "#shelve-form"), timeout=10, message="the shelve form")
    # Without a reason (past the form's own check): an error, in red.
    browser.evaluate("document.getElementById('shelve-form').dispatchEvent(new Event('submit', {cancelable: true}))")
    assert message(browser) == {"text": words["shelve.noReason"], "kind": "error", "colour": RED}
    browser.evaluate("document.getElementById('shelve-minutes').value = '45';"
                     f"document.getElementById('shelve-reason').value = '{reason}';"
                     "document.querySelector('#shelve-form button[type=submit]').click()")
    shelved_card = f"#shelved li[data-alarm-id=\"{ids['critical']}\"]"
    wait_for(lambda: browser.check(f"!!document.querySelector('{shelved_card}') && !document.querySelector('{card}')"
                                   " && document.getElementById('shelve-form').hidden"),
             timeout=30, message="the alarm in the shelved list")
    with writable() as s:
        alarm = s.get(Alarm, ids["critical"])
        assert alarm.status == "SHELVED" and alarm.shelve_reason == reason
        assert abs((alarm.shelved_until - alarm.shelved_at).total_seconds() - 45 * 60) < 1
    note = browser.evaluate(f"document.querySelector('{shelved_card} .shelved-note').textContent")
    assert reason in note and note.startswith(words["alarms.shelvedNote"].split("{")[0])
    assert browser.evaluate(f"document.querySelector('{shelved_card} button.unshelve').textContent") == \
        words["alarms.unshelve"]

    browser.evaluate(f"document.querySelector('{shelved_card} button.unshelve').click()")
    wait_for(lambda: browser.check(f"!document.querySelector('{shelved_card}')"
                                   f" && document.querySelector('{card} .status').dataset.status === 'RAISED'"),
             timeout=30, message="the alarm back in the active list")
    with writable() as s:
        assert s.get(Alarm, ids["critical"]).status == "RAISED"

    # The history: by code, then by severity.
    browser.evaluate("document.querySelector('#alarm-filter [name=code]').value = 'MACHINE_FAULT';"
                     "document.querySelector('#alarm-filter button[type=submit]').click()")
    wait_for(lambda: browser.check("document.querySelectorAll('#alarm-history tbody tr[data-alarm-id]').length === 3"),
             timeout=15, message="the MACHINE_FAULT history")
    browser.evaluate("document.querySelector('#alarm-filter [name=code]').value = '';"
                     "document.querySelector('#alarm-filter [name=severity]').value = 'CRITICAL';"
                     "document.querySelector('#alarm-filter button[type=submit]').click()")
    wait_for(lambda: browser.evaluate("[...document.querySelectorAll('#alarm-history tbody tr[data-alarm-id]')]"
                                      ".map(r => Number(r.dataset.alarmId))") == [ids["critical"]],
             timeout=15, message="the CRITICAL history")
    assert browser.evaluate("document.getElementById('message').textContent") == ""
    assert page_errors(browser) == []


@pytest.mark.parametrize("language", ["en"])  # once (see the module's docstring)
def test_the_ai_panel_shows_failures_and_an_admin_reruns_one(served, writable, browser, language):
    words = catalog(language)
    status_of = {words[f"aiStatus.{s}"]: s for s in
                 ("pending", "locked", "running", "succeeded", "failed", "cancelled", "expired")}
    # Through the HTTP API, as a platform and a runtime would: one failed
    # (a non-retryable code), one succeeded, one still pending.
    failed = ai_job(served, target="t-failed")
    ai_finish(served, failed["id"], status="failed", errorCode="INVALID_CREDENTIAL",
              errorMessage="the provider refused the key")
    done = ai_job(served, target="t-done")
    output = {"summary": "steady progress", "masteryLevel": 0.6}
    ai_finish(served, done["id"], status="succeeded", output=output, outputHash=output_hash(output))
    ai_job(served, target="t-pending")

    open_page(browser, served, ADMIN, language)
    row = f"#ai-failures tr[data-job-id=\"{failed['id']}\"]"
    wait_for(lambda: browser.check(f"document.body.dataset.aiLoaded === 'true' && !!document.querySelector('{row}')"),
             timeout=30, message="the AI panel")
    assert visible(browser, "#ai-section") and visible(browser, "#production-section")  # admin: both
    assert browser.evaluate(f"document.querySelector('{row} .code').textContent") == "INVALID_CREDENTIAL"
    by_status = chart_data(browser, "ai-status-chart")
    counts = dict(zip([status_of[label] for label in by_status["labels"]], by_status["datasets"][0]["data"],
                      strict=True))
    assert counts == {"pending": 1, "locked": 0, "running": 0, "succeeded": 1, "failed": 1, "cancelled": 0,
                      "expired": 0}
    hourly = chart_data(browser, "ai-hourly-chart")
    assert sum(hourly["datasets"][0]["data"]) == 1 and sum(hourly["datasets"][1]["data"]) == 1

    browser.evaluate(f"document.querySelector('{row} button.rerun').click()")
    wait_for(lambda: browser.check(f"!!document.querySelector('{row} .rerun-as')"), timeout=15,
             message="the rerun on screen")
    with writable() as s:
        rerun = s.scalars(select(AiRuntimeJob).where(AiRuntimeJob.retried_from_job_id == failed["id"])).one()
        assert rerun.status == "pending" and rerun.target_id == "t-failed"
    wait_for(lambda: chart_data(browser, "ai-status-chart")["datasets"][0]["data"][0] == 2, timeout=15,
             message="two pending jobs in the chart")
    # The confirmation is information, not an error: not in red.
    said = message(browser)
    assert rerun.id[:8] in said["text"] and said["kind"] == "info" and said["colour"] != RED, said
    assert page_errors(browser) == []
    assert browser.evaluate(f"document.querySelector('{row} .rerun-as').textContent") == \
        words["ai.rerunAs"].replace("{id}", rerun.id[:8])
    # A reload (or another admin's page) knows it was rerun: no second Rerun to press.
    open_page(browser, served, ADMIN, language)
    wait_for(lambda: browser.check("document.body.dataset.aiLoaded === 'true'"
                                   f" && !!document.querySelector('{row} .rerun-as')"),
             timeout=30, message="the rerun after a reload")
    assert not browser.check(f"!!document.querySelector('{row} button.rerun')")
    browser.evaluate("document.querySelector('#ai-section').scrollIntoView()")
    browser.screenshot(ARTIFACTS / f"ai-panel-{language}.png")


def test_each_role_sees_only_what_it_may_use(served, writable, browser):
    ai_job(served)

    open_page(browser, served, OPERATOR)
    wait_for(lambda: browser.check("document.body.dataset.statsLoaded === 'true'"), timeout=30,
             message="the operator's page")
    assert not visible(browser, "#ai-section") and visible(browser, "#production-section")
    assert not [u for u in fetched(browser) if "/api/ai/" in u or "/api/admin/" in u]

    open_page(browser, served, PLATFORM)
    wait_for(lambda: browser.check("document.body.dataset.aiLoaded === 'true'"), timeout=30,
             message="the platform's page")
    assert visible(browser, "#ai-section")
    for section in ("#line-section", "#production-section", "#timeline-section", "#alarms-section",
                    "#orders-section", "#alarm-history-section", "#feed-section"):
        assert not visible(browser, section), section
    assert not [u for u in fetched(browser) if "/api/" in u and "/api/ai/" not in u and "/api/me" not in u]
    assert not browser.check("!!document.querySelector('#ai-failures button.rerun')")  # admin only
    assert browser.evaluate("document.getElementById('message').textContent") == ""
    assert browser.evaluate("document.getElementById('who').textContent") == "platform (platform)"
    # The line's event stream is for operators: no "offline" for a stream this page never opens.
    assert browser.evaluate("(c => [c.textContent, c.className])(document.getElementById('conn'))") == \
        ["no line stream", "conn none"]

    open_page(browser, served, RUNTIME)
    wait_for(lambda: browser.check("document.getElementById('message').textContent.includes('nothing to show')"),
             timeout=30, message="the runtime's page")
    assert not browser.check("[...document.querySelectorAll('section')].some(s => s.offsetParent !== null)")
    assert message(browser)["kind"] == "info"
    assert browser.evaluate("document.getElementById('conn').textContent") == "no line stream"
    assert page_errors(browser) == []
    # ...and the watch on the console is live: it does see an error.
    browser.evaluate("setTimeout(() => { throw new Error('probe'); })")
    wait_for(lambda: any("probe" in e for e in page_errors(browser)), timeout=5, message="the probe error")
