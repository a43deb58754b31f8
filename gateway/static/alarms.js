// Alarms: the active list (RAISED, ACKNOWLEDGED) coloured by severity, with
// acknowledge and shelve; the shelved list (hidden from the active one for a
// while, ISA-18.2) with unshelve; the history with filters; and the per-code
// counts over the production window ("what keeps coming back").
"use strict";

const HISTORY_PAGE = 50;

let shelving = null;        // the alarm the shelve form is open for
let historyQuery = "";      // the history's filters, as a query string
let historyCursor = null;   // where its next page starts

function alarmCard(a, ...buttons) {
  return el("li", { class: `alarm sev-${a.severity} ${a.status}`, dataset: { alarmId: a.id, severity: a.severity } },
    el("b", {}, `${a.severity} ${a.code}`), ` ${a.message} `,
    el("span", { class: "where" }, [a.equipmentId, a.jobId && `job ${a.jobId}`].filter(Boolean).join(" ")), " ",
    el("span", { class: "status" }, a.status), " ", ...buttons);
}

function drawAlarms(alarms) {
  const list = $("#alarms");
  list.replaceChildren();
  for (const a of alarms) {
    const buttons = [];
    if (a.status === "RAISED") {
      buttons.push(el("button", { type: "button", class: "ack",
                                  onclick: () => command(`/api/alarms/${a.id}/acknowledge`, {}) }, "Acknowledge"), " ");
    }
    buttons.push(el("button", { type: "button", class: "shelve", onclick: () => openShelveForm(a) }, "Shelve"));
    list.append(alarmCard(a, ...buttons));
  }
  if (!alarms.length) list.append(el("li", {}, "no active alarms"));
  // The alarm being shelved was cleared or shelved meanwhile: nothing left to shelve.
  if (shelving && !alarms.some((a) => a.id === shelving.id)) closeShelveForm();
}

function drawShelved(alarms) {
  const list = $("#shelved");
  list.replaceChildren();
  for (const a of alarms) {
    const card = alarmCard(a, el("button", { type: "button", class: "unshelve",
                                             onclick: () => command(`/api/alarms/${a.id}/unshelve`, {}) }, "Unshelve"));
    card.append(el("div", { class: "shelved-note" },
      `until ${dateTime(a.shelvedUntil)} — ${a.shelveReason || ""}${a.shelvedBy ? ` (${a.shelvedBy})` : ""}`));
    list.append(card);
  }
  if (!alarms.length) list.append(el("li", {}, "none"));
}

// -- shelving -------------------------------------------------------------------------

function openShelveForm(alarm) {
  shelving = alarm;
  $("#shelve-what").textContent = `Shelve #${alarm.id} ${alarm.code}`;
  $("#shelve-form").hidden = false;
  $("#shelve-reason").focus();
}

function closeShelveForm() {
  shelving = null;
  $("#shelve-form").hidden = true;
  $("#shelve-reason").value = "";
}

async function shelveAlarm() {
  const minutes = Number($("#shelve-minutes").value);
  const reason = $("#shelve-reason").value.trim();
  if (!Number.isInteger(minutes) || minutes < 1 || minutes > 1440) { say("shelve: minutes must be 1 to 1440"); return; }
  if (!reason) { say("shelve: a reason is required"); return; }
  try {
    say("");
    await api("POST", `/api/alarms/${shelving.id}/shelve`, { minutes, reason });
    closeShelveForm();
    scheduleRefresh();
  } catch (e) {
    say(e.message);
  }
}

$("#shelve-form").addEventListener("submit", (ev) => { ev.preventDefault(); shelveAlarm(); });
$("#shelve-cancel").addEventListener("click", closeShelveForm);

// -- counts and history ---------------------------------------------------------------

function drawAlarmCounts(items) {
  const body = $("#alarm-counts tbody");
  body.replaceChildren(...items.map((c) => el("tr", { dataset: { code: c.code } },
    el("td", {}, el("a", { href: "#alarm-history", onclick: (ev) => { ev.preventDefault(); showHistoryOf(c.code); } }, c.code)),
    el("td", { class: "count" }, c.count), el("td", {}, c.open), el("td", {}, dateTime(c.lastRaisedAt)))));
  if (!items.length) body.append(el("tr", {}, el("td", { colspan: 4 }, "no alarms in this window")));
}

/** The history form's filters as a query string (datetime-local is local time: sent as UTC). */
function historyFilters() {
  const form = $("#alarm-filter");
  const params = new URLSearchParams({ limit: HISTORY_PAGE });
  for (const name of ["code", "equipmentId", "severity", "status"]) {
    const value = form.elements[name].value.trim();
    if (value) params.set(name, value);
  }
  for (const name of ["from", "to"]) {
    const value = form.elements[name].value;
    if (value) params.set(name, new Date(value).toISOString());
  }
  return params.toString();
}

async function loadHistory(more = false) {
  const cursor = more && historyCursor ? `&cursor=${historyCursor}` : "";
  try {
    const page = await api("GET", `/api/alarms?${historyQuery}${cursor}`);
    const body = $("#alarm-history tbody");
    if (!more) body.replaceChildren();
    for (const a of page.items) {
      body.append(el("tr", { class: `sev-${a.severity}`, dataset: { alarmId: a.id } },
        el("td", {}, a.id), el("td", {}, dateTime(a.raisedAt)), el("td", {}, a.severity), el("td", {}, a.code),
        el("td", {}, a.equipmentId || ""), el("td", {}, a.status), el("td", {}, a.message),
        el("td", {}, a.clearedAt ? dateTime(a.clearedAt) : "")));
    }
    if (!more && !page.items.length) body.append(el("tr", {}, el("td", { colspan: 8 }, "no alarm matches")));
    historyCursor = page.nextCursor;
    $("#alarm-history-more").hidden = !historyCursor;
  } catch (e) {
    say(e.message);
  }
}

function searchHistory() {
  historyQuery = historyFilters();
  historyCursor = null;
  return loadHistory();
}

function showHistoryOf(code) {
  const form = $("#alarm-filter");
  form.reset();
  form.elements.code.value = code;
  searchHistory();
  $("#alarm-history-section").scrollIntoView();
}

/** The history form's machine choice, from the line's layout. */
function fillHistoryMachines(equipment) {
  const select = $("#alarm-filter").elements.equipmentId;
  select.replaceChildren(el("option", { value: "" }, "any machine"),
                         ...equipment.map((e) => el("option", { value: e.id }, e.id)));
}

$("#alarm-filter").addEventListener("submit", (ev) => { ev.preventDefault(); searchHistory(); });
$("#alarm-history-more").addEventListener("click", () => loadHistory(true));
