"""Issue 27's page for the floor, in headless Chromium on a served gateway, in
简体中文 and in English: every view translated (no catalog key, no English
sentence on the zh-CN page but names and codes), manual actions and alarms
worded from their facts, the event feed in sentences, touch-sized targets,
axe-core's serious and critical findings none, screenshots of every view at
1280×800 and 1920×1080; then, in zh-CN, a manual action answered (a refusal
said from the catalog), the alarm banner acknowledged, an order run, and the
language switched and remembered. One browser for the module."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime

import pytest
import requests
from sqlalchemy import update

from shared.db.models import Alarm, Equipment, ManualAction
from tests.gateway.cdp import Browser
from tests.gateway.conftest import ADMIN, OPERATOR
from tests.gateway.views.conftest import ERROR_HOOK
from tests.gateway.views.pages import (
    ARTIFACTS,
    PAGE_MARKS,
    ROOT,
    ai_finish,
    ai_job,
    catalog,
    message,
    open_page,
    page_errors,
    visible,
)
from tests.gateway.views.seeding import seed_alarms, seed_history, seed_live_job, seed_open_actions
from tests.support.waiting import wait_for

pytestmark = PAGE_MARKS

TEST_TOOLS = ROOT / "tests" / "gateway" / "test-tools"
AXE = TEST_TOOLS / "node_modules" / "axe-core" / "axe.min.js"
LANGUAGES = ("zh-CN", "en")
ACCEPT = {"zh-CN": "zh-CN,zh;q=0.9,en;q=0.5", "en": "en-US,en;q=0.9"}
# Each view of the page: the sections it is made of (the first is scrolled to for its screenshot).
VIEWS = {
    "line": ["header", "#alarm-banner", "#line-section", "#manual-section", "#alarms-section", "#feed-section"],
    "production": ["#production-section", "#timeline-section"],
    "orders": ["#orders-section"],
    "alarm-history": ["#alarm-history-section"],
    "job": ["#job-section"],
    "ai": ["#ai-section"],
}
SIZES = ((1280, 800), (1920, 1080))
TOUCH_PX = 44
# What the page may show in Latin letters on the zh-CN page besides names (from
# the layout) and codes (upper case): units and abbreviations read as such.
LATIN_WORDS = {"linectl", "oee", "plc", "json", "ai", "english", "wo", "p95", "s", "id", "admin", "operator"}

# Every string a person reads: visible text, and the placeholder / title /
# aria-label / optgroup label of visible elements; with whether it sits inside
# something marked lang="en" (the API's English fallback, the raw JSON).
READ_TEXTS = """(() => {
  const shown = (e) => !!e && e.checkVisibility({visibilityProperty: true});
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode, parent = node.parentElement, text = node.textContent.trim();
    if (!text || parent.closest('script, style')) continue;
    if (!shown(parent) && !parent.closest('select')) continue;
    out.push([text, !!parent.closest('[lang=en]'), parent.tagName + '#' + parent.id + '.' + parent.className]);
  }
  for (const e of document.querySelectorAll('[placeholder], [title], [aria-label], optgroup[label]')) {
    if (!shown(e) && !e.closest('select')) continue;
    for (const a of ['placeholder', 'title', 'aria-label', 'label']) {
      if (e.getAttribute(a)) out.push([e.getAttribute(a), !!e.closest('[lang=en]'), e.tagName + '@' + a]);
    }
  }
  for (const canvas of document.querySelectorAll('canvas')) {  // what the charts draw
    const chart = Chart.getChart(canvas);
    if (!chart || !shown(canvas)) continue;
    for (const d of chart.data.datasets) out.push([String(d.label), false, canvas.id + ' legend']);
    for (const s of Object.values(chart.options.scales || {})) {
      if (s.title && s.title.text) out.push([s.title.text, false, canvas.id + ' axis']);
    }
    if (canvas.id === 'ai-status-chart') for (const l of chart.data.labels) out.push([String(l), false, canvas.id]);
  }
  return out;
})()"""

TOO_SMALL = f"""[...document.querySelectorAll('button, input, select, summary, a[href], .piece')]
  .filter(e => e.checkVisibility())
  .map(e => [e.tagName + '#' + e.id + '.' + e.className + ' ' + e.textContent.trim().slice(0, 30),
             e.getBoundingClientRect().width, e.getBoundingClientRect().height])
  .filter(([, w, h]) => w < {TOUCH_PX} - 0.5 || h < {TOUCH_PX} - 0.5)"""


@pytest.fixture(scope="module")
def axe_source() -> str:
    """axe-core as pinned by tests/gateway/test-tools/package-lock.json (`npm ci` there)."""
    if not AXE.exists():
        why = f"axe-core is not installed: `make test-tools` (npm ci in {TEST_TOOLS})"
        if os.environ.get("CI"):
            pytest.fail(f"{why} (.ci/run does)")
        pytest.skip(why)
    lock = json.loads((TEST_TOOLS / "package-lock.json").read_text())
    installed = json.loads((AXE.parent / "package.json").read_text())["version"]
    assert installed == lock["packages"]["node_modules/axe-core"]["version"], "npm ci again: not the pinned axe-core"
    return AXE.read_text()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """One Chromium for the module (each test has its own gateway and database)."""
    b = Browser(tmp_path_factory.mktemp("chromium") / "profile")
    b.call("Page.enable")
    b.call("Page.addScriptToEvaluateOnNewDocument", source=ERROR_HOOK)
    yield b
    b.close()


def ask_for(browser, language: str) -> None:
    """The browser's Accept-Language (and navigator.languages) from now on."""
    agent = browser.evaluate("navigator.userAgent")
    browser.call("Emulation.setUserAgentOverride", userAgent=agent, acceptLanguage=ACCEPT[language])


