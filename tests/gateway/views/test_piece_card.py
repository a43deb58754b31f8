"""Piece traceability on the page (PRODUCT.md, "Piece traceability"), in headless
Chromium on a served gateway: a serial typed into the search box finds the piece
(on any line: /api/plant/pieces) and its card shows its timeline in time order,
its steps (machine, slot, verdict), moves, scan, mark, an alarm and the answer
with the operator's name, in English and in 简体中文 (from the catalogs), with no
error on the page; an unknown serial says so. The screenshot is docs/piece-card.png's."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from tests.gateway.conftest import OPERATOR
from tests.gateway.views.pages import ARTIFACTS, PAGE_MARKS, catalog, open_page, page_errors
from tests.support.waiting import wait_for

pytestmark = PAGE_MARKS

SERIAL = "SNQ4TZ7KEM00000041"


def seed_piece(writable) -> None:
    """A finished piece's record as the loop writes it: five steps (a fault stopped its
    machining once, the operator answered RETURN_TO_BUFFER), its moves, scan, mark, alarm."""
    t0 = datetime.now(UTC) - timedelta(hours=2)

    def at(minutes: float) -> datetime:
        return t0 + timedelta(minutes=minutes)
    with writable.begin() as s:
        s.execute(text("INSERT INTO piece (job_id, serial, work_order_id, work_order_code, product_id, status, "
                       "created_at, finished_at) VALUES (7041, :s, 41, 'WO-20260301-41', 'BRACKET-A', 'COMPLETED', "
                       ":c, :f)"), {"s": SERIAL, "c": at(0), "f": at(60)})
        steps = [(0, "scan", None, None, 2, 2.5, "DONE", {"code": SERIAL}),
                 (1, "machining", "MC1", 1, 4, 9, "ABORTED", {}),
                 (1, "machining", "MC2", 2, 15, 27, "DONE", {}),
                 (2, "washing", "WASH1", 1, 29, 49, "DONE", {}),
                 (3, "inspection", "INSP1", 1, 51, 55, "PASS", {"diameter": 12.01}),
                 (4, "mark", None, None, 57, 58, "DONE", {"text": SERIAL})]
        for index, kind, machine, slot, start, end, result, values in steps:
            s.execute(text("INSERT INTO piece_step (job_id, step_index, kind, equipment_id, slot_no, started_at, "
                           "ended_at, result, values) VALUES (7041, :i, :k, :e, :n, :s, :x, :r, CAST(:v AS jsonb))"),
                      {"i": index, "k": kind, "e": machine, "n": slot, "s": at(start), "x": at(end), "r": result,
                       "v": __import__("json").dumps(values)})
        entries = [
            ("move", 1, '{"kind": "DOCK_TO_BUFFER", "result": "SUCCEEDED", "equipmentId": null}'),
            ("scan", 2.5, f'{{"code": "{SERIAL}", "result": "SUCCEEDED"}}'),
            ("move", 3.5, '{"kind": "BUFFER_TO_EQUIPMENT", "result": "SUCCEEDED", "equipmentId": "MC1"}'),
            ("alarm", 9, '{"alarmId": 5, "code": "EQUIPMENT_FAULT", "message": "MC1 reports fault 3", '
                         '"equipmentId": "MC1", "facts": {"equipmentId": "MC1", "fault": 3}}'),
            ("answer", 11, '{"manualActionId": 12, "kind": "MACHINE_FAULT_DURING_CYCLE", '
                           '"resolution": "RETURN_TO_BUFFER", "by": "erika"}'),
            ("move", 12, '{"kind": "EQUIPMENT_TO_BUFFER", "result": "SUCCEEDED", "equipmentId": "MC1"}'),
            ("mark", 58, f'{{"text": "{SERIAL}", "result": "SUCCEEDED"}}'),
            ("move", 59, '{"kind": "BUFFER_TO_DOCK", "result": "SUCCEEDED", "equipmentId": null}'),
        ]
        for category, minutes, detail in entries:
            s.execute(text("INSERT INTO piece_entry (job_id, category, at, detail) VALUES (7041, :c, :a, "
                           "CAST(:d AS jsonb))"), {"c": category, "a": at(minutes), "d": detail})
        s.execute(text("UPDATE piece_entry SET detail = detail || jsonb_build_object('at', to_jsonb(at)) "
                       "WHERE category = 'answer'"))


def search(browser, serial: str) -> None:
    browser.evaluate(f"document.querySelector('#piece-serial').value = {serial!r}; "
                     "document.querySelector('#piece-search').requestSubmit()")


def test_a_serial_finds_its_piece_and_the_card_shows_its_timeline_in_both_languages(served, browser, writable):
    seed_piece(writable)
    browser.call("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False)
    for language in ("en", "zh-CN"):
        words = catalog(language)
        open_page(browser, served, OPERATOR, language)
        wait_for(lambda: browser.check("!document.querySelector('#pieces-section').hidden"), 30,
                 message="the piece search shown")
        search(browser, "SN-NO-SUCH-PIECE")
        wait_for(lambda: browser.check("document.querySelector('#piece-found').textContent.length > 0"), 30,
                 message="an unknown serial said")
        assert browser.evaluate("document.querySelector('#piece-found').textContent") == \
            words["pieces.notFound"].replace("{serial}", "SN-NO-SUCH-PIECE")
        search(browser, SERIAL)
        wait_for(lambda: browser.check(f"document.body.dataset.pieceShown === {SERIAL!r}"), 30,
                 message="the piece's card")
        assert browser.evaluate("document.querySelector('#piece-title').textContent") == \
            words["pieces.card"].replace("{serial}", SERIAL)
        kinds = browser.evaluate("[...document.querySelectorAll('#piece-timeline li')].map(li => li.dataset.kind)")
        assert kinds == ["move", "step", "scan", "move", "step", "alarm", "answer", "move", "step", "step", "step",
                         "step", "mark", "move"], kinds
        lines = browser.evaluate("[...document.querySelectorAll('#piece-timeline li')].map(li => li.textContent)")
        answer = lines[kinds.index("answer")]
        assert "erika" in answer and words["choice.MACHINE_FAULT_DURING_CYCLE.RETURN_TO_BUFFER"] in answer
        inspection = lines[10]  # the fourth step of the route, its fifth run
        assert "INSP1" in inspection and words["pieceResult.PASS"] in inspection
        assert "MC1" in lines[4] and words["pieceResult.ABORTED"] in lines[4]  # the run the fault stopped
        alarm = words["alarm.EQUIPMENT_FAULT"].replace("{equipmentId}", "MC1").replace("{fault}", "3")
        assert lines[5].endswith(alarm), lines[5]  # worded from its facts in the reader's language
        facts = browser.evaluate("document.querySelector('#piece-facts').textContent")
        assert "demo-cell" in facts and "WO-20260301-41" in facts and words["jobStatus.COMPLETED"] in facts
        assert page_errors(browser) == []
        # The card alone (docs/piece-card.png is the English one).
        box = browser.evaluate("(r => ({x: r.x + scrollX, y: r.y + scrollY, width: r.width, height: r.height}))"
                               "(document.querySelector('#pieces-section').getBoundingClientRect())")
        shot = browser.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                            clip={**box, "scale": 1})
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / f"piece-card-{language}.png").write_bytes(base64.b64decode(shot["data"]))
