// The operator's page: plain JS, no build step. State comes from the REST API;
// the websocket event stream tells the page when to refresh and feeds the log.
// common.js (helpers), the views (production.js, alarms.js, job.js, ai.js) load
// before this file, which draws the line and starts the page.
"use strict";

const LIVE_JOB_STATUSES = "PENDING,QUEUED,MOVING,PROCESSING,WAITING_UNLOAD,PAUSED,SUSPENDED,ERROR";
const ORDER_ACTIONS = { CREATED: ["start", "cancel"], RUNNING: ["pause", "cancel"], PAUSED: ["resume", "cancel"] };
const FEED_MAX = 200;
const ROBOT_TASKS = ["DOCK_TO_BUFFER", "BUFFER_TO_EQUIPMENT", "EQUIPMENT_TO_BUFFER", "SWAP", "SCAN", "MARK"];
// What each role may use here (admin may use everything): the page asks only
// for that, so a platform token does not meet a 403 on every line panel.
const LINE_ROLES = ["operator", "admin"];
const AI_ROLES = ["platform", "admin"];

let role = null;
let layout = null;
let lastSeq = null;
let socket = null;
let refreshTimer = null;
let statsPeriodTimer = null;

async function command(path, body) {
  try {
    say("");
    await api("POST", path, body);
    scheduleRefresh();
  } catch (e) {
    say(e.message);
  }
}

// -- the line -------------------------------------------------------------------

function pieceLabel(job) { return `WO${job.workOrderId}#${job.seqNo} s${job.stepIndex}`; }

function piece(job) {
  return el("span", { class: `piece ${job.status}`, dataset: { jobId: job.id, orderId: job.workOrderId },
                      title: `job ${job.id}: ${job.status}, step ${job.stepIndex}` }, pieceLabel(job));
}

function drawLayout() {
  $("#line-name").textContent = layout.name;
  const slots = $("#buffer .slots");
  slots.replaceChildren();
  for (let n = 1; n <= layout.bufferSlots; n++) {
    slots.append(el("div", { class: "slot buffer-slot", dataset: { slot: n } }, el("span", { class: "no" }, n)));
  }
  const machines = $("#machines");
  machines.replaceChildren();
  for (const m of layout.equipment) {
    const box = el("div", { class: "machine", id: `machine-${m.id}`, dataset: { equipmentId: m.id } },
      el("h3", {}, `${m.name} `, el("span", { class: "status" }, "")));
    const ms = el("div", { class: "slots" });
    for (let n = 1; n <= m.slots; n++) {
      ms.append(el("div", { class: "slot machine-slot", dataset: { slot: n } }, el("span", { class: "no" }, n)));
    }
    box.append(ms);
    machines.append(box);
  }
}

function drawRobot(tasks) {
  const doing = tasks.filter((t) => ROBOT_TASKS.includes(t.kind))
    .map((t) => `${t.kind}${t.jobId ? ` job ${t.jobId}` : ""}${t.equipmentId ? ` ${t.equipmentId}` : ""}`);
  let line = document.querySelector("#robot .doing");
  if (!line) { line = el("div", { class: "doing" }); $("#robot").append(line); }
  line.textContent = doing.length ? doing.join("; ") : "idle";
}

function drawPieces(jobs, equipment, buffer) {
  document.querySelectorAll(".slot .piece, #dock .piece, #robot .piece").forEach((p) => p.remove());
  const byId = new Map(jobs.map((j) => [j.id, j]));
  for (const s of buffer.slots) {
    const job = byId.get(s.jobId);
    if (job && job.positionType === "ON_BUFFER") $(`#buffer [data-slot="${s.slotNo}"]`).append(piece(job));
  }
  for (const e of equipment.items) {
    const box = document.getElementById(`machine-${e.id}`);
    if (!box) continue;
    box.className = `machine ${e.status}`;
    box.querySelector(".status").textContent = e.status;
    for (const s of e.slots) {
      const job = byId.get(s.currentJobId);
      if (job) box.querySelector(`[data-slot="${s.slotNo}"]`).append(piece(job));
    }
  }
  for (const job of jobs) {
    if (job.positionType === "ON_DOCK") $("#dock .pieces").append(piece(job));
    if (job.positionType === "ON_ROBOT") $("#robot .pieces").append(piece(job));
  }
}

// -- orders, manual actions (alarms: alarms.js) ------------------------------------------------

function drawOrders(orders) {
  const body = $("#orders tbody");
  body.replaceChildren();
  for (const o of orders.slice().reverse()) {
    const done = o.completedQty + o.scrappedQty;
    const actions = el("td");
    for (const a of ORDER_ACTIONS[o.status] || []) {
      actions.append(el("button", { type: "button", dataset: { action: a },
                                   onclick: () => command(`/api/work-orders/${o.id}/${a}`, {}) }, a));
    }
    // A started order's code shows its run in the Production panel and the timeline.
    const code = o.startedAt
      ? el("a", { href: "#production-section", class: "order-window", title: "show this order's run in Production",
                  onclick: (ev) => { ev.preventDefault(); showOrderWindow(o.id); } }, o.code)
      : o.code;
    body.append(el("tr", { dataset: { orderId: o.id } },
      el("td", {}, o.id), el("td", { class: "code" }, code), el("td", {}, o.productId),
      el("td", { class: "status" }, o.status),
      el("td", {}, el("progress", { max: o.quantity, value: done }),
         ` ${o.completedQty}/${o.quantity}` + (o.scrappedQty ? ` (${o.scrappedQty} scrapped)` : "")),
      actions));
  }
  offerOrderWindows(orders);
}

