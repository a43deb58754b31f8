// What every view of the page shares: DOM helpers, the API call and its
// refusals in words, the message line; Chart.js set up once with its colours
// (ISA-101: colour only where something is abnormal). Loaded after i18n.js;
// app.js, loaded last, starts the page.
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

/** A sentence from the catalog, or the API's English `fallback` when the
 *  catalog has none for it: {text, lang} ("en" for the fallback, so a screen
 *  reader reads it as English and a reader knows why it is). */
function worded(text, fallback) {
  return text === null ? { text: fallback, lang: "en" } : { text, lang: null };
}

/** An element saying a worded() text, marked with its language when it is not the page's. */
function spoken(tag, attrs, { text, lang: language }) {
  return el(tag, language ? { ...attrs, lang: language } : attrs, text);
}

// The line the line views show: "/api" (the unprefixed paths: the default line,
// as in a one-line plant), or "/api/lines/<id>" (plant.js, a plant of several lines).
let lineRoot = "/api";

/** A line-control path ("/work-orders?…") of the line the page shows. */
function linePath(path) { return `${lineRoot}${path}`; }

/** A line-control path of the line `lineId` ("/api/lines/<id>/…"); of the shown line if null. */
function pathOfLine(lineId, path) {
  return lineId ? `/api/lines/${encodeURIComponent(lineId)}${path}` : linePath(path);
}

let token = localStorage.getItem("linectl.token") || "";
// Without a token the page runs on the sign-in session (its HttpOnly cookie);
// every state-changing request then echoes the session's CSRF token.
let csrfToken = "";
const SAFE_METHODS = ["GET", "HEAD"];

/** The message line: `kind` "error" (the default: a refusal, a failure) shows
 *  in red, "info" (a confirmation, a hint) does not; "" clears it. */
function say(text, kind = "error") {
  if (text === undefined) return;  // nothing to say (a request that found the session gone)
  const line = $("#message");
  line.textContent = text || "";
  line.className = text ? kind : "";
}

/** A request the API refused (or that never reached it): `message` is what the
 *  catalog says for its error code, in the page's language; `code` and
 *  `serverMessage` (the API's English) stay for an engineer. */
class Refusal extends Error {
  constructor(code, serverMessage) {
    super(refusalText(code, serverMessage));
    this.code = code;
    this.serverMessage = serverMessage;
  }
}

/** A request refused because the sign-in session is gone: the form says it, nothing else does. */
class SessionGone extends Refusal {}

function refusalText(code, serverMessage) {
  return tFirst([`error.${code}`], { code, message: serverMessage || "" }) || t("error.other", { code });
}

async function api(method, path, body) {
  const opts = { method, headers: {}, credentials: "same-origin" };
  if (token) opts.headers.Authorization = `Bearer ${token}`;
  else if (!SAFE_METHODS.includes(method)) opts.headers["X-CSRF-Token"] = csrfToken;
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, opts);
  } catch (e) {
    throw new Refusal("network", e.message);
  }
  const data = resp.status === 204 ? null : await resp.json().catch(() => null);
  if (!resp.ok) {
    const err = (data && data.error) || { code: String(resp.status), message: resp.statusText };
    if (resp.status === 401 && !token) {
      sessionEnded();  // app.js: back to the sign-in form, which says so
      throw new SessionGone(err.code, err.message);
    }
    throw new Refusal(err.code, err.message);
  }
  if (resp.status === 202) say(t("accepted", { commandId: data.commandId }), "info");
  return data;
}

/** What went wrong, for the message line: a refusal's catalog text; anything
 *  else is the page's own fault, said as such (the details go to the console). */
function failure(e) {
  if (e instanceof SessionGone) return undefined;
  if (e instanceof Refusal) return e.message;
  console.warn(e);
  return t("error.page");
}

// -- charts ---------------------------------------------------------------------------

const MACHINE_STATES = ["PROCESSING", "IDLE", "WAITING_UNLOAD", "FAULT"];
// ISA-101: normal running is calm grey; colour is kept for what needs a person
// (waiting for unload: amber, a fault: red).
const STATE_COLOURS = { PROCESSING: "#6b7480", IDLE: "#c4c8cd", WAITING_UNLOAD: "#d98e00", FAULT: "#c62828" };
const SERIES_COLOURS = {
  completed: "#5a6470", scrapped: "#c62828", succeeded: "#5a6470", failed: "#c62828",
  oee: "#23303d", availability: "#6b7f99", performance: "#9aa3ad", quality: "#3f4a56",
};
const HOUR_MS = 3600 * 1000;

const chartsAvailable = typeof Chart !== "undefined";
if (chartsAvailable) {
  // The figures are redrawn every few seconds: an animation on each redraw only distracts.
  Chart.defaults.animation = false;
  Chart.defaults.maintainAspectRatio = false;
  Chart.defaults.font.family = "system-ui, sans-serif";
  Chart.defaults.font.size = 14;
  Chart.defaults.color = "#333";
  Chart.defaults.locale = lang;  // its own number formatting follows the page's language
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

/** An axis title from the catalog. */
function axisTitle(key) { return { display: true, text: t(key) }; }

/** A bar chart of `series` (key → values, named from the catalog's series.<key>)
 *  over `labels`, stacked if told; `axes`: the catalog keys of the x and y titles. */
function barConfig(labels, series, { stacked = false, percent = false, axes = [] } = {}) {
  const datasets = Object.entries(series).map(([key, data]) => (
    { label: t(`series.${key}`), data, backgroundColor: SERIES_COLOURS[key] || "#6b7f99" }));
  const y = { stacked, beginAtZero: true, ticks: { precision: 0 } };
  if (percent) Object.assign(y, { max: 100, ticks: { callback: percentTick } });
  const x = { stacked };
  if (axes[0]) x.title = axisTitle(axes[0]);
  if (axes[1]) y.title = axisTitle(axes[1]);
  return {
    type: "bar",
    data: { labels, datasets },
    options: { scales: { x, y }, plugins: { legend: { position: "bottom" } } },
  };
}

/** Stacked bars per hour of the `hourly` rows, one series per field in `fields`. */
function showHourlyBars(canvasId, hourly, fields, yTitle = "chart.axisPieces") {
  const series = Object.fromEntries(fields.map((f) => [f, hourly.map((h) => h[f])]));
  showChart(canvasId, barConfig(hourly.map((h) => clock(h.from)), series,
                                { stacked: true, axes: ["chart.axisHour", yTitle] }));
}

// -- formatting (the Intl formatters are in i18n.js) -----------------------------------

/** A ratio 0..1 as a percentage rounded to one decimal, half up on its decimal
 *  value (0.6605 → 66.1; the float 660.4999… of 0.1235 * 1000 is first cut to
 *  six decimals); null (nothing observed) stays null: Chart.js leaves a gap.
 *  The one rounding of the page: charts draw this, text shows it (percent). */
function percentValue(ratio) {
  if (ratio === null || ratio === undefined) return null;
  return Math.round(Number((ratio * 1000).toFixed(6))) / 10;
}

/** A ratio 0..1 as text in the page's language ("66.1%"): the number percentValue charts; null as a dash. */
function percent(ratio) {
  const value = percentValue(ratio);
  return value === null ? t("fmt.none") : PERCENT_1.format(value / 100);
}
