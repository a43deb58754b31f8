"""Issue 38's page for a plant of several lines, in headless Chromium on a served
gateway: three lines behind it, demo-cell (the default line), cell-b (stand-in
services of its own) and cell-c (no controller: down).

The page opens on the plant overview: a card per line with its state, its
running orders and their progress, its open alarms and manual actions, and its
output today; in 简体中文 and in English, every target touch-sized, axe-core's
serious and critical findings none. A card (a tap anywhere on it, or Enter on its
link) opens the line's page, the line views on that line's paths; "All lines"
and the browser's Back go back. Every line's alarms and manual actions announce
themselves, naming the line, while another line's page is on screen: an alarm
of the default line is acknowledged from the banner on cell-b's page, a manual
action of cell-c leads to cell-c's page. With one line, there is no overview."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
from sqlalchemy import select

from services.identity.passwords import Passwords
from services.identity.users import UserStore
from shared.db.engine import make_engine
from shared.db.models import Alarm, Job, ManualAction, WorkOrder
from shared.plant import load_plant
from tests.gateway.conftest import ADMIN, AUTH, OPERATOR
from tests.gateway.standin import EventWriter, open_plant_lines, stand_ins_of_line, write_plant_file
from tests.gateway.views.pages import ARTIFACTS, PAGE_MARKS, asked_by, catalog, fetched, open_page, page_errors
from tests.gateway.views.test_languages import (  # noqa: F401 - axe_source is a fixture
    READ_TEXTS,
    TOO_SMALL,
    ask_for,
    axe_findings,
    axe_source,
    check_translated,
    size,
)
from tests.identity.conftest import CONSOLE, FAST_ARGON2, PASSWORD
from tests.support.waiting import wait_for

pytestmark = PAGE_MARKS

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
LINES = ("demo-cell", "cell-b", "cell-c")
LANGUAGES = ("zh-CN", "en")
# What the overview is made of, for axe-core.
OVERVIEW = ["header", "#alarm-banner", "#manual-banner", "#plant-section"]
CARD = "#plant-lines li[data-line-id=\"{}\"]"


# -- the plant ----------------------------------------------------------------------------


@pytest.fixture
def plant_file(tmp_path):
    return write_plant_file(tmp_path / "plant.yaml", DEPLOY, "page-plant")


@pytest.fixture
def lines(db_url, writable, plant_file):
    """Every line's tables, seeded as its controller would: {line id: read-write sessions},
    and "schemas": {line id: schema}."""
    sessions, schemas, engines = open_plant_lines(db_url, writable, load_plant(plant_file))
    yield {**sessions, "schemas": schemas}
    for engine in engines:
        engine.dispose()


@pytest.fixture
def serve_plant(gateway_server, plant_file, lines, container_factory, nameko_config):
    """``serve_plant(**env)``: the plant's served gateway (cell-b's stand-ins running; cell-c has none)."""
    for service in stand_ins_of_line("cell-b", lines["schemas"]["cell-b"], DEPLOY / "lines" / "cell-b.yaml"):
        container_factory(service, nameko_config).start()
    return lambda **env: gateway_server(LINECTL_PLANT_FILE=str(plant_file), **env).base


@pytest.fixture
def plant(serve_plant):
    # A broker named (the gateway never connects to it; the publisher, not run here, would).
    return serve_plant(LINECTL_MQTT_URL="mqtt://127.0.0.1:1883")


def seed_publisher(lines) -> None:
    """The northbound publisher's rows (docs/uns.md): demo-cell's node connected and caught
    up, cell-b's gone a minute ago with 2 events unsent; cell-c never published."""
    from sqlalchemy import text

    with lines["cell-b"].begin() as s:
        s.execute(text("INSERT INTO event_log (seq, tx_id, type, at, payload) SELECT b.seq + g, b.tx + g,"
                       " 'DockChanged', now(), CAST(:payload AS jsonb) FROM generate_series(1, 2) g,"
                       " (SELECT coalesce(max(seq), 0) AS seq, coalesce(max(tx_id), 0) AS tx FROM event_log) b"),
                  {"payload": '{"piecesWaiting": 0}'})
        newest_b = s.execute(text("SELECT max(seq) FROM event_log")).scalar()
    with lines["demo-cell"].begin() as s:
        newest_a = s.execute(text("SELECT coalesce(max(seq), 0) FROM event_log")).scalar()
        s.execute(text("INSERT INTO public.uns_node (line_id, schema_name, acked_seq, connected, heartbeat_at)"
                       " VALUES ('demo-cell', 'public', :a, true, now()),"
                       " ('cell-b', :schema, :b, false, now() - interval '1 minute')"),
                  {"a": newest_a, "b": newest_b - 2, "schema": lines["schemas"]["cell-b"]})


