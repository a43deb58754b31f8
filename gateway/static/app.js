// The operator's page: plain JS, no build step. State comes from the REST API;
// the websocket event stream (stream.js) tells the page when to refresh and
// feeds the log, each event a sentence from the catalog (its JSON one tap away).
// i18n.js (catalogs, Intl), common.js (helpers), the views (production.js,
// alarms.js, job.js, ai.js, audit.js) and the plant (plant.js: a plant of
// several lines opens on its overview) load before this file, which draws the
// line and starts the page.
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
let lineStream = null;       // a one-line plant's stream (a plant's: plant.js)
let refreshTimer = null;
let statsPeriodTimer = null;
// Bumped whenever the page shows another line (plant.js): answers still coming
// for the line before are dropped, not drawn on the new one.
let lineGeneration = 0;
let may = { line: false, ai: false, audit: false, pieces: false };  // what the role may use
let sessionLimited = false;  // a signed-in user limited to some lines (not every line)

async function command(path, body) {
  try {
    say("");
    await api("POST", path, body);
    scheduleRefresh();
    return true;
  } catch (e) {
    say(failure(e));
    return false;
  }
}

// -- the line -------------------------------------------------------------------

function pieceLabel(job) { return t("line.piece", job); }

/** A piece on the line: a button (a tap shows its route), its status in words for a screen reader too. */
function piece(job) {
  const says = t("line.pieceTitle", { ...job, status: tCode("jobStatus", job.status) });
  // Its accessible name starts with what it shows (WCAG 2.5.3), then says the rest.
  return el("button", { type: "button", class: `piece ${job.status}`, title: says,
                        "aria-label": `${pieceLabel(job)}: ${says}`,
                        dataset: { jobId: job.id, orderId: job.workOrderId, status: job.status } }, pieceLabel(job));
}

function drawLayout() {
  $("#line-name").textContent = layout.name;
  const slots = $("#buffer .slots");
  slots.replaceChildren();
  for (let n = 1; n <= layout.bufferSlots; n++) {
    slots.append(el("div", { class: "slot buffer-slot", dataset: { slot: n } },
                    el("span", { class: "no", "aria-label": t("line.slot", { slotNo: n }) }, integer(n))));
  }
  const machines = $("#machines");
  machines.replaceChildren();
  for (const m of layout.equipment) {
    const box = el("div", { class: "machine", id: `machine-${m.id}`, dataset: { equipmentId: m.id } },
      el("h3", {}, el("span", { class: "machine-id" }, m.id), " ", el("span", { class: "machine-name" }, m.name), " ",
         el("span", { class: "status" }, "")));
    const ms = el("div", { class: "slots" });
    for (let n = 1; n <= m.slots; n++) {
      ms.append(el("div", { class: "slot machine-slot", dataset: { slot: n } },
                   el("span", { class: "no", "aria-label": t("line.slot", { slotNo: n }) }, integer(n))));
    }
    box.append(ms);
    machines.append(box);
  }
}

function drawRobot(tasks) {
  const doing = tasks.filter((task) => ROBOT_TASKS.includes(task.kind))
    .map((task) => t("line.robotDoing", { task: tCode("task", task.kind), details: [
      task.jobId ? t("alarms.job", { jobId: task.jobId }) : "", task.equipmentId || ""].filter(Boolean).join(" ") }));
  let line = document.querySelector("#robot .doing");
  if (!line) { line = el("div", { class: "doing" }); $("#robot").append(line); }
  line.textContent = doing.length ? list(doing) : t("line.robotIdle");
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
    box.dataset.status = e.status;
    box.querySelector(".status").textContent = tCode("equipmentStatus", e.status);
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
                                   onclick: () => command(linePath(`/work-orders/${o.id}/${a}`), {}) }, t(`orderAction.${a}`)));
    }
    // A started order's code shows its run in the Production panel and the timeline.
    const code = o.startedAt
      ? el("a", { href: "#production-section", class: "order-window", title: t("orders.runTitle"),
                  onclick: (ev) => { ev.preventDefault(); showOrderWindow(o.id); } }, o.code)
      : o.code;
    const progress = t("orders.done", { completed: o.completedQty, quantity: o.quantity })
      + (o.scrappedQty ? ` ${t("orders.scrapped", { scrapped: o.scrappedQty })}` : "");
    body.append(el("tr", { dataset: { orderId: o.id, status: o.status } },
      el("td", {}, integer(o.id)), el("td", { class: "code" }, code), el("td", {}, o.productId),
      el("td", { class: "status", dataset: { status: o.status } }, tCode("orderStatus", o.status)),
      el("td", {}, el("progress", { max: o.quantity, value: done, "aria-label": progress }), ` ${progress}`),
      actions));
  }
  if (!orders.length) body.append(el("tr", {}, el("td", { colspan: 6 }, t("orders.empty"))));
  offerOrderWindows(orders);
}

