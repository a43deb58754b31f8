// A job's detail: clicking a piece on the line shows its route (GET
// /api/jobs/{id}/route), each step DONE / CURRENT / TODO with when it started
// and finished, on which machine, and the tasks that served it.
"use strict";

let shownJobId = null;

function stepTimes(step) {
  if (!step.startedAt) return "";
  const start = Date.parse(step.startedAt);
  if (!step.finishedAt) return t("job.started", { at: clock(start) });
  const end = Date.parse(step.finishedAt);
  return t("job.times", { from: clock(start), to: clock(end), length: duration(end - start) });
}

function taskLine(task) {
  const when = task.startedAt ? ` ${clock(task.startedAt)}${task.finishedAt ? `–${clock(task.finishedAt)}` : ""}` : "";
  return el("li", { class: `task ${task.status}`, dataset: { taskId: task.id, status: task.status } },
    `${tCode("task", task.kind)}${task.equipmentId ? ` ${task.equipmentId}` : ""} ${tCode("taskStatus", task.status)}${when}`);
}

function stepName(step) {
  const op = tCode("op", step.op);
  return step.equipmentKind ? t("op.withKind", { op, kind: tCode("kind", step.equipmentKind) }) : op;
}

function drawJobRoute(route) {
  $("#job-title").textContent = t("job.title", { id: route.jobId });
  $("#job-title").title = t("job.summary", { ...route, status: tCode("jobStatus", route.status) });
  $("#job-steps").replaceChildren(...route.steps.map((step) => el("li",
    { class: `step ${step.state}`, dataset: { index: step.index, state: step.state } },
    el("b", {}, stepName(step)), " ",
    el("span", { class: "state" }, tCode("step", step.state)), " ",
    el("span", { class: "step-machines" }, step.equipmentIds.join(", ")), " ",
    el("span", { class: "times" }, stepTimes(step)),
    step.tasks.length ? el("ul", { class: "tasks" }, ...step.tasks.map(taskLine)) : "")));
  $("#job-section").hidden = false;
}

async function showJob(jobId) {
  shownJobId = jobId;
  try {
    const route = await api("GET", linePath(`/jobs/${jobId}/route`));
    if (shownJobId === jobId) drawJobRoute(route);  // not another piece clicked meanwhile
  } catch (e) {
    say(failure(e));
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