def broker_line(browser) -> dict:
    return browser.evaluate("(p => ({hidden: p.hidden, state: p.dataset.state, backlog: p.dataset.backlog,"
                            " text: p.textContent}))(document.getElementById('plant-broker'))")


def writer(lines, nameko_config, line_id: str) -> EventWriter:
    """Events of a line, as its controller writes and publishes them."""
    if line_id == LINES[0]:
        return EventWriter(lines[line_id], nameko_config)
    return EventWriter(lines[line_id], nameko_config, service=f"line_controller@{line_id}", line_id=line_id)


def seed_running_order(sessions, code: str, product, quantity: int, completed: int, scrapped: int) -> int:
    """A running order, `completed` and `scrapped` of its pieces finished a moment ago (today's output)."""
    route = [step.to_json() for step in product.route]
    now = datetime.now(UTC)
    with sessions.begin() as s:
        order = WorkOrder(code=code, product_id=product.id, route=route, quantity=quantity, status="RUNNING",
                          completed_qty=completed, scrapped_qty=scrapped, started_at=now - timedelta(minutes=20))
        s.add(order)
        s.flush()
        for n in range(completed + scrapped):
            s.add(Job(work_order_id=order.id, seq_no=n + 1, status="COMPLETED" if n < completed else "SCRAPPED",
                      position_type="OUT", step_index=len(route), finished_at=now - timedelta(seconds=5 + n)))
        return order.id


def raise_fault(sessions, equipment_id: str, fault: int) -> int:
    """A machine's fault alarm (RAISED), worded from its facts."""
    with sessions.begin() as s:
        alarm = Alarm(code="EQUIPMENT_FAULT", severity="ERROR", message=f"{equipment_id} reports fault {fault}",
                      equipment_id=equipment_id, facts={"equipmentId": equipment_id, "fault": fault})
        s.add(alarm)
        s.flush()
        return alarm.id


def open_action(sessions, equipment_id: str) -> int:
    """A machine that did not start: the operator is asked what to do."""
    with sessions.begin() as s:
        action = ManualAction(kind="EQUIPMENT_FAULT", text=f"{equipment_id} did not start: PLC_ERROR",
                              choices=["RETRY", "SCRAP"], equipment_id=equipment_id,
                              facts={"equipmentId": equipment_id, "errorCode": "PLC_ERROR"})
        s.add(action)
        s.flush()
        return action.id


@pytest.fixture
def seeded(plant_file, lines):
    """demo-cell and cell-b each run an order; cell-b has a fault and an open manual action."""
    plant = {line.id: line for line in load_plant(plant_file).lines}
    return {
        "a_order": seed_running_order(lines["demo-cell"], "WO-A-1", plant["demo-cell"].layout.product("BRACKET-A"),
                                      quantity=5, completed=2, scrapped=1),
        "b_order": seed_running_order(lines["cell-b"], "WO-B-1", plant["cell-b"].layout.product("SHAFT-B"),
                                      quantity=4, completed=3, scrapped=0),
        "b_alarm": raise_fault(lines["cell-b"], "MC1", 3),
        "b_action": open_action(lines["cell-b"], "INSP1"),
        "names": {line.name for line in plant.values()} | set(LINES)
                 | {e.name for line in plant.values() for e in line.layout.equipment},
    }


# -- reading the page ---------------------------------------------------------------------


def overview_drawn(browser) -> bool:
    return browser.check(
        "document.body.dataset.view === 'plant' && document.body.dataset.plantLoaded === 'true'"
        " && document.querySelectorAll('#plant-lines li.line-card').length === 3"
        " && document.querySelectorAll('#plant-lines .line-output dd').length === 12"
        " && document.getElementById('conn').dataset.state === 'on'"
        " && !document.getElementById('alarm-banner').hidden && !document.getElementById('manual-banner').hidden")


