"""What every part of the queue's SQL shares: a job's columns, the rule a
failure follows, a recorded transition, new ids and JSON parameters."""

from __future__ import annotations

import json
import uuid

from sqlalchemy import text

from services.ai_jobs.domain import QueueTimings

JOB_COLUMNS = """
    id, user_id, job_type, target_type, target_id, snapshot_id, params, status, priority,
    idempotency_key, api_key_mode, credential_id, model_provider, model_name, prompt_version,
    output_schema_version, attempt_no, retried_from_job_id, locked_by, locked_at, lock_until,
    started_at, finished_at, retry_count, max_retry_count, timeout_seconds, cancel_requested,
    available_at, error_code, error_message, created_at, updated_at
"""

# The status a failure leads to, and the counters that go with it (used by a
# retryable failure and by expiry alike). {retryable} is a boolean SQL term.
_RETRIED = "NOT j.cancel_requested AND {retryable} AND j.retry_count < j.max_retry_count"
RETRY_OR_FAIL = f"""
    status = CASE WHEN j.cancel_requested THEN 'cancelled'
                  WHEN {{retryable}} AND j.retry_count < j.max_retry_count THEN 'pending'
                  ELSE 'failed' END,
    retry_count = CASE WHEN {_RETRIED} THEN j.retry_count + 1 ELSE j.retry_count END,
    available_at = now() + make_interval(secs => LEAST(
        :backoff * power(2, j.retry_count), :backoff_max)),
    finished_at = CASE WHEN {_RETRIED} THEN NULL ELSE now() END,
    started_at = CASE WHEN {_RETRIED} THEN NULL ELSE j.started_at END,
    locked_by = NULL, lock_until = NULL, updated_at = now()
"""


def backoff_params(timings: QueueTimings) -> dict:
    return {"backoff": max(timings.retry_backoff_seconds, 0.0),
            "backoff_max": timings.retry_backoff_max_seconds}


def transition(session, job_id, from_status, to_status, *, error_code=None, runtime=None,
               attempt=None):
    session.execute(
        text("INSERT INTO ai_job_transition (job_id, from_status, to_status, error_code,"
             " runtime_instance_id, attempt_no) VALUES (:j, :f, :t, :e, :r, :a)"),
        {"j": job_id, "f": from_status, "t": to_status, "e": error_code, "r": runtime,
         "a": attempt},
    )


def new_id() -> str:
    return str(uuid.uuid4())


def to_json(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def short_message(message: str | None) -> str | None:
    """An error message as stored: at most 2000 characters, empty as NULL."""
    return (message or "")[:2000] or None
