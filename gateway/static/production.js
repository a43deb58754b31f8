// The production panel (GET /api/stats: KPI tiles, pieces per hour, OEE per
// machine, a table per machine) and the machine timeline (GET
// /api/stats/timeline, a Gantt strip), over one window the operator picks:
// the last 15 min / 1 / 8 / 24 hours, or one work order's run (from its start
// to its finish, or to now while it runs).
"use strict";

// Events that change the figures; any of them asks for a refresh, at most one
// per STATS_MIN_INTERVAL_MS however many arrive (a busy line sends dozens a second).
const STATS_EVENTS = new Set(["MachineStateChanged", "JobFinished", "WorkOrderCompleted", "AlarmRaised",
                              "AlarmCleared", "AlarmShelved", "AlarmUnshelved",
                              // the shift's OEE, states and stops (oee.js)
                              "LineStateChanged", "StopReasonAssigned", "StopSplit", "PlannedDowntimeAdded"]);
const STATS_MIN_INTERVAL_MS = 3000;
// The open interval of each machine grows with time even when nothing happens.
const STATS_PERIOD_MS = 30000;
// The per-machine figures charted (each named by the catalog's series.<figure>).
const FIGURES = ["oee", "availability", "performance", "quality"];
const TIMELINE_ROW_PX = 34;
// A work order's window: a little before it started and after it finished, so
// its first and last state changes are on the strip, not on its edges.
const ORDER_WINDOW_PAD_MS = 5000;
// How many of the latest started orders the window choice offers.
const ORDER_CHOICES = 20;
// The longest window the API answers (gateway.api.common.window_of: 31 days).
const MAX_WINDOW_MS = 31 * 24 * HOUR_MS;

let statsHours = 8;        // the time span chosen last (the AI panel follows it)
let statsOrderId = null;   // the work order whose run is shown instead, if any
let startedOrders = [];    // the started orders, latest start first (from the orders list)
let statsTimer = null;
let statsLastAt = 0;
let statsGeneration = 0;

/** The last `hours` hours up to now. */
function hoursWindow(hours) {
  const to = new Date();
  const from = new Date(to.getTime() - hours * HOUR_MS);
  return { from: from.toISOString(), to: to.toISOString() };
}

/** A started order's run: fixed once it finished (or was cancelled), up to now while it runs. */
function orderWindow(order) {
  const from = Date.parse(order.startedAt) - ORDER_WINDOW_PAD_MS;
  // max: the page's clock may lag the server's a little
  const to = order.finishedAt ? Date.parse(order.finishedAt) + ORDER_WINDOW_PAD_MS
    : Math.max(Date.now(), from + 2 * ORDER_WINDOW_PAD_MS);
  return { from: new Date(Math.max(from, to - MAX_WINDOW_MS)).toISOString(), to: new Date(to).toISOString() };
}

function chosenOrder() {
  return statsOrderId === null ? null : startedOrders.find((o) => o.id === statsOrderId) || null;
}

/** The window the panels show: the chosen order's run, or the last `statsHours` hours. */
function statsWindow() {
  const order = chosenOrder();
  return order ? orderWindow(order) : hoursWindow(statsHours);
}

function windowQuery(w) { return `from=${encodeURIComponent(w.from)}&to=${encodeURIComponent(w.to)}`; }

function scheduleStatsRefresh() {
  if (statsTimer) return;
  statsTimer = setTimeout(refreshStats, Math.max(0, statsLastAt + STATS_MIN_INTERVAL_MS - Date.now()));
}

async function refreshStats() {
  clearTimeout(statsTimer);
  statsTimer = null;
  if (!lineShown()) return;  // the plant overview (plant.js): no line's figures to draw
  statsLastAt = Date.now();
  const generation = ++statsGeneration;
  refreshOee();  // the shift's OEE, states, stops and Pareto (oee.js), beside these figures
  const w = statsWindow();
  const q = windowQuery(w);
  try {
    const [stats, timeline, counts] = await Promise.all([
      api("GET", linePath(`/stats?${q}`)),
      api("GET", linePath(`/stats/timeline?${q}`)),
      api("GET", linePath(`/stats/alarms?${q}`)),
    ]);
    if (generation !== statsGeneration) return;  // a newer refresh (another window, another line) is drawing
    drawKpis(stats.line);
    drawHourly(stats.hourly);
    drawOee(stats.equipment);
    drawMachineFigures(stats.equipment);
    drawTimeline(timeline, w);
    drawAlarmCounts(counts.items);
    drawWindowSpan(w);
    document.body.dataset.statsLoaded = "true";
  } catch (e) {
    if (generation === statsGeneration) say(failure(e));
  }
}

