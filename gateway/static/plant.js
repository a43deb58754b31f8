// A plant of several lines behind one gateway (GET /api/lines has more than
// one): the page opens on the plant's overview, a card per line with its state
// (controller, PLC), its running orders and their progress, its open alarms and
// manual actions, and its output today (GET /api/plant/stats). A card opens the
// line's page: the line views as in a one-line plant, reading
// /api/lines/<id>/… and /ws?line=<id>. Where the page is shows in the address
// ("#line=<id>"), so the browser's Back and a bookmark work; "All lines" goes
// back to the overview. With one line none of this shows: the page is the line's.
//
// Every line's alarms and manual actions announce themselves, naming the line,
// whatever is on screen: the alarm banner (alarms.js) shows the plant's newest
// unacknowledged alarm, the manual-action banner the newest open manual action.
// The page keeps one event stream per line (at most PLANT_STREAMS_MAX); an
// alarm or manual-action event of a line fetches that line's open alarms and
// manual actions again (once per burst). What this costs, per open page:
//   - a websocket per line: only the frames of the plant's own lines, no polling
//     of each line;
//   - GET /api/lines every PLANT_POLL_MS (the controllers' and PLCs' state, which
//     no event carries); it also fetches a line's alarms and manual actions again
//     when its counts disagree with the page's, or when the line has no live
//     stream (down, refused, or past the cap), so nothing is missed meanwhile;
//   - on the overview only: a line's running orders at most every
//     CARD_MIN_INTERVAL_MS while its orders move, the plant's figures at most
//     every PLANT_STATS_MIN_MS and every PLANT_STATS_PERIOD_MS; for an admin, the
//     MQTT broker link (GET /api/plant/uns) with each GET /api/lines.
"use strict";

const PLANT_STREAMS_MAX = 16;
const PLANT_POLL_MS = 10000;
const PLANT_STATS_MIN_MS = 15000;
const PLANT_STATS_PERIOD_MS = 60000;
const CARD_MIN_INTERVAL_MS = 3000;
const ALERTS_DELAY_MS = 250;            // a burst of alarm events: one fetch
const ALERT_EVENT = /^(Alarm|ManualAction|Recovery)/;
const ORDER_EVENT = /^(WorkOrder|Job)/;
const CARD_ORDER_STATUSES = "RUNNING,PAUSED";
const LINE_HASH = /^#line=(.+)$/;

const plant = {
  on: false,            // several lines: the overview and the lines' pages
  lines: [],            // GET /api/lines' items, in its order (the default line first)
  viewed: null,         // the line whose page is on screen; null: the overview
  streams: new Map(),   // line id → its LineStream
  alerts: new Map(),    // line id → {alarms: RAISED and ACKNOWLEDGED, manual: OPEN}
  orders: new Map(),    // line id → its running (and paused) orders
  output: null,         // GET /api/plant/stats since midnight
  alertTimers: new Map(),
  cardTimers: new Map(),
  cardLastAt: new Map(),
  pollTimer: null,
  statsTimer: null,
  statsPeriodTimer: null,
  statsLastAt: 0,
};

function lineName(lineId) {
  const line = plant.lines.find((l) => l.id === lineId);
  return line ? line.name : lineId;
}

function lineHash(lineId) { return `#line=${encodeURIComponent(lineId)}`; }

/** A path of the line an alarm or manual action is on (the shown line's in a one-line plant). */
function alertPath(lineId, path) { return plant.on ? pathOfLine(lineId, path) : linePath(path); }

// -- starting and stopping --------------------------------------------------------------

async function startPlant(lines) {
  stopPlant();
  plant.on = true;
  plant.lines = lines;
  document.body.dataset.plant = "true";
  for (const line of lines.slice(0, PLANT_STREAMS_MAX)) openStream(line.id);
  for (const line of lines) scheduleAlerts(line.id);
  plant.pollTimer = setInterval(pollLines, PLANT_POLL_MS);
  await route();
}

function openStream(lineId) {
  const stream = new LineStream(lineId, { onFrame: (frame) => onPlantFrame(lineId, frame),
                                          onState: onPlantStreamState });
  plant.streams.set(lineId, stream.start());
  return stream;
}

