"""The queue at a glance (``GET /api/ai/stats``, the page's AI panel)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import text

from services.ai_jobs.domain import JOB_STATUSES
from shared import wire
from shared.serialize import hourly, iso

RECENT_FAILURES = 20

_FINISHED_BY_HOUR = text(
    "SELECT date_trunc('hour', finished_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour, "
    "count(*) FILTER (WHERE status = 'succeeded') AS succeeded, "
    "count(*) FILTER (WHERE status = 'failed') AS failed "
    "FROM ai_runtime_job WHERE finished_at IS NOT NULL AND finished_at >= :s AND finished_at < :e "
    "GROUP BY 1 ORDER BY 1")
_RECENT_FAILURES = text(
    "SELECT j.id, j.job_type, j.error_code, j.error_message, j.finished_at, j.attempt_no, "
    "j.retry_count, (SELECT r.id FROM ai_runtime_job r WHERE r.retried_from_job_id = j.id "
    "  ORDER BY r.created_at, r.id LIMIT 1) AS rerun_job_id "
    "FROM ai_runtime_job j WHERE j.status = 'failed' AND j.finished_at IS NOT NULL "
    "ORDER BY j.finished_at DESC, j.id LIMIT :n")


# What /metrics reports beside the depth by status (gateway.metrics): how long the
# oldest pending job has waited (the poll index holds only pending rows) and how
# the jobs that finished lately ended (the finished_at index). Gauges over a fixed
# window rather than counters: retention deletes old jobs, and a count of rows
# that shrinks would read as a counter reset.
FINISHED_WINDOW_MINUTES = 15
_OLDEST_PENDING = text(
    "SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0) FROM ai_runtime_job"
    " WHERE status = 'pending'")
_FINISHED_LATELY = text(
    "SELECT status, count(*) FROM ai_runtime_job"
    f" WHERE finished_at > now() - interval '{FINISHED_WINDOW_MINUTES} minutes' GROUP BY status")
FINISHED_STATUSES = ("succeeded", "failed", "cancelled")  # "expired" is transitional


def queue_figures(session) -> dict:
    """The queue's figures for /metrics: depth by status, the oldest pending job's
    age in seconds, and jobs finished in the last FINISHED_WINDOW_MINUTES by status."""
    finished = {status: 0 for status in FINISHED_STATUSES}
    finished.update({status: n for status, n in session.execute(_FINISHED_LATELY)})
    return {"byStatus": counts_by_status(session),
            "oldestPendingSeconds": float(session.execute(_OLDEST_PENDING).scalar_one()),
            "finishedLately": finished}


def counts_by_status(session) -> dict[str, int]:
    rows = session.execute(text("SELECT status, count(*) FROM ai_runtime_job GROUP BY status"))
    return {status: n for status, n in rows}


def queue_stats(session, start: datetime, end: datetime, now: datetime) -> dict:
    """The queue at a glance: depth by status, jobs finished per hour in the
    window, and the latest failures with their error codes."""
    counts = counts_by_status(session)
    hours = session.execute(_FINISHED_BY_HOUR, {"s": start, "e": min(end, now)}).all()
    failures = session.execute(_RECENT_FAILURES, {"n": RECENT_FAILURES}).all()
    observed_hours = max(0.0, (min(end, now) - start).total_seconds()) / 3600
    succeeded = sum(r.succeeded for r in hours)
    return {
        "from": iso(start), "to": iso(end),
        "byStatus": {s: counts.get(s, 0) for s in JOB_STATUSES},
        "hourly": hourly(start, end, {r.hour: r for r in hours}, ("succeeded", "failed")),
        "throughputPerHour": round(succeeded / observed_hours, 3) if observed_hours > 0 else None,
        "recentFailures": [wire.AI_FAILURE.dump(r) for r in failures],
    }
