"""Issue 18's production views of the page in headless Chromium, on a served
gateway and seeded history: the production charts and the machine timeline
draw what /api/stats and /api/stats/timeline answer and follow a
MachineStateChanged event; a piece's route. Chart.js is the vendored, pinned
build."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from urllib.parse import unquote

import requests

from shared.serialize import iso
from tests.gateway.conftest import OPERATOR
from tests.gateway.views import pages
from tests.gateway.views.seeding import seed_alarms, seed_history, seed_line_states, seed_live_job
from tests.support.waiting import wait_for

pytestmark = pages.PAGE_MARKS


def test_the_vendored_chart_js_is_the_pinned_one_and_is_served(served):
    package = json.loads((pages.STATIC / "package.json").read_text())
    lock = json.loads((pages.STATIC / "package-lock.json").read_text())
    pinned = package["dependencies"]["chart.js"]
    assert package["private"] is True and pinned[0].isdigit()  # an exact version, no range
    assert lock["packages"]["node_modules/chart.js"]["version"] == pinned
    vendored = (pages.STATIC / "vendor" / "chart.umd.min.js").read_text()
    assert vendored.startswith(f"/*!\n * Chart.js v{pinned}\n")
    assert (pages.STATIC / "vendor" / "chart.js-LICENSE.md").read_text().startswith("The MIT License")

    r = requests.get(served + "/static/vendor/chart.umd.min.js", timeout=10)
    assert r.status_code == 200 and "javascript" in r.headers["Content-Type"]
    assert r.content == (pages.STATIC / "vendor" / "chart.umd.min.js").read_bytes()
    page = requests.get(served + "/", timeout=10)
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe" not in csp  # no inline script, no eval
    for script in ("vendor/chart.umd.min.js", "common.js", "production.js", "alarms.js", "job.js", "ai.js",
                   "app.js"):
        assert f'<script src="/static/{script}"></script>' in page.text
        assert requests.get(f"{served}/static/{script}", timeout=10).status_code == 200
    assert "<script>" not in page.text


def check_the_production_panel(browser, stats: dict) -> None:
    """The tiles, the hourly chart, the per-machine figures (chart and table)."""
    line = stats["line"]
    assert line["completed"] > 50 and line["scrapped"] > 5  # the seeding is what the test thinks
    tiles = pages.kpi_tiles(browser)
    assert tiles == {"kpi-completed": str(line["completed"]), "kpi-scrapped": str(line["scrapped"]),
                     "kpi-throughput": f"{line['throughputPerHour']:.1f}",
                     "kpi-scrap-rate": pages.pct(line["scrapRate"])}

    hourly = pages.chart_data(browser, "hourly-chart")
    assert [d["label"] for d in hourly["datasets"]] == ["completed", "scrapped"]
    assert len(hourly["labels"]) == len(stats["hourly"])
    assert hourly["datasets"][0]["data"] == [h["completed"] for h in stats["hourly"]]
    assert hourly["datasets"][1]["data"] == [h["scrapped"] for h in stats["hourly"]]

    oee = pages.chart_data(browser, "oee-chart")
    assert oee["labels"] == ["MC1", "MC2", "WASH1", "INSP1"]
    assert [d["label"] for d in oee["datasets"]] == list(pages.FIGURES)
    for d in oee["datasets"]:
        expected = [e[pages.FIGURES[d["label"]]] * 100 for e in stats["equipment"]]
        # the window slid by a second or two between the page's request and ours
        assert all(v is not None and abs(v - x) < 0.5 for v, x in zip(d["data"], expected, strict=True)), d
    assert all(0 < e["oee"] < 1 and e["cycles"] > 0 for e in stats["equipment"])
    # One rounding for the chart and the table: INSP1's OEE 0.6605 was 66.1 in
    # the chart (Math.round) and "66.0 %" in the table (toFixed on 66.0499…).
    ratios = [0.6605, 0.1235, 0.0005, 0.9995, 0.0015, 0.125, 0.05, 1, 0]
    assert browser.evaluate(f"{json.dumps(ratios)}.map(r => [percentValue(r), percent(r)])") == \
        [[float(pages.pct(r)[:-1]), pages.pct(r)] for r in ratios]
    assert browser.check(
        "(c => [...document.querySelectorAll('#machine-figures tbody tr')].every((r, i) =>"
        " r.querySelector('.oee').textContent === c.data.datasets[0].data[i].toFixed(1) + '%'"
        " && r.querySelector('.availability').textContent === c.data.datasets[1].data[i].toFixed(1) + '%'))"
        "(Chart.getChart(document.getElementById('oee-chart')))")
    # Counts are grouped as the language groups them (1,270).
    cycles = browser.evaluate("[...document.querySelectorAll('#machine-figures tbody tr')]"
                              ".map(r => [r.dataset.equipmentId,"
                              " Number(r.querySelector('.cycles').textContent.replaceAll(',', ''))])")
    assert cycles == [[e["id"], e["cycles"]] for e in stats["equipment"]]


def check_the_timeline(browser, timeline: dict) -> None:
    """Per machine, the bars drawn start where the served intervals do; the first
    one starts at the window's edge, which slid between the two requests."""
    drawn = pages.chart_data(browser, "timeline-chart")
    assert drawn["labels"] == ["MC1", "MC2", "WASH1", "INSP1"]
    assert [pages.STATE_OF_LABEL[d["label"]] for d in drawn["datasets"]] == \
        ["PROCESSING", "IDLE", "WAITING_UNLOAD", "FAULT"]
    bars, served_bars = {}, {}
    for d in drawn["datasets"]:
        for b in d["data"]:
            bars.setdefault(b["y"], []).append((pages.STATE_OF_LABEL[d["label"]], b["x"][0] // 1000))
    for i in timeline["items"]:
        served_bars.setdefault(i["equipmentId"], []).append(
            (i["state"], int(datetime.fromisoformat(i["from"]).timestamp())))
    assert bars.keys() == served_bars.keys() == {"MC1", "MC2", "WASH1", "INSP1"}
    for machine, starts in bars.items():
        assert sorted(starts, key=lambda b: b[1])[1:] == served_bars[machine][1:], machine
        assert len(starts) > 15
    colours = browser.evaluate("Chart.getChart(document.getElementById('timeline-chart'))"
                               ".data.datasets.map(d => d.backgroundColor)")
    assert len(set(colours)) == 4


def show_the_last_hour(browser) -> None:
    """The last hour instead: the panels are redrawn over it."""
    pages.choose_window(browser, "1")
    hour_ago_ms = (datetime.now(UTC) - timedelta(hours=1)).timestamp() * 1000
    wait_for(lambda: browser.check(
        "Chart.getChart(document.getElementById('hourly-chart')).data.labels.length <= 2"
        " && Math.abs(Chart.getChart(document.getElementById('timeline-chart')).options.scales.x.min"
        f" - {hour_ago_ms}) < 30000"
        " && document.querySelectorAll('#alarm-counts tbody tr').length === 2"), timeout=15,
        message="the last hour's figures")


def check_a_pieces_route(browser, job_id: int) -> None:
    """A piece's route, from a click on it."""
    browser.evaluate(f"document.querySelector('#robot .piece[data-job-id=\"{job_id}\"]').click()")
    wait_for(lambda: pages.visible(browser, "#job-section") and browser.check(
        "document.querySelectorAll('#job-steps > li').length === 5"), timeout=15, message="the job's route")
    steps = browser.evaluate("[...document.querySelectorAll('#job-steps > li')].map(li => "
                             "[li.dataset.state, li.querySelector('.step-machines').textContent,"
                             " li.querySelectorAll('.tasks li').length, li.querySelector('.times').textContent])")
    assert [s[:3] for s in steps] == [["DONE", "", 1], ["DONE", "MC1", 3], ["CURRENT", "WASH1", 1],
                                      ["TODO", "", 0], ["TODO", "", 0]]
    assert steps[1][3].endswith("(16 min)") and steps[2][3].startswith("started ")


def check_the_shift_oee(browser, served: str) -> None:
    """Issue 53: the current shift's A, P, Q and OEE as /api/oee says, its states, the
    Pareto; a stop without a reason given one by a finger (the stop, then the reason:
    two taps on large targets); screenshots at 1280x800 in both languages."""
    wait_for(lambda: browser.check("document.body.dataset.oeeLoaded === 'true'"), timeout=30,
             message="the shift's OEE")
    auth = {"Authorization": f"Bearer {OPERATOR}"}
    asked = {key: unquote(value) for key, value in pages.asked_by(browser)("/api/oee")[-1].items()}
    shift = requests.get(f"{served}/api/oee", params=asked, headers=auth, timeout=10).json()["items"][-1]
    for key in ("availability", "performance", "quality", "oee"):
        shown = browser.evaluate(f"document.querySelector('#oee-{key} .value').textContent")
        # the same window a moment later: the shift is a few seconds longer
        assert abs(float(shown.rstrip("%")) - shift[key] * 100) < 0.2, (key, shown, shift[key])
    states = pages.chart_data(browser, "states-chart")
    assert [d["label"] for d in states["datasets"]] == ["running", "idle", "down", "planned downtime",
                                                        "not scheduled"]
    assert len(states["datasets"][2]["data"]) == 2  # the fault and the e-stop
    pareto = pages.chart_data(browser, "pareto-chart")
    assert pareto["labels"] == ["no reason yet", "Operator"]
    stop = browser.evaluate("document.querySelector('#oee-stops li[data-stop-id] button.stop')"
                            ".getBoundingClientRect().height")
    assert stop >= 56  # a finger's target
    browser.call("Emulation.setDeviceMetricsOverride", width=1280, height=800, deviceScaleFactor=1, mobile=False)
    pick_a_reason(browser, "en")
    assert browser.check("[...document.querySelectorAll('#oee-stops button.reason')]"
                         ".every(b => b.getBoundingClientRect().height >= 56)")
    pages.open_page(browser, served, OPERATOR, "zh-CN")
    wait_for(lambda: browser.check("document.body.dataset.oeeLoaded === 'true'"), timeout=30,
             message="the shift's OEE in Chinese")
    pick_a_reason(browser, "zh-CN")
    browser.evaluate("document.querySelector('#oee-stops button.reason[data-code=MECHANICAL]').click()")
    wait_for(lambda: browser.check("document.querySelector('#oee-stops li.empty') !== null"
                                   " && Chart.getChart(document.getElementById('pareto-chart')).data.labels"
                                   ".includes('机械故障')"), timeout=15, message="the reason given")
    stops = requests.get(f"{served}/api/stops", headers=auth, timeout=10).json()["items"]
    assert [(s["reasonCode"], s["assignedBy"]) for s in stops] == [("MECHANICAL", "operator"), ("OPERATOR", "anna")]
    assert pages.page_errors(browser) == []


def pick_a_reason(browser, language: str) -> None:
    """The first tap: the stop opens its reasons (a screenshot of it, docs/ has a copy)."""
    browser.evaluate("document.querySelector('#oee-stops li[data-stop-id] button.stop').click()")
    wait_for(lambda: browser.check("document.querySelectorAll('#oee-stops button.reason').length >= 6"),
             timeout=10, message="the reasons to pick from")
    browser.evaluate("document.getElementById('oee-section').scrollIntoView()")
    browser.screenshot(pages.ARTIFACTS / f"oee-{language}.png")


def test_production_charts_and_timeline_draw_the_history_and_follow_events(served, writable, browser, events):
    now = datetime.now(UTC)
    seed_history(writable, now)
    seed_alarms(writable, now)
    seed_line_states(writable, now)
    job_id = seed_live_job(writable, now)
    pages.open_page(browser, served, OPERATOR)
    wait_for(lambda: browser.check(
        "document.body.dataset.statsLoaded === 'true' && document.body.dataset.loaded === 'true'"
        " && !!Chart.getChart(document.getElementById('timeline-chart'))"
        " && document.getElementById('conn').textContent === 'live'"),
        timeout=30, message="the production panel and the timeline")

    # The very window the page last asked for (its last 8 hours), asked again here: a
    # window of our own, a moment later, could lose a cycle that began at its edge.
    window = {key: unquote(value) for key, value in pages.asked_by(browser)("/api/stats")[-1].items()}
    stats, timeline = pages.stats_and_timeline(served, window)
    check_the_production_panel(browser, stats)
    check_the_timeline(browser, timeline)

    # A machine changes state: the event alone brings it onto the timeline.
    changed = pages.mc1_faults(writable)
    events.write([("MachineStateChanged", {"equipmentId": "MC1", "state": "FAULT", "since": iso(changed)})])
    changed_ms = int(changed.timestamp() * 1000)
    wait_for(lambda: browser.check(
        "Chart.getChart(document.getElementById('timeline-chart')).data.datasets[3].data"
        f".some(b => b.y === 'MC1' && b.x[0] >= {changed_ms - 1})"), timeout=15,
        message="the new FAULT interval on the timeline")
    assert browser.check("[...document.querySelectorAll('#feed li')].some(li => "
                         "li.textContent.includes('MachineStateChanged'))")

    wait_for(lambda: browser.check("document.querySelectorAll('#alarm-counts tbody tr').length === 4"),
             timeout=15, message="the alarm counts")
    assert browser.evaluate("document.querySelector('#alarm-counts tr[data-code=MACHINE_FAULT] .count')"
                            ".textContent") == "3"

    show_the_last_hour(browser)
    check_a_pieces_route(browser, job_id)

    assert not pages.visible(browser, "#ai-section")
    assert browser.evaluate("document.getElementById('message').textContent") == ""
    assert pages.page_errors(browser) == []
    pages.wait_for_the_8_hours(browser)
    browser.call("Emulation.setDeviceMetricsOverride", width=1400, height=2400, deviceScaleFactor=1, mobile=False)
    browser.screenshot(pages.ARTIFACTS / "operator-views.png")
    check_the_shift_oee(browser, served)
