// The audit view (admin): who did what, newest first (GET /api/audit): commands
// and manual-action answers, sign-ins and -outs, failed sign-ins, user changes.
// Loaded when the view is opened, and again on "Refresh"; "Older" pages on.
"use strict";

const AUDIT_PAGE = 50;
let auditCursor = null;

function auditRow(a) {
  const target = tCode("auditTarget", a.targetType) + (a.targetId ? ` ${a.targetId}` : "");
  return el("tr", { dataset: { action: a.action, actor: a.actor } },
            el("td", {}, dateTime(a.at)), el("td", {}, a.actor), el("td", {}, tCode("role", a.role)),
            el("td", {}, tCode("auditAction", a.action)), el("td", {}, target),
            el("td", {}, tCode("auditOutcome", a.outcome)), el("td", {}, a.source || t("fmt.none")));
}

async function loadAudit(more = false) {
  const cursor = more && auditCursor ? `&cursor=${encodeURIComponent(auditCursor)}` : "";
  let page;
  try {
    page = await api("GET", `/api/audit?limit=${AUDIT_PAGE}${cursor}`);
  } catch (e) {
    say(failure(e));
    return;
  }
  const rows = page.items.map(auditRow);
  if (more) $("#audit tbody").append(...rows); else $("#audit tbody").replaceChildren(...rows);
  auditCursor = page.nextCursor;
  $("#audit-more").hidden = !auditCursor;
  document.body.dataset.auditLoaded = "true";
}

$("#audit-details").addEventListener("toggle", () => { if ($("#audit-details").open) loadAudit(); });
$("#audit-refresh").addEventListener("click", () => loadAudit());
$("#audit-more").addEventListener("click", () => loadAudit(true));
