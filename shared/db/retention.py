"""Data retention: keeps the database from growing without bound.

Deletes, in small batches (short transactions, no long locks):

* ``event_log`` rows older than ``event_days``, never the newest one (the
  loop numbers on from it, so ``seq`` never restarts). A client resuming from a
  purged ``seq`` is told so with a gap frame (``/ws``) or ``gap`` (``/api/events``).
  An event the MQTT broker has not acknowledged yet (after the line's
  ``uns_node.acked_seq``: the northbound publisher, ``services.uns``) is kept
  until it is ``unpublished_days`` old; then it is purged all the same, counted
  in ``uns_node.purged_unpublished`` (``/metrics``) and logged as a warning;
* handled ``loop_message`` rows older than ``event_days`` (so an
  ``Idempotency-Key`` is remembered that long; QUEUED ones are never purged);
* finished AI jobs (succeeded, failed, cancelled) older than ``ai_days``, with
  their results and transitions, and snapshots no job names any more;
* ``audit_log`` and ``people_audit`` rows older than ``audit_days``, and sign-in
  sessions a day after they ended;
* the transport's ``mq_dead_letter`` rows older than ``dead_letter_days``;
* piece records (``piece`` and its steps and entries) of pieces finished more
  than ``piece_days`` ago (``LINECTL_PIECE_RETENTION_DAYS``, ten years by
  default): they outlive the event log they were written beside.

Deleting old rows never conflicts with their writers (the loop and the AI
queue only insert new ones and update live ones), so it runs beside them: every
``LINECTL_RETENTION_INTERVAL_SECONDS`` as the ``retention`` process of
``linectl up`` (``linectl retention``), or from the systemd timer
``deploy/systemd/linectl-retention.timer``, or by hand: ``linectl purge``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import Engine

from shared.config import Settings
from shared.db.lines import PUBLIC, line_schemas, quote

log = logging.getLogger(__name__)

BATCH = 5000


@dataclass(frozen=True)
class RetentionPolicy:
    """Days kept; by default the settings' (``LINECTL_RETENTION_*``)."""

    event_days: int = Settings.retention_event_days
    ai_days: int = Settings.retention_ai_days
    audit_days: int = Settings.retention_audit_days
    dead_letter_days: int = Settings.retention_dead_letter_days
    piece_days: int = Settings.piece_retention_days
    unpublished_days: int = Settings.retention_unpublished_days

    @classmethod
    def from_settings(cls, settings) -> RetentionPolicy:
        return cls(event_days=settings.retention_event_days, ai_days=settings.retention_ai_days,
                   audit_days=settings.retention_audit_days,
                   dead_letter_days=settings.retention_dead_letter_days,
                   piece_days=settings.piece_retention_days,
                   unpublished_days=settings.retention_unpublished_days)


def _delete_batches(engine: Engine, sql: str, params: dict, schema: str = PUBLIC) -> int:
    total = 0
    while True:
        with engine.begin() as conn:
            if schema != PUBLIC:  # a line's own tables (shared.db.lines)
                conn.execute(text(f"SET LOCAL search_path TO {quote(schema)}"))
            n = conn.execute(text(sql), {**params, "batch": BATCH}).rowcount
        total += n
        if n < BATCH:
            return total


# Old events, never the newest; those after the broker's acknowledgement (``:acked``, NULL
# without a publisher) only when also older than ``:hold`` days, and counted apart.
_OLD_EVENTS = """
    DELETE FROM event_log WHERE seq IN (
      SELECT seq FROM event_log WHERE at < now() - make_interval(days => :days)
        AND seq < (SELECT max(seq) FROM event_log)
        AND {published}
      ORDER BY seq LIMIT :batch)"""
_PUBLISHED = "(CAST(:acked AS bigint) IS NULL OR seq <= :acked)"
_UNPUBLISHED = "seq > :acked AND at < now() - make_interval(days => :hold)"


