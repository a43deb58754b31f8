"""The learning platform's side: snapshots, credentials, and creating,
reading, listing, cancelling and rerunning jobs (with consent withdrawal)."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import NoReturn

from sqlalchemy import text

from services.ai_jobs import schemas
from services.ai_jobs.domain import TERMINAL, AiJobError, QueueTimings
from services.ai_jobs.repository.expiry import expire_due, job_for_update
from services.ai_jobs.repository.rows import JOB_COLUMNS, new_id, to_json, transition
from shared import wire
from shared.wire import iso


def create_snapshot(session, user_id, target_type, target_id, data) -> dict:
    row = session.execute(
        text("INSERT INTO ai_snapshot (id, user_id, target_type, target_id, data)"
             " VALUES (:id, :u, :tt, :ti, CAST(:d AS jsonb))"
             " RETURNING id, user_id, target_type, target_id, data, created_at"),
        {"id": new_id(), "u": user_id, "tt": target_type, "ti": target_id, "d": to_json(data)},
    ).one()
    return wire.AI_SNAPSHOT.dump(row)


def create_credential(session, box, user_id, provider, api_key) -> dict:
    row = session.execute(
        text("INSERT INTO ai_credential (id, user_id, provider, encrypted_key, key_hint)"
             " VALUES (:id, :u, :p, :k, :h)"
             " RETURNING id, user_id, provider, key_hint, created_at, revoked_at"),
        {"id": new_id(), "u": user_id, "p": provider, "k": box.seal(api_key),
         "h": box.hint(api_key)},
    ).one()
    return wire.AI_CREDENTIAL.dump(row)


def _refuse(message: str) -> NoReturn:
    raise AiJobError("VALIDATION_ERROR", message)


def _check_references(session, req: dict, mode: str) -> None:
    """The snapshot and the credential a new job names exist and are the user's."""
    if req.get("snapshotId"):
        snap = session.execute(text("SELECT user_id FROM ai_snapshot WHERE id = :id"),
                               {"id": req["snapshotId"]}).first()
        if snap is None:
            _refuse(f"snapshotId: snapshot {req['snapshotId']} does not exist")
        if snap.user_id != req["userId"]:
            _refuse("snapshotId: the snapshot belongs to another user")
    if mode == "user_deepseek_key":
        if not req.get("credentialId"):
            _refuse("credentialId: required with apiKeyMode=user_deepseek_key")
        cred = session.execute(text("SELECT user_id, revoked_at FROM ai_credential WHERE id = :id"),
                               {"id": req["credentialId"]}).first()
        if cred is None or cred.user_id != req["userId"] or cred.revoked_at is not None:
            _refuse("credentialId: no usable credential of this user")
    elif req.get("credentialId"):
        _refuse("credentialId: only with apiKeyMode=user_deepseek_key")


def _job_row(req: dict, timings: QueueTimings, version: str, mode: str) -> dict:
    """A new job's columns: the request's, with the defaults it left out."""
    return {
        "id": new_id(), "user_id": req["userId"], "job_type": req["jobType"],
        "target_type": req["targetType"], "target_id": req["targetId"],
        "snapshot_id": req.get("snapshotId"), "params": to_json(req.get("params") or {}),
        "priority": req.get("priority", 0), "idempotency_key": req.get("idempotencyKey"),
        "api_key_mode": mode, "credential_id": req.get("credentialId"),
        "model_provider": req.get("modelProvider") or "deepseek",
        "model_name": req.get("modelName") or "deepseek-chat",
        "prompt_version": req.get("promptVersion") or "v1", "output_schema_version": version,
        "max_retry_count": req.get("maxRetryCount", 3),
        "timeout_seconds": req.get("timeoutSeconds") or timings.default_timeout_seconds,
        "retried_from_job_id": req.get("retriedFromJobId"),
    }


