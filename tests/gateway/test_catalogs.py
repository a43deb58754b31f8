"""The page's two catalogs (gateway/static/i18n): the same keys and
placeholders in both; every key the page names is in them, and so is every
code the line can show (statuses, task kinds, manual-action kinds and their
choices, alarm codes, error codes, event types); the zh-CN one is Chinese.
The gateway serves them and starts the page in the Accept-Language's language."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from werkzeug.datastructures import LanguageAccept
from werkzeug.http import parse_accept_header

from gateway.app import page_language
from services.line_controller import consistency_checks, manual_actions
from shared import events
from shared.config import ROLES, Settings
from shared.db.models import vocabularies as vocab
from shared.layout import load_layout

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "gateway" / "static"
SERVICES = ROOT / "services" / "line_controller"
LANGUAGES = ("en", "zh-CN")
PLACEHOLDER = re.compile(r"\{(\w+)(?::(\w+))?\}")
# Issue 29's kind, as PRODUCT.md names it ("Faults on the floor").
MACHINE_FAULT_DURING_CYCLE = ("MACHINE_FAULT_DURING_CYCLE", ("RESTART_CYCLE", "RETURN_TO_BUFFER", "SCRAP"))
# Latin the zh-CN catalog may hold: abbreviations read as such, and names.
LATIN = {"OEE", "PLC", "AI", "JSON", "WO", "P95", "linectl", "English", "s"}


def load(language: str) -> dict[str, str]:
    return json.loads((STATIC / "i18n" / f"{language}.json").read_text(encoding="utf-8"))


CATALOGS = {language: load(language) for language in LANGUAGES}
EN = CATALOGS["en"]


def source(*paths: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in paths)


def test_both_catalogs_have_the_same_keys_and_placeholders():
    en, zh = CATALOGS["en"], CATALOGS["zh-CN"]
    assert sorted(en) == sorted(zh)
    for key, text in en.items():
        assert text.strip() and zh[key].strip(), key
        assert sorted(PLACEHOLDER.findall(text)) == sorted(PLACEHOLDER.findall(zh[key])), key


def test_the_zh_cn_catalog_is_chinese():
    english = {}
    for key, text in CATALOGS["zh-CN"].items():
        words = [w for w in re.findall(r"[A-Za-z][A-Za-z0-9]*", PLACEHOLDER.sub(" ", text))
                 if w not in LATIN and not w.isupper()]
        if words:
            english[key] = words
    assert not english
    # ...and the check sees English where there is some.
    assert re.findall(r"[A-Za-z][A-Za-z0-9]*", PLACEHOLDER.sub(" ", EN["manual.empty"]))


def test_every_key_the_page_names_is_in_the_catalogs():
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    named = set(re.findall(r'data-i18n(?:-[a-z-]+)?="([^"]+)"', html))
    scripts = source(*sorted(STATIC.glob("*.js")))
    prefixes = {key.split(".")[0] for key in EN}
    # Every string literal shaped like one of the catalog's keys ("orders.create").
    named |= {k for k in re.findall(r'"([a-z][A-Za-z0-9]*\.[A-Za-z0-9_.]+)"', scripts) if k.split(".")[0] in prefixes}
    assert len(named) > 150
    # (a counted text, tCount(key), is its plural forms: key.one, key.other)
    assert sorted(k for k in named - set(EN) if f"{k}.other" not in EN) == []
    # Keys built at run time: `orderAction.${a}`, `conn.${state}`, `series.${key}`.
    built = {f"orderAction.{a}" for a in ("start", "pause", "resume", "cancel")}
    built |= {f"conn.{s}" for s in ("on", "off", "none")}
    built |= {"banner.more.one", "banner.more.other"}  # tCount: the plural forms of en (zh-CN has one)
    # The plant overview's badges (plant.js): `plant.${kind}`, worded with tCode(`${kind}State`, …).
    built |= {"plant.controller", "plant.plc", "manualBanner.more.one", "manualBanner.more.other",
              "plant.alarms.one", "plant.alarms.other", "plant.manual.one", "plant.manual.other"}
    built |= {f"series.{s}" for s in ("completed", "scrapped", "succeeded", "failed", "oee", "availability",
                                       "performance", "quality")}
    assert sorted(built - set(EN)) == []


# Each code the page words with tCode(prefix, code), and every value it may take.
CODES = {
    "jobStatus": vocab.JOB_STATUSES, "orderStatus": vocab.WORK_ORDER_STATUSES,
    "alarmStatus": vocab.ALARM_STATUSES, "severity": vocab.ALARM_SEVERITIES,
    "machineState": vocab.MACHINE_STATES, "taskStatus": vocab.TASK_STATUSES,
    "slotStatus": vocab.SLOT_STATUSES, "equipmentStatus": vocab.EQUIPMENT_STATUSES,
    "position": vocab.POSITION_TYPES, "aiStatus": vocab.AI_JOB_STATUSES, "aiType": vocab.AI_JOB_TYPES,
    "role": ROLES, "step": ("DONE", "CURRENT", "TODO"),
    # A line's state on the plant overview (GET /api/lines).
    "controllerState": ("UP", "DOWN"), "plcState": ("CONNECTED", "DISCONNECTED"),
    "task": (events.DOCK_TO_BUFFER, events.BUFFER_TO_EQUIPMENT, events.EQUIPMENT_TO_BUFFER, events.SWAP,
             events.SCAN, events.MARK, events.START_MACHINE, events.BUFFER_TO_DOCK, events.ABORT_CYCLE),
    # A hardware action's outcome codes, shown inside a sentence ("… failed (not sent: …)").
    "fault": (events.NOT_EXECUTED, events.NOT_SENT, events.OUTCOME_UNKNOWN, "ACTION_TIMEOUT", "REJECTED",
              "SOURCE_EMPTY", "RECOVERY_OUTCOME_UNKNOWN"),
}


@pytest.mark.parametrize("prefix", list(CODES))
def test_every_code_the_line_shows_has_its_words(prefix):
    assert CODES[prefix]
    assert [c for c in CODES[prefix] if f"{prefix}.{c}" not in EN] == []


def test_the_layouts_steps_and_kinds_have_their_words():
    layout = load_layout(Settings().line_file)
    ops = {step.op for product in layout.products for step in product.route}
    kinds = {e.kind for e in layout.equipment} | {t.kind for t in layout.tools}
    assert ops and kinds
    assert sorted(f"op.{o}" for o in ops if f"op.{o}" not in EN) == []
    assert sorted(f"kind.{k}" for k in kinds if f"kind.{k}" not in EN) == []


def manual_action_kinds() -> dict[str, tuple[str, ...]]:
    # a kind's variants (facts.case: ACTION_FAILED's REPEATED) may offer other choices
    kinds = {k: tuple(dict.fromkeys(spec.choices + tuple(c for _, cs in spec.variants.values() for c in cs)))
             for k, spec in manual_actions.MANUAL_ACTIONS.items()}
    kinds.update(consistency_checks.CHOICES)
    kinds.setdefault(*MACHINE_FAULT_DURING_CYCLE)
    return kinds


def test_every_manual_action_and_its_choices_have_their_words():
    slot_cases = set(re.findall(r'"((?:JOB_SLOT|SLOT_JOB)_[A-Z_]+)"', source(SERVICES / "consistency_checks.py")))
    assert len(slot_cases) == 4
    for kind, choices in manual_action_kinds().items():
        if kind == consistency_checks.SLOT_MISMATCH:
            assert sorted(c for c in slot_cases if f"action.{kind}.{c}" not in EN) == []
        else:
            assert f"action.{kind}" in EN, kind
        # A choice says what it does in this kind's own words (RETRY means another thing per kind).
        assert [c for c in choices if f"choice.{kind}.{c}" not in EN] == [], kind
    assert EN["choice.MACHINE_FAULT_DURING_CYCLE.RESTART_CYCLE"] == "Restart the cycle with the pieces in place"
    variants = [(k, case) for k, spec in manual_actions.MANUAL_ACTIONS.items() for case in spec.variants]
    variants.append((consistency_checks.MACHINE_PIECE_MISSING, consistency_checks.SOURCE_EMPTY))
    assert ("ACTION_FAILED", "REPEATED") in variants
    assert [f"{k}.{case}" for k, case in variants
            if f"action.{k}.{case}" not in EN or f"alarm.{k}.{case}" not in EN] == []


def alarm_codes() -> set[str]:
    """The codes the line raises alarms with: literal, or named by a constant (``*_ALARM = "…"``)."""
    code = source(*sorted(SERVICES.rglob("*.py")))
    constants = dict(re.findall(r'^([A-Z_]+) = "([A-Z_]+)"', code, re.M))
    raised = set(re.findall(r'raise_alarm\(\s*(?:"([A-Z_]+)"|(?:ma\.)?([A-Z_]+))', code))
    codes = {literal or constants[name] for literal, name in raised}
    return codes - {""}


def test_every_alarm_code_has_its_sentence_and_what_to_do_next():
    codes = alarm_codes()
    assert {"EQUIPMENT_FAULT", "CYCLE_OVERDUE", "ACTION_FAILED", "SIGNAL_JOB_MISMATCH", "PLC_DISCONNECTED",
            "ROBOT_FAULT", "SIGNAL_UNEXPECTED"} <= codes
    signals = set(re.findall(r'_unexpected\([^)]*?"([A-Z_]+)"', source(SERVICES / "handlers" / "signals.py")))
    assert signals == {"DONE_NO_PIECE", "DONE_EMPTY_SLOT", "INSPECTION_NO_PIECE"}
    assert sorted(s for s in signals if f"alarm.SIGNAL_UNEXPECTED.{s}" not in EN) == []
    for code in codes - {"SIGNAL_UNEXPECTED"}:  # (worded per signal, above)
        assert f"alarm.{code}" in EN and f"next.{code}" in EN, code
    for kind in consistency_checks.RECOVERY_KINDS:
        assert kind == consistency_checks.SLOT_MISMATCH or f"alarm.{kind}" in EN, kind
    assert "next.RECOVERY" in EN and "next.default" in EN


def test_every_error_code_has_its_words():
    gateway = source(*sorted((ROOT / "gateway").rglob("*.py")))
    codes = set(re.findall(r'ApiError\(\d+, "([A-Z_]+)"', gateway)) | set(re.findall(
        r'"([A-Z_]+)": \d{3}', gateway)) | {"EQUIPMENT_FAULTED"}
    codes -= {"INTERNAL"}  # a 500 the contract says never happens: "error.other" says it with its code
    assert {"VALIDATION_ERROR", "INVALID_TRANSITION", "UNAVAILABLE", "EQUIPMENT_FAULTED"} <= codes
    assert sorted(c for c in codes if f"error.{c}" not in EN) == []
    assert "PLC" in EN["error.EQUIPMENT_FAULTED"]


def test_every_event_the_loop_writes_has_its_sentence():
    code = source(*sorted(SERVICES.rglob("*.py")))
    emitted = set(re.findall(r'emit\(\s*"([A-Z]\w+)"', code))
    emitted |= set(re.findall(r',\s*"([A-Z][a-z]+(?:[A-Z][a-z]+)+)",\s*(?:serialize\.|f"|lambda)', code))
    assert {"JobMoved", "MachineStateChanged", "AlarmRaised", "ManualActionResolved"} <= emitted
    assert sorted(e for e in emitted if f"event.{e}" not in EN) == []


def test_nothing_on_the_page_needs_hover():
    assert ":hover" not in (STATIC / "style.css").read_text()
    scripts = source(*sorted(STATIC.glob("*.js")))
    assert not re.search(r"mouse(over|enter|move)|pointer(over|enter)", scripts)


@pytest.mark.parametrize(("header", "language"), [
    ("zh-CN,zh;q=0.9,en;q=0.5", "zh-CN"), ("zh", "zh-CN"), ("zh-TW", "zh-CN"), ("en-GB,en;q=0.8", "en"),
    ("de-DE, zh;q=0.5, en;q=0.4", "zh-CN"), ("en;q=0.5, zh-CN", "zh-CN"), ("fr", "en"), ("", "en"),
])
def test_the_page_language_follows_accept_language(header, language):
    assert page_language(parse_accept_header(header, LanguageAccept)) == language


def test_the_gateway_serves_the_catalogs_and_starts_the_page_in_its_language(client):
    for language in LANGUAGES:
        r = client.get(f"/static/i18n/{language}.json")
        assert r.status_code == 200 and json.loads(r.data) == CATALOGS[language]
    page = client.get("/", headers={"Accept-Language": "zh-CN,zh;q=0.9"})
    assert page.status_code == 200 and '<html lang="zh-CN">' in page.get_data(as_text=True)
    assert "Accept-Language" in page.headers["Vary"] and page.headers["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    assert '<html lang="en">' in client.get("/").get_data(as_text=True)
    # The gateway replaces exactly this: the page's only <html> tag.
    assert (STATIC / "index.html").read_text().count('<html lang="en">') == 1
