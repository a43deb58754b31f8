"""Issue 18's production window in headless Chromium, on a served gateway and
seeded history: the window may be a time span or one work order's run (fixed
once the order finished, up to now while it runs)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import requests
from sqlalchemy import select

from shared.db.models import WorkOrder
from shared.serialize import iso
from tests.gateway.conftest import OPERATOR
from tests.gateway.views import pages
from tests.gateway.views.seeding import seed_history, seed_live_job, seed_orders
from tests.support.waiting import wait_for

pytestmark = pages.PAGE_MARKS
timeline_x = pages.TIMELINE_X


def check_the_offered_windows(browser, orders: dict, ids: dict) -> None:
    """The choice: four time spans, then the started orders, latest start first."""
    choices = browser.evaluate("[...document.querySelectorAll('#stats-window option')]"
                               ".map(o => [o.parentElement.id, o.value, o.textContent])")
    assert [c[1] for c in choices if c[0] != "stats-orders"] == ["0.25", "1", "8", "24"]
    offered = [(c[1], c[2]) for c in choices if c[0] == "stats-orders"]
    assert [v for v, _ in offered] == [f"wo:{orders[code].id}" for code in ("WO-LIVE", "WO-SHORT", "WO-HISTORY")]
    assert offered[1][1].startswith("WO-SHORT (completed, ") and offered[0][1].startswith("WO-LIVE (running, ")
    assert offered[0][1].endswith("–now)")
    assert f"wo:{ids['never']}" not in [v for v, _ in offered]  # never started: no run to show


def show_the_last_15_minutes(browser) -> None:
    pages.choose_window(browser, "0.25")
    quarter_ago_ms = (datetime.now(UTC) - timedelta(minutes=15)).timestamp() * 1000
    wait_for(lambda: browser.check(f"Math.abs({timeline_x}[0] - {quarter_ago_ms}) < 20000"
                                   f" && Math.abs({timeline_x}[1] - {timeline_x}[0] - 900000) < 1000"),
             timeout=15, message="the last 15 minutes")


def check_the_figures_over(browser, served: str, sent: dict, from_ms: int, to_ms: int) -> None:
    """The window the page sent is the order's run, and the page draws what
    /api/stats and /api/stats/timeline answer for it."""
    asked = pages.asked_by(browser)
    window = {k: requests.utils.unquote(v) for k, v in sent.items()}
    assert window["from"].endswith("Z") and window["to"].endswith("Z")
    assert [int(datetime.fromisoformat(window[k]).timestamp() * 1000) for k in ("from", "to")] == [from_ms, to_ms]
    assert asked("/api/stats/timeline")[-1] == sent
    stats, timeline = pages.stats_and_timeline(served, window)
    tiles = pages.kpi_tiles(browser)
    line = stats["line"]
    assert line["completed"] + line["scrapped"] >= 1  # a piece finishes every 5 minutes
    assert tiles["kpi-completed"] == str(line["completed"]) and tiles["kpi-scrapped"] == str(line["scrapped"])
    hourly = pages.chart_data(browser, "hourly-chart")
    assert hourly["datasets"][0]["data"] == [h["completed"] for h in stats["hourly"]]
    oee = pages.chart_data(browser, "oee-chart")
    assert oee["datasets"][0]["data"] == [float(pages.pct(e["oee"])[:-1]) if e["oee"] is not None else None
                                          for e in stats["equipment"]]
    drawn = pages.chart_data(browser, "timeline-chart")
    bars = sorted((b["y"], pages.STATE_OF_LABEL[d["label"]], b["x"][0], b["x"][1])
                  for d in drawn["datasets"] for b in d["data"])
    ms = lambda t: int(datetime.fromisoformat(t).timestamp() * 1000)  # noqa: E731
    assert bars == sorted((i["equipmentId"], i["state"], ms(i["from"]), ms(i["to"])) for i in timeline["items"])
    assert len(bars) >= 4
    assert browser.evaluate("document.getElementById('stats-span').textContent").endswith("(7 min)")


def follow_a_running_order(browser, events, live, changed: datetime) -> None:
    """A running order, from the choice: from its start, up to now, and "now" moves."""
    pages.choose_window(browser, f"wo:{live.id}")
    live_from_ms = int(live.started_at.timestamp() * 1000) - 5000
    changed_ms = int(changed.timestamp() * 1000)
    wait_for(lambda: browser.check(
        f"{timeline_x}[0] === {live_from_ms} && Math.abs({timeline_x}[1] - Date.now()) < 10000"
        " && Chart.getChart(document.getElementById('timeline-chart')).data.datasets[3].data"
        f".some(b => b.y === 'MC1' && b.x[0] >= {changed_ms - 1})"), timeout=15, message="WO-LIVE's run so far")
    first_to = browser.evaluate(timeline_x)[1]
    events.write([("JobFinished", {"jobId": 1, "status": "COMPLETED"})])
    wait_for(lambda: browser.evaluate(timeline_x)[1] > first_to, timeout=15, message="WO-LIVE's window to grow")
    assert browser.evaluate(timeline_x)[0] == live_from_ms
    assert "–now (" in browser.evaluate("document.getElementById('stats-span').textContent")


def test_the_production_window_may_be_a_work_orders_run(served, writable, browser, events):
    now = datetime.now(UTC)
    seed_history(writable, now)
    seed_live_job(writable, now)
    ids = seed_orders(writable, now)
    with writable() as s:
        orders = {o.code: o for o in s.scalars(select(WorkOrder))}
    pages.open_page(browser, served, OPERATOR)
    wait_for(lambda: browser.check(
        "document.body.dataset.statsLoaded === 'true' && document.body.dataset.loaded === 'true'"
        " && document.querySelectorAll('#stats-orders option').length > 0"
        " && document.getElementById('conn').textContent === 'live'"), timeout=30,
        message="the production panel and the orders")
    check_the_offered_windows(browser, orders, ids)
    show_the_last_15_minutes(browser)

    # A finished order, from a click on it in the Work orders table: its run,
    # a few seconds either side, exactly; the figures are /api/stats's for it.
    short = orders["WO-SHORT"]
    from_ms = int(short.started_at.timestamp() * 1000) - 5000
    to_ms = int(short.finished_at.timestamp() * 1000) + 5000
    browser.evaluate("performance.clearResourceTimings()")
    browser.evaluate(f"document.querySelector('#orders tr[data-order-id=\"{short.id}\"] a.order-window').click()")
    wait_for(lambda: browser.evaluate(timeline_x) == [from_ms, to_ms], timeout=15, message="WO-SHORT's run")
    assert browser.evaluate("document.getElementById('stats-window').value") == f"wo:{short.id}"
    assert not browser.check(f"!!document.querySelector('#orders tr[data-order-id=\"{ids['never']}\"] a')")
    asked = pages.asked_by(browser)
    sent = asked("/api/stats")[-1]
    check_the_figures_over(browser, served, sent, from_ms, to_ms)
    browser.call("Emulation.setDeviceMetricsOverride", width=1400, height=1400, deviceScaleFactor=1, mobile=False)
    browser.screenshot(pages.ARTIFACTS / "order-window.png")

    # A finished order's window stays put when the line moves on.
    changed = pages.mc1_faults(writable)
    browser.evaluate("performance.clearResourceTimings()")
    events.write([("MachineStateChanged", {"equipmentId": "MC1", "state": "FAULT", "since": iso(changed)})])
    wait_for(lambda: asked("/api/stats/timeline") and asked("/api/stats"), timeout=15,
             message="the redraw the event asks for")
    assert asked("/api/stats")[-1] == sent and browser.evaluate(timeline_x) == [from_ms, to_ms]

    follow_a_running_order(browser, events, orders["WO-LIVE"], changed)
    pages.wait_for_the_8_hours(browser)
    assert browser.evaluate("document.getElementById('message').textContent") == ""
    assert pages.page_errors(browser) == []