/** Signed out, or another token: no stream, no timer, nothing of the plant left on screen. */
function stopPlant() {
  if (!plant.on) return;
  for (const stream of plant.streams.values()) stream.stop();
  for (const timer of [...plant.alertTimers.values(), ...plant.cardTimers.values()]) clearTimeout(timer);
  clearInterval(plant.pollTimer);
  clearTimeout(plant.statsTimer);
  clearInterval(plant.statsPeriodTimer);
  Object.assign(plant, { on: false, lines: [], viewed: null, output: null, pollTimer: null, statsTimer: null,
                         statsPeriodTimer: null, statsLastAt: 0 });
  for (const map of [plant.streams, plant.alerts, plant.orders, plant.alertTimers, plant.cardTimers,
                     plant.cardLastAt]) map.clear();
  lineRoot = "/api";
  $("#plant-lines").replaceChildren();
  $("#manual-banner").hidden = true;
  delete $("#manual-banner").dataset.manualActionId;
  for (const key of ["plant", "view", "lineId", "plantLoaded"]) delete document.body.dataset[key];
  $("#line-name").textContent = "linectl";
}

// -- where the page is ------------------------------------------------------------------

/** What the address names: a line's page ("#line=<id>"), else the overview. */
function route() {
  if (!plant.on) return Promise.resolve(false);
  const match = LINE_HASH.exec(location.hash);
  const lineId = match ? decodeURIComponent(match[1]) : null;
  if (lineId && plant.lines.some((l) => l.id === lineId)) {
    return lineId === plant.viewed && document.body.dataset.view === "line" ? Promise.resolve(true) : openLine(lineId);
  }
  return document.body.dataset.view === "plant" ? Promise.resolve(true) : showOverview();
}

// The address changed: a card's link, "All lines", the browser's Back and Forward.
window.addEventListener("hashchange", () => { route(); });
window.addEventListener("popstate", () => { route(); });

/** A line's page, from the banner (its alarm, its manual action): in the address too.
 *  True once it is drawn (false: another line or the overview meanwhile). */
function goToLine(lineId) {
  if (lineId === plant.viewed) return Promise.resolve(true);
  history.pushState(null, "", lineHash(lineId));  // (pushState fires no hashchange: opened here)
  return openLine(lineId);
}

async function showOverview() {
  if (plant.viewed !== null) { leaveLine(); say(""); }
  plant.viewed = null;
  dropTemporaryStreams();
  document.body.dataset.view = "plant";
  delete document.body.dataset.lineId;
  $("#line-name").textContent = t("plant.title");
  showView();
  showPlantConn();
  drawCards();
  clearInterval(plant.statsPeriodTimer);
  plant.statsPeriodTimer = setInterval(schedulePlantStats, PLANT_STATS_PERIOD_MS);
  await Promise.all([pollLines(), refreshPlantStats(), ...plant.lines.map((l) => refreshCardOrders(l.id))]);
  if (plant.viewed === null) document.body.dataset.plantLoaded = "true";
  return plant.viewed === null;
}

/** The line's page: the line views on its paths, its feed from what its stream kept. */
async function openLine(lineId) {
  leaveLine();
  say("");
  plant.viewed = lineId;
  dropTemporaryStreams();
  clearInterval(plant.statsPeriodTimer);
  lineRoot = pathOfLine(lineId, "");
  document.body.dataset.view = "line";
  document.body.dataset.lineId = lineId;
  $("#line-name").textContent = lineName(lineId);
  $("#alarm-filter").reset();
  $("#orders tbody").replaceChildren();
  // A line past the cap has no stream of its own: it gets one while its page is open.
  let stream = plant.streams.get(lineId);
  if (!stream) {
    stream = openStream(lineId);
    stream.temporary = true;
  }
  fillFeed(stream.recent);
  showView();
  showPlantConn();
  window.scrollTo(0, 0);
  const generation = lineGeneration;
  if (!await loadLine()) return false;
  await drawLine();
  return generation === lineGeneration;
}

function dropTemporaryStreams() {
  for (const [lineId, stream] of plant.streams) {
    if (stream.temporary && lineId !== plant.viewed) { stream.stop(); plant.streams.delete(lineId); }
  }
}

// -- the streams ------------------------------------------------------------------------

function onPlantFrame(lineId, frame) {
  if (lineId === plant.viewed) {
    onFrame(frame);  // its page: the feed, a refresh (which announces its alarms), the figures
    return;
  }
  if (ALERT_EVENT.test(frame.type)) scheduleAlerts(lineId);
  if (plant.viewed !== null) return;
  if (ORDER_EVENT.test(frame.type)) scheduleCard(lineId);
  if (STATS_EVENTS.has(frame.type)) schedulePlantStats();
}