def size(browser, width: int, height: int) -> None:
    browser.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)


def filled(text: str, facts: dict, words: dict) -> str:
    """A catalog text filled as the page fills it, for the plain facts used here."""
    def one(m):
        value = facts[m.group(1)]
        return words.get(f"{m.group(2)}.{value}", str(value)) if m.group(2) else str(value)
    return re.sub(r"\{(\w+)(?::(\w+))?\}", one, text)


def names_on_the_line(base: str) -> set[str]:
    """The proper names the page shows as they are: the line's, machines', products'."""
    auth = {"Authorization": f"Bearer {OPERATOR}"}
    line = requests.get(base + "/api/line", headers=auth, timeout=10).json()
    products = requests.get(base + "/api/products", headers=auth, timeout=10).json()["items"]
    return {line["name"], *(e["name"] for e in line["equipment"]), *(p["name"] for p in products)}


def check_translated(texts: list, language: str, names: set[str]) -> None:
    """No catalog key shows as itself; on the zh-CN page no English but names,
    codes and what is marked lang="en" (the API's own words where the catalog has none)."""
    keys = set(catalog(language))
    untranslated = [(text, where) for text, _, where in texts if text in keys]
    assert not untranslated, untranslated
    if language != "zh-CN":
        return
    english = []
    for text, marked_en, where in texts:
        if marked_en:
            continue
        rest = text
        for name in sorted(names, key=len, reverse=True):
            rest = rest.replace(name, " ")
        rest = re.sub(r"\b[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\b|\b[0-9a-f]{8}\b", " ", rest)  # AI job ids
        # codes: upper case (EQUIPMENT_FAULT), with digits (MC1), or CamelCase (an event type)
        words = [w for w in re.findall(r"[A-Za-z][A-Za-z0-9]*", rest)
                 if not w.isupper() and not any(c.isdigit() for c in w) and not re.search(r"[a-z][A-Z]", w)
                 and w.lower() not in LATIN_WORDS]
        if words:
            english.append((text, where, words))
    assert not english, english


def axe_findings(browser, axe_source: str, sections: list[str]) -> list[dict]:
    """axe-core's serious and critical violations within `sections` (those shown)."""
    if not browser.check("typeof axe !== 'undefined'"):
        browser.evaluate(axe_source + "; true")
    shown = [s for s in sections if visible(browser, s)]
    assert shown, sections
    result = json.loads(browser.evaluate(
        f"axe.run({{include: {json.dumps([[s] for s in shown])}}}, {{resultTypes: ['violations']}})"
        ".then(r => JSON.stringify(r.violations.map(v => ({id: v.id, impact: v.impact,"
        " nodes: v.nodes.map(n => n.target.join(' ')).slice(0, 5)}))))"))
    return [v for v in result if v["impact"] in ("serious", "critical")]