def line_page_drawn(browser, line_id: str, machines: int) -> bool:
    return browser.check(
        f"document.body.dataset.view === 'line' && document.body.dataset.lineId === '{line_id}'"
        " && document.body.dataset.loaded === 'true' && document.body.dataset.statsLoaded === 'true'"
        f" && document.querySelectorAll('.machine').length === {machines}"
        " && document.getElementById('conn').dataset.state === 'on'")


def card(browser, line_id: str) -> dict:
    """A line's card as it reads: its state, counts, running orders and output."""
    return json.loads(browser.evaluate(f"""(c => JSON.stringify({{
      name: c.querySelector('h3 a').textContent, href: c.querySelector('h3 a').getAttribute('href'),
      controller: c.dataset.controller, plc: c.dataset.plc, alarms: Number(c.dataset.alarms),
      manual: Number(c.dataset.manual), classes: [...c.classList].sort(),
      state: c.querySelector('.line-state').textContent, open: c.querySelector('.line-open').textContent,
      orders: [...c.querySelectorAll('.line-orders li[data-order-id]')].map(li => ({{
        id: Number(li.dataset.orderId), code: li.querySelector('.code').textContent,
        value: li.querySelector('progress').value, max: li.querySelector('progress').max,
        text: li.querySelector('.progress-text').textContent}})),
      noOrders: !!c.querySelector('.line-orders li.empty'),
      output: [...c.querySelectorAll('.line-output dd')].map(dd => dd.textContent)}}))
      (document.querySelector('{CARD.format(line_id)}'))"""))


def line_states(browser) -> list[tuple[str, str]]:
    """(controller, PLC link) of each line's card, in LINES' order."""
    return [(shown["controller"], shown["plc"]) for shown in (card(browser, line_id) for line_id in LINES)]


def banner(browser) -> dict:
    return browser.evaluate("({line: document.getElementById('banner-line').textContent,"
                            " lineId: document.getElementById('alarm-banner').dataset.lineId,"
                            " alarmId: document.getElementById('alarm-banner').dataset.alarmId,"
                            " what: document.getElementById('banner-what').textContent,"
                            " hidden: document.getElementById('alarm-banner').hidden})")


def manual_banner(browser) -> dict:
    return browser.evaluate("(b => ({line: document.getElementById('manual-banner-line').textContent,"
                            " lineId: b.dataset.lineId, actionId: b.dataset.manualActionId,"
                            " what: document.getElementById('manual-banner-what').textContent, hidden: b.hidden}))"
                            "(document.getElementById('manual-banner'))")


def filled(text: str, **facts) -> str:
    for name, value in facts.items():
        text = text.replace(f"{{{name}}}", str(value))
    return text


def press_enter(browser) -> None:
    """Enter on what has the focus, as a keyboard sends it."""
    for kind in ("keyDown", "keyUp"):
        browser.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter", windowsVirtualKeyCode=13,
                     **({"text": "\r"} if kind == "keyDown" else {}))


# -- the tests ------------------------------------------------------------------------------