function onPlantStreamState(stream) {
  showPlantConn();
  markStream(stream.lineId);
  if (!stream.live) return;
  // (Re)connected: whatever happened while it was down.
  if (stream.lineId === plant.viewed) {
    scheduleRefresh();
    scheduleStatsRefresh();
  } else {
    scheduleAlerts(stream.lineId);
    if (plant.viewed === null) scheduleCard(stream.lineId);
  }
}

/** The indicator: the line's stream on its page; on the overview, live only if every line's is. */
function showPlantConn() {
  if (!plant.on) return;
  if (plant.viewed !== null) {
    const stream = plant.streams.get(plant.viewed);
    showConn(stream ? stream.state : "off");  // past the cap: no stream of its own
    return;
  }
  const states = plant.lines.map((l) => plant.streams.get(l.id)?.state || "off");
  const down = plant.lines.filter((l, i) => states[i] === "off").map((l) => l.name);
  showConn(down.length ? "off" : states.includes("connecting") ? "connecting" : "on");
  if (down.length) $("#conn").title = t("conn.titleLines", { lines: list(down) });
}

// -- announcing: every line's alarms and manual actions -----------------------------------

function scheduleAlerts(lineId) {
  if (plant.alertTimers.has(lineId)) return;
  plant.alertTimers.set(lineId, setTimeout(() => refreshAlerts(lineId), ALERTS_DELAY_MS));
}

/** An alarm of `lineId` was answered from the banner: its lists again (the banner moves on). */
function alertsChanged(lineId) {
  if (plant.on && lineId) scheduleAlerts(lineId);
}

async function refreshAlerts(lineId) {
  plant.alertTimers.delete(lineId);
  try {
    const [alarms, manual] = await Promise.all([
      api("GET", pathOfLine(lineId, "/alarms?limit=500&status=RAISED,ACKNOWLEDGED")),
      api("GET", pathOfLine(lineId, "/manual-actions?limit=500&status=OPEN")),
    ]);
    if (plant.on) setAlerts(lineId, alarms.items, manual.items);
  } catch (e) {
    // A line not ready yet (503) has nothing open; its card says what /api/lines says.
    if (!(e instanceof Refusal)) console.warn(e);
  }
}

/** The open alarms and manual actions of a line (its page's refresh, or fetched here). */
function setAlerts(lineId, alarms, manual) {
  const ofLine = (item) => ({ ...item, lineId });
  plant.alerts.set(lineId, { alarms: alarms.map(ofLine), manual: manual.map(ofLine) });
  announcePlant();
  if (plant.viewed === null) drawCard(lineId);
}

/** From the line page's refresh (app.js): the banner, the plant's in a plant. */
function announceLine(alarms, manual) {
  if (plant.on) setAlerts(plant.viewed, alarms, manual); else announceAlarms(alarms, manual);
}

function announcePlant() {
  const alarms = [];
  const manual = [];
  for (const line of plant.lines) {
    const open = plant.alerts.get(line.id);
    if (open) { alarms.push(...open.alarms); manual.push(...open.manual); }
  }
  announceAlarms(alarms, manual);
  announceManual(manual);
}

/** The manual-action banner: the plant's newest open manual action, its line named,
 *  a tap from its answer; it speaks again (role="alert") for each new one. */
function announceManual(manual) {
  const banner = $("#manual-banner");
  const waiting = manual.slice().sort((x, y) => y.id - x.id);
  const m = waiting[0];
  if (!m) {
    banner.hidden = true;
    delete banner.dataset.manualActionId;
    delete banner.dataset.lineId;
    return;
  }
  if (banner.dataset.manualActionId !== String(m.id)) {
    banner.dataset.manualActionId = m.id;
    banner.dataset.lineId = m.lineId;
    $("#manual-banner-line").textContent = t("banner.line", { line: lineName(m.lineId) });
    const what = manualText(m);
    $("#manual-banner-what").textContent = what.text;
    $("#manual-banner-what").lang = what.lang || lang;
  }
  $("#manual-banner-more").textContent = waiting.length > 1 ? tCount("manualBanner.more", waiting.length - 1) : "";
  banner.hidden = false;
}

/** To a manual action on its line's page, its first choice focused. */
async function goToManualAction(lineId, manualActionId) {
  if (plant.on && lineId && !await goToLine(lineId)) return;
  const card = document.querySelector(`#manual li[data-manual-action-id="${manualActionId}"]`);
  if (!card) return;
  card.scrollIntoView({ block: "center" });
  card.querySelector("button")?.focus();
}

$("#manual-banner-answer").addEventListener("click", () => {
  const { lineId, manualActionId } = $("#manual-banner").dataset;
  if (manualActionId) goToManualAction(lineId, manualActionId);
});

