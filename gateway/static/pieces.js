// Piece traceability: a serial typed (or scanned into the box) is looked for on
// every line of the plant (GET /api/plant/pieces?serial=), and the piece's card
// shows its timeline (GET /api/lines/{lineId}/pieces/{serial}): its steps with
// machine, slot, times and verdict, the robot's moves, its scans and marks, the
// alarms while it was in the cell and who answered what about it.
"use strict";

/** A timeline entry: when, what kind (its badge), and the sentence. */
function pieceEntry(at, kind, text, extra = {}) {
  return { at, kind, text, ...extra };
}

function pieceStepText(s) {
  const what = s.equipmentId
    ? t("pieces.stepOn", { kind: tCode("kind", s.kind), machine: s.equipmentId, slot: s.slotNo })
    : tCode("op", s.kind);
  const result = tCode("pieceResult", s.result || "RUNNING");
  const length = s.endedAt ? duration(Date.parse(s.endedAt) - Date.parse(s.startedAt)) : t("fmt.none");
  return t("pieces.step", { index: s.stepIndex + 1, what, result, length });
}

function pieceTimeline(piece) {
  const entries = [
    ...piece.steps.map((s) => pieceEntry(s.startedAt, "step", pieceStepText(s), { result: s.result })),
    ...piece.moves.map((m) => pieceEntry(m.at, "move", t(m.equipmentId ? "pieces.moveAt" : "pieces.move", {
      move: tCode("task", m.kind), result: tCode("taskStatus", m.result), machine: m.equipmentId,
    }), { result: m.result })),
    ...piece.scans.map((s) => pieceEntry(s.at, "scan", t("pieces.scan", { code: s.code || t("fmt.none") }),
                                          { result: s.result })),
    ...piece.marks.map((m) => pieceEntry(m.at, "mark", t("pieces.mark", { text: m.text || t("fmt.none") }),
                                          { result: m.result })),
    ...piece.alarms.map((a) => pieceEntry(a.at, "alarm", alarmText(a).text)),
    ...piece.answers.map((a) => pieceEntry(a.at, "answer", t("pieces.answer", {
      by: a.by || t("fmt.none"), choice: choiceLabel(a.kind, a.resolution), action: a.manualActionId,
    }))),
  ];
  return entries.sort((a, b) => Date.parse(a.at) - Date.parse(b.at));
}

function drawPiece(piece) {
  $("#piece-title").textContent = t("pieces.card", { serial: piece.serial });
  $("#piece-facts").replaceChildren(
    el("dt", {}, t("pieces.line")), el("dd", {}, piece.lineId),
    el("dt", {}, t("pieces.order")), el("dd", {}, piece.workOrderCode || String(piece.workOrderId)),
    el("dt", {}, t("pieces.product")), el("dd", {}, piece.productId || t("fmt.none")),
    el("dt", {}, t("pieces.status")), el("dd", { class: `status ${piece.status}` }, tCode("jobStatus", piece.status)),
    el("dt", {}, t("pieces.made")), el("dd", {}, t("pieces.madeFromTo", {
      from: dateTime(piece.createdAt), to: dateTime(piece.finishedAt) })));
  $("#piece-timeline").replaceChildren(...pieceTimeline(piece).map((e) => el("li",
    { class: `entry entry-${e.kind} result-${e.result || "none"}`, dataset: { kind: e.kind } },
    el("time", { datetime: e.at }, clock(e.at, true)), " ",
    el("b", { class: "badge" }, t(`pieces.kind.${e.kind}`)), " ",
    el("span", {}, e.text))));
  $("#piece-card").hidden = false;
  document.body.dataset.pieceShown = piece.serial;
}

async function findPiece(serial) {
  $("#piece-card").hidden = true;
  $("#piece-found").replaceChildren();
  let found;
  try {
    found = await api("GET", `/api/plant/pieces?serial=${encodeURIComponent(serial)}`);
  } catch (e) {
    say(failure(e));
    return;
  }
  if (!found.items.length) {
    $("#piece-found").textContent = t("pieces.notFound", { serial });
    return;
  }
  if (found.items.length > 1) {  // a label seen on several lines: the newest first, the others listed
    $("#piece-found").replaceChildren(t("pieces.several", { count: found.items.length }), " ",
      ...found.items.map((p) => el("button", { type: "button", class: "link",
        onclick: () => showPiece(p.lineId, p.serial) }, `${p.lineId}: ${dateTime(p.createdAt)}`)));
  }
  const newest = found.items.reduce((a, b) => (Date.parse(b.createdAt) > Date.parse(a.createdAt) ? b : a));
  await showPiece(newest.lineId, newest.serial);
}

async function showPiece(lineId, serial) {
  try {
    drawPiece(await api("GET", pathOfLine(lineId, `/pieces/${encodeURIComponent(serial)}`)));
  } catch (e) {
    say(failure(e));
  }
}

$("#piece-search").addEventListener("submit", (event) => {
  event.preventDefault();
  const serial = $("#piece-serial").value.trim();
  if (serial) findPiece(serial);
});
$("#piece-close").addEventListener("click", () => { $("#piece-card").hidden = true; });