/** A manual action in the reader's language: its kind's sentence from the
 *  catalog, filled from its facts (a variant per `facts.case`); a kind the
 *  catalog does not know, or an older action without facts, says the API's
 *  English text: never nothing. */
function manualText(m) {
  const facts = m.facts || {};
  const keys = facts.case ? [`action.${m.kind}.${facts.case}`, `action.${m.kind}`] : [`action.${m.kind}`];
  return worded(Object.keys(facts).length ? tFirst(keys, facts) : null, m.text);
}

/** A choice says what it does: the kind's own label, else the choice's general one, else its code. */
function choiceLabel(kind, choice) {
  return tFirst([`choice.${kind}.${choice}`, `choice.${choice}`], {}) || choice;
}

async function answerManual(m, choice, button) {
  button.disabled = true;  // one tap, one answer (a glove may tap twice)
  if (!await command(linePath(`/manual-actions/${m.id}/resolve`), { resolution: choice })) button.disabled = false;
}

function drawManual(actions) {
  const list = $("#manual");
  list.replaceChildren();
  let recovery = 0;
  for (const m of actions) {
    if (m.kind.startsWith("RECOVERY")) recovery++;
    const choices = el("div", { class: "choices", role: "group", "aria-label": t("manual.choose") });
    for (const choice of m.choices) {
      const button = el("button", { type: "button", class: "big choice", dataset: { resolution: choice } },
                        el("span", { class: "choice-label" }, choiceLabel(m.kind, choice)),
                        el("span", { class: "choice-code" }, choice));
      button.addEventListener("click", () => answerManual(m, choice, button));
      choices.append(button);
    }
    const where = [m.equipmentId, m.jobId && t("alarms.job", { jobId: m.jobId })].filter(Boolean).join(" ");
    list.append(el("li", { class: "manual-action", dataset: { manualActionId: m.id, kind: m.kind } },
      spoken("p", { class: "manual-text" }, manualText(m)),
      el("p", { class: "manual-meta" }, where ? `${where} · ` : "", el("span", { class: "code" }, t("manual.code", { code: m.kind })),
         " · ", dateTime(m.createdAt)),
      choices));
  }
  if (!actions.length) list.append(el("li", { class: "empty" }, t("manual.empty")));
  $("#confirm-recovery").hidden = recovery === 0;
  $("#manual-section").classList.toggle("has-open", actions.length > 0);  // amber only when someone must act
}

// -- loading and live updates ------------------------------------------------------

async function refresh() {
  refreshTimer = null;
  if (!lineShown()) return;  // the plant overview: no line's page to draw
  const generation = lineGeneration;
  try {
    const [orders, jobs, equipment, buffer, alarms, shelved, manual, tasks] = await Promise.all([
      api("GET", linePath("/work-orders?limit=500")),
      api("GET", linePath(`/jobs?limit=500&status=${LIVE_JOB_STATUSES}`)),
      api("GET", linePath("/equipment")),
      api("GET", linePath("/buffer")),
      api("GET", linePath("/alarms?limit=500&status=RAISED,ACKNOWLEDGED")),
      api("GET", linePath("/alarms?limit=500&status=SHELVED")),
      api("GET", linePath("/manual-actions?limit=500&status=OPEN")),
      api("GET", linePath("/tasks?limit=50&status=RUNNING")),
    ]);
    if (generation !== lineGeneration) return;  // another line is on screen now
    drawOrders(orders.items);
    drawPieces(jobs.items, equipment, buffer);
    drawRobot(tasks.items);
    drawAlarms(alarms.items);
    drawShelved(shelved.items);
    drawManual(manual.items);
    announceLine(alarms.items, manual.items);  // plant.js: the banner (a plant's: every line's)
    document.body.dataset.loaded = "true";
  } catch (e) {
    if (generation === lineGeneration) say(failure(e));
  }
  refreshShownJob();
}

function scheduleRefresh() {
  if (!refreshTimer) refreshTimer = setTimeout(refresh, 100);
}

/** An event as a sentence from the catalog (event.<type>, filled from its
 *  payload); a type the catalog does not know, or a payload without what its
 *  sentence needs, says just its type. */
function eventSentence(frame) {
  const payload = { type: frame.type, ...(frame.payload || {}) };
  return tFirst([`event.${frame.type}`], payload) || t("event.other", payload);
}

