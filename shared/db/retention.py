"""Data retention: keeps the database from growing without bound.

Deletes, in small batches (short transactions, no long locks):

* ``event_log`` rows older than ``event_days`` — a websocket client resuming
  from an older ``seq`` is told its resume point is gone;
* handled ``loop_message`` rows older than ``event_days``;
* finished AI jobs (succeeded, failed, cancelled) older than ``ai_days``, with
  their results and transitions, and snapshots no job names any more;
* ``audit_log`` rows older than ``audit_days``.

Run by the line_controller's retention timer (the only writer of these
tables besides the AI queue), or by hand: ``linectl purge``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import Engine

BATCH = 5000


@dataclass(frozen=True)
class RetentionPolicy:
    event_days: int = 30
    ai_days: int = 90
    audit_days: int = 365


def _delete_batches(engine: Engine, sql: str, params: dict) -> int:
    total = 0
    while True:
        with engine.begin() as conn:
            n = conn.execute(text(sql), {**params, "batch": BATCH}).rowcount
        total += n
        if n < BATCH:
            return total


def purge(engine: Engine, policy: RetentionPolicy = RetentionPolicy()) -> dict[str, int]:
    ev = {"days": policy.event_days}
    counts = {
        "event_log": _delete_batches(engine, """
            DELETE FROM event_log WHERE seq IN (
              SELECT seq FROM event_log WHERE at < now() - make_interval(days => :days)
              ORDER BY seq LIMIT :batch)""", ev),
        "loop_message": _delete_batches(engine, """
            DELETE FROM loop_message WHERE id IN (
              SELECT id FROM loop_message WHERE status <> 'QUEUED'
                AND created_at < now() - make_interval(days => :days) LIMIT :batch)""", ev),
        "audit_log": _delete_batches(engine, """
            DELETE FROM audit_log WHERE id IN (
              SELECT id FROM audit_log WHERE at < now() - make_interval(days => :days)
              LIMIT :batch)""", {"days": policy.audit_days}),
    }
    ai = {"days": policy.ai_days}
    old_jobs = """
        SELECT id FROM ai_runtime_job
         WHERE status IN ('succeeded', 'failed', 'cancelled')
           AND coalesce(finished_at, updated_at) < now() - make_interval(days => :days)
           AND NOT EXISTS (SELECT 1 FROM ai_runtime_job r WHERE r.retried_from_job_id = ai_runtime_job.id)
         LIMIT :batch"""
    total_jobs = 0
    while True:
        with engine.begin() as conn:
            ids = [r[0] for r in conn.execute(text(old_jobs), {**ai, "batch": BATCH})]
            if ids:
                conn.execute(text("DELETE FROM ai_runtime_result WHERE job_id = ANY(:ids)"), {"ids": ids})
                conn.execute(text("DELETE FROM ai_job_transition WHERE job_id = ANY(:ids)"), {"ids": ids})
                conn.execute(text("DELETE FROM ai_runtime_job WHERE id = ANY(:ids)"), {"ids": ids})
        total_jobs += len(ids)
        if len(ids) < BATCH:
            break
    counts["ai_runtime_job"] = total_jobs
    counts["ai_snapshot"] = _delete_batches(engine, """
        DELETE FROM ai_snapshot WHERE id IN (
          SELECT s.id FROM ai_snapshot s
           WHERE s.created_at < now() - make_interval(days => :days)
             AND NOT EXISTS (SELECT 1 FROM ai_runtime_job j WHERE j.snapshot_id = s.id)
           LIMIT :batch)""", ai)
    return counts
