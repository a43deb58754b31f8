// The production panel (GET /api/stats: KPI tiles, pieces per hour, OEE per
// machine, a table per machine) and the machine timeline (GET
// /api/stats/timeline, a Gantt strip), over one window the operator picks.
"use strict";

// Events that change the figures; any of them asks for a refresh, at most one
// per STATS_MIN_INTERVAL_MS however many arrive (a busy line sends dozens a second).
const STATS_EVENTS = new Set(["MachineStateChanged", "JobFinished", "WorkOrderCompleted", "AlarmRaised",
                              "AlarmCleared", "AlarmShelved", "AlarmUnshelved"]);
const STATS_MIN_INTERVAL_MS = 3000;
// The open interval of each machine grows with time even when nothing happens.
const STATS_PERIOD_MS = 30000;
// The per-machine figures charted, each under the name a person reads.
const FIGURES = { oee: "OEE", availability: "availability", performance: "performance", quality: "quality" };
const TIMELINE_ROW_PX = 34;

let statsHours = 8;
let statsTimer = null;
let statsLastAt = 0;
let statsGeneration = 0;

/** The window the panels show: the last `statsHours` hours up to now. */
function statsWindow() {
  const to = new Date();
  const from = new Date(to.getTime() - statsHours * HOUR_MS);
  return { from: from.toISOString(), to: to.toISOString() };
}

function windowQuery(w) { return `from=${encodeURIComponent(w.from)}&to=${encodeURIComponent(w.to)}`; }

function scheduleStatsRefresh() {
  if (statsTimer) return;
  statsTimer = setTimeout(refreshStats, Math.max(0, statsLastAt + STATS_MIN_INTERVAL_MS - Date.now()));
}

async function refreshStats() {
  clearTimeout(statsTimer);
  statsTimer = null;
  statsLastAt = Date.now();
  const generation = ++statsGeneration;
  const w = statsWindow();
  const q = windowQuery(w);
  try {
    const [stats, timeline, counts] = await Promise.all([
      api("GET", `/api/stats?${q}`),
      api("GET", `/api/stats/timeline?${q}`),
      api("GET", `/api/stats/alarms?${q}`),
    ]);
    if (generation !== statsGeneration) return;  // a newer refresh (another window) is drawing
    drawKpis(stats.line);
    drawHourly(stats.hourly);
    drawOee(stats.equipment);
    drawMachineFigures(stats.equipment);
    drawTimeline(timeline, w);
    drawAlarmCounts(counts.items);
    document.body.dataset.statsLoaded = "true";
  } catch (e) {
    say(e.message);
  }
}

// -- production ---------------------------------------------------------------------

function setTile(id, text) { document.querySelector(`#${id} .value`).textContent = text; }

function drawKpis(line) {
  setTile("kpi-completed", line.completed);
  setTile("kpi-scrapped", line.scrapped);
  setTile("kpi-throughput", fixed1(line.throughputPerHour));
  setTile("kpi-scrap-rate", percent(line.scrapRate));
}

function drawHourly(hourly) {
  showChart("hourly-chart", barConfig(hourly.map((h) => clock(h.from)), {
    completed: hourly.map((h) => h.completed),
    scrapped: hourly.map((h) => h.scrapped),
  }, { stacked: true }));
}

function drawOee(equipment) {
  const series = {};
  for (const [key, name] of Object.entries(FIGURES)) series[name] = equipment.map((e) => percentValue(e[key]));
  showChart("oee-chart", barConfig(equipment.map((e) => e.id), series, { percent: true }));
}

function drawMachineFigures(equipment) {
  $("#machine-figures tbody").replaceChildren(...equipment.map((e) => el("tr", { dataset: { equipmentId: e.id } },
    el("td", {}, e.id), el("td", {}, percent(e.utilization)), el("td", {}, percent(e.availability)),
    el("td", {}, percent(e.oee)), el("td", { class: "cycles" }, e.cycles),
    el("td", {}, seconds(e.meanCycleSeconds)), el("td", {}, seconds(e.p95CycleSeconds)),
    el("td", {}, seconds(e.idealCycleSeconds)))));
}

// -- the timeline ---------------------------------------------------------------------

/** The tick spacing that suits the window: 10 min for 1 h, 1 h for 8 h, 3 h for 24 h. */
function timelineStep(spanMs) {
  for (const minutes of [5, 10, 15, 30, 60, 120, 180, 360]) {
    if (spanMs / (minutes * 60000) <= 12) return minutes * 60000;
  }
  return 720 * 60000;
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
  const datasets = MACHINE_STATES.map((state) => ({
    label: state,
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
        x: { type: "linear", min: fromMs, max: toMs, ticks: { callback: (v) => clock(v) },
             afterBuildTicks: (scale) => { scale.ticks = clockTicks(scale.min, scale.max, timelineStep(toMs - fromMs)); } },
        y: { type: "category", labels: rows },
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
  return `${ctx.dataset.label} ${clock(start)}–${clock(end)} (${duration(end - start)})`;
}

function drawTimeline(timeline, w) {
  const rows = layout ? layout.equipment.map((e) => e.id) : [...new Set(timeline.items.map((i) => i.equipmentId))];
  $("#timeline-section .timeline-box").style.height = `${rows.length * TIMELINE_ROW_PX + 70}px`;
  showChart("timeline-chart", timelineConfig(timeline.items, rows, Date.parse(w.from), Date.parse(w.to)));
  let note = "";
  if (timeline.truncated) note = "more state changes than can be drawn: pick a shorter window";
  else if (!timeline.items.length) note = "no machine states recorded in this window";
  $("#timeline-note").textContent = note;
}

$("#stats-window").addEventListener("change", (ev) => {
  statsHours = Number(ev.target.value);
  refreshStats();
});
