"""Issue 18's views of the page in headless Chromium, on a served gateway and
seeded history: the production charts and the machine timeline draw what
/api/stats and /api/stats/timeline answer and follow a MachineStateChanged
event; a piece's route; an alarm shelved and unshelved from the page; the
alarm history and counts; the AI queue panel (an admin reruns a failed job);
each role sees only what it may use. The production window may be one work
order's run. Chart.js is the vendored, pinned build."""

from __future__ import annotations

import json
import os
import random
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
import requests
from sqlalchemy import insert, select, update

from services.ai_jobs.domain import output_hash
from shared.config import Settings
from shared.db.models import (
    AiRuntimeJob,
    Alarm,
    Job,
    MachineCycle,
    MachineStateInterval,
    Task,
    WorkOrder,
)
from shared.layout import load_layout
from shared.serialize import iso
from tests.gateway.cdp import CHROMIUM, Browser
from tests.gateway.conftest import ADMIN, OPERATOR, RUNTIME, TOKENS
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "gateway" / "static"
ARTIFACTS = ROOT / "test-artifacts"
PLATFORM = "platform-token-0123"

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM),
                       reason=f"{CHROMIUM} is absent (Debian package `chromium`); the page test needs it"),
    pytest.mark.timeout(240),
]

# Recorded before any of the page's scripts run, in every document: what a
# person would see in the console (uncaught errors, failed script loads,
# rejected promises, CSP refusals, console.error).
ERROR_HOOK = """
window.__pageErrors = [];
window.addEventListener('error', (e) => window.__pageErrors.push(
  'error: ' + (e.message || (e.target && (e.target.src || e.target.href)) || e.type)), true);
window.addEventListener('unhandledrejection', (e) => window.__pageErrors.push('rejection: ' + e.reason));
document.addEventListener('securitypolicyviolation', (e) => window.__pageErrors.push(
  'csp: ' + e.violatedDirective + ' ' + e.blockedURI));
const consoleError = console.error;
console.error = (...args) => { window.__pageErrors.push('console: ' + args.join(' ')); consoleError(...args); };
"""

# Each machine's states, repeated from ten hours ago until now (minutes). The
# history starts before the 8 h window, so the line is observed over all of it,
# and 30 s off the minute, so no state change sits on the window's edges.
PATTERNS = {
    "MC1": [("PROCESSING", 14), ("WAITING_UNLOAD", 2), ("IDLE", 4), ("PROCESSING", 14), ("FAULT", 9), ("IDLE", 3)],
    "MC2": [("PROCESSING", 16), ("WAITING_UNLOAD", 3), ("IDLE", 3), ("PROCESSING", 16), ("IDLE", 5)],
    "WASH1": [("IDLE", 6), ("PROCESSING", 25), ("WAITING_UNLOAD", 2), ("IDLE", 10), ("PROCESSING", 25),
              ("FAULT", 12), ("IDLE", 4)],
    "INSP1": [("PROCESSING", 5), ("WAITING_UNLOAD", 1), ("IDLE", 12), ("PROCESSING", 6), ("IDLE", 9)],
}
FINISHED_JOBS = 120  # one every 5 minutes over the ten hours, every 8th scrapped
FIGURES = {"OEE": "oee", "availability": "availability", "performance": "performance", "quality": "quality"}


@pytest.fixture
def served(gateway_server):
    """A served gateway that also knows a platform token."""
    return gateway_server(LINECTL_TOKENS=f"{TOKENS},platform:{PLATFORM}").base


@pytest.fixture
def browser(tmp_path):
    b = Browser(tmp_path / "chromium-profile")
    b.call("Page.enable")  # the hook below is only installed on an enabled page domain
    b.call("Page.addScriptToEvaluateOnNewDocument", source=ERROR_HOOK)
    yield b
    b.close()