def test_the_plant_overview_in_both_languages(axe_source, plant, seeded, lines, browser,  # noqa: F811
                                              record_property):
    seed_publisher(lines)
    found = {}
    for language in LANGUAGES:
        words = catalog(language)
        ask_for(browser, language)
        open_page(browser, plant, ADMIN)
        wait_for(lambda: overview_drawn(browser), timeout=30, message=f"the plant overview in {language}")
        assert browser.evaluate("document.documentElement.lang") == language
        # The overview in place of a line's page; the AI queue and the audit stay (the admin's).
        assert browser.evaluate("['#plant-section', '#line-section', '#orders-section', '#feed-section',"
                                " '#ai-section', '#audit-section', '#plant-back']"
                                ".map(s => document.querySelector(s).hidden)") == \
            [False, True, True, True, False, False, True]
        assert browser.evaluate("document.getElementById('line-name').textContent") == words["plant.title"]

        # Each line's state: cell-c has no controller; cell-b and demo-cell run. A status()
        # slow to answer (a loaded machine) shows a PLC link as down until the next poll.
        wait_for(lambda: line_states(browser) == [("UP", "CONNECTED"), ("UP", "CONNECTED"), ("DOWN", "DISCONNECTED")],
                 timeout=30, message=lambda: f"each line's state on its card: {line_states(browser)}")
        a, b, c = (card(browser, line_id) for line_id in LINES)
        lines = {item["id"]: item for item in requests.get(plant + "/api/lines", headers=AUTH, timeout=10)
                 .json()["items"]}
        for shown, line_id in ((a, "demo-cell"), (b, "cell-b"), (c, "cell-c")):
            assert shown["name"] == lines[line_id]["name"] and shown["href"] == f"#line={line_id}"
            assert (shown["controller"], shown["plc"]) == (lines[line_id]["controller"], lines[line_id]["plc"])
        assert (a["controller"], b["controller"], c["controller"]) == ("UP", "UP", "DOWN")
        assert "down" in c["classes"] and "down" not in b["classes"]
        assert words["controllerState.DOWN"] in c["state"] and words["controllerState.UP"] in b["state"]
        # Open alarms and manual actions: cell-b's fault (red edge) and its question (amber).
        assert (b["alarms"], b["manual"], a["alarms"], a["manual"]) == (1, 1, 0, 0)
        assert {"has-alarm", "has-manual"} <= set(b["classes"]) and "has-alarm" not in a["classes"]
        # The running orders and how far they are.
        assert [(o["code"], o["value"], o["max"]) for o in a["orders"]] == [("WO-A-1", 3, 5)]
        assert [(o["code"], o["value"], o["max"]) for o in b["orders"]] == [("WO-B-1", 3, 4)]
        assert a["orders"][0]["text"].startswith(filled(words["orders.done"], completed=2, quantity=5))
        assert c["orders"] == [] and c["noOrders"]
        # Today's output, as /api/plant/stats says it for the window the page asked (since midnight).
        window = asked_by(browser)("/api/plant/stats")[-1]
        assert datetime.fromisoformat(window["from"].replace("%3A", ":")).astimezone().time().isoformat() \
            == "00:00:00"
        stats = requests.get(plant + "/api/plant/stats", headers=AUTH, timeout=10,
                             params={k: v.replace("%3A", ":") for k, v in window.items()}).json()
        figures = {line["id"]: line for line in stats["lines"]}
        assert (figures["demo-cell"]["completed"], figures["demo-cell"]["scrapped"]) == (2, 1)
        assert a["output"][:2] == ["2", "1"] and b["output"][:2] == ["3", "0"] and c["output"][:2] == ["0", "0"]
        assert browser.evaluate("document.querySelector('#plant-completed .value').textContent") == "5"
        # The MQTT broker link, for the admin: cell-b's node is away with 2 events to send.
        wait_for(lambda: broker_line(browser)["state"] == "DISCONNECTED", timeout=15,
                 message=lambda: f"the broker link: {broker_line(browser)}")
        broker = broker_line(browser)
        assert not broker["hidden"] and broker["backlog"] == "2"
        assert filled(words["plant.broker"], state=words["brokerState.DISCONNECTED"]) in broker["text"]
        assert filled(words["plant.brokerBacklog.other"], count=2) in broker["text"]

        # The banners name the line: cell-b's fault, cell-b's question.
        assert banner(browser)["lineId"] == "cell-b" and banner(browser)["line"] == \
            filled(words["banner.line"], line=lines["cell-b"]["name"])
        assert banner(browser)["what"] == filled(words["alarm.EQUIPMENT_FAULT"], equipmentId="MC1", fault=3)
        assert manual_banner(browser)["lineId"] == "cell-b"
        assert manual_banner(browser)["actionId"] == str(seeded["b_action"])
        assert lines["cell-b"]["name"] in manual_banner(browser)["line"]

        size(browser, 1280, 800)
        check_translated(browser.evaluate(READ_TEXTS), language, seeded["names"] | {"WO-A-1", "WO-B-1"})
        assert browser.evaluate(TOO_SMALL) == []  # a touch panel: every target at least 44 CSS px
        found[language] = axe_findings(browser, axe_source, OVERVIEW)
        for width, height in ((1280, 800), (1920, 1080)):
            size(browser, width, height)
            browser.screenshot(ARTIFACTS / "page" / f"plant-{language}-{width}x{height}.png")
        assert page_errors(browser) == []
    record_property("axe", json.dumps(found))
    assert all(not v for v in found.values()), found