def screenshots(browser, language: str) -> None:
    """Each view at each size, scrolled to its first section."""
    for width, height in SIZES:
        size(browser, width, height)
        for view, sections in VIEWS.items():
            browser.evaluate(f"document.querySelector('{sections[0]}').scrollIntoView()")
            browser.screenshot(ARTIFACTS / "page" / f"{view}-{language}-{width}x{height}.png")
        browser.evaluate("window.scrollTo(0, 0)")


def open_everything(browser, served: str, events, language: str, job_id: int) -> None:
    """The page as the browser's Accept-Language asks, every view drawn, the feed fed, a route open."""
    ask_for(browser, language)
    open_page(browser, served, ADMIN)
    wait_for(lambda: browser.check(
        "document.body.dataset.loaded === 'true' && document.body.dataset.statsLoaded === 'true'"
        " && document.body.dataset.aiLoaded === 'true' && document.getElementById('conn').dataset.state === 'on'"
        " && !document.getElementById('alarm-banner').hidden"), timeout=30, message=f"the page in {language}")
    assert browser.evaluate("document.documentElement.lang") == language
    events.write([("MachineStateChanged", {"equipmentId": "MC1", "state": "PROCESSING", "since": "x"}),
                  ("SlotChanged", {"equipmentId": "WASH1", "slotNo": 2, "status": "OCCUPIED", "currentJobId": job_id}),
                  ("SomethingNewFromTheLoop", {"what": 1})])
    wait_for(lambda: browser.check("document.querySelectorAll('#feed li[data-type]').length === 3"), timeout=15,
             message="the events in the feed")
    browser.evaluate(f"document.querySelector('#robot .piece[data-job-id=\"{job_id}\"]').click()")
    wait_for(lambda: browser.check("document.querySelectorAll('#job-steps > li').length === 5"), timeout=15,
             message="the piece's route")


def check_the_words(browser, language: str, ids: dict) -> None:
    """Manual actions, their choices, the banner and the feed say what the catalog says."""
    words = catalog(language)
    card = f"#manual li[data-manual-action-id=\"{ids['start']}\"]"
    assert browser.evaluate(f"document.querySelector('{card} .manual-text').textContent") == \
        filled(words["action.EQUIPMENT_FAULT"], {"equipmentId": "MC1", "errorCode": "PLC_ERROR"}, {
            "fault.PLC_ERROR": words["fault.PLC_ERROR"]})
    assert browser.evaluate(f"[...document.querySelectorAll('{card} button .choice-label')].map(b => b.textContent)") \
        == [words["choice.EQUIPMENT_FAULT.RETRY"], words["choice.EQUIPMENT_FAULT.SCRAP"]]
    # A fault during a cycle (issue 29): the stopped pieces from the facts, the choices saying what they do.
    stopped = f"#manual li[data-manual-action-id=\"{ids['stopped']}\"]"
    piece = filled(words["action.pieceInSlot"], {"jobId": 5, "slotNo": 2}, {})
    said = words["action.MACHINE_FAULT_DURING_CYCLE"].replace("{stopped:pieces}", piece)
    assert browser.evaluate(f"document.querySelector('{stopped} .manual-text').textContent") == \
        filled(said, {"equipmentId": "WASH1"}, {})
    assert browser.evaluate(f"[...document.querySelectorAll('{stopped} button .choice-label')]"
                            ".map(b => b.textContent)") == \
        [words[f"choice.MACHINE_FAULT_DURING_CYCLE.{c}"] for c in ("RESTART_CYCLE", "RETURN_TO_BUFFER", "SCRAP")]
    recovery = f"#manual li[data-manual-action-id=\"{ids['recovery']}\"]"
    assert browser.evaluate(f"[...document.querySelectorAll('{recovery} button')].map(b => b.dataset.resolution)") \
        == ["CONFIRM", "ACTION_DONE", "PIECE_REMOVED", "SCRAP"]
    assert words["task.DOCK_TO_BUFFER"] in browser.evaluate(f"document.querySelector('{recovery} .manual-text')"
                                                             ".textContent")
    # A kind no catalog knows says the API's English text, marked as English; never nothing.
    unknown = f"#manual li[data-manual-action-id=\"{ids['unknown']}\"] .manual-text"
    assert browser.evaluate(f"(p => [p.textContent, p.lang])(document.querySelector('{unknown}'))") == \
        ["Something only the English text explains.", "en"]
    # The banner: the newest alarm nobody acknowledged, its machine and what to do next.
    banner = browser.evaluate("document.getElementById('banner-where').textContent"
                              " + document.getElementById('banner-what').textContent")
    assert "MC2" in banner
    assert browser.evaluate("document.getElementById('banner-what').textContent") == \
        filled(words["alarm.EQUIPMENT_FAULT"], {"equipmentId": "MC2", "fault": 3}, {})
    assert browser.evaluate("document.getElementById('banner-next').textContent") == words["next.EQUIPMENT_FAULT"]
    # The feed: a sentence per event, the JSON one tap away; an unknown type says its type.
    sentences = browser.evaluate("[...document.querySelectorAll('#feed li[data-type]')].map(li => "
                                 "[li.dataset.type, li.querySelector('.sentence').textContent])")
    assert sentences == [
        ["SomethingNewFromTheLoop", filled(words["event.other"], {"type": "SomethingNewFromTheLoop"}, {})],
        ["SlotChanged", filled(words["event.SlotChanged"], {"equipmentId": "WASH1", "slotNo": 2,
                                                            "status": "OCCUPIED"}, words)],
        ["MachineStateChanged", filled(words["event.MachineStateChanged"], {"equipmentId": "MC1",
                                                                            "state": "PROCESSING"}, words)],
    ]
    raw = "document.querySelector('#feed li[data-type=MachineStateChanged] pre').checkVisibility()"
    assert browser.evaluate(raw) is False
    browser.evaluate("document.querySelector('#feed li[data-type=MachineStateChanged] summary').click()")
    assert browser.evaluate(raw) is True
    assert '"equipmentId":"MC1"' in browser.evaluate("document.querySelector('#feed li[data-type=MachineStateChanged]"
                                                     " pre').textContent")