function drawManual(actions) {
  const list = $("#manual");
  list.replaceChildren();
  let recovery = 0;
  for (const m of actions) {
    if (m.kind.startsWith("RECOVERY")) recovery++;
    const li = el("li", { dataset: { manualActionId: m.id } }, el("b", {}, m.kind), ` ${m.text} `);
    for (const choice of m.choices) {
      li.append(el("button", { type: "button", dataset: { resolution: choice },
        onclick: () => command(`/api/manual-actions/${m.id}/resolve`, { resolution: choice }) }, choice));
    }
    list.append(li);
  }
  if (!actions.length) list.append(el("li", {}, "nothing to do"));
  $("#confirm-recovery").hidden = recovery === 0;
}

// -- loading and live updates ------------------------------------------------------

async function refresh() {
  refreshTimer = null;
  try {
    const [orders, jobs, equipment, buffer, alarms, shelved, manual, tasks] = await Promise.all([
      api("GET", "/api/work-orders?limit=500"),
      api("GET", `/api/jobs?limit=500&status=${LIVE_JOB_STATUSES}`),
      api("GET", "/api/equipment"),
      api("GET", "/api/buffer"),
      api("GET", "/api/alarms?limit=500&status=RAISED,ACKNOWLEDGED"),
      api("GET", "/api/alarms?limit=500&status=SHELVED"),
      api("GET", "/api/manual-actions?limit=500&status=OPEN"),
      api("GET", "/api/tasks?limit=50&status=RUNNING"),
    ]);
    drawOrders(orders.items);
    drawPieces(jobs.items, equipment, buffer);
    drawRobot(tasks.items);
    drawAlarms(alarms.items);
    drawShelved(shelved.items);
    drawManual(manual.items);
    document.body.dataset.loaded = "true";
  } catch (e) {
    say(e.message);
  }
  refreshShownJob();
}

function scheduleRefresh() {
  if (!refreshTimer) refreshTimer = setTimeout(refresh, 100);
}

function feed(frame) {
  const list = $("#feed");
  list.prepend(el("li", { value: frame.seq }, `${frame.at.slice(11, 19)} ${frame.type} ${JSON.stringify(frame.payload)}`));
  while (list.children.length > FEED_MAX) list.lastChild.remove();
}

function onFrame(frame) {
  lastSeq = frame.seq;
  feed(frame);
  scheduleRefresh();
  if (STATS_EVENTS.has(frame.type)) scheduleStatsRefresh();
}

/** The stream indicator: "on" (live), "off" (offline: reconnecting), or "none"
 *  for a role the line's event stream is not for (platform, runtime). */
function showConn(state) {
  const conn = $("#conn");
  conn.className = `conn ${state}`;
  conn.textContent = { on: "live", off: "offline", none: "no line stream" }[state];
  conn.title = state === "none" ? "the line's event stream is for operator and admin tokens" : "live event stream";
}

function connect() {
  const proto = location.protocol === "https:" ? "wss" : "ws";
  const after = lastSeq === null ? "" : `after=${lastSeq}&`;
  socket = new WebSocket(`${proto}://${location.host}/ws?${after}token=${encodeURIComponent(token)}`);
  socket.onopen = () => {
    showConn("on");
    scheduleRefresh();
    scheduleStatsRefresh();  // whatever happened while the stream was down
  };
  socket.onmessage = (msg) => {
    const frame = JSON.parse(msg.data);
    if (frame.type === "overflow") { lastSeq = frame.resumeAfter; return; }
    onFrame(frame);
  };
  socket.onclose = () => {
    showConn("off");
    setTimeout(connect, 2000);  // resume from lastSeq
  };
}

/** Shows the sections the role may use, hides the others. */
function showSectionsFor(canLine, canAi) {
  for (const section of document.querySelectorAll("section[data-needs]")) {
    section.hidden = !(section.dataset.needs === "line" ? canLine : canAi);
  }
  if (!canLine) closeJob();
}

async function startLine() {
  try {
    layout = await api("GET", "/api/line");
    const products = await api("GET", "/api/products");
    $("#product").replaceChildren(...products.items.map((p) => el("option", { value: p.id }, p.name)));
  } catch (e) {
    say(e.message);
    return;
  }
  drawLayout();
  fillHistoryMachines(layout.equipment);
  connect();
  clearInterval(statsPeriodTimer);
  statsPeriodTimer = setInterval(scheduleStatsRefresh, STATS_PERIOD_MS);
  await Promise.all([refresh(), refreshStats(), searchHistory()]);
}

async function start() {
  say("");
  if (!token) { say("enter an access token", "info"); return; }
  try {
    const me = await api("GET", "/api/me");
    role = me.role;
    $("#who").textContent = `${me.name} (${me.role})`;
  } catch (e) {
    showSectionsFor(false, false);
    say(e.message);
    return;
  }
  document.body.dataset.role = role;
  const canLine = LINE_ROLES.includes(role);
  const canAi = AI_ROLES.includes(role);
  showSectionsFor(canLine, canAi);
  if (!canLine && !canAi) say(`a ${role} token has nothing to show on this page`, "info");
  if (!canLine) showConn("none");
  if (canAi) startAiRefresh(); else stopAiRefresh();
  if (canLine) await startLine();
  else clearInterval(statsPeriodTimer);  // a token of another role came before this one
}

$("#token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = $("#token").value.trim();
  localStorage.setItem("linectl.token", token);
  if (socket) { socket.onclose = null; socket.close(); socket = null; }
  start();
});

$("#create-order").addEventListener("submit", (ev) => {
  ev.preventDefault();
  command("/api/work-orders", { productId: $("#product").value, quantity: Number($("#quantity").value),
                                priority: Number($("#priority").value) });
});

$("#confirm-recovery").addEventListener("click", () => command("/api/recovery/confirm", {}));

start();
