// The page's languages: every string a person reads comes from one catalog per
// language (i18n/en.json, i18n/zh-CN.json: flat keys, "{name}" placeholders),
// and every number, percentage, duration and time is formatted by the browser's
// Intl in the page's language and the browser's time zone. Loaded first.
//
// Which language: ?lang= forces it; else the one chosen with the switch on the
// page (remembered in localStorage); else the browser's Accept-Language, which
// the gateway has already matched into <html lang> (navigator.languages says
// the same in a browser, but a client may send only the header).
"use strict";

const LANGUAGES = ["zh-CN", "en"];
const LANG_KEY = "linectl.lang";

function chosenLanguage() {
  const forced = new URLSearchParams(location.search).get("lang");
  if (LANGUAGES.includes(forced)) return forced;
  const stored = localStorage.getItem(LANG_KEY);
  if (LANGUAGES.includes(stored)) return stored;
  const served = document.documentElement.lang;
  return LANGUAGES.includes(served) ? served : "en";
}

const lang = chosenLanguage();
document.documentElement.lang = lang;
let catalog = {};

/** The chosen language's catalog, fetched once before the page draws anything. */
async function loadCatalog() {
  const resp = await fetch(`/static/i18n/${lang}.json`);
  catalog = await resp.json();
  applyCatalog(document);
}

function hasText(key) { return Object.prototype.hasOwnProperty.call(catalog, key); }

/** The catalog's text for `key`, its placeholders filled from `facts`. A key
 *  missing from the catalog shows as itself (the tests look for that), never blank. */
function t(key, facts = {}) {
  if (!hasText(key)) return key;
  const filled = fill(catalog[key], facts);
  return filled === null ? fill(catalog[key], facts, true) : filled;
}

/** A text that depends on a count: `key.one`, `key.other`, … as the language's plural rules pick. */
function tCount(key, count, facts = {}) {
  const form = `${key}.${PLURAL.select(count)}`;
  return t(hasText(form) ? form : `${key}.other`, { ...facts, count });
}

/** The text of the first key the catalog has, filled from `facts`; null if it
 *  has none of them, or a placeholder's fact is missing (an older row). */
function tFirst(keys, facts) {
  for (const key of keys) {
    if (hasText(key)) return fill(catalog[key], facts);
  }
  return null;
}

/** A code (a status, a task kind) in words: `prefix.code` from the catalog, else the code itself. */
function tCode(prefix, code) {
  if (code === null || code === undefined || code === "") return t("fmt.none");
  return hasText(`${prefix}.${code}`) ? catalog[`${prefix}.${code}`] : String(code);
}

/** "{name}" → the fact, formatted; "{name:prefix}" → the fact as a code in
 *  words (tCode), or with "pieces" a list of {jobId, slotNo}. A fact that is
 *  absent makes the whole text null (`lenient`: a dash instead). */
function fill(template, facts, lenient = false) {
  let missing = false;
  const text = template.replace(/\{(\w+)(?::(\w+))?\}/g, (_, name, prefix) => {
    const value = facts[name];
    if (value === undefined) { missing = true; return t("fmt.none"); }
    if (prefix === "pieces") return pieces(value);
    if (prefix) return Array.isArray(value) ? list(value.map((v) => tCode(prefix, v))) : tCode(prefix, value);
    return factText(value);
  });
  return missing && !lenient ? null : text;
}

