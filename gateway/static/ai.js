// The AI job queue panel (platform and admin tokens): depth by status, jobs
// finished per hour, throughput and the latest failures with their error codes
// (GET /api/ai/stats); an admin may rerun a failed job. The AI queue sends no
// line events, so the panel refreshes on a timer.
"use strict";

const AI_STATUSES = ["pending", "locked", "running", "succeeded", "failed", "cancelled", "expired"];
// Calm greys for a queue at work; colour for what someone should look at.
const AI_STATUS_COLOURS = { pending: "#9aa3ad", locked: "#7d8794", running: "#5a6470", succeeded: "#3f4a56",
                            failed: "#c62828", cancelled: "#c4c8cd", expired: "#d98e00" };
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
    say(failure(e));
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
    data: { labels: AI_STATUSES.map((s) => tCode("aiStatus", s)),
            datasets: [{ label: t("series.jobs"), data: AI_STATUSES.map((s) => byStatus[s] || 0),
                         backgroundColor: AI_STATUSES.map((s) => AI_STATUS_COLOURS[s]) }] },
    options: { scales: { x: { title: axisTitle("chart.axisStatus") },
                         y: { beginAtZero: true, ticks: { precision: 0 }, title: axisTitle("chart.axisJobs") } },
               plugins: { legend: { display: false } } },
  });
}

function drawAiHourly(hourly) {
  showHourlyBars("ai-hourly-chart", hourly, ["succeeded", "failed"], "chart.axisJobs");
}

function rerunCell(job) {
  // The server says which failed job has been rerun (a failed job is rerun once).
  const rerun = job.rerunJobId || rerunAs.get(job.id);
  if (rerun) {
    return el("td", { class: "rerun-as", title: rerun }, t("ai.rerunAs", { id: rerun.slice(0, 8) }));
  }
  if (role !== "admin") return el("td");
  return el("td", {}, el("button", { type: "button", class: "rerun", onclick: () => rerunAiJob(job.id) }, t("ai.rerun")));
}

function drawAiFailures(failures) {
  const body = $("#ai-failures tbody");
  body.replaceChildren(...failures.map((f) => el("tr", { dataset: { jobId: f.id } },
    el("td", {}, dateTime(f.finishedAt)), el("td", { class: "id", title: f.id }, f.id.slice(0, 8)),
    el("td", {}, tCode("aiType", f.jobType)), el("td", { class: "code" }, f.errorCode || ""),
    // The runtime's own message (its model's words, not the page's): marked as English for a screen reader.
    el("td", { lang: "en" }, f.errorMessage || ""),
    el("td", {}, integer(f.attemptNo)), el("td", {}, integer(f.retryCount)), rerunCell(f))));
  if (!failures.length) body.append(el("tr", {}, el("td", { colspan: 8 }, t("ai.empty"))));
}

async function rerunAiJob(jobId) {
  try {
    say("");
    const job = await api("POST", `/api/admin/ai/jobs/${encodeURIComponent(jobId)}/rerun`, {});
    rerunAs.set(jobId, job.id);
    say(t("ai.rerunDone", { id: jobId.slice(0, 8), newId: job.id.slice(0, 8), status: tCode("aiStatus", job.status) }), "info");
    await refreshAi();
  } catch (e) {
    say(failure(e));
  }
}
