// The AI job queue panel (platform and admin tokens): depth by status, jobs
// finished per hour, throughput and the latest failures with their error codes
// (GET /api/ai/stats); an admin may rerun a failed job. The AI queue sends no
// line events, so the panel refreshes on a timer.
"use strict";

const AI_STATUSES = ["pending", "locked", "running", "succeeded", "failed", "cancelled", "expired"];
const AI_STATUS_COLOURS = { pending: "#3b6ea5", locked: "#6a8fc0", running: "#8a63b8", succeeded: "#2e8b57",
                            failed: "#cc3333", cancelled: "#a0a4aa", expired: "#e8a200" };
const AI_PERIOD_MS = 10000;

let aiTimer = null;
const rerunAs = new Map();  // failed job id → the job this page reran it as

async function refreshAi() {
  try {
    const w = hoursWindow(statsHours);  // a work order's run means nothing to the AI queue
    const stats = await api("GET", `/api/ai/stats?${windowQuery(w)}`);
    drawAiStatus(stats.byStatus);
    drawAiHourly(stats.hourly);
    setTile("ai-throughput", fixed1(stats.throughputPerHour));
    drawAiFailures(stats.recentFailures);
    document.body.dataset.aiLoaded = "true";
  } catch (e) {
    say(e.message);
  }
}

function startAiRefresh() {
  clearInterval(aiTimer);
  aiTimer = setInterval(refreshAi, AI_PERIOD_MS);
  return refreshAi();
}

function stopAiRefresh() {
  clearInterval(aiTimer);
  aiTimer = null;
}

function drawAiStatus(byStatus) {
  showChart("ai-status-chart", {
    type: "bar",
    data: { labels: AI_STATUSES, datasets: [{ label: "jobs", data: AI_STATUSES.map((s) => byStatus[s] || 0),
                                              backgroundColor: AI_STATUSES.map((s) => AI_STATUS_COLOURS[s]) }] },
    options: { scales: { y: { beginAtZero: true, ticks: { precision: 0 } } }, plugins: { legend: { display: false } } },
  });
}

function drawAiHourly(hourly) {
  showHourlyBars("ai-hourly-chart", hourly, ["succeeded", "failed"]);
}

function rerunCell(job) {
  // The server says which failed job has been rerun (a failed job is rerun once).
  const rerun = job.rerunJobId || rerunAs.get(job.id);
  if (rerun) {
    return el("td", { class: "rerun-as", title: rerun }, `rerun as ${rerun.slice(0, 8)}`);
  }
  if (role !== "admin") return el("td");
  return el("td", {}, el("button", { type: "button", class: "rerun", onclick: () => rerunAiJob(job.id) }, "Rerun"));
}

function drawAiFailures(failures) {
  const body = $("#ai-failures tbody");
  body.replaceChildren(...failures.map((f) => el("tr", { dataset: { jobId: f.id } },
    el("td", {}, dateTime(f.finishedAt)), el("td", { class: "id", title: f.id }, f.id.slice(0, 8)),
    el("td", {}, f.jobType), el("td", { class: "code" }, f.errorCode || ""), el("td", {}, f.errorMessage || ""),
    el("td", {}, f.attemptNo), el("td", {}, f.retryCount), rerunCell(f))));
  if (!failures.length) body.append(el("tr", {}, el("td", { colspan: 8 }, "no failures")));
}

async function rerunAiJob(jobId) {
  try {
    say("");
    const job = await api("POST", `/api/admin/ai/jobs/${encodeURIComponent(jobId)}/rerun`, {});
    rerunAs.set(jobId, job.id);
    say(`AI job ${jobId.slice(0, 8)} rerun as ${job.id.slice(0, 8)} (${job.status})`, "info");
    await refreshAi();
  } catch (e) {
    say(e.message);
  }
}
