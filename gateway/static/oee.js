// The shift's OEE (docs/oee.md): on a line's page the current shift's A, P, Q and
// OEE (GET /oee?by=shift), its state timeline (/states), its unassigned stops
// with a reason picker made for a finger (a stop, then a reason: two taps; POST
// /stops/{id}/reason) and the Pareto of reasons (/stops/pareto); on the plant
// overview a table of OEE by shift and line (GET /api/plant/oee).
"use strict";

const LINE_STATES = ["RUNNING", "IDLE", "DOWN", "PLANNED_DOWN", "NOT_SCHEDULED"];
const LINE_STATE_COLOURS = { RUNNING: "#2e7d32", IDLE: "#c4c8cd", DOWN: "#c62828", PLANNED_DOWN: "#1565c0",
                             NOT_SCHEDULED: "#ececec" };
const OEE_LOOKBACK_MS = 24 * HOUR_MS;  // the latest shift started within the last day

let oeeReasons = null;  // the plant's reason tree, once fetched
let oeeGeneration = 0;
let oeePicking = null;  // the stop whose reason is being picked

async function downtimeReasons() {
  if (!oeeReasons) oeeReasons = (await api("GET", "/api/plant/downtime-reasons")).items;
  return oeeReasons;
}

/** A reason's name in the page's language ("Mechanical failure › Spindle" for a child). */
function reasonName(code) {
  if (code === "UNASSIGNED") return t("oee.unassigned");
  const reason = (oeeReasons || []).find((r) => r.code === code);
  if (!reason) return code;
  const own = reason.names[lang] || reason.names.en;
  return reason.parent ? `${reasonName(reason.parent)} › ${own}` : own;
}

function lastDay() {
  const to = new Date();
  return { from: new Date(to.getTime() - OEE_LOOKBACK_MS).toISOString(), to: to.toISOString() };
}

async function refreshOee() {
  if (!lineShown()) return;
  const generation = ++oeeGeneration;
  try {
    const [figures] = await Promise.all([api("GET", linePath(`/oee?by=shift&${windowQuery(lastDay())}`)),
                                         downtimeReasons()]);
    const shift = figures.items.length ? figures.items[figures.items.length - 1] : null;
    const w = shift ? { from: shift.from, to: new Date().toISOString() } : lastDay();
    const q = windowQuery(w);
    const [states, stops, pareto] = await Promise.all([
      api("GET", linePath(`/states?${q}`)), api("GET", linePath(`/stops?unassigned=true&${q}`)),
      api("GET", linePath(`/stops/pareto?${q}`))]);
    if (generation !== oeeGeneration) return;
    drawShiftOee(shift);
    drawLineStates(states.items, w);
    drawUnassigned(stops.items);
    drawPareto(pareto.items);
    document.body.dataset.oeeLoaded = "true";
  } catch (e) {
    if (generation === oeeGeneration) say(failure(e));
  }
}

function drawShiftOee(shift) {
  for (const key of ["availability", "performance", "quality", "oee"]) {
    setTile(`oee-${key}`, shift ? percent(shift[key]) : t("fmt.none"));
  }
  $("#oee-shift").textContent = shift ? t("oee.shiftOf", { name: tCode("shift", shift.shift), from: clock(shift.from),
                                                           to: clock(shift.to) }) : t("oee.noShift");
  $("#oee-inputs").textContent = shift ? t("oee.inputs", {
    busy: duration(shift.plannedBusySeconds * 1000), down: duration(shift.downSeconds * 1000),
    stops: count(shift.stops), micro: count(shift.microStops), produced: count(shift.produced),
    good: count(shift.good) }) : "";
}

/** One row, one floating bar per stretch of a state (as the machine timeline). */
function drawLineStates(items, w) {
  const fromMs = Date.parse(w.from);
  const toMs = Math.max(Date.parse(w.to), fromMs + 1000);
  const row = t("oee.lineRow");
  const datasets = LINE_STATES.map((state) => ({
    label: tCode("lineState", state), backgroundColor: LINE_STATE_COLOURS[state], grouped: false,
    barPercentage: 0.8, categoryPercentage: 1,
    data: items.filter((i) => i.state === state).map((i) => ({ x: [Date.parse(i.from), Date.parse(i.to)], y: row })),
  }));
  const step = timelineStep(toMs - fromMs);
  showChart("states-chart", {
    type: "bar",
    data: { labels: [row], datasets },
    options: {
      indexAxis: "y",
      scales: {
        x: { type: "linear", min: fromMs, max: toMs, ticks: { callback: (v) => clock(v, step < 60000) },
             afterBuildTicks: (scale) => { scale.ticks = clockTicks(scale.min, scale.max, step); } },
        y: { type: "category", labels: [row] },
      },
      plugins: { legend: { position: "top" }, tooltip: { callbacks: { label: timelineTooltip } } },
    },
  });
}

