"""What the page's view tests read off the page (charts, tiles, the message
line, what it fetched) and do on it (open it with a token, choose a window),
plus the API calls they compare it with."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
import requests
from sqlalchemy import update

from shared.db.models import MachineStateInterval
from tests.gateway.cdp import CHROMIUM
from tests.gateway.conftest import OPERATOR, RUNTIME
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[3]
STATIC = ROOT / "gateway" / "static"
ARTIFACTS = ROOT / "test-artifacts"
PLATFORM = "platform-token-0123"
AUTH = {"Authorization": f"Bearer {OPERATOR}"}

# Each view test module's marks.
PAGE_MARKS = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM),
                       reason=f"{CHROMIUM} is absent (Debian package `chromium`); the page test needs it"),
    pytest.mark.timeout(240),
]

# The per-machine figures as the OEE chart's legend names them (en) → their field.
FIGURES = {"OEE": "oee", "availability": "availability", "performance": "performance", "quality": "quality"}
RED = "rgb(170, 51, 51)"  # #a33, the message line's colour for an error
# The timeline's x axis, [min, max] in ms.
TIMELINE_X = "(s => [s.min, s.max])(Chart.getChart(document.getElementById('timeline-chart')).options.scales.x)"


def open_page(browser, base: str, token: str, language: str | None = None) -> None:
    """The page with `token`, in `language` if given (as its switch would have
    left it), else in the one the browser asks for."""
    browser.navigate(base + "/")
    wait_for(lambda: browser.check(f"location.origin === '{base}' && document.readyState === 'complete'"),
             timeout=30, message="the page at the gateway's origin")
    remember = f"localStorage.setItem('linectl.lang', '{language}')" if language else \
        "localStorage.removeItem('linectl.lang')"
    browser.evaluate(f"localStorage.setItem('linectl.token', '{token}'); {remember}; window.__before = true")
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
    on its decimal value (0.6605 → "66.1%", as Intl writes it in en and zh-CN)."""
    return f"{(Decimal(str(ratio)) * 100).quantize(Decimal('0.1'), ROUND_HALF_UP)}%"


def catalog(language: str = "en") -> dict[str, str]:
    """The page's catalog for `language` (what a person reads on the page)."""
    return json.loads((STATIC / "i18n" / f"{language}.json").read_text(encoding="utf-8"))


EN = catalog("en")
# A machine state as the timeline's legend names it (en) → its code.
STATE_OF_LABEL = {EN[f"machineState.{s}"]: s for s in ("PROCESSING", "IDLE", "WAITING_UNLOAD", "FAULT")}



def message(browser) -> dict:
    return browser.evaluate("(m => ({text: m.textContent, kind: m.className, colour: getComputedStyle(m).color}))"
                            "(document.getElementById('message'))")


def visible(browser, selector: str) -> bool:
    return browser.check(f"(e => !!e && e.offsetParent !== null)(document.querySelector('{selector}'))")


def fetched(browser) -> list[str]:
    """The URLs the page fetched (resource timing; the websocket is not one of them)."""
    return browser.evaluate("performance.getEntriesByType('resource').map(e => e.name)")



def asked_by(browser):
    """``asked(path)``: the windows the page asked `path` for, as sent (ISO-8601, Z)."""
    def asked(path: str) -> list[dict]:
        urls = [u for u in fetched(browser) if u.split("?")[0].endswith(path)]
        return [dict(q.split("=", 1) for q in u.split("?", 1)[1].split("&")) for u in urls]
    return asked


def kpi_tiles(browser) -> dict[str, str]:
    """The production panel's tiles: id -> the value shown."""
    return browser.evaluate("Object.fromEntries([...document.querySelectorAll('#kpis .tile')]"
                            ".map(t => [t.id, t.querySelector('.value').textContent]))")


def choose_window(browser, value: str) -> None:
    """Pick a production window in the choice, as a person would."""
    browser.evaluate(f"(s => {{ s.value = '{value}'; s.dispatchEvent(new Event('change')); }})"
                     "(document.getElementById('stats-window'))")


def stats_and_timeline(base: str, window: dict) -> tuple[dict, dict]:
    """/api/stats and /api/stats/timeline over `window`, as the operator."""
    stats = requests.get(base + "/api/stats", params=window, headers=AUTH, timeout=10).json()
    timeline = requests.get(base + "/api/stats/timeline", params=window, headers=AUTH, timeout=10).json()
    return stats, timeline


def mc1_faults(writable) -> datetime:
    """MC1's open interval ends now and a FAULT one starts, as the loop records it."""
    changed = datetime.now(UTC)
    with writable.begin() as s:
        s.execute(update(MachineStateInterval).where(MachineStateInterval.equipment_id == "MC1",
                                                     MachineStateInterval.ended_at.is_(None))
                  .values(ended_at=changed))
        s.add(MachineStateInterval(equipment_id="MC1", state="FAULT", started_at=changed))
    return changed


def wait_for_the_8_hours(browser) -> None:
    choose_window(browser, "8")
    wait_for(lambda: browser.check("Chart.getChart(document.getElementById('hourly-chart')).data.labels.length >= 8"),
             timeout=15, message="the 8 hours again")


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