function feed(frame) {
  const list = $("#feed");
  list.querySelector(".empty")?.remove();
  // The raw JSON is one tap away for an engineer (a <details>: nothing needs hover).
  list.prepend(el("li", { value: frame.seq, dataset: { type: frame.type } },
    el("time", { datetime: frame.at }, clock(frame.at, true)), " ",
    el("span", { class: "sentence" }, eventSentence(frame)), " ",
    el("details", {}, el("summary", { title: t("feed.jsonLabel") }, t("feed.json")),
       el("pre", { lang: "en" }, `${frame.type} ${JSON.stringify(frame.payload)}`))));
  while (list.children.length > FEED_MAX) list.lastChild.remove();
}

/** The feed again, from the frames the line's stream kept (another line's page opened). */
function fillFeed(frames) {
  const list = $("#feed");
  list.replaceChildren();
  for (const frame of frames) feed(frame);
  if (!list.children.length) list.append(el("li", { class: "empty" }, t("feed.empty")));
}

/** An event of the line on screen. */
function onFrame(frame) {
  feed(frame);
  scheduleRefresh();
  if (STATS_EVENTS.has(frame.type)) scheduleStatsRefresh();
}

/** The stream indicator, saying what is true: "out" (signed out: no stream),
 *  "connecting" (opening, not yet open), "on" (live), "off" (offline: it closed and
 *  is reconnecting), or "none" for a role the line's event stream is not for
 *  (platform, runtime). */
const CONN_TITLES = { none: "conn.titleNone", out: "conn.titleOut" };
function showConn(state) {
  const conn = $("#conn");
  conn.className = `conn ${state}`;
  conn.dataset.state = state;
  conn.textContent = t(`conn.${state}`);
  conn.title = t(CONN_TITLES[state] || "conn.title");
}

/** The stream of the line on screen opened or closed: the indicator says so;
 *  opened, whatever happened while it was down is fetched. */
function lineStreamState(stream) {
  showConn(stream.state);
  if (!stream.live) return;
  scheduleRefresh();
  scheduleStatsRefresh();
}

/** Whether a line's page is on screen (not the plant overview). */
function lineShown() { return !plant.on || plant.viewed !== null; }

/** Shows the sections the role may use, hides the others. */
function showSectionsFor(canLine, canAi, canAudit = false) {
  may = { line: canLine, ai: canAi, audit: canAudit, pieces: canLine };  // pieces: any line's, from any view
  showView();
  if (!canLine) closeJob();
}

/** The sections of what is on screen: a line's page, or (a plant of several
 *  lines) its overview; the AI queue and the audit wherever the role may. */
function showView() {
  const overview = may.line && !lineShown();
  for (const section of document.querySelectorAll("section[data-needs]")) {
    const needs = section.dataset.needs;
    if (needs === "plant") section.hidden = !overview;
    else section.hidden = !may[needs] || (needs === "line" && overview);
  }
  $("#plant-back").hidden = !(may.line && plant.on && plant.viewed !== null);
}

/** The line's layout and products, drawn; false if they could not be had (said)
 *  or another line is on screen meanwhile. */
async function loadLine() {
  const generation = lineGeneration;
  let products;
  try {
    layout = await api("GET", linePath("/line"));
    products = await api("GET", linePath("/products"));
  } catch (e) {
    if (generation === lineGeneration) say(failure(e));
    return false;
  }
  if (generation !== lineGeneration) return false;
  $("#product").replaceChildren(...products.items.map((p) => el("option", { value: p.id }, p.name)));
  drawLayout();
  fillHistoryMachines(layout.equipment);
  return true;
}

/** Everything on the line's page, kept fresh by its stream's events (and the figures on a timer). */
async function drawLine() {
  clearInterval(statsPeriodTimer);
  statsPeriodTimer = setInterval(scheduleStatsRefresh, STATS_PERIOD_MS);
  await Promise.all([refresh(), refreshStats(), searchHistory()]);
}

/** The line's page is left (another line, the overview): nothing of it keeps running or stays open. */
function leaveLine() {
  lineGeneration++;
  clearInterval(statsPeriodTimer);
  clearTimeout(refreshTimer);
  refreshTimer = null;
  closeJob();
  closeShelveForm();
  resetOrderWindow();
  delete document.body.dataset.loaded;
  delete document.body.dataset.statsLoaded;
}

/** A one-line plant (or a user limited to one line, `lineId`): the line's page, as it always was. */
async function startLine(lineId = null) {
  lineRoot = lineId ? pathOfLine(lineId, "") : "/api";
  if (!await loadLine()) return;
  lineStream = new LineStream(lineId, { onFrame, onState: lineStreamState }).start();
  showConn(lineStream.state);
  await drawLine();
}

/** The plant's lines the user may see: more than one opens the plant overview. */
async function startLines() {
  let lines = null;
  try {
    lines = (await api("GET", "/api/lines")).items;
  } catch (e) {
    if (e instanceof SessionGone) return;
    // An older gateway (no /api/lines): one line, as before.
  }
  if (lines && lines.length > 1) { await startPlant(lines); return; }
  // A user limited to one line reads it under its own paths (the unprefixed ones are the default line's).
  await startLine(lines && lines.length === 1 && sessionLimited ? lines[0].id : null);
}

