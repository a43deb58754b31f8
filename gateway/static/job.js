// A job's detail: clicking a piece on the line shows its route (GET
// /api/jobs/{id}/route), each step DONE / CURRENT / TODO with when it started
// and finished, on which machine, and the tasks that served it.
"use strict";

let shownJobId = null;

function stepTimes(step) {
  if (!step.startedAt) return "";
  const start = Date.parse(step.startedAt);
  if (!step.finishedAt) return `started ${clock(start)}`;
  const end = Date.parse(step.finishedAt);
  return `${clock(start)}–${clock(end)} (${duration(end - start)})`;
}

function taskLine(t) {
  const when = t.startedAt ? ` ${clock(t.startedAt)}${t.finishedAt ? `–${clock(t.finishedAt)}` : ""}` : "";
  return el("li", { class: `task ${t.status}`, dataset: { taskId: t.id } },
    `${t.kind}${t.equipmentId ? ` ${t.equipmentId}` : ""} ${t.status}${when}`);
}

function drawJobRoute(route) {
  $("#job-title").textContent = `${route.jobId} (WO${route.workOrderId}) ${route.status}, step ${route.stepIndex}`;
  $("#job-steps").replaceChildren(...route.steps.map((step) => el("li",
    { class: `step ${step.state}`, dataset: { index: step.index, state: step.state } },
    el("b", {}, `${step.op}${step.equipmentKind ? ` (${step.equipmentKind})` : ""}`), " ",
    el("span", { class: "state" }, step.state), " ",
    el("span", { class: "step-machines" }, step.equipmentIds.join(", ")), " ",
    el("span", { class: "times" }, stepTimes(step)),
    step.tasks.length ? el("ul", { class: "tasks" }, ...step.tasks.map(taskLine)) : "")));
  $("#job-section").hidden = false;
}

async function showJob(jobId) {
  shownJobId = jobId;
  try {
    const route = await api("GET", `/api/jobs/${jobId}/route`);
    if (shownJobId === jobId) drawJobRoute(route);  // not another piece clicked meanwhile
  } catch (e) {
    say(e.message);
  }
}

/** The open job's route again (the line moved on); nothing if none is open. */
function refreshShownJob() {
  if (shownJobId !== null) showJob(shownJobId);
}

function closeJob() {
  shownJobId = null;
  $("#job-section").hidden = true;
}

// One listener for every piece, drawn or redrawn later.
$("#line").addEventListener("click", (ev) => {
  const p = ev.target.closest(".piece");
  if (p) showJob(Number(p.dataset.jobId));
});
$("#job-close").addEventListener("click", closeJob);
