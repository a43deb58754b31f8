// What every view of the page shares: DOM helpers, the API call, the message
// line; Chart.js set up once with its colours; the formatting of ratios,
// durations and clock times. Loaded first; app.js, loaded last, starts the page.
// Chart.js is the vendored UMD build (vendor/, `make vendor`): the plant network
// has no internet, so no CDN.
"use strict";

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "dataset") Object.assign(node.dataset, v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
};

let token = localStorage.getItem("linectl.token") || "";

/** The message line: `kind` "error" (the default: a refusal, a failure) shows
 *  in red, "info" (a confirmation, a hint) does not; "" clears it. */
function say(text, kind = "error") {
  const line = $("#message");
  line.textContent = text || "";
  line.className = text ? kind : "";
}

async function api(method, path, body) {
  const opts = { method, headers: { Authorization: `Bearer ${token}` } };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const resp = await fetch(path, opts);
  const data = resp.status === 204 ? null : await resp.json().catch(() => null);
  if (!resp.ok) {
    const err = (data && data.error) || { code: resp.status, message: resp.statusText };
    throw new Error(`${err.code}: ${err.message}`);
  }
  if (resp.status === 202) say(`accepted (command ${data.commandId}); the outcome will show shortly`, "info");
  return data;
}

// -- charts ---------------------------------------------------------------------------

const MACHINE_STATES = ["PROCESSING", "IDLE", "WAITING_UNLOAD", "FAULT"];
const STATE_COLOURS = { PROCESSING: "#2e8b57", IDLE: "#a0a4aa", WAITING_UNLOAD: "#e8a200", FAULT: "#cc3333" };
const SERIES_COLOURS = {
  completed: "#2e8b57", scrapped: "#cc3333", succeeded: "#2e8b57", failed: "#cc3333",
  OEE: "#23303d", availability: "#3b6ea5", performance: "#8a63b8", quality: "#2e8b57",
};
const HOUR_MS = 3600 * 1000;

const chartsAvailable = typeof Chart !== "undefined";
if (chartsAvailable) {
  // The figures are redrawn every few seconds: an animation on each redraw only distracts.
  Chart.defaults.animation = false;
  Chart.defaults.maintainAspectRatio = false;
  Chart.defaults.font.family = "system-ui, sans-serif";
}

/** Draws `config` on the canvas: a new chart the first time, the same chart
 *  with new data after (Chart.js refuses two charts on one canvas). */
function showChart(canvasId, config) {
  if (!chartsAvailable) return null;
  const canvas = document.getElementById(canvasId);
  const chart = Chart.getChart(canvas);
  if (!chart) return new Chart(canvas, config);
  chart.data = config.data;
  chart.options = config.options;
  chart.update();
  return chart;
}

/** A bar chart of `series` (name → values) over `labels`, stacked if told. */
function barConfig(labels, series, { stacked = false, percent = false } = {}) {
  const datasets = Object.entries(series).map(([name, data]) => (
    { label: name, data, backgroundColor: SERIES_COLOURS[name] || "#3b6ea5" }));
  const y = { stacked, beginAtZero: true, ticks: { precision: 0 } };
  if (percent) Object.assign(y, { max: 100, ticks: { callback: (v) => `${v} %` } });
  return {
    type: "bar",
    data: { labels, datasets },
    options: { scales: { x: { stacked }, y }, plugins: { legend: { position: "bottom" } } },
  };
}

/** Stacked bars per hour of the `hourly` rows, one series per field in `fields`. */
function showHourlyBars(canvasId, hourly, fields) {
  const series = Object.fromEntries(fields.map((f) => [f, hourly.map((h) => h[f])]));
  showChart(canvasId, barConfig(hourly.map((h) => clock(h.from)), series, { stacked: true }));
}

// -- formatting -----------------------------------------------------------------------

const NONE = "–";

/** A ratio 0..1 as a percentage rounded to one decimal, half up on its decimal
 *  value (0.6605 → 66.1; the float 660.4999… of 0.1235 * 1000 is first cut to
 *  six decimals); null (nothing observed) stays null: Chart.js leaves a gap.
 *  The one rounding of the page: charts draw this, text shows it (percent). */
function percentValue(ratio) {
  if (ratio === null || ratio === undefined) return null;
  return Math.round(Number((ratio * 1000).toFixed(6))) / 10;
}

/** A ratio 0..1 as text, "66.1 %" (the number percentValue charts); null as a dash. */
function percent(ratio) {
  const value = percentValue(ratio);
  return value === null ? NONE : `${value.toFixed(1)} %`;
}

function seconds(s) { return s === null || s === undefined ? NONE : `${s.toFixed(1)} s`; }

function fixed1(x) { return x === null || x === undefined ? NONE : x.toFixed(1); }

/** An instant (ISO text or epoch ms) as the local clock time, HH:MM (HH:MM:SS with `withSeconds`). */
function clock(when, withSeconds = false) {
  const parts = { hour: "2-digit", minute: "2-digit", hourCycle: "h23" };
  if (withSeconds) parts.second = "2-digit";
  return new Date(when).toLocaleTimeString([], parts);
}

/** An instant as local date and time, short; null as a dash. */
function dateTime(when) {
  if (!when) return NONE;
  return new Date(when).toLocaleString([], { month: "short", day: "numeric", hour: "2-digit",
                                             minute: "2-digit", second: "2-digit", hourCycle: "h23" });
}

/** A length of time in ms, the way a person says it: 40 s, 12 min, 2 h 05 min. */
function duration(ms) {
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s} s`;
  const min = Math.round(s / 60);
  if (min < 60) return `${min} min`;
  return `${Math.floor(min / 60)} h ${String(min % 60).padStart(2, "0")} min`;
}