function factText(value) {
  if (value === null || value === undefined) return t("fmt.none");
  if (Array.isArray(value)) return list(value.map(factText));
  if (typeof value === "number") return Number.isInteger(value) ? integer(value) : DECIMAL.format(value);
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

/** The pieces a machine fault stopped: [{jobId, slotNo}] in words (a list of
 *  ids or a text, as the API may give, as they are). */
function pieces(value) {
  if (!Array.isArray(value)) return factText(value);
  return list(value.map((p) => (p && typeof p === "object" ? t("action.pieceInSlot", p) : factText(p))));
}

/** Puts the catalog's texts into the static page: data-i18n (text),
 *  data-i18n-placeholder / -title / -aria-label / -label (those attributes). */
function applyCatalog(root) {
  for (const node of root.querySelectorAll("[data-i18n]")) node.textContent = t(node.dataset.i18n);
  for (const attr of ["placeholder", "title", "aria-label", "label"]) {
    const data = `i18n${attr.split("-").map((w) => w[0].toUpperCase() + w.slice(1)).join("")}`;
    for (const node of root.querySelectorAll(`[data-i18n-${attr}]`)) node.setAttribute(attr, t(node.dataset[data]));
  }
  document.title = t("page.title");
}

/** The switch: remember the choice and draw the page again in it (a ?lang= in
 *  the address would force the old one, so it goes). */
function switchLanguage(to) {
  localStorage.setItem(LANG_KEY, to);
  const url = new URL(location.href);
  url.searchParams.delete("lang");
  if (url.href === location.href) location.reload(); else location.replace(url.href);
}

// -- Intl formatting ------------------------------------------------------------------

const NUMBER_1 = new Intl.NumberFormat(lang, { minimumFractionDigits: 1, maximumFractionDigits: 1 });
const INTEGER = new Intl.NumberFormat(lang, { useGrouping: false, maximumFractionDigits: 0 });
const DECIMAL = new Intl.NumberFormat(lang, { maximumFractionDigits: 2 });
const PLURAL = new Intl.PluralRules(lang);
const COUNT = new Intl.NumberFormat(lang, { maximumFractionDigits: 0 });
const PERCENT_1 = new Intl.NumberFormat(lang, { style: "percent", minimumFractionDigits: 1, maximumFractionDigits: 1 });
const PERCENT_0 = new Intl.NumberFormat(lang, { style: "percent", maximumFractionDigits: 0 });
const SECONDS_1 = new Intl.NumberFormat(lang, { style: "unit", unit: "second", unitDisplay: "short",
                                                 minimumFractionDigits: 1, maximumFractionDigits: 1 });
const LIST = new Intl.ListFormat(lang, { style: "long", type: "conjunction" });
const CLOCK = new Intl.DateTimeFormat(lang, { hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
const CLOCK_S = new Intl.DateTimeFormat(lang, { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" });
const DATE_TIME = new Intl.DateTimeFormat(lang, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
                                                  second: "2-digit", hourCycle: "h23" });
const DURATION = typeof Intl.DurationFormat === "function" ? new Intl.DurationFormat(lang, { style: "short" }) : null;

/** An identifier or a small count (job 1234, slot 3): no grouping. */
function integer(x) { return INTEGER.format(x); }

/** A count of pieces or cycles (grouped as the language groups). */
function count(x) { return x === null || x === undefined ? t("fmt.none") : COUNT.format(x); }

function list(items) { return LIST.format(items.map(String)); }

/** A number with one decimal (throughput). */
function fixed1(x) { return x === null || x === undefined ? t("fmt.none") : NUMBER_1.format(x); }

/** Seconds with one decimal, in the language's unit ("12.3 sec", "12.3秒"). */
function seconds(s) { return s === null || s === undefined ? t("fmt.none") : SECONDS_1.format(s); }

/** A whole percentage for a chart's axis (0 … 100). */
function percentTick(value) { return PERCENT_0.format(value / 100); }

/** An instant (ISO text or epoch ms) as the local clock time, HH:MM (HH:MM:SS with `withSeconds`). */
function clock(when, withSeconds = false) { return (withSeconds ? CLOCK_S : CLOCK).format(new Date(when)); }

/** An instant as local date and time, short; null as a dash. */
function dateTime(when) { return when ? DATE_TIME.format(new Date(when)) : t("fmt.none"); }

/** A length of time in ms, the way the language says it: 40 s, 12 min, 2 h 5 min. */
function duration(ms) {
  const s = Math.round(ms / 1000);
  const parts = s < 60 ? { seconds: s } : (() => {
    const min = Math.round(s / 60);
    return min < 60 ? { minutes: min } : { hours: Math.floor(min / 60), minutes: min % 60 };
  })();
  if (DURATION) return DURATION.format(parts);
  return list(Object.entries(parts).filter(([, v]) => v).map(([unit, v]) => new Intl.NumberFormat(
    lang, { style: "unit", unit: unit.slice(0, -1), unitDisplay: "short" }).format(v)));
}