// -- signing in -------------------------------------------------------------------------

function closeStream() {
  if (lineStream) { lineStream.stop(); lineStream = null; }
  stopPlant();
}

/** The sign-in form in place of the line; `ended` says plainly that a session ended. */
function showSignIn(ended) {
  closeStream();
  showConn("out");
  csrfToken = "";
  showSectionsFor(false, false);
  stopAiRefresh();
  clearInterval(statsPeriodTimer);
  $("#who").textContent = "";
  $("#sign-out").hidden = true;
  $("#signin-ended").hidden = !ended;
  $("#signin-lang").value = lang;
  $("#signin-section").hidden = false;
  $("#signin-user").focus();
}

/** A request or the stream found the session gone (sign-out elsewhere, limits, a disabled user). */
function sessionEnded() {
  if (!$("#signin-section").hidden) return;
  say("");
  showSignIn(true);
}

/** The signed-in session of this browser's cookie, or null. */
async function currentSession() {
  try {
    const resp = await fetch("/api/session", { credentials: "same-origin" });
    return resp.ok ? await resp.json() : null;
  } catch (e) {
    return null;
  }
}

async function start() {
  say("");
  sessionLimited = false;
  let user = null;  // the signed-in person (a token's holder has none)
  if (!token) {
    const session = await currentSession();
    if (!session) { showSignIn(false); return; }
    csrfToken = session.csrfToken;
    user = session.user || null;
    // allLines (gateway 56+); before it, a limited user was one with lines listed.
    sessionLimited = !!user && (user.allLines === undefined ? (user.lines || []).length > 0 : !user.allLines);
    $("#signin-section").hidden = true;
    $("#sign-out").hidden = false;
  }
  try {
    const me = await api("GET", "/api/me");
    role = me.role;
    // A person by their display name (their user name in the tooltip), a token by its holder.
    const name = (user && user.displayName) || me.name;
    $("#who").textContent = t("who", { name, role: tCode("role", me.role) });
    $("#who").title = user ? user.name : "";
    $("#who").dataset.role = me.role;
  } catch (e) {
    showSectionsFor(false, false);
    say(failure(e));
    return;
  }
  document.body.dataset.role = role;
  const canLine = LINE_ROLES.includes(role);
  const canAi = AI_ROLES.includes(role);
  showSectionsFor(canLine, canAi, role === "admin");
  if (!canLine && !canAi) say(t("role.nothing", { role: tCode("role", role) }), "info");
  if (!canLine) showConn("none");
  if (canAi) startAiRefresh(); else stopAiRefresh();
  if (canLine) await startLines();
  else clearInterval(statsPeriodTimer);  // a token of another role came before this one
}

$("#token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = $("#token").value.trim();  // empty: back to signing in
  localStorage.setItem("linectl.token", token);
  closeStream();
  start();
});

$("#signin-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const body = { username: $("#signin-user").value.trim(), password: $("#signin-password").value };
  let resp;
  try {
    resp = await fetch("/api/session", { method: "POST", credentials: "same-origin",
                                         headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  } catch (e) {
    say(refusalText("network", e.message));
    return;
  }
  $("#signin-password").value = "";
  if (!resp.ok) {
    const err = ((await resp.json().catch(() => null)) || {}).error || { code: String(resp.status) };
    say(refusalText(err.code, err.message));
    return;
  }
  const chosen = $("#signin-lang").value;
  if (chosen !== lang) { switchLanguage(chosen); return; }  // reloads; the cookie keeps the session
  start();
});

$("#sign-out").addEventListener("click", async () => {
  try {
    await api("DELETE", "/api/session");
  } catch (e) {
    // already ended: the form shows either way
  }
  showSignIn(false);
  say(t("signin.signedOut"), "info");
});

$("#create-order").addEventListener("submit", (ev) => {
  ev.preventDefault();
  command(linePath("/work-orders"), { productId: $("#product").value, quantity: Number($("#quantity").value),
                                priority: Number($("#priority").value) });
});

$("#confirm-recovery").addEventListener("click", () => command(linePath("/recovery/confirm"), {}));

for (const button of document.querySelectorAll("#lang-switch button")) {
  button.setAttribute("aria-pressed", String(button.dataset.lang === lang));
  button.addEventListener("click", () => { if (button.dataset.lang !== lang) switchLanguage(button.dataset.lang); });
}

// The catalog first: nothing is drawn in a language the page has not loaded.
loadCatalog().then(() => {
  $("#feed").append(el("li", { class: "empty" }, t("feed.empty")));
  showSound();
  document.body.dataset.lang = lang;
  return start();
}).catch((e) => say(failure(e)));