def open_page(browser, base: str, token: str) -> None:
    browser.navigate(base + "/")
    wait_for(lambda: browser.check(f"location.origin === '{base}' && document.readyState === 'complete'"),
             timeout=30, message="the page at the gateway's origin")
    browser.evaluate(f"localStorage.setItem('linectl.token', '{token}'); window.__before = true")
    browser.navigate(base + "/")
    wait_for(lambda: browser.check("!window.__before && document.body.dataset.role !== undefined"),
             timeout=30, message="the page (reloaded) to learn its role")


def page_errors(browser) -> list[str]:
    return browser.evaluate("window.__pageErrors")


def chart_data(browser, canvas_id: str) -> dict:
    """What the Chart.js instance on the canvas draws: its labels and datasets."""
    return json.loads(browser.evaluate(
        f"JSON.stringify((c => ({{labels: c.data.labels, datasets: c.data.datasets.map("
        f"d => ({{label: d.label, data: d.data}}))}}))(Chart.getChart(document.getElementById('{canvas_id}'))))"))


def pct(ratio: float) -> str:
    """A ratio as the page shows it: a percentage rounded half up to one decimal
    on its decimal value (0.6605 → "66.1 %")."""
    return f"{(Decimal(str(ratio)) * 100).quantize(Decimal('0.1'), ROUND_HALF_UP)} %"


RED = "rgb(170, 51, 51)"  # #a33, the message line's colour for an error


def message(browser) -> dict:
    return browser.evaluate("(m => ({text: m.textContent, kind: m.className, colour: getComputedStyle(m).color}))"
                            "(document.getElementById('message'))")


def visible(browser, selector: str) -> bool:
    return browser.check(f"(e => !!e && e.offsetParent !== null)(document.querySelector('{selector}'))")


def fetched(browser) -> list[str]:
    """The URLs the page fetched (resource timing; the websocket is not one of them)."""
    return browser.evaluate("performance.getEntriesByType('resource').map(e => e.name)")


# -- seeding ------------------------------------------------------------------------


def seed_history(writable, now: datetime) -> None:
    """Ten hours of the line as the loop records it: state intervals (the last
    one open), the cycles inside PROCESSING, finished jobs."""
    layout = load_layout(Settings().line_file)
    product = layout.product("BRACKET-A")
    rng = random.Random(18)
    t0 = now - timedelta(hours=10, seconds=30)
    with writable.begin() as s:
        order = WorkOrder(code="WO-HISTORY", product_id=product.id, route=[st.to_json() for st in product.route],
                          quantity=FINISHED_JOBS, status="RUNNING", started_at=t0)
        s.add(order)
        s.flush()
        jobs = [Job(work_order_id=order.id, seq_no=n + 1, status="SCRAPPED" if n % 8 == 7 else "COMPLETED",
                    position_type="OUT", step_index=len(product.route),
                    finished_at=t0 + timedelta(minutes=5 * (n + 1))) for n in range(FINISHED_JOBS)]
        s.add_all(jobs)
        s.flush()
        job_ids = [j.id for j in jobs]
        intervals, cycles = [], []
        for spec in layout.equipment:
            at, k = t0, 0
            while at < now:
                state, minutes = PATTERNS[spec.id][k % len(PATTERNS[spec.id])]
                end = at + timedelta(minutes=minutes)
                intervals.append({"equipment_id": spec.id, "state": state, "started_at": at,
                                  "ended_at": end if end < now else None})
                if state == "PROCESSING":  # back-to-back cycles a little slower than ideal
                    start = at
                    while True:
                        stop = start + timedelta(seconds=spec.cycle_seconds * rng.uniform(0.95, 1.3))
                        if stop > min(end, now):
                            break
                        pieces = [(len(cycles) + i) % FINISHED_JOBS for i in range(4 if spec.batch else 1)]
                        cycle = {"equipment_id": spec.id, "requested_at": start - timedelta(seconds=1),
                                 "started_at": start, "ended_at": stop, "aborted": False,
                                 "job_ids": [job_ids[n] for n in pieces]}
                        # the loop counts each finished piece's outcome into its cycles
                        scrapped = sum(1 for n in pieces if jobs[n].status == "SCRAPPED")
                        cycles.append({**cycle, "good_pieces": len(pieces) - scrapped,
                                       "scrapped_pieces": scrapped})
                        start = stop
                at, k = end, k + 1
        s.execute(insert(MachineStateInterval), intervals)
        s.execute(insert(MachineCycle), cycles)