// -- production ---------------------------------------------------------------------

function setTile(id, text) { document.querySelector(`#${id} .value`).textContent = text; }

function drawKpis(line) {
  setTile("kpi-completed", count(line.completed));
  setTile("kpi-scrapped", count(line.scrapped));
  setTile("kpi-throughput", fixed1(line.throughputPerHour));
  setTile("kpi-scrap-rate", percent(line.scrapRate));
}

function drawHourly(hourly) {
  showHourlyBars("hourly-chart", hourly, ["completed", "scrapped"]);
}

function drawOee(equipment) {
  const series = {};
  for (const key of FIGURES) series[key] = equipment.map((e) => percentValue(e[key]));
  showChart("oee-chart", barConfig(equipment.map((e) => e.id), series,
                                   { percent: true, axes: ["chart.axisMachine", "chart.axisPercent"] }));
}

function drawMachineFigures(equipment) {
  $("#machine-figures tbody").replaceChildren(...equipment.map((e) => el("tr", { dataset: { equipmentId: e.id } },
    el("td", {}, e.id), el("td", { class: "utilization" }, percent(e.utilization)),
    el("td", { class: "availability" }, percent(e.availability)),
    el("td", { class: "oee" }, percent(e.oee)), el("td", { class: "cycles" }, count(e.cycles)),
    el("td", {}, seconds(e.meanCycleSeconds)), el("td", {}, seconds(e.p95CycleSeconds)),
    el("td", {}, seconds(e.idealCycleSeconds)))));
}

// -- the timeline ---------------------------------------------------------------------

/** The tick spacing that suits the window: 10 min for 1 h, 1 h for 8 h, 3 h for
 *  24 h, down to 10 s for a work order of half a minute. */
function timelineStep(spanMs) {
  for (const s of [10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600]) {
    if (spanMs / (s * 1000) <= 12) return s * 1000;
  }
  return 43200 * 1000;
}

/** Ticks on whole local clock steps (14:00, 15:00), not counted from the
 *  window's start (14:27, 15:27), which is what a linear axis would do. */
function clockTicks(min, max, step) {
  const offset = new Date(min).getTimezoneOffset() * 60000;
  const ticks = [];
  for (let t = Math.ceil((min - offset) / step) * step + offset; t <= max; t += step) ticks.push({ value: t });
  return ticks;
}

/** One row per machine, one bar per state interval: floating horizontal bars
 *  ([start, end] in epoch ms) on a linear axis labelled as clock time. One
 *  dataset per state, so the legend names the colours; `grouped: false` puts
 *  the states of a machine on one row instead of side by side. */
function timelineConfig(items, rows, fromMs, toMs) {
  const step = timelineStep(toMs - fromMs);
  const datasets = MACHINE_STATES.map((state) => ({
    label: tCode("machineState", state),
    backgroundColor: STATE_COLOURS[state],
    grouped: false,
    barPercentage: 0.8,
    categoryPercentage: 1,
    data: items.filter((i) => i.state === state)
      .map((i) => ({ x: [Date.parse(i.from), Date.parse(i.to)], y: i.equipmentId })),
  }));
  return {
    type: "bar",
    data: { labels: rows, datasets },
    options: {
      indexAxis: "y",
      scales: {
        x: { type: "linear", min: fromMs, max: toMs, ticks: { callback: (v) => clock(v, step < 60000) },
             title: axisTitle("chart.axisTime"),
             afterBuildTicks: (scale) => { scale.ticks = clockTicks(scale.min, scale.max, step); } },
        y: { type: "category", labels: rows, title: axisTitle("chart.axisMachine") },
      },
      plugins: {
        legend: { position: "top" },
        tooltip: { callbacks: { label: timelineTooltip } },
      },
    },
  };
}

