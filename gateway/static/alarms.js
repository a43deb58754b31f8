// Alarms: the banner that announces the newest alarm nobody has acknowledged
// (with an optional tone the operator switches on) until it is acknowledged or
// shelved; the active list (RAISED, ACKNOWLEDGED) coloured by severity, with
// acknowledge and shelve; the shelved list (hidden from the active one for a
// while, ISA-18.2) with unshelve; the history with filters; and the per-code
// counts over the production window ("what keeps coming back"). An alarm's
// sentence comes from the catalog, filled from its facts. In a plant of several
// lines the banner is the plant's: every line's alarms, the line named (plant.js).
"use strict";

const HISTORY_PAGE = 50;
const SOUND_KEY = "linectl.sound";
const TONE_EVERY_MS = 4000;

let announced = null;       // the alarm the banner shows
let toneTimer = null;
let audio = null;

let shelving = null;        // the alarm the shelve form is open for
let historyQuery = "";      // the history's filters, as a query string
let historyCursor = null;   // where its next page starts

/** An alarm's sentence in the reader's language: alarm.<code> (a variant per
 *  facts.signal or facts.case), filled from its facts; else the API's English
 *  message (a code the catalog does not know, an alarm from before facts). */
function alarmText(a) {
  const facts = a.facts || {};
  const variant = facts.signal || facts.case;
  const keys = variant ? [`alarm.${a.code}.${variant}`, `alarm.${a.code}`] : [`alarm.${a.code}`];
  return worded(Object.keys(facts).length ? tFirst(keys, facts) : null, a.message);
}

/** What to do next about an alarm: answer its manual action if it has one, else its code's advice. */
function alarmNext(a, manual) {
  if (manual.some((m) => m.alarmId === a.id)) return t("banner.next.answer");
  const family = a.code.startsWith("RECOVERY") ? "RECOVERY" : a.code;
  return tFirst([`next.${family}`], {}) || t("next.default");
}

function alarmCard(a, ...buttons) {
  return el("li", { class: `alarm sev-${a.severity} ${a.status}`,
                    dataset: { alarmId: a.id, severity: a.severity, status: a.status } },
    el("b", {}, `${tCode("severity", a.severity)} `, el("span", { class: "code" }, a.code)), " ",
    spoken("span", { class: "alarm-text" }, alarmText(a)), " ",
    el("span", { class: "where" }, [a.equipmentId, a.jobId && t("alarms.job", { jobId: a.jobId })].filter(Boolean).join(" ")), " ",
    el("span", { class: "status", dataset: { status: a.status } }, tCode("alarmStatus", a.status)), " ",
    el("span", { class: "buttons" }, ...buttons));
}

function drawAlarms(alarms) {
  const list = $("#alarms");
  list.replaceChildren();
  for (const a of alarms) {
    const buttons = [];
    if (a.status === "RAISED") {
      buttons.push(el("button", { type: "button", class: "ack",
                                  onclick: () => command(linePath(`/alarms/${a.id}/acknowledge`), {}) }, t("alarms.ack")), " ");
    }
    buttons.push(el("button", { type: "button", class: "shelve", onclick: () => openShelveForm(a) }, t("alarms.shelve")));
    list.append(alarmCard(a, ...buttons));
  }
  if (!alarms.length) list.append(el("li", { class: "empty" }, t("alarms.empty")));
  // The alarm being shelved was cleared or shelved meanwhile: nothing left to shelve.
  if (shelving && !alarms.some((a) => a.id === shelving.id)) closeShelveForm();
}

function drawShelved(alarms) {
  const list = $("#shelved");
  list.replaceChildren();
  for (const a of alarms) {
    const card = alarmCard(a, el("button", { type: "button", class: "unshelve",
                                             onclick: () => command(linePath(`/alarms/${a.id}/unshelve`), {}) }, t("alarms.unshelve")));
    card.append(el("div", { class: "shelved-note" },
      t("alarms.shelvedNote", { until: dateTime(a.shelvedUntil), reason: a.shelveReason || "" })
      + (a.shelvedBy ? ` ${t("alarms.shelvedBy", { by: a.shelvedBy })}` : "")));
    list.append(card);
  }
  if (!alarms.length) list.append(el("li", { class: "empty" }, t("alarms.shelvedEmpty")));
}