def seed_alarms(writable, now: datetime) -> dict[str, int]:
    """Two active alarms (CRITICAL raised, WARNING acknowledged) and a history in
    which MACHINE_FAULT keeps coming back."""
    ago = lambda minutes: now - timedelta(minutes=minutes)  # noqa: E731
    with writable.begin() as s:
        active = Alarm(code="SPINDLE_OVERLOAD", severity="CRITICAL", message="MC2 spindle overload",
                       equipment_id="MC2", raised_at=ago(20))
        acked = Alarm(code="LOW_COOLANT", severity="WARNING", message="WASH1 coolant low",
                      equipment_id="WASH1", status="ACKNOWLEDGED", raised_at=ago(50), acknowledged_at=ago(45),
                      acknowledged_by="operator")
        s.add_all([active, acked])
        for minutes in (400, 250, 90):
            s.add(Alarm(code="MACHINE_FAULT", severity="ERROR", message="MC1 tool breakage", equipment_id="MC1",
                        status="CLEARED", raised_at=ago(minutes), cleared_at=ago(minutes - 9)))
        s.add(Alarm(code="DOOR_OPEN", severity="INFO", message="INSP1 door opened", equipment_id="INSP1",
                    status="CLEARED", raised_at=ago(130), cleared_at=ago(129)))
        s.flush()
        return {"critical": active.id, "warning": acked.id}


def seed_live_job(writable, now: datetime) -> int:
    """A piece on the robot, its first two steps done (their tasks say when)."""
    layout = load_layout(Settings().line_file)
    product = layout.product("BRACKET-A")
    with writable.begin() as s:
        order = WorkOrder(code="WO-LIVE", product_id=product.id, route=[st.to_json() for st in product.route],
                          quantity=1, status="RUNNING", started_at=now - timedelta(minutes=30))
        s.add(order)
        s.flush()
        job = Job(work_order_id=order.id, seq_no=1, status="MOVING", position_type="ON_ROBOT", step_index=2)
        s.add(job)
        s.flush()

        def task(kind, step, start, end, equipment=None, status="SUCCEEDED"):
            s.add(Task(kind=kind, status=status, job_id=job.id, work_order_id=order.id, equipment_id=equipment,
                       started_at=now - timedelta(minutes=start),
                       finished_at=None if end is None else now - timedelta(minutes=end),
                       params={"jobIds": [job.id], "before": {str(job.id): {"stepIndex": step}}}))
        task("DOCK_TO_BUFFER", 0, 29, 28)
        task("SCAN", 0, 27, 26)
        task("BUFFER_TO_EQUIPMENT", 1, 25, 24, "MC1")
        task("START_MACHINE", 1, 24, 23, "MC1")
        task("EQUIPMENT_TO_BUFFER", 1, 10, 9, "MC1")
        task("BUFFER_TO_EQUIPMENT", 2, 1, None, "WASH1", status="RUNNING")
        return job.id


def seed_orders(writable, now: datetime) -> dict[str, int]:
    """A short order that ran (and finished) three hours ago, one never started."""
    layout = load_layout(Settings().line_file)
    product = layout.product("BRACKET-A")
    route = [st.to_json() for st in product.route]
    started = now.replace(microsecond=0) - timedelta(hours=3, seconds=17)
    with writable.begin() as s:
        short = WorkOrder(code="WO-SHORT", product_id=product.id, route=route, quantity=2, completed_qty=2,
                          status="COMPLETED", started_at=started, finished_at=started + timedelta(minutes=7))
        never = WorkOrder(code="WO-NEVER", product_id=product.id, route=route, quantity=1)
        s.add_all([short, never])
        s.flush()
        return {"short": short.id, "never": never.id}