// -- the overview -----------------------------------------------------------------------

/** GET /api/lines: each line's state and counts; a line whose counts disagree with
 *  the lists held, or that has no live stream, has its lists fetched again. */
async function pollLines() {
  let lines;
  try {
    lines = (await api("GET", "/api/lines")).items;
  } catch (e) {
    if (plant.viewed === null) say(failure(e));
    return;
  }
  if (!plant.on) return;
  for (const line of lines) {
    const held = plant.alerts.get(line.id);
    const live = plant.streams.get(line.id)?.live;
    if (!live || !held || held.alarms.length !== line.openAlarms || held.manual.length !== line.openManualActions) {
      scheduleAlerts(line.id);
    }
  }
  plant.lines = lines;
  if (plant.viewed === null) drawCards();
  showPlantConn();
  if (plant.viewed === null) await refreshBroker();
}

/** The northbound publisher's link to the MQTT broker, and what it has still to send
 *  (an admin's: the figures are GET /api/plant/uns's; others see nothing of it). */
async function refreshBroker() {
  const line = $("#plant-broker");
  if (role !== "admin") { line.hidden = true; return; }
  let uns;
  try {
    uns = await api("GET", "/api/plant/uns");
  } catch (e) {
    if (!(e instanceof Refusal)) console.warn(e);
    return;
  }
  if (!plant.on) return;
  const state = uns.format === null ? "OFF" : uns.connected ? "CONNECTED" : "DISCONNECTED";
  const backlog = uns.lines.reduce((sum, l) => sum + (l.backlog || 0), 0);
  const behind = uns.lines.filter((l) => l.backlog).map((l) => `${lineName(l.id)}: ${l.backlog}`);
  Object.assign(line.dataset, { state, backlog });
  line.replaceChildren(
    el("span", { class: `badge broker${state === "DISCONNECTED" ? " abnormal" : ""}` },
       t("plant.broker", { state: tCode("brokerState", state) })),
    ...(backlog ? [" ", el("span", { class: "broker-backlog" },
                          tCount("plant.brokerBacklog", backlog) + ` (${list(behind)})`)] : []));
  line.hidden = false;
}

function scheduleCard(lineId) {
  if (plant.cardTimers.has(lineId)) return;
  const wait = Math.max(0, (plant.cardLastAt.get(lineId) || 0) + CARD_MIN_INTERVAL_MS - Date.now());
  plant.cardTimers.set(lineId, setTimeout(() => refreshCardOrders(lineId), wait));
}

async function refreshCardOrders(lineId) {
  clearTimeout(plant.cardTimers.get(lineId));
  plant.cardTimers.delete(lineId);
  plant.cardLastAt.set(lineId, Date.now());
  try {
    const page = await api("GET", pathOfLine(lineId, `/work-orders?limit=100&status=${CARD_ORDER_STATUSES}`));
    if (!plant.on) return;
    plant.orders.set(lineId, page.items);
    if (plant.viewed === null) drawCard(lineId);
  } catch (e) {
    if (!(e instanceof Refusal)) console.warn(e);
  }
}

function schedulePlantStats() {
  if (plant.statsTimer || plant.viewed !== null) return;
  const wait = Math.max(0, plant.statsLastAt + PLANT_STATS_MIN_MS - Date.now());
  plant.statsTimer = setTimeout(refreshPlantStats, wait);
}

/** Since local midnight, up to now. */
function today() {
  const from = new Date();
  from.setHours(0, 0, 0, 0);
  return { from: from.toISOString(), to: new Date().toISOString() };
}

async function refreshPlantStats() {
  clearTimeout(plant.statsTimer);
  plant.statsTimer = null;
  plant.statsLastAt = Date.now();
  const day = today();
  try {
    const stats = await api("GET", `/api/plant/stats?${windowQuery(day)}`);
    if (!plant.on) return;
    plant.output = stats;
    drawPlantOutput(stats, day);
    refreshPlantOee();  // OEE by shift and line (oee.js)
    if (plant.viewed === null) for (const line of plant.lines) drawCard(line.id);
  } catch (e) {
    if (plant.viewed === null) say(failure(e));
  }
}

function drawPlantOutput(stats, day) {
  const figures = stats.plant;
  setTile("plant-completed", count(figures.completed));
  setTile("plant-scrapped", count(figures.scrapped));
  setTile("plant-throughput", fixed1(figures.throughputPerHour));
  setTile("plant-scrap-rate", percent(figures.scrapRate));
  $("#plant-day").textContent = t("plant.since", { from: clock(day.from) });
}