// -- the banner and its tone -------------------------------------------------------------

/** The banner shows the newest RAISED alarm (active: not acknowledged, not
 *  shelved), naming its machine and what to do next; the tone sounds while
 *  there is one, if switched on. `manual`: the open manual actions. In a plant
 *  of several lines, `alarms` and `manual` are every line's (each with its
 *  lineId: ids are unique across the plant) and the banner names the line. */
function announceAlarms(alarms, manual) {
  const waiting = alarms.filter((a) => a.status === "RAISED").sort((x, y) => y.id - x.id);
  const banner = $("#alarm-banner");
  announced = waiting[0] || null;
  if (!announced) {
    banner.hidden = true;
    delete banner.dataset.alarmId;
    delete banner.dataset.lineId;
    stopTone();
    return;
  }
  const a = announced;
  if (banner.dataset.alarmId !== String(a.id)) {
    // A new alarm: the live region says it again (role="alert" speaks what changes).
    banner.dataset.alarmId = a.id;
    banner.className = `alarm-banner sev-${a.severity}`;
    $("#banner-line").textContent = plant.on ? t("banner.line", { line: lineName(a.lineId) }) : "";
    $("#banner-line").hidden = !plant.on;
    if (plant.on) banner.dataset.lineId = a.lineId; else delete banner.dataset.lineId;
    const what = alarmText(a);
    // The machine first, unless the sentence starts with it already.
    const named = a.equipmentId && !what.text.startsWith(a.equipmentId);
    $("#banner-where").textContent = named ? t("banner.where", { equipmentId: a.equipmentId }) : "";
    $("#banner-what").textContent = what.text;
    $("#banner-what").lang = what.lang || lang;
    $("#banner-next").textContent = alarmNext(a, manual);
  }
  const action = manual.find((m) => m.alarmId === a.id);
  $("#banner-answer").hidden = !action;
  $("#banner-answer").dataset.manualActionId = action ? action.id : "";
  $("#banner-answer").dataset.lineId = action && plant.on ? action.lineId : "";
  $("#banner-more").textContent = waiting.length > 1 ? tCount("banner.more", waiting.length - 1) : "";
  banner.hidden = false;
  startTone();
}

function soundOn() { return localStorage.getItem(SOUND_KEY) === "on"; }

function showSound() {
  const button = $("#sound");
  button.setAttribute("aria-pressed", String(soundOn()));
  button.textContent = t(soundOn() ? "sound.on" : "sound.off");
}

/** A short two-tone chime (Web Audio: no sound file to ship). */
function chime() {
  audio = audio || new AudioContext();
  for (const [i, hz] of [880, 660].entries()) {
    const osc = audio.createOscillator();
    const gain = audio.createGain();
    osc.frequency.value = hz;
    gain.gain.value = 0.15;
    osc.connect(gain).connect(audio.destination);
    osc.start(audio.currentTime + i * 0.25);
    osc.stop(audio.currentTime + i * 0.25 + 0.2);
  }
}

function startTone() {
  if (!soundOn() || toneTimer || !announced) return;
  chime();
  toneTimer = setInterval(chime, TONE_EVERY_MS);
}

function stopTone() {
  clearInterval(toneTimer);
  toneTimer = null;
}