# -- the tests ----------------------------------------------------------------------


def test_the_vendored_chart_js_is_the_pinned_one_and_is_served(served):
    package = json.loads((STATIC / "package.json").read_text())
    lock = json.loads((STATIC / "package-lock.json").read_text())
    pinned = package["dependencies"]["chart.js"]
    assert package["private"] is True and pinned[0].isdigit()  # an exact version, no range
    assert lock["packages"]["node_modules/chart.js"]["version"] == pinned
    vendored = (STATIC / "vendor" / "chart.umd.min.js").read_text()
    assert vendored.startswith(f"/*!\n * Chart.js v{pinned}\n")
    assert (STATIC / "vendor" / "chart.js-LICENSE.md").read_text().startswith("The MIT License")

    r = requests.get(served + "/static/vendor/chart.umd.min.js", timeout=10)
    assert r.status_code == 200 and "javascript" in r.headers["Content-Type"]
    assert r.content == (STATIC / "vendor" / "chart.umd.min.js").read_bytes()
    page = requests.get(served + "/", timeout=10)
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe" not in csp  # no inline script, no eval
    for script in ("vendor/chart.umd.min.js", "common.js", "production.js", "alarms.js", "job.js", "ai.js",
                   "app.js"):
        assert f'<script src="/static/{script}"></script>' in page.text
        assert requests.get(f"{served}/static/{script}", timeout=10).status_code == 200
    assert "<script>" not in page.text


