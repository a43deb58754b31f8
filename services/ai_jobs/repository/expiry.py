"""Expiry: a held job whose lease or execution timeout ran out is expired and
then retried, failed or cancelled, in one statement; and the row lock every
per-job operation decides under, on the job as expiry leaves it."""

from __future__ import annotations

from sqlalchemy import text

from services.ai_jobs.domain import AiJobError, QueueTimings
from services.ai_jobs.repository.rows import JOB_COLUMNS, RETRY_OR_FAIL, backoff_params

_EXPIRE_DUE = """
    WITH due AS (
        SELECT id, status AS old_status, locked_by AS old_holder, attempt_no AS old_attempt,
               CASE WHEN started_at IS NOT NULL
                         AND started_at + make_interval(secs => timeout_seconds) <= now()
                    THEN 'JOB_TIMEOUT' ELSE 'LOCK_EXPIRED' END AS code
        FROM ai_runtime_job
        WHERE status IN ('locked', 'running') AND lock_until < now() {only_one}
        ORDER BY lock_until
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ), upd AS (
        UPDATE ai_runtime_job j SET
            {retry_or_fail},
            error_code = due.code,
            error_message = CASE due.code WHEN 'JOB_TIMEOUT'
                THEN 'execution ran past timeoutSeconds'
                ELSE 'the lease ran out without a heartbeat' END
        FROM due WHERE j.id = due.id
        RETURNING j.id, due.old_status, j.status, due.code, due.old_holder, due.old_attempt
    ), steps AS (
        SELECT upd.*, s.n FROM upd CROSS JOIN (VALUES (1), (2)) AS s(n)
    ), ins AS (
        INSERT INTO ai_job_transition (job_id, from_status, to_status, error_code,
                                       runtime_instance_id, attempt_no)
        SELECT id, CASE n WHEN 1 THEN old_status ELSE 'expired' END,
               CASE n WHEN 1 THEN 'expired' ELSE status END, code, old_holder, old_attempt
        FROM steps ORDER BY id, n
        RETURNING 1
    )
    SELECT id, old_status, status, code FROM upd
"""
# The statement for all due jobs, and for one job.
_EXPIRE_ALL, _EXPIRE_ONE = (
    text(_EXPIRE_DUE.format(only_one=only_one, retry_or_fail=RETRY_OR_FAIL.format(retryable="true")))
    for only_one in ("", "AND id = :job_id")
)


def expire_due(session, timings: QueueTimings, job_id: str | None = None,
               limit: int = 200) -> list[dict]:
    """Apply expiry to held jobs whose lease ran out: ``expired`` then, in the
    same statement, ``pending`` (retryCount+1, after the back-off), ``failed``
    (retries exhausted) or ``cancelled`` (a cancel was requested). Both
    transitions are recorded. Returns ``[{jobId, from, to, errorCode}]``."""
    rows = session.execute(
        _EXPIRE_ONE if job_id else _EXPIRE_ALL,
        {"job_id": job_id, "limit": limit, **backoff_params(timings)},
    ).all()
    return [{"jobId": r.id, "from": r.old_status, "to": r.status, "errorCode": r.code}
            for r in rows]


_ANY_DUE = text("SELECT EXISTS (SELECT 1 FROM ai_runtime_job"
                " WHERE lock_until < now() AND status IN ('locked', 'running'))")


def expire_if_any_due(session, timings: QueueTimings) -> list[dict]:
    """Expiry before a poll: an index probe (``ix_ai_runtime_job_lock_until``)
    in the common case that nothing is due, the full expiry otherwise."""
    if not session.execute(_ANY_DUE).scalar():
        return []
    return expire_due(session, timings)


_JOB_FOR_UPDATE = text(f"""
    SELECT {JOB_COLUMNS}, (status IN ('locked', 'running') AND lock_until < now()) AS lease_over
    FROM ai_runtime_job WHERE id = :id FOR UPDATE""")


def job_for_update(session, job_id: str, timings: QueueTimings | None = None):
    """The job, row-locked while the caller decides. With ``timings``, a held
    job whose lease or timeout ran out is expired first (in this transaction:
    our own row lock does not make ``expire_due`` skip it), so the caller
    decides on the job as it now is. The common case costs one statement."""
    row = session.execute(_JOB_FOR_UPDATE, {"id": job_id}).first()
    if row is None:
        raise AiJobError("NOT_FOUND", f"AI job {job_id} does not exist")
    if timings is not None and row.lease_over:
        expire_due(session, timings, job_id)
        row = session.execute(_JOB_FOR_UPDATE, {"id": job_id}).first()
    return row