def test_every_view_in_both_languages(axe_source, served, writable, browser, events, record_property):
    now = datetime.now(UTC)
    seed_history(writable, now)
    seed_alarms(writable, now)
    job_id = seed_live_job(writable, now)
    ids = seed_open_actions(writable)
    failed = ai_job(served, target="t-failed")
    ai_finish(served, failed["id"], status="failed", errorCode="INVALID_CREDENTIAL",
              errorMessage="the provider refused the key")
    names = names_on_the_line(served) | {"WO-HISTORY", "WO-LIVE"}
    found = {}
    for language in LANGUAGES:
        open_everything(browser, served, events, language, job_id)
        size(browser, *SIZES[0])
        check_the_words(browser, language, ids)
        check_translated(browser.evaluate(READ_TEXTS), language, names)
        # A touch panel: every target at least 44 CSS px, at the panel's size.
        assert browser.evaluate(TOO_SMALL) == []
        for view, sections in VIEWS.items():
            found[f"{view} {language}"] = axe_findings(browser, axe_source, sections)
        screenshots(browser, language)
        assert page_errors(browser) == []
    record_property("axe", json.dumps(found))
    print("axe-core serious/critical per view:", json.dumps({k: len(v) for k, v in found.items()}))
    assert all(not v for v in found.values()), {k: v for k, v in found.items() if v}