// A page may start sound only after a tap: the tone switched on earlier (remembered)
// sounds from the first tap anywhere after a reload.
document.addEventListener("pointerdown", () => { if (audio && audio.state === "suspended") audio.resume(); });
$("#sound").addEventListener("click", () => {
  // Switched on by a tap: a browser lets a page make sound only after one.
  localStorage.setItem(SOUND_KEY, soundOn() ? "off" : "on");
  showSound();
  if (soundOn()) startTone(); else stopTone();
});
$("#banner-ack").addEventListener("click", async () => {
  if (!announced) return;
  const alarm = announced;
  // The alarm's own line (in a plant, not necessarily the one on screen).
  if (await command(alertPath(alarm.lineId, `/alarms/${alarm.id}/acknowledge`), {})) alertsChanged(alarm.lineId);
});
$("#banner-answer").addEventListener("click", (ev) => {
  // To the alarm's manual action, its first choice focused: the answer is a tap away.
  const { manualActionId, lineId } = ev.currentTarget.dataset;
  goToManualAction(lineId || null, manualActionId);
});
$("#banner-shelve").addEventListener("click", async () => {
  if (!announced) return;
  const alarm = announced;
  // Shelved from its line's page (the form asks why, for how long).
  if (plant.on && alarm.lineId !== plant.viewed && !await goToLine(alarm.lineId)) return;
  openShelveForm(alarm);
  $("#alarms-section").scrollIntoView();
});

// -- shelving -------------------------------------------------------------------------

function openShelveForm(alarm) {
  shelving = alarm;
  $("#shelve-what").textContent = t("shelve.what", { id: alarm.id, code: alarm.code });
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
  if (!Number.isInteger(minutes) || minutes < 1 || minutes > 1440) { say(t("shelve.badMinutes")); return; }
  if (!reason) { say(t("shelve.noReason")); return; }
  try {
    say("");
    await api("POST", linePath(`/alarms/${shelving.id}/shelve`), { minutes, reason });
    closeShelveForm();
    scheduleRefresh();
  } catch (e) {
    say(failure(e));
  }
}

$("#shelve-form").addEventListener("submit", (ev) => { ev.preventDefault(); shelveAlarm(); });
$("#shelve-cancel").addEventListener("click", closeShelveForm);

// -- counts and history ---------------------------------------------------------------

function drawAlarmCounts(items) {
  const body = $("#alarm-counts tbody");
  body.replaceChildren(...items.map((c) => el("tr", { dataset: { code: c.code } },
    el("td", {}, el("a", { href: "#alarm-history", onclick: (ev) => { ev.preventDefault(); showHistoryOf(c.code); } }, c.code)),
    el("td", { class: "count" }, count(c.count)), el("td", {}, count(c.open)), el("td", {}, dateTime(c.lastRaisedAt)))));
  if (!items.length) body.append(el("tr", {}, el("td", { colspan: 4 }, t("history.countsEmpty"))));
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
  const generation = lineGeneration;
  try {
    const page = await api("GET", linePath(`/alarms?${historyQuery}${cursor}`));
    if (generation !== lineGeneration) return;  // another line's page meanwhile
    const body = $("#alarm-history tbody");
    if (!more) body.replaceChildren();
    for (const a of page.items) {
      body.append(el("tr", { class: `sev-${a.severity}`, dataset: { alarmId: a.id, status: a.status } },
        el("td", {}, integer(a.id)), el("td", {}, dateTime(a.raisedAt)), el("td", {}, tCode("severity", a.severity)),
        el("td", { class: "code" }, a.code), el("td", {}, a.equipmentId || ""), el("td", {}, tCode("alarmStatus", a.status)),
        spoken("td", {}, alarmText(a)), el("td", {}, a.clearedAt ? dateTime(a.clearedAt) : "")));
    }
    if (!more && !page.items.length) body.append(el("tr", {}, el("td", { colspan: 8 }, t("history.empty"))));
    historyCursor = page.nextCursor;
    $("#alarm-history-more").hidden = !historyCursor;
  } catch (e) {
    if (generation === lineGeneration) say(failure(e));
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
  select.replaceChildren(el("option", { value: "" }, t("history.anyMachine")),
                         ...equipment.map((e) => el("option", { value: e.id }, e.id)));
}

$("#alarm-filter").addEventListener("submit", (ev) => { ev.preventDefault(); searchHistory(); });
$("#alarm-history-more").addEventListener("click", () => loadHistory(true));