_INSERT_JOB = text(f"""
    INSERT INTO ai_runtime_job (id, user_id, job_type, target_type, target_id, snapshot_id,
        params, priority, idempotency_key, api_key_mode, credential_id, model_provider,
        model_name, prompt_version, output_schema_version, max_retry_count, timeout_seconds,
        retried_from_job_id)
    VALUES (:id, :user_id, :job_type, :target_type, :target_id, :snapshot_id,
        CAST(:params AS jsonb), :priority, :idempotency_key, :api_key_mode, :credential_id,
        :model_provider, :model_name, :prompt_version, :output_schema_version, :max_retry_count,
        :timeout_seconds, :retried_from_job_id)
    ON CONFLICT (user_id, job_type, target_type, target_id, idempotency_key)
        WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING {JOB_COLUMNS}
""")
_JOB_OF_KEY = text(f"""
    SELECT {JOB_COLUMNS} FROM ai_runtime_job
    WHERE user_id = :user_id AND job_type = :job_type AND target_type = :target_type
      AND target_id = :target_id AND idempotency_key = :idempotency_key""")


def create_job(session, timings: QueueTimings, req: dict) -> tuple[dict, bool]:
    """Insert a pending job; ``(job, created)``. A repeated idempotency key
    (same user, type, target) returns the existing job with ``created=False``."""
    version = req.get("outputSchemaVersion") or schemas.DEFAULT_VERSION
    if not schemas.known_version(req["jobType"], version):
        _refuse(f"outputSchemaVersion: no schema {version!r} for {req['jobType']}")
    mode = req.get("apiKeyMode") or "platform_key"
    _check_references(session, req, mode)
    params = _job_row(req, timings, version, mode)
    row = session.execute(_INSERT_JOB, params).first()
    if row is None:
        return wire.AI_JOB.dump(session.execute(_JOB_OF_KEY, params).one()), False
    transition(session, row.id, None, "pending")
    return wire.AI_JOB.dump(row), True


def _transition_json(t) -> dict:
    """A transition without its empty fields (``from`` stays: null for the first)."""
    full = {"from": t.from_status, "to": t.to_status, "at": iso(t.at), "errorCode": t.error_code,
            "runtimeInstanceId": t.runtime_instance_id, "attemptNo": t.attempt_no}
    return {k: v for k, v in full.items() if v is not None or k == "from"}


def get_job(session, job_id: str) -> dict:
    row = session.execute(text(f"SELECT {JOB_COLUMNS} FROM ai_runtime_job WHERE id = :id"),
                          {"id": job_id}).first()
    if row is None:
        raise AiJobError("NOT_FOUND", f"AI job {job_id} does not exist")
    job = wire.AI_JOB.dump(row)
    job["transitions"] = [
        _transition_json(t) for t in session.execute(
            text("SELECT * FROM ai_job_transition WHERE job_id = :id ORDER BY id"), {"id": job_id})
    ]
    result = session.execute(
        text("SELECT * FROM ai_runtime_result WHERE job_id = :id"
             " ORDER BY (status = 'succeeded') DESC, created_at DESC LIMIT 1"), {"id": job_id}
    ).first()
    job["result"] = wire.AI_RESULT.dump(result) if result else None
    return job


def _cursor_encode(created_at, job_id) -> str:
    return base64.urlsafe_b64encode(f"{created_at.isoformat()}|{job_id}".encode()).decode()


def _cursor_decode(cursor: str) -> tuple[datetime, str]:
    """Every part checked: strict base64, UTF-8, an aware ISO timestamp and a
    job id of the API's shape. Anything else was not issued here: 400."""
    refused = AiJobError("VALIDATION_ERROR", "cursor: not a cursor this API returned")
    try:
        raw = base64.b64decode(cursor.encode("ascii"), altchars=b"-_", validate=True).decode("utf-8")
        at, sep, job_id = raw.partition("|")
        when = datetime.fromisoformat(at)
    except (ValueError, UnicodeError):
        raise refused from None
    if (not sep or when.tzinfo is None or not 0 < len(job_id) <= 200
            or any(not c.isprintable() for c in job_id)):
        raise refused
    return when, job_id


def list_jobs(session, *, user_id=None, status=None, job_type=None, limit=50, cursor=None) -> dict:
    where, params = [], {"limit": limit + 1}
    for col, value in (("user_id", user_id), ("status", status), ("job_type", job_type)):
        if value is not None:
            where.append(f"{col} = :{col}")
            params[col] = value
    if cursor:
        params["c_at"], params["c_id"] = _cursor_decode(cursor)
        where.append("(created_at, id) > (:c_at, :c_id)")
    clause = ("WHERE " + " AND ".join(where)) if where else ""
    rows = session.execute(
        text(f"SELECT {JOB_COLUMNS} FROM ai_runtime_job {clause}"
             " ORDER BY created_at, id LIMIT :limit"),
        params,
    ).all()
    more = len(rows) > limit
    rows = rows[:limit]
    return {"items": [wire.AI_JOB.dump(r) for r in rows],
            "nextCursor": _cursor_encode(rows[-1].created_at, rows[-1].id) if more else None}