/** The cards: drawn once per line, then filled in place (a focused card keeps its focus). */
function drawCards() {
  const list = $("#plant-lines");
  const shown = [...list.children].map((li) => li.dataset.lineId).join("\n");
  if (shown !== plant.lines.map((l) => l.id).join("\n")) list.replaceChildren(...plant.lines.map(lineCard));
  for (const line of plant.lines) drawCard(line.id);
}

function cardOf(lineId) {
  return [...$("#plant-lines").children].find((li) => li.dataset.lineId === lineId) || null;
}

function lineCard(line) {
  // Tapping anywhere on the card opens the line; the link is what a keyboard and a screen reader use.
  const open = (ev) => { if (!ev.target.closest("a")) location.hash = lineHash(line.id); };
  return el("li", { class: "line-card", dataset: { lineId: line.id }, onclick: open },
    el("h3", {}, el("a", { href: lineHash(line.id), class: "open-line" }, line.name), " ",
       el("span", { class: "line-id code" }, line.id)),
    el("p", { class: "line-state" }),
    el("p", { class: "line-open" }),
    el("h4", {}, t("plant.orders")),
    el("ul", { class: "line-orders" }),
    el("h4", {}, t("plant.today")),
    el("dl", { class: "line-output" }));
}

function badge(kind, state, normal) {
  return el("span", { class: `badge ${kind}${state === normal ? "" : " abnormal"}`, dataset: { state } },
            t(`plant.${kind}`, { state: tCode(`${kind}State`, state) }));
}

function drawCard(lineId) {
  const card = cardOf(lineId);
  const line = plant.lines.find((l) => l.id === lineId);
  if (!card || !line) return;
  const open = plant.alerts.get(lineId);
  const alarms = open ? open.alarms.length : line.openAlarms;
  const raised = open ? open.alarms.filter((a) => a.status === "RAISED").length : 0;
  const manual = open ? open.manual.length : line.openManualActions;
  const stream = plant.streams.get(lineId);
  Object.assign(card.dataset, { controller: line.controller, plc: line.plc, alarms, manual });
  card.classList.toggle("down", line.controller !== "UP" || line.plc !== "CONNECTED");
  card.classList.toggle("has-alarm", raised > 0);
  card.classList.toggle("has-manual", manual > 0);

  card.querySelector(".line-state").replaceChildren(
    badge("controller", line.controller, "UP"), " ", badge("plc", line.plc, "CONNECTED"),
    ...(stream && !stream.live ? [" ", el("span", { class: "badge stream abnormal" }, t("plant.streamOff"))] : []));
  card.querySelector(".line-open").replaceChildren(
    el("span", { class: `count-alarms${alarms ? " abnormal" : ""}` }, tCount("plant.alarms", alarms)), " · ",
    el("span", { class: `count-manual${manual ? " abnormal" : ""}` }, tCount("plant.manual", manual)));

  const orders = plant.orders.get(lineId);
  const ordersList = card.querySelector(".line-orders");
  if (orders) {
    ordersList.replaceChildren(...orders.map(cardOrder));
    if (!orders.length) ordersList.append(el("li", { class: "empty" }, t("plant.noOrders")));
  }

  const output = plant.output && plant.output.lines.find((o) => o.id === lineId);
  const figures = output ? [["kpi.completed", count(output.completed)], ["kpi.scrapped", count(output.scrapped)],
                            ["kpi.throughput", fixed1(output.throughputPerHour)], ["kpi.scrapRate", percent(output.scrapRate)]]
    : [];
  card.querySelector(".line-output").replaceChildren(...figures.map(([label, value]) => el("div", {},
    el("dt", {}, t(label)), el("dd", {}, value))));
}

function markStream(lineId) {
  if (plant.viewed === null) drawCard(lineId);
}

/** A running order on its line's card: code, product, how far (as the orders table says it). */
function cardOrder(o) {
  const done = o.completedQty + o.scrappedQty;
  const progress = t("orders.done", { completed: o.completedQty, quantity: o.quantity })
    + (o.scrappedQty ? ` ${t("orders.scrapped", { scrapped: o.scrappedQty })}` : "");
  return el("li", { dataset: { orderId: o.id, status: o.status } },
    el("span", { class: "code" }, o.code), " ", el("span", { class: "product" }, o.productId), " ",
    o.status === "RUNNING" ? "" : el("span", { class: "status" }, tCode("orderStatus", o.status)), " ",
    el("progress", { max: o.quantity, value: done, "aria-label": `${o.code}: ${progress}` }), " ",
    el("span", { class: "progress-text" }, progress));
}
