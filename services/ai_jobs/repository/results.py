"""A runtime's outcome of an attempt: a result checked against its hash and
schema and stored once (idempotent on ``jobId:attemptNo:outputHash``), or a
failure that retries the job or fails it."""

from __future__ import annotations

from sqlalchemy import text

from services.ai_jobs import schemas
from services.ai_jobs.domain import (
    RETRYABLE,
    AiJobError,
    QueueTimings,
    output_hash,
    result_idempotency_key,
)
from services.ai_jobs.repository.expiry import job_for_update
from services.ai_jobs.repository.leases import cancel_held, check_holder, holds, start
from services.ai_jobs.repository.rows import (
    RETRY_OR_FAIL,
    backoff_params,
    new_id,
    short_message,
    to_json,
    transition,
)


def _result_key(job_id: str, attempt_no: int, status: str, output, claimed_hash, error_code):
    """The result's idempotency key and, for a success, the output's checked hash."""
    if status == "succeeded":
        actual = output_hash(output)
        if claimed_hash != actual:
            raise AiJobError("OUTPUT_HASH_MISMATCH",
                             "outputHash is not the SHA-256 of the output's canonical JSON")
        return result_idempotency_key(job_id, attempt_no, actual), actual
    if error_code not in RETRYABLE:
        raise AiJobError("VALIDATION_ERROR",
                         f"errorCode: {error_code!r} is not one of {sorted(RETRYABLE)}")
    return result_idempotency_key(job_id, attempt_no, f"failed-{error_code}"), None


def _stored_result(session, key: str):
    return session.execute(text("SELECT * FROM ai_runtime_result WHERE idempotency_key = :k"),
                           {"k": key}).first()


def _result_reply(stored, duplicate: bool) -> dict:
    if stored.error_code == "INVALID_SCHEMA" and stored.output_hash is not None:
        raise AiJobError("INVALID_SCHEMA", stored.error_message)
    return {"jobId": stored.job_id, "attemptNo": stored.attempt_no, "status": stored.status,
            "resultId": stored.id, "duplicate": duplicate}


def submit_result(session, timings: QueueTimings, job_id: str, runtime_id: str, attempt_no: int,
                  status: str, output=None, claimed_hash: str | None = None,
                  error_code: str | None = None, error_message: str | None = None) -> dict:
    """Record an attempt's outcome (idempotent on ``jobId:attemptNo:outputHash``)."""
    key, digest = _result_key(job_id, attempt_no, status, output, claimed_hash, error_code)
    job = job_for_update(session, job_id, timings)
    if not holds(job, runtime_id, attempt_no):
        # While the attempt is held no result of it is stored (any result ends
        # the hold), so only a caller that no longer holds it may be repeating.
        stored = _stored_result(session, key)
        if stored is not None:
            return _result_reply(stored, duplicate=True)
        if job.status == "succeeded":
            raise AiJobError("RESULT_ALREADY_EXISTS",
                             f"AI job {job_id} already has a different succeeded result")
        check_holder(job, runtime_id, attempt_no)
    if job.cancel_requested:
        cancel_held(session, job)
        raise AiJobError("CANCEL_REQUESTED",
                         f"AI job {job_id} was cancelled; the result is discarded")
    if job.status == "locked":
        start(session, timings, job)
    if status == "succeeded":
        return _succeed(session, timings, job, runtime_id, key, output, digest)
    result_id = _store_result(session, key, job, runtime_id, "failed", None, None, error_code,
                              error_message)
    new_status = _fail(session, timings, job, error_code, error_message, runtime_id)
    return {"jobId": job_id, "attemptNo": attempt_no, "status": "failed", "resultId": result_id,
            "duplicate": False, "jobStatus": new_status}


_SUCCEED = text("""
    WITH r AS (
        INSERT INTO ai_runtime_result (id, job_id, attempt_no, idempotency_key, runtime_instance_id,
                                       status, output, output_hash)
        VALUES (:rid, :id, :a, :k, :r, 'succeeded', CAST(:o AS jsonb), :h) RETURNING 1
    ), u AS (
        UPDATE ai_runtime_job SET status = 'succeeded', finished_at = now(), lock_until = NULL,
               error_code = NULL, error_message = NULL, updated_at = now()
        WHERE id = :id RETURNING id
    )
    INSERT INTO ai_job_transition (job_id, from_status, to_status, runtime_instance_id, attempt_no)
    SELECT id, 'running', 'succeeded', :r, :a FROM u""")


def _succeed(session, timings, job, runtime_id, key, output, digest) -> dict:
    """A result that keeps the schema ends the job succeeded; one that breaks
    it is stored and fails the job (INVALID_SCHEMA, not retried)."""
    violations = schemas.schema_errors(job.job_type, job.output_schema_version, output)
    if violations:
        message = "output breaks the schema: " + "; ".join(violations)
        _store_result(session, key, job, runtime_id, "failed", output, digest, "INVALID_SCHEMA",
                      message)
        _fail(session, timings, job, "INVALID_SCHEMA", message, runtime_id)
        raise AiJobError("INVALID_SCHEMA", message)
    result_id = new_id()
    session.execute(_SUCCEED, {"rid": result_id, "id": job.id, "a": job.attempt_no, "k": key,
                               "r": runtime_id, "o": to_json(output), "h": digest})
    return {"jobId": job.id, "attemptNo": job.attempt_no, "status": "succeeded",
            "resultId": result_id, "duplicate": False}


def _store_result(session, key, job, runtime_id, status, output, digest, error_code,
                  error_message) -> str:
    result_id = new_id()
    session.execute(
        text("INSERT INTO ai_runtime_result (id, job_id, attempt_no, idempotency_key,"
             " runtime_instance_id, status, output, output_hash, error_code, error_message)"
             " VALUES (:id, :j, :a, :k, :r, :s, CAST(:o AS jsonb), :h, :ec, :em)"),
        {"id": result_id, "j": job.id, "a": job.attempt_no, "k": key, "r": runtime_id, "s": status,
         "o": None if output is None else to_json(output), "h": digest, "ec": error_code,
         "em": short_message(error_message)},
    )
    return result_id


def _fail(session, timings, job, error_code, error_message, runtime_id) -> str:
    """A reported failure: retryable and retries left → pending (retryCount+1), else failed."""
    new_status = session.execute(
        text(f"UPDATE ai_runtime_job j SET {RETRY_OR_FAIL.format(retryable=':retryable')},"
             " error_code = :code, error_message = :msg WHERE j.id = :id RETURNING j.status"),
        {"id": job.id, "retryable": RETRYABLE[error_code], "code": error_code,
         "msg": short_message(error_message), **backoff_params(timings)},
    ).scalar()
    transition(session, job.id, "running", new_status, error_code=error_code, runtime=runtime_id,
               attempt=job.attempt_no)
    return new_status