def test_a_card_opens_its_line_and_every_line_announces_itself(plant, seeded, lines, nameko_config, browser):
    en = catalog("en")
    names = {item["id"]: item["name"] for item in requests.get(plant + "/api/lines", headers=AUTH, timeout=10)
             .json()["items"]}
    ask_for(browser, "en")
    open_page(browser, plant, OPERATOR, "en")
    wait_for(lambda: overview_drawn(browser), timeout=30, message="the plant overview")
    # The broker link is an admin's (GET /api/plant/uns): an operator's page neither shows nor asks it.
    assert broker_line(browser)["hidden"] and not [u for u in fetched(browser) if "/api/plant/uns" in u]

    # A tap anywhere on cell-b's card opens its page: the line views, on cell-b's paths.
    browser.evaluate(f"document.querySelector('{CARD.format('cell-b')} .line-output').click()")
    wait_for(lambda: line_page_drawn(browser, "cell-b", machines=2), timeout=30, message="cell-b's page")
    assert browser.evaluate("[location.hash, document.getElementById('line-name').textContent,"
                            " document.getElementById('plant-section').hidden,"
                            " document.getElementById('plant-back').hidden]") == \
        ["#line=cell-b", names["cell-b"], True, False]
    assert browser.evaluate("[...document.querySelectorAll('#orders tbody tr[data-order-id]')]"
                            ".map(r => Number(r.dataset.orderId))") == [seeded["b_order"]]
    assert browser.evaluate("[...document.querySelectorAll('#alarms li[data-alarm-id]')]"
                            ".map(li => Number(li.dataset.alarmId))") == [seeded["b_alarm"]]
    line_paths = [u.split("?")[0].split(plant, 1)[1] for u in fetched(browser) if "/api/" in u]
    assert "/api/lines/cell-b/work-orders" in line_paths and "/api/lines/cell-b/stats" in line_paths
    assert "/api/work-orders" not in line_paths  # nothing of the default line's own paths

    # The default line raises an alarm while cell-b's page is on screen: the banner names it.
    a_alarm = raise_fault(lines["demo-cell"], "MC2", 7)
    writer(lines, nameko_config, "demo-cell").write([("AlarmRaised", {"id": a_alarm, "code": "EQUIPMENT_FAULT"})])
    wait_for(lambda: banner(browser)["alarmId"] == str(a_alarm), timeout=15,
             message="the default line's alarm in the banner")
    assert banner(browser)["lineId"] == "demo-cell"
    assert banner(browser)["line"] == filled(en["banner.line"], line=names["demo-cell"])
    assert banner(browser)["what"] == filled(en["alarm.EQUIPMENT_FAULT"], equipmentId="MC2", fault=7)
    # Acknowledged from here: on its own line.
    browser.evaluate("document.getElementById('banner-ack').click()")
    wait_for(lambda: banner(browser)["alarmId"] == str(seeded["b_alarm"]), timeout=15,
             message="the banner on to cell-b's alarm")
    with lines["demo-cell"]() as s:
        assert s.get(Alarm, a_alarm).status == "ACKNOWLEDGED"
    assert browser.evaluate("document.body.dataset.lineId") == "cell-b"

    # cell-c (no controller) asks the operator something: the manual banner names it, and leads there.
    c_action = open_action(lines["cell-c"], "WASH1")
    writer(lines, nameko_config, "cell-c").write([("ManualActionCreated", {"id": c_action})])
    wait_for(lambda: manual_banner(browser)["actionId"] == str(c_action), timeout=15,
             message="cell-c's manual action announced")
    assert manual_banner(browser)["line"] == filled(en["banner.line"], line=names["cell-c"])
    assert manual_banner(browser)["what"] == filled(en["action.EQUIPMENT_FAULT"], equipmentId="WASH1") \
        .replace("{errorCode:fault}", en["fault.PLC_ERROR"])
    browser.evaluate("document.getElementById('manual-banner-answer').click()")
    wait_for(lambda: line_page_drawn(browser, "cell-c", machines=4), timeout=30, message="cell-c's page")
    wait_for(lambda: browser.check(f"document.activeElement.closest('#manual li[data-manual-action-id=\"{c_action}\"]')"
                                   " !== null"), timeout=10, message="its first choice focused")
    assert browser.evaluate("location.hash") == "#line=cell-c"

    # Back: the browser's Back to cell-b's page, "All lines" to the overview.
    browser.evaluate("history.back()")
    wait_for(lambda: line_page_drawn(browser, "cell-b", machines=2), timeout=30, message="back on cell-b's page")
    browser.evaluate("document.getElementById('plant-back').click()")
    wait_for(lambda: overview_drawn(browser), timeout=30, message="back on the overview")
    assert card(browser, "cell-c")["manual"] == 1 and card(browser, "demo-cell")["alarms"] == 1

    # The keyboard: a card's link, Enter.
    browser.evaluate(f"document.querySelector('{CARD.format('demo-cell')} h3 a').focus()")
    press_enter(browser)
    wait_for(lambda: line_page_drawn(browser, "demo-cell", machines=4), timeout=30, message="demo-cell's page")
    browser.screenshot(ARTIFACTS / "page" / "plant-line-page.png")

    # Shelving cell-b's alarm from the banner, on demo-cell's page: the form, on cell-b's page.
    assert banner(browser)["alarmId"] == str(seeded["b_alarm"])
    browser.evaluate("document.getElementById('banner-shelve').click()")
    wait_for(lambda: line_page_drawn(browser, "cell-b", machines=2) and browser.check(
        "!document.getElementById('shelve-form').hidden && document.activeElement.id === 'shelve-reason'"),
        timeout=30, message="the shelve form on cell-b's page")
    browser.evaluate("document.getElementById('shelve-reason').value = 'sensor swap';"
                     "document.querySelector('#shelve-form button[type=submit]').click()")
    wait_for(lambda: browser.check(f"!!document.querySelector('#shelved li[data-alarm-id=\"{seeded['b_alarm']}\"]')"
                                   " && document.getElementById('alarm-banner').hidden"), timeout=15,
             message="cell-b's alarm shelved, no alarm left to announce")
    with lines["cell-b"]() as s:
        assert s.scalars(select(Alarm.status).where(Alarm.id == seeded["b_alarm"])).one() == "SHELVED"
    assert browser.evaluate("document.getElementById('message').textContent") == ""
    assert page_errors(browser) == []