def test_production_charts_and_timeline_draw_the_history_and_follow_events(served, writable, browser, events):
    now = datetime.now(UTC)
    seed_history(writable, now)
    seed_alarms(writable, now)
    job_id = seed_live_job(writable, now)
    open_page(browser, served, OPERATOR)
    wait_for(lambda: browser.check(
        "document.body.dataset.statsLoaded === 'true' && document.body.dataset.loaded === 'true'"
        " && !!Chart.getChart(document.getElementById('timeline-chart'))"
        " && document.getElementById('conn').textContent === 'live'"),
        timeout=30, message="the production panel and the timeline")

    # The same window the page asked for (its last 8 hours), asked again here.
    auth = {"Authorization": f"Bearer {OPERATOR}"}
    window = {"from": iso(datetime.now(UTC) - timedelta(hours=8)), "to": iso(datetime.now(UTC))}
    stats = requests.get(served + "/api/stats", params=window, headers=auth, timeout=10).json()
    timeline = requests.get(served + "/api/stats/timeline", params=window, headers=auth, timeout=10).json()
    line = stats["line"]
    assert line["completed"] > 50 and line["scrapped"] > 5  # the seeding is what the test thinks
    tiles = browser.evaluate("Object.fromEntries([...document.querySelectorAll('#kpis .tile')]"
                             ".map(t => [t.id, t.querySelector('.value').textContent]))")
    assert tiles == {"kpi-completed": str(line["completed"]), "kpi-scrapped": str(line["scrapped"]),
                     "kpi-throughput": f"{line['throughputPerHour']:.1f}",
                     "kpi-scrap-rate": pct(line["scrapRate"])}

    hourly = chart_data(browser, "hourly-chart")
    assert [d["label"] for d in hourly["datasets"]] == ["completed", "scrapped"]
    assert len(hourly["labels"]) == len(stats["hourly"])
    assert hourly["datasets"][0]["data"] == [h["completed"] for h in stats["hourly"]]
    assert hourly["datasets"][1]["data"] == [h["scrapped"] for h in stats["hourly"]]

    oee = chart_data(browser, "oee-chart")
    assert oee["labels"] == ["MC1", "MC2", "WASH1", "INSP1"]
    assert [d["label"] for d in oee["datasets"]] == list(FIGURES)
    for d in oee["datasets"]:
        expected = [e[FIGURES[d["label"]]] * 100 for e in stats["equipment"]]
        # the window slid by a second or two between the page's request and ours
        assert all(v is not None and abs(v - x) < 0.5 for v, x in zip(d["data"], expected, strict=True)), d
    assert all(0 < e["oee"] < 1 and e["cycles"] > 0 for e in stats["equipment"])
    # One rounding for the chart and the table: INSP1's OEE 0.6605 was 66.1 in
    # the chart (Math.round) and "66.0 %" in the table (toFixed on 66.0499…).
    ratios = [0.6605, 0.1235, 0.0005, 0.9995, 0.0015, 0.125, 0.05, 1, 0]
    assert browser.evaluate(f"{json.dumps(ratios)}.map(r => [percentValue(r), percent(r)])") == \
        [[float(pct(r)[:-2]), pct(r)] for r in ratios]
    assert browser.check(
        "(c => [...document.querySelectorAll('#machine-figures tbody tr')].every((r, i) =>"
        " r.querySelector('.oee').textContent === c.data.datasets[0].data[i].toFixed(1) + ' %'"
        " && r.querySelector('.availability').textContent === c.data.datasets[1].data[i].toFixed(1) + ' %'))"
        "(Chart.getChart(document.getElementById('oee-chart')))")
    cycles = browser.evaluate("[...document.querySelectorAll('#machine-figures tbody tr')]"
                              ".map(r => [r.dataset.equipmentId, Number(r.querySelector('.cycles').textContent)])")
    assert cycles == [[e["id"], e["cycles"]] for e in stats["equipment"]]

    drawn = chart_data(browser, "timeline-chart")
    assert drawn["labels"] == ["MC1", "MC2", "WASH1", "INSP1"]
    assert [d["label"] for d in drawn["datasets"]] == ["PROCESSING", "IDLE", "WAITING_UNLOAD", "FAULT"]
    # Per machine, the bars drawn start where the served intervals do; the first
    # one starts at the window's edge, which slid between the two requests.
    bars, served_bars = {}, {}
    for d in drawn["datasets"]:
        for b in d["data"]:
            bars.setdefault(b["y"], []).append((d["label"], b["x"][0] // 1000))
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

    # A machine changes state: the event alone brings it onto the timeline.
    changed = datetime.now(UTC)
    with writable.begin() as s:
        s.execute(update(MachineStateInterval).where(MachineStateInterval.equipment_id == "MC1",
                                                     MachineStateInterval.ended_at.is_(None))
                  .values(ended_at=changed))
        s.add(MachineStateInterval(equipment_id="MC1", state="FAULT", started_at=changed))
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

    # The last hour instead: the panels are redrawn over it.
    browser.evaluate("(s => { s.value = '1'; s.dispatchEvent(new Event('change')); })"
                     "(document.getElementById('stats-window'))")
    hour_ago_ms = (datetime.now(UTC) - timedelta(hours=1)).timestamp() * 1000
    wait_for(lambda: browser.check(
        "Chart.getChart(document.getElementById('hourly-chart')).data.labels.length <= 2"
        " && Math.abs(Chart.getChart(document.getElementById('timeline-chart')).options.scales.x.min"
        f" - {hour_ago_ms}) < 30000"
        " && document.querySelectorAll('#alarm-counts tbody tr').length === 2"), timeout=15,
        message="the last hour's figures")

    # A piece's route, from a click on it.
    browser.evaluate(f"document.querySelector('#robot .piece[data-job-id=\"{job_id}\"]').click()")
    wait_for(lambda: visible(browser, "#job-section") and browser.check(
        "document.querySelectorAll('#job-steps > li').length === 5"), timeout=15, message="the job's route")
    steps = browser.evaluate("[...document.querySelectorAll('#job-steps > li')].map(li => "
                             "[li.dataset.state, li.querySelector('.step-machines').textContent,"
                             " li.querySelectorAll('.tasks li').length, li.querySelector('.times').textContent])")
    assert [s[:3] for s in steps] == [["DONE", "", 1], ["DONE", "MC1", 3], ["CURRENT", "WASH1", 1],
                                      ["TODO", "", 0], ["TODO", "", 0]]
    assert steps[1][3].endswith("(16 min)") and steps[2][3].startswith("started ")

    assert not visible(browser, "#ai-section")
    assert browser.evaluate("document.getElementById('message').textContent") == ""
    assert page_errors(browser) == []
    browser.evaluate("(s => { s.value = '8'; s.dispatchEvent(new Event('change')); })"
                     "(document.getElementById('stats-window'))")
    wait_for(lambda: browser.check("Chart.getChart(document.getElementById('hourly-chart')).data.labels.length >= 8"),
             timeout=15, message="the 8 hours again")
    browser.call("Emulation.setDeviceMetricsOverride", width=1400, height=2400, deviceScaleFactor=1, mobile=False)
    browser.screenshot(ARTIFACTS / "operator-views.png")


def test_the_production_window_may_be_a_work_orders_run(served, writable, browser, events):
    now = datetime.now(UTC)
    seed_history(writable, now)
    seed_live_job(writable, now)
    ids = seed_orders(writable, now)
    with writable() as s:
        orders = {o.code: o for o in s.scalars(select(WorkOrder))}
    open_page(browser, served, OPERATOR)
    wait_for(lambda: browser.check(
        "document.body.dataset.statsLoaded === 'true' && document.body.dataset.loaded === 'true'"
        " && document.querySelectorAll('#stats-orders option').length > 0"
        " && document.getElementById('conn').textContent === 'live'"), timeout=30,
        message="the production panel and the orders")
    auth = {"Authorization": f"Bearer {OPERATOR}"}
    timeline_x = ("(s => [s.min, s.max])(Chart.getChart(document.getElementById('timeline-chart'))"
                  ".options.scales.x)")

    # The choice: four time spans, then the started orders, latest start first.
    choices = browser.evaluate("[...document.querySelectorAll('#stats-window option')]"
                               ".map(o => [o.parentElement.id, o.value, o.textContent])")
    assert [c[1] for c in choices if c[0] != "stats-orders"] == ["0.25", "1", "8", "24"]
    offered = [(c[1], c[2]) for c in choices if c[0] == "stats-orders"]
    assert [v for v, _ in offered] == [f"wo:{orders[code].id}" for code in ("WO-LIVE", "WO-SHORT", "WO-HISTORY")]
    assert offered[1][1].startswith("WO-SHORT (completed, ") and offered[0][1].startswith("WO-LIVE (running, ")
    assert offered[0][1].endswith("–now)")
    assert f"wo:{ids['never']}" not in [v for v, _ in offered]  # never started: no run to show

    # The last 15 minutes.
    browser.evaluate("(s => { s.value = '0.25'; s.dispatchEvent(new Event('change')); })"
                     "(document.getElementById('stats-window'))")
    quarter_ago_ms = (datetime.now(UTC) - timedelta(minutes=15)).timestamp() * 1000
    wait_for(lambda: browser.check(f"Math.abs({timeline_x}[0] - {quarter_ago_ms}) < 20000"
                                   f" && Math.abs({timeline_x}[1] - {timeline_x}[0] - 900000) < 1000"),
             timeout=15, message="the last 15 minutes")

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

    def asked(path: str) -> list[dict]:
        """The windows the page asked `path` for, as sent (ISO-8601, Z)."""
        urls = [u for u in fetched(browser) if u.split("?")[0].endswith(path)]
        return [dict(q.split("=", 1) for q in u.split("?", 1)[1].split("&")) for u in urls]

    sent = asked("/api/stats")[-1]
    window = {k: requests.utils.unquote(v) for k, v in sent.items()}
    assert window["from"].endswith("Z") and window["to"].endswith("Z")
    assert [int(datetime.fromisoformat(window[k]).timestamp() * 1000) for k in ("from", "to")] == [from_ms, to_ms]
    assert asked("/api/stats/timeline")[-1] == sent
    stats = requests.get(served + "/api/stats", params=window, headers=auth, timeout=10).json()
    timeline = requests.get(served + "/api/stats/timeline", params=window, headers=auth, timeout=10).json()
    tiles = browser.evaluate("Object.fromEntries([...document.querySelectorAll('#kpis .tile')]"
                             ".map(t => [t.id, t.querySelector('.value').textContent]))")
    line = stats["line"]
    assert line["completed"] + line["scrapped"] >= 1  # a piece finishes every 5 minutes
    assert tiles["kpi-completed"] == str(line["completed"]) and tiles["kpi-scrapped"] == str(line["scrapped"])
    hourly = chart_data(browser, "hourly-chart")
    assert hourly["datasets"][0]["data"] == [h["completed"] for h in stats["hourly"]]
    oee = chart_data(browser, "oee-chart")
    assert oee["datasets"][0]["data"] == [float(pct(e["oee"])[:-2]) if e["oee"] is not None else None
                                          for e in stats["equipment"]]
    drawn = chart_data(browser, "timeline-chart")
    bars = sorted((b["y"], d["label"], b["x"][0], b["x"][1]) for d in drawn["datasets"] for b in d["data"])
    ms = lambda t: int(datetime.fromisoformat(t).timestamp() * 1000)  # noqa: E731
    assert bars == sorted((i["equipmentId"], i["state"], ms(i["from"]), ms(i["to"])) for i in timeline["items"])
    assert len(bars) >= 4
    assert browser.evaluate("document.getElementById('stats-span').textContent").endswith("(7 min)")
    browser.call("Emulation.setDeviceMetricsOverride", width=1400, height=1400, deviceScaleFactor=1, mobile=False)
    browser.screenshot(ARTIFACTS / "order-window.png")

    # A finished order's window stays put when the line moves on.
    changed = datetime.now(UTC)
    with writable.begin() as s:
        s.execute(update(MachineStateInterval).where(MachineStateInterval.equipment_id == "MC1",
                                                     MachineStateInterval.ended_at.is_(None))
                  .values(ended_at=changed))
        s.add(MachineStateInterval(equipment_id="MC1", state="FAULT", started_at=changed))
    browser.evaluate("performance.clearResourceTimings()")
    events.write([("MachineStateChanged", {"equipmentId": "MC1", "state": "FAULT", "since": iso(changed)})])
    wait_for(lambda: asked("/api/stats/timeline") and asked("/api/stats"), timeout=15,
             message="the redraw the event asks for")
    assert asked("/api/stats")[-1] == sent and browser.evaluate(timeline_x) == [from_ms, to_ms]

    # A running order, from the choice: from its start, up to now, and "now" moves.
    live = orders["WO-LIVE"]
    browser.evaluate(f"(s => {{ s.value = 'wo:{live.id}'; s.dispatchEvent(new Event('change')); }})"
                     "(document.getElementById('stats-window'))")
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

    browser.evaluate("(s => { s.value = '8'; s.dispatchEvent(new Event('change')); })"
                     "(document.getElementById('stats-window'))")
    wait_for(lambda: browser.check("Chart.getChart(document.getElementById('hourly-chart')).data.labels.length >= 8"),
             timeout=15, message="the 8 hours again")
    assert browser.evaluate("document.getElementById('message').textContent") == ""
    assert page_errors(browser) == []


def test_an_alarm_is_shelved_and_unshelved_from_the_page(served, writable, browser):
    now = datetime.now(UTC)
    ids = seed_alarms(writable, now)
    open_page(browser, served, OPERATOR)
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
    assert message(browser) == {"text": "shelve: a reason is required", "kind": "error", "colour": RED}
    browser.evaluate("document.getElementById('shelve-minutes').value = '45';"
                     "document.getElementById('shelve-reason').value = 'spindle sensor swap';"
                     "document.querySelector('#shelve-form button[type=submit]').click()")
    shelved_card = f"#shelved li[data-alarm-id=\"{ids['critical']}\"]"
    wait_for(lambda: browser.check(f"!!document.querySelector('{shelved_card}') && !document.querySelector('{card}')"
                                   " && document.getElementById('shelve-form').hidden"),
             timeout=30, message="the alarm in the shelved list")
    with writable() as s:
        alarm = s.get(Alarm, ids["critical"])
        assert alarm.status == "SHELVED" and alarm.shelve_reason == "spindle sensor swap"
        assert abs((alarm.shelved_until - alarm.shelved_at).total_seconds() - 45 * 60) < 1
    note = browser.evaluate(f"document.querySelector('{shelved_card} .shelved-note').textContent")
    assert "spindle sensor swap" in note and note.startswith("until ")

    browser.evaluate(f"document.querySelector('{shelved_card} button.unshelve').click()")
    wait_for(lambda: browser.check(f"!document.querySelector('{shelved_card}')"
                                   f" && document.querySelector('{card} .status').textContent === 'RAISED'"),
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


def ai_job(base: str, job_type: str = "learning_state_analysis", target: str = "t1") -> dict:
    r = requests.post(base + "/api/ai/jobs", headers={"Authorization": f"Bearer {PLATFORM}"}, timeout=10,
                      json={"userId": "u1", "jobType": job_type, "targetType": "user", "targetId": target})
    assert r.status_code == 201, r.text
    return r.json()


def ai_finish(base: str, job_id: str, **result) -> None:
    runtime = {"Authorization": f"Bearer {RUNTIME}"}
    r = requests.post(f"{base}/internal/runtime/jobs/{job_id}/lock", headers=runtime, timeout=10,
                      json={"runtimeInstanceId": "rt-page"})
    assert r.status_code == 200, r.text
    r = requests.post(f"{base}/internal/runtime/jobs/{job_id}/result", headers=runtime, timeout=10,
                      json={"runtimeInstanceId": "rt-page", "attemptNo": 1, **result})
    assert r.status_code == 200, r.text


def test_the_ai_panel_shows_failures_and_an_admin_reruns_one(served, writable, browser):
    # Through the HTTP API, as a platform and a runtime would: one failed
    # (a non-retryable code), one succeeded, one still pending.
    failed = ai_job(served, target="t-failed")
    ai_finish(served, failed["id"], status="failed", errorCode="INVALID_CREDENTIAL",
              errorMessage="the provider refused the key")
    done = ai_job(served, target="t-done")
    output = {"summary": "steady progress", "masteryLevel": 0.6}
    ai_finish(served, done["id"], status="succeeded", output=output, outputHash=output_hash(output))
    ai_job(served, target="t-pending")

    open_page(browser, served, ADMIN)
    row = f"#ai-failures tr[data-job-id=\"{failed['id']}\"]"
    wait_for(lambda: browser.check(f"document.body.dataset.aiLoaded === 'true' && !!document.querySelector('{row}')"),
             timeout=30, message="the AI panel")
    assert visible(browser, "#ai-section") and visible(browser, "#production-section")  # admin: both
    assert browser.evaluate(f"document.querySelector('{row} .code').textContent") == "INVALID_CREDENTIAL"
    by_status = chart_data(browser, "ai-status-chart")
    counts = dict(zip(by_status["labels"], by_status["datasets"][0]["data"], strict=True))
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
    # A reload (or another admin's page) knows it was rerun: no second Rerun to press.
    open_page(browser, served, ADMIN)
    wait_for(lambda: browser.check(f"document.body.dataset.aiLoaded === 'true' && !!document.querySelector('{row} .rerun-as')"),
             timeout=30, message="the rerun after a reload")
    assert not browser.check(f"!!document.querySelector('{row} button.rerun')")
    browser.evaluate("document.querySelector('#ai-section').scrollIntoView()")
    browser.screenshot(ARTIFACTS / "ai-panel.png")


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