function stopText(stop) {
  const to = stop.to ? Date.parse(stop.to) : Date.now();
  return t("oee.stopText", { from: clock(stop.from, true), length: duration(to - Date.parse(stop.from)),
                             cause: tCode("stopCause", stop.cause), where: stop.equipmentId || "" });
}

/** Each unassigned stop a large button; tapped, the reasons open under it as large buttons. */
function drawUnassigned(stops) {
  if (oeePicking !== null && !stops.some((s) => s.id === oeePicking)) oeePicking = null;
  const list = $("#oee-stops");
  list.replaceChildren(...stops.map((stop) => el("li", { dataset: { stopId: String(stop.id) } },
    el("button", { type: "button", class: "stop big", "aria-expanded": String(oeePicking === stop.id),
                   onclick: () => { oeePicking = oeePicking === stop.id ? null : stop.id; drawUnassigned(stops); } },
       stopText(stop)),
    oeePicking === stop.id ? reasonPicker(stop) : "")));
  if (!stops.length) list.append(el("li", { class: "empty" }, t("oee.none")));
}

function reasonPicker(stop) {
  return el("div", { class: "reasons", role: "group", "aria-label": t("oee.pick") },
    ...(oeeReasons || []).filter((r) => !r.planned).map((r) => el("button", {
      type: "button", class: "reason big", dataset: { code: r.code }, onclick: () => assignReason(stop, r.code),
    }, reasonName(r.code))));
}

async function assignReason(stop, code) {
  try {
    await api("POST", linePath(`/stops/${stop.id}/reason`), { reasonCode: code });
    oeePicking = null;
    say(t("oee.saved", { reason: reasonName(code) }), "info");
    refreshOee();
  } catch (e) {
    say(failure(e));
  }
}

/** Minutes per reason (bars) and the cumulative share of the time (a line). */
function drawPareto(items) {
  showChart("pareto-chart", {
    data: {
      labels: items.map((i) => reasonName(i.reasonCode)),
      datasets: [
        { type: "bar", label: t("oee.minutes"), data: items.map((i) => Math.round(i.seconds / 6) / 10),
          backgroundColor: "#6b7f99", yAxisID: "y" },
        { type: "line", label: t("oee.cumulative"), data: items.map((i) => percentValue(i.cumulativeShare)),
          borderColor: "#c62828", backgroundColor: "#c62828", yAxisID: "share" },
      ],
    },
    options: {
      scales: {
        y: { beginAtZero: true, title: axisTitle("oee.minutes") },
        share: { position: "right", min: 0, max: 100, ticks: { callback: percentTick },
                 grid: { drawOnChartArea: false } },
      },
      plugins: { legend: { position: "bottom" } },
    },
  });
}

// -- the plant -------------------------------------------------------------------------

/** OEE per shift (rows) and line (columns), and the plant's, over the last day. */
async function refreshPlantOee() {
  try {
    const figures = await api("GET", `/api/plant/oee?by=shift&${windowQuery(lastDay())}`);
    if (!plant.on || plant.viewed !== null) return;
    const lineIds = plant.lines.map((l) => l.id);
    const cell = (item) => el("td", { class: "oee", title: item ? t("oee.apq", {
      a: percent(item.availability), p: percent(item.performance), q: percent(item.quality) }) : "" },
    item ? percent(item.oee) : t("fmt.none"));
    $("#plant-oee thead tr").replaceChildren(el("th", {}, t("plant.oeeShift")),
      ...lineIds.map((id) => el("th", {}, id)), el("th", {}, t("plant.oeePlant")));
    $("#plant-oee tbody").replaceChildren(...figures.plant.map((p) => el("tr", { dataset: { from: p.from } },
      el("th", {}, t("oee.shiftOf", { name: tCode("shift", p.shift), from: clock(p.from), to: clock(p.to) })),
      ...lineIds.map((id) => cell(figures.items.find((i) => i.lineId === id && i.from === p.from))),
      cell(p))));
  } catch (e) {
    say(failure(e));
  }
}