def test_a_zh_cn_operator_answers_from_the_page(served, writable, browser, record_property):
    ids = seed_open_actions(writable)
    zh = catalog("zh-CN")
    # ?lang= forces Chinese over the browser's English.
    ask_for(browser, "en")
    browser.navigate(served + "/")
    wait_for(lambda: browser.check(f"location.origin === '{served}' && document.readyState === 'complete'"),
             timeout=30, message="the page")
    browser.evaluate(f"localStorage.setItem('linectl.token', '{OPERATOR}'); localStorage.removeItem('linectl.lang')")
    browser.navigate(served + "/?lang=zh-CN")
    wait_for(lambda: browser.check("document.body.dataset.loaded === 'true' && document.body.dataset.lang === 'zh-CN'"
                                   " && document.getElementById('conn').dataset.state === 'on'"),
             timeout=30, message="the page in zh-CN")
    assert browser.evaluate("document.getElementById('conn').textContent") == zh["conn.on"]

    # MC1's fault is still on: the answer is refused, and said from the catalog.
    retry = f"#manual li[data-manual-action-id=\"{ids['start']}\"] button[data-resolution=RETRY]"
    browser.evaluate(f"document.querySelector('{retry}').click()")
    wait_for(lambda: message(browser)["text"] == zh["error.EQUIPMENT_FAULTED"], timeout=15,
             message="the refusal in Chinese")
    assert message(browser)["kind"] == "error"
    with writable() as s:
        assert s.get(ManualAction, ids["start"]).status == "OPEN"
    # Cleared on the machine: the same tap answers it.
    with writable.begin() as s:
        s.execute(update(Equipment).where(Equipment.id == "MC1").values(status="IDLE"))
    wait_for(lambda: browser.check(f"!document.querySelector('{retry}').disabled"), timeout=5,
             message="the choice usable again")
    browser.evaluate(f"document.querySelector('{retry}').click()")
    wait_for(lambda: browser.check(f"!document.querySelector('#manual li[data-manual-action-id=\"{ids['start']}\"]')"),
             timeout=15, message="the answered action gone")
    with writable() as s:
        answered = s.get(ManualAction, ids["start"])
        assert (answered.status, answered.resolution) == ("RESOLVED", "RETRY")
    assert message(browser)["text"] == ""

    # The banner names MC2 and what to do, until acknowledged; the tone can be switched on.
    wait_for(lambda: visible(browser, "#alarm-banner"), timeout=10, message="the banner")
    assert browser.evaluate("document.getElementById('banner-next').textContent") == zh["next.EQUIPMENT_FAULT"]
    browser.evaluate("document.getElementById('sound').click()")
    assert browser.evaluate("[document.getElementById('sound').getAttribute('aria-pressed'),"
                            " document.getElementById('sound').textContent, localStorage.getItem('linectl.sound')]") \
        == ["true", zh["sound.on"], "on"]
    # The banner leads to the alarm's manual action when it has one (MC2's fault has none).
    assert not visible(browser, "#banner-answer")
    browser.evaluate("document.getElementById('banner-ack').click()")
    wait_for(lambda: not visible(browser, "#alarm-banner"), timeout=15, message="the banner gone once acknowledged")
    with writable() as s:
        assert s.get(Alarm, ids["fault_alarm"]).status == "ACKNOWLEDGED"
    browser.evaluate("document.getElementById('sound').click()")  # off again

    # A running order, created and started from the Chinese page.
    browser.evaluate("document.getElementById('quantity').value = '2';"
                     "document.querySelector('#create-order button[type=submit]').click()")
    row = wait_for(lambda: browser.evaluate("(r => r && r.dataset.orderId)"
                                            "(document.querySelector('#orders tbody tr[data-order-id]'))"),
                   timeout=15, message="the new order")
    browser.evaluate(f"document.querySelector('tr[data-order-id=\"{row}\"] button[data-action=start]').click()")
    wait_for(lambda: browser.check(
        f"document.querySelector('tr[data-order-id=\"{row}\"] .status').textContent === '{zh['orderStatus.RUNNING']}'"
        f" && !!document.querySelector('.buffer-slot .piece[data-order-id=\"{row}\"]')"), timeout=15,
        message="the running order in Chinese")
    assert browser.evaluate(f"document.querySelector('tr[data-order-id=\"{row}\"] button[data-action=pause]')"
                            ".textContent") == zh["orderAction.pause"]
    browser.screenshot(ARTIFACTS / "page" / "running-order-zh-CN.png")

    # The switch: English, remembered across a reload, over the ?lang= that is dropped.
    browser.evaluate("window.__before = true; document.querySelector('#lang-switch [data-lang=en]').click()")
    wait_for(lambda: browser.check("!window.__before && document.body.dataset.loaded === 'true'"), timeout=30,
             message="the page in English")
    assert browser.evaluate("[document.documentElement.lang, location.search, localStorage.getItem('linectl.lang')]") \
        == ["en", "", "en"]
    ask_for(browser, "zh-CN")  # the browser asks for Chinese now: the choice made on the page wins
    browser.evaluate("window.__before = true; location.reload()")
    # Loaded, and live again: the stream reconnects after the load, and says "offline" until it has.
    wait_for(lambda: browser.check("!window.__before && document.body.dataset.loaded === 'true'"
                                   " && document.getElementById('conn').dataset.state === 'on'"), timeout=30,
             message="the page reloaded and live")
    assert browser.evaluate("document.documentElement.lang") == "en"
    assert browser.evaluate("document.getElementById('conn').textContent") == catalog("en")["conn.on"]
    assert page_errors(browser) == []
    browser.evaluate("localStorage.removeItem('linectl.lang')")