def _purge_events(engine: Engine, policy: RetentionPolicy, schema: str) -> int:
    """The line's old events; what the broker never acknowledged only past ``unpublished_days``."""
    with engine.connect() as conn:
        acked = conn.execute(text("SELECT acked_seq FROM public.uns_node WHERE schema_name = :schema"),
                             {"schema": schema}).scalar()
    params = {"days": policy.event_days, "acked": acked}
    purged = _delete_batches(engine, _OLD_EVENTS.format(published=_PUBLISHED), params, schema)
    if acked is None:
        return purged
    lost = _delete_batches(engine, _OLD_EVENTS.format(published=_UNPUBLISHED),
                           {**params, "hold": policy.unpublished_days}, schema)
    if lost:
        with engine.begin() as conn:
            line_id = conn.execute(text(
                "UPDATE public.uns_node SET purged_unpublished = purged_unpublished + :n, updated_at = now()"
                " WHERE schema_name = :schema RETURNING line_id"), {"n": lost, "schema": schema}).scalar()
        log.warning("retention: purged %d event(s) of line %s the MQTT broker never acknowledged (older than "
                    "%d days, LINECTL_RETENTION_UNPUBLISHED_DAYS); a host will miss their seqs", lost, line_id,
                    policy.unpublished_days)
    return purged + lost


def _purge_line(engine: Engine, policy: RetentionPolicy, schema: str) -> dict[str, int]:
    ev = {"days": policy.event_days}
    return {
        "event_log": _purge_events(engine, policy, schema),
        "loop_message": _delete_batches(engine, """
            DELETE FROM loop_message WHERE id IN (
              SELECT id FROM loop_message WHERE status <> 'QUEUED'
                AND created_at < now() - make_interval(days => :days) LIMIT :batch)""", ev, schema),
        "audit_log": _delete_batches(engine, """
            DELETE FROM audit_log WHERE id IN (
              SELECT id FROM audit_log WHERE at < now() - make_interval(days => :days)
              LIMIT :batch)""", {"days": policy.audit_days}, schema),
        # A piece's steps and entries go with it, in the same statement.
        "piece": _delete_batches(engine, """
            WITH old AS (SELECT job_id FROM piece
                          WHERE finished_at < now() - make_interval(days => :days) LIMIT :batch),
            s AS (DELETE FROM piece_step WHERE job_id IN (SELECT job_id FROM old)),
            e AS (DELETE FROM piece_entry WHERE job_id IN (SELECT job_id FROM old))
            DELETE FROM piece WHERE job_id IN (SELECT job_id FROM old)""", {"days": policy.piece_days}, schema),
    }


def purge(engine: Engine, policy: RetentionPolicy = RetentionPolicy()) -> dict[str, int]:
    """What was deleted, per table (a line table's count is every line's)."""
    counts: dict[str, int] = {}
    with engine.connect() as conn:
        schemas = line_schemas(conn)
    for schema in schemas:
        for table, n in _purge_line(engine, policy, schema).items():
            counts[table] = counts.get(table, 0) + n
    counts |= {
        "people_audit": _delete_batches(engine, """
            DELETE FROM people_audit WHERE id IN (
              SELECT id FROM people_audit WHERE at < now() - make_interval(days => :days)
              LIMIT :batch)""", {"days": policy.audit_days}),
        # Sessions that ended (or reached their absolute limit) a day ago serve nothing.
        "people_session": _delete_batches(engine, """
            DELETE FROM people_session WHERE id IN (
              SELECT id FROM people_session WHERE coalesce(ended_at, expires_at) < now() - interval '1 day'
              LIMIT :batch)""", {}),
        "mq_dead_letter": _delete_batches(engine, """
            DELETE FROM mq_dead_letter WHERE id IN (
              SELECT id FROM mq_dead_letter WHERE dead_at < now() - make_interval(days => :days)
              LIMIT :batch)""", {"days": policy.dead_letter_days}),
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