def cancel_job(session, timings: QueueTimings, job_id: str) -> dict:
    """pending → cancelled; locked/running → cancel requested; terminal → refused."""
    job = job_for_update(session, job_id, timings)
    if job.status in TERMINAL:
        raise AiJobError("INVALID_TRANSITION",
                         f"AI job {job_id} is {job.status}; it cannot be cancelled")
    if job.status == "pending":
        session.execute(
            text("UPDATE ai_runtime_job SET status = 'cancelled', finished_at = now(),"
                 " lock_until = NULL, updated_at = now() WHERE id = :id"), {"id": job_id})
        transition(session, job_id, "pending", "cancelled")
    else:
        session.execute(text("UPDATE ai_runtime_job SET cancel_requested = true, updated_at = now()"
                             " WHERE id = :id"), {"id": job_id})
    return get_job(session, job_id)


def revoke_user(session, timings: QueueTimings, user_id: str) -> dict:
    """Consent withdrawn: every pending job → cancelled, every held job → cancel requested."""
    expire_due(session, timings)
    cancelled = session.execute(
        text("""
        WITH c AS (
            UPDATE ai_runtime_job SET status = 'cancelled', finished_at = now(), lock_until = NULL,
                   updated_at = now()
            WHERE user_id = :u AND status = 'pending' RETURNING id
        ), t AS (
            INSERT INTO ai_job_transition (job_id, from_status, to_status)
            SELECT id, 'pending', 'cancelled' FROM c RETURNING 1
        ) SELECT id FROM c"""), {"u": user_id}).scalars().all()
    requested = session.execute(
        text("UPDATE ai_runtime_job SET cancel_requested = true, updated_at = now()"
             " WHERE user_id = :u AND status IN ('locked', 'running') RETURNING id"), {"u": user_id}
    ).scalars().all()
    # Consent covers the user's own model keys too: none may be handed out again.
    revoked = session.execute(
        text("UPDATE ai_credential SET revoked_at = now() WHERE user_id = :u AND revoked_at IS NULL"
             " RETURNING id"), {"u": user_id}
    ).scalars().all()
    return {"userId": user_id, "cancelled": sorted(cancelled), "cancelRequested": sorted(requested),
            "credentialsRevoked": sorted(revoked)}


# What a rerun takes from the failed job: the request that created it.
_RERUN_COPIES = ("user_id", "job_type", "target_type", "target_id", "snapshot_id", "params", "priority",
                 "api_key_mode", "credential_id", "model_provider", "model_name", "prompt_version",
                 "output_schema_version", "max_retry_count", "timeout_seconds")


def rerun_job(session, timings: QueueTimings, job_id: str) -> tuple[dict, bool]:
    """A failed job → a new pending job with ``retriedFromJobId``; (job, created).
    A failed job is rerun once: asking again (a double click, a retried request)
    answers the rerun it already has. Its lock serialises concurrent reruns."""
    job = job_for_update(session, job_id)
    if job.status != "failed":
        raise AiJobError("INVALID_TRANSITION",
                         f"only a failed job can be rerun; {job_id} is {job.status}")
    earlier = session.execute(text(
        "SELECT id FROM ai_runtime_job WHERE retried_from_job_id = :id"
        " ORDER BY created_at, id LIMIT 1"), {"id": job.id}).scalar()
    if earlier is not None:
        return get_job(session, earlier), False
    if job.api_key_mode == "user_deepseek_key":
        cred = session.execute(text("SELECT revoked_at FROM ai_credential WHERE id = :id"),
                               {"id": job.credential_id}).first()
        if cred is None or cred.revoked_at is not None:
            raise AiJobError("INVALID_TRANSITION", "the job's credential has been revoked")
    req = {**{wire.camel(f): getattr(job, f) for f in _RERUN_COPIES}, "retriedFromJobId": job.id}
    new_job, _ = create_job(session, timings, req)
    return new_job, True