def test_a_user_limited_to_one_line_gets_that_line_s_page(serve_plant, seeded, db_url, browser):
    engine = make_engine(db_url, pool_size=1)
    UserStore(engine, Passwords(1, 1024)).add("bea", "operator", PASSWORD, CONSOLE, lines=["cell-b"])
    engine.dispose()
    base = serve_plant(**FAST_ARGON2)
    browser.navigate(f"{base}/?lang=en")
    wait_for(lambda: browser.check("!document.getElementById('signin-section').hidden"), timeout=30,
             message="the sign-in form")
    browser.evaluate(f"document.getElementById('signin-user').value = 'bea';"
                     f"document.getElementById('signin-password').value = {PASSWORD!r};"
                     "document.querySelector('#signin-form button[type=submit]').click()")
    # One line to see: its page, as in a one-line plant, on its own paths and stream.
    wait_for(lambda: browser.check("document.body.dataset.loaded === 'true' && document.body.dataset.statsLoaded"
                                   " === 'true' && document.querySelectorAll('.machine').length === 2"
                                   " && document.getElementById('conn').dataset.state === 'on'"),
             timeout=30, message="cell-b's page for bea")
    assert browser.evaluate("[document.getElementById('plant-section').hidden,"
                            " document.getElementById('plant-back').hidden,"
                            " document.body.dataset.plant === undefined]") == [True, True, True]
    paths = [u.split("?")[0].split(base, 1)[1] for u in fetched(browser) if "/api/" in u]
    assert "/api/lines/cell-b/work-orders" in paths and "/api/work-orders" not in paths
    assert browser.evaluate("[...document.querySelectorAll('#alarms li[data-alarm-id]')]"
                            ".map(li => Number(li.dataset.alarmId))") == [seeded["b_alarm"]]
    assert browser.evaluate("document.getElementById('message').textContent") == ""
    assert page_errors(browser) == []


def test_one_line_has_no_overview(served, writable, browser):
    open_page(browser, served, OPERATOR, "en")
    wait_for(lambda: browser.check("document.body.dataset.loaded === 'true'"
                                   " && document.getElementById('conn').dataset.state === 'on'"),
             timeout=30, message="the line's page")
    assert browser.evaluate("[document.getElementById('plant-section').hidden,"
                            " document.getElementById('plant-back').hidden,"
                            " document.getElementById('manual-banner').hidden,"
                            " document.body.dataset.plant === undefined]") == [True, True, True, True]
    # The line's own (unprefixed) paths, as before.
    assert not [u for u in fetched(browser) if "/api/lines/" in u]
    assert any(u.split("?")[0].endswith("/api/work-orders") for u in fetched(browser))
    assert page_errors(browser) == []