function timelineTooltip(ctx) {
  const [start, end] = ctx.raw.x;
  return t("timeline.tooltip", { state: ctx.dataset.label, from: clock(start, true), to: clock(end, true),
                                 length: duration(end - start) });
}

function drawTimeline(timeline, w) {
  const rows = layout ? layout.equipment.map((e) => e.id) : [...new Set(timeline.items.map((i) => i.equipmentId))];
  $("#timeline-section .timeline-box").style.height = `${rows.length * TIMELINE_ROW_PX + 70}px`;
  showChart("timeline-chart", timelineConfig(timeline.items, rows, Date.parse(w.from), Date.parse(w.to)));
  let note = "";
  if (timeline.truncated) note = t("timeline.truncated");
  else if (!timeline.items.length) note = t("timeline.empty");
  $("#timeline-note").textContent = note;
}

// -- the window ----------------------------------------------------------------------

/** What the panels are over, in words: "14:02:07–14:09:25 (7 min)". */
function drawWindowSpan(w) {
  const from = Date.parse(w.from);
  const to = Date.parse(w.to);
  const order = chosenOrder();
  const running = order && !order.finishedAt;
  $("#stats-span").textContent = t("production.spanText", {
    from: clock(from, true), to: running ? t("production.now") : clock(to, true), length: duration(to - from) });
}

function orderChoiceLabel(o) {
  const end = o.finishedAt ? clock(o.finishedAt) : t("production.now");
  return t("production.orderChoice", { code: o.code, status: tCode("orderStatus", o.status),
                                       from: clock(o.startedAt), to: end });
}

/** The window choice's work orders, from the orders list (app.js): the latest
 *  ORDER_CHOICES started ones, and the chosen one even if older. An order
 *  never started has no run to show. A chosen order that finished meanwhile
 *  asks for a redraw: its window is now fixed. (The list is the page's
 *  /api/work-orders?limit=500, which pages in ascending id with no newest-first
 *  order: past 500 orders the newest are missing here as in the table.) */
function offerOrderWindows(orders) {
  const before = chosenOrder();
  startedOrders = orders.filter((o) => o.startedAt)
    .sort((a, b) => Date.parse(b.startedAt) - Date.parse(a.startedAt) || b.id - a.id);
  if (statsOrderId !== null && !chosenOrder()) statsOrderId = null;  // gone from the list: back to hours
  const offered = startedOrders.slice(0, ORDER_CHOICES);
  const chosen = chosenOrder();
  if (chosen && !offered.includes(chosen)) offered.push(chosen);
  const group = $("#stats-orders");
  group.replaceChildren(...offered.map((o) => el("option", {
    value: `wo:${o.id}`, title: t("production.orderChoiceTitle", {
      from: dateTime(o.startedAt), to: o.finishedAt ? dateTime(o.finishedAt) : t("production.running") }),
  }, orderChoiceLabel(o))));
  group.hidden = !offered.length;
  $("#stats-window").value = windowChoice();
  if (before && (!chosen || before.finishedAt !== chosen.finishedAt)) scheduleStatsRefresh();
}

/** Another line's page: no work order of the line before is chosen (the span chosen stays). */
function resetOrderWindow() {
  statsGeneration++;  // a refresh on its way for the line before draws nothing
  statsOrderId = null;
  startedOrders = [];
  $("#stats-orders").replaceChildren();
  $("#stats-orders").hidden = true;
  $("#stats-window").value = windowChoice();
}

function windowChoice() { return statsOrderId === null ? String(statsHours) : `wo:${statsOrderId}`; }

/** Shows one order's run in the panels (a click on the order in the Work orders table). */
function showOrderWindow(orderId) {
  statsOrderId = orderId;
  offerOrderWindows(startedOrders);
  refreshStats();
  $("#production-section").scrollIntoView();
}

$("#stats-window").addEventListener("change", (ev) => {
  const value = ev.target.value;
  if (value.startsWith("wo:")) {
    statsOrderId = Number(value.slice(3));
  } else {
    statsOrderId = null;
    statsHours = Number(value);
  }
  refreshStats();
});
