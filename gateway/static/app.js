// The operator's page: plain JS, no build step. State comes from the REST API;
// the websocket event stream tells the page when to refresh and feeds the log.
"use strict";

const LIVE_JOB_STATUSES = "PENDING,QUEUED,MOVING,PROCESSING,WAITING_UNLOAD,PAUSED,SUSPENDED,ERROR";
const ORDER_ACTIONS = { CREATED: ["start", "cancel"], RUNNING: ["pause", "cancel"], PAUSED: ["resume", "cancel"] };
const FEED_MAX = 200;
const ROBOT_TASKS = ["DOCK_TO_BUFFER", "BUFFER_TO_EQUIPMENT", "EQUIPMENT_TO_BUFFER", "SWAP", "SCAN", "MARK"];

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
let layout = null;
let lastSeq = null;
let socket = null;
let refreshTimer = null;

function say(text) { $("#message").textContent = text || ""; }

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
  if (resp.status === 202) say(`accepted (command ${data.commandId}); the outcome will show shortly`);
  return data;
}

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

// -- orders, alarms, manual actions ------------------------------------------------

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
    body.append(el("tr", { dataset: { orderId: o.id } },
      el("td", {}, o.id), el("td", {}, o.code), el("td", {}, o.productId),
      el("td", { class: "status" }, o.status),
      el("td", {}, el("progress", { max: o.quantity, value: done }),
         ` ${o.completedQty}/${o.quantity}` + (o.scrappedQty ? ` (${o.scrappedQty} scrapped)` : "")),
      actions));
  }
}

function drawAlarms(alarms) {
  const list = $("#alarms");
  list.replaceChildren();
  for (const a of alarms) {
    const li = el("li", { class: a.status, dataset: { alarmId: a.id } },
      el("b", {}, `${a.severity} ${a.code}`), ` ${a.message} `,
      el("span", { class: "status" }, a.status));
    if (a.status === "RAISED") {
      li.append(" ", el("button", { type: "button", class: "ack",
                                    onclick: () => command(`/api/alarms/${a.id}/acknowledge`, {}) }, "Acknowledge"));
    }
    list.append(li);
  }
  if (!alarms.length) list.append(el("li", {}, "no active alarms"));
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
    const [orders, jobs, equipment, buffer, alarms, manual, tasks] = await Promise.all([
      api("GET", "/api/work-orders?limit=500"),
      api("GET", `/api/jobs?limit=500&status=${LIVE_JOB_STATUSES}`),
      api("GET", "/api/equipment"),
      api("GET", "/api/buffer"),
      api("GET", "/api/alarms?limit=500&status=RAISED,ACKNOWLEDGED"),
      api("GET", "/api/manual-actions?limit=500&status=OPEN"),
      api("GET", "/api/tasks?limit=50&status=RUNNING"),
    ]);
    drawOrders(orders.items);
    drawPieces(jobs.items, equipment, buffer);
    drawRobot(tasks.items);
    drawAlarms(alarms.items);
    drawManual(manual.items);
    document.body.dataset.loaded = "true";
  } catch (e) {
    say(e.message);
  }
}

function scheduleRefresh() {
  if (!refreshTimer) refreshTimer = setTimeout(refresh, 100);
}

function feed(frame) {
  const list = $("#feed");
  list.prepend(el("li", { value: frame.seq }, `${frame.at.slice(11, 19)} ${frame.type} ${JSON.stringify(frame.payload)}`));
  while (list.children.length > FEED_MAX) list.lastChild.remove();
}

function connect() {
  const proto = location.protocol === "https:" ? "wss" : "ws";
  const after = lastSeq === null ? "" : `after=${lastSeq}&`;
  socket = new WebSocket(`${proto}://${location.host}/ws?${after}token=${encodeURIComponent(token)}`);
  socket.onopen = () => { $("#conn").className = "conn on"; $("#conn").textContent = "live"; scheduleRefresh(); };
  socket.onmessage = (msg) => {
    const frame = JSON.parse(msg.data);
    if (frame.type === "overflow") { lastSeq = frame.resumeAfter; return; }
    lastSeq = frame.seq;
    feed(frame);
    scheduleRefresh();
  };
  socket.onclose = () => {
    $("#conn").className = "conn off";
    $("#conn").textContent = "offline";
    setTimeout(connect, 2000);  // resume from lastSeq
  };
}

async function start() {
  if (!token) { say("enter an access token"); return; }
  try {
    layout = await api("GET", "/api/line");
    const products = await api("GET", "/api/products");
    $("#product").replaceChildren(...products.items.map((p) => el("option", { value: p.id }, p.name)));
  } catch (e) {
    say(e.message);
    return;
  }
  drawLayout();
  connect();
  await refresh();
}

$("#token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = $("#token").value.trim();
  localStorage.setItem("linectl.token", token);
  if (socket) { socket.onclose = null; socket.close(); }
  start();
});

$("#create-order").addEventListener("submit", (ev) => {
  ev.preventDefault();
  command("/api/work-orders", { productId: $("#product").value, quantity: Number($("#quantity").value),
                                priority: Number($("#priority").value) });
});

$("#confirm-recovery").addEventListener("click", () => command("/api/recovery/confirm", {}));

start();
