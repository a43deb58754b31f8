"""The AI job queue in SQL: the only module that writes the ai_* tables.

Every function takes an open SQLAlchemy session (the caller's unit of work:
one transaction per call) and uses raw SQL, because the queue's safety *is*
the SQL: the lock is the seed's conditional UPDATE (zero rows →
``JOB_ALREADY_LOCKED``), claims use ``FOR UPDATE SKIP LOCKED``, and per-job
operations (heartbeat, result, cancel) hold the row lock while they decide.

Expiry (lease or execution timeout) is applied by :func:`expire_due`, which the
sweeper calls on a timer and every operation calls first, so correctness
never waits on the sweeper. A refusal (:class:`AiJobError`) does not undo the
transaction: the caller commits it, so an expiry noticed on the way, or a
decided outcome (schema violation, a cancel taking effect), is kept. The execution timeout is folded into the lease:
a heartbeat never extends ``lock_until`` past ``started_at + timeoutSeconds``.
"""

from __future__ import annotations

import base64
import uuid
from datetime import datetime

from sqlalchemy import text

from services.ai_jobs import schemas
from services.ai_jobs.domain import (
    HELD,
    JOB_STATUSES,
    POLL_LIMIT_DEFAULT,
    POLL_LIMIT_MAX,
    RETRYABLE,
    TERMINAL,
    AiJobError,
    QueueTimings,
    output_hash,
    result_idempotency_key,
)
from shared import wire
from shared.serialize import hourly, iso

JOB_COLUMNS = """
    id, user_id, job_type, target_type, target_id, snapshot_id, params, status, priority,
    idempotency_key, api_key_mode, credential_id, model_provider, model_name, prompt_version,
    output_schema_version, attempt_no, retried_from_job_id, locked_by, locked_at, lock_until,
    started_at, finished_at, retry_count, max_retry_count, timeout_seconds, cancel_requested,
    available_at, error_code, error_message, created_at, updated_at
"""

# The status a failure leads to, and the counters that go with it (used by a
# retryable failure and by expiry alike). :retryable is a boolean parameter.
_RETRY_OR_FAIL = """
    status = CASE WHEN j.cancel_requested THEN 'cancelled'
                  WHEN {retryable} AND j.retry_count < j.max_retry_count THEN 'pending'
                  ELSE 'failed' END,
    retry_count = CASE WHEN NOT j.cancel_requested AND {retryable} AND j.retry_count < j.max_retry_count
                       THEN j.retry_count + 1 ELSE j.retry_count END,
    available_at = now() + make_interval(secs => LEAST(
        :backoff * power(2, j.retry_count), :backoff_max)),
    finished_at = CASE WHEN NOT j.cancel_requested AND {retryable} AND j.retry_count < j.max_retry_count
                       THEN NULL ELSE now() END,
    started_at = CASE WHEN NOT j.cancel_requested AND {retryable} AND j.retry_count < j.max_retry_count
                      THEN NULL ELSE j.started_at END,
    locked_by = NULL, lock_until = NULL, updated_at = now()
"""


def _backoff_params(timings: QueueTimings) -> dict:
    return {"backoff": max(timings.retry_backoff_seconds, 0.0),
            "backoff_max": timings.retry_backoff_max_seconds}


# -- shapes -------------------------------------------------------------------


job_json = wire.AI_JOB.dump
result_json = wire.AI_RESULT.dump
snapshot_json = wire.AI_SNAPSHOT.dump
credential_json = wire.AI_CREDENTIAL.dump


def poll_item(r, claimed: bool) -> dict:
    return (wire.AI_CLAIMED_ITEM if claimed else wire.AI_POLL_ITEM).dump(r)


# -- helpers --------------------------------------------------------------------


def _transition(session, job_id, from_status, to_status, *, error_code=None, runtime=None, attempt=None):
    session.execute(
        text("INSERT INTO ai_job_transition (job_id, from_status, to_status, error_code,"
             " runtime_instance_id, attempt_no) VALUES (:j, :f, :t, :e, :r, :a)"),
        {"j": job_id, "f": from_status, "t": to_status, "e": error_code, "r": runtime, "a": attempt},
    )


_JOB_FOR_UPDATE = text(f"""
    SELECT {JOB_COLUMNS}, (status IN ('locked', 'running') AND lock_until < now()) AS lease_over
    FROM ai_runtime_job WHERE id = :id FOR UPDATE""")


def _job_for_update(session, job_id: str, timings: QueueTimings | None = None):
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


_ANY_DUE = text("SELECT EXISTS (SELECT 1 FROM ai_runtime_job"
                " WHERE lock_until < now() AND status IN ('locked', 'running'))")


def expire_if_any_due(session, timings: QueueTimings) -> list[dict]:
    """Expiry before a poll: an index probe (``ix_ai_runtime_job_lock_until``)
    in the common case that nothing is due, the full expiry otherwise."""
    if not session.execute(_ANY_DUE).scalar():
        return []
    return expire_due(session, timings)


def _new_id() -> str:
    return str(uuid.uuid4())


# -- expiry -----------------------------------------------------------------------


def expire_due(session, timings: QueueTimings, job_id: str | None = None, limit: int = 200) -> list[dict]:
    """Apply expiry to held jobs whose lease ran out: ``expired`` then, in the
    same statement, ``pending`` (retryCount+1, after the back-off), ``failed``
    (retries exhausted) or ``cancelled`` (a cancel was requested). Both
    transitions are recorded. Returns ``[{jobId, from, to, errorCode}]``."""
    only_one = "AND id = :job_id" if job_id else ""
    rows = session.execute(
        text(f"""
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
                {_RETRY_OR_FAIL.format(retryable="true")},
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
        """),
        {"job_id": job_id, "limit": limit, **_backoff_params(timings)},
    ).all()
    return [{"jobId": r.id, "from": r.old_status, "to": r.status, "errorCode": r.code} for r in rows]


# -- platform side ---------------------------------------------------------------------


def create_snapshot(session, user_id, target_type, target_id, data) -> dict:
    row = session.execute(
        text("INSERT INTO ai_snapshot (id, user_id, target_type, target_id, data)"
             " VALUES (:id, :u, :tt, :ti, CAST(:d AS jsonb))"
             " RETURNING id, user_id, target_type, target_id, data, created_at"),
        {"id": _new_id(), "u": user_id, "tt": target_type, "ti": target_id, "d": _json(data)},
    ).one()
    return snapshot_json(row)


def create_credential(session, box, user_id, provider, api_key) -> dict:
    row = session.execute(
        text("INSERT INTO ai_credential (id, user_id, provider, encrypted_key, key_hint)"
             " VALUES (:id, :u, :p, :k, :h)"
             " RETURNING id, user_id, provider, key_hint, created_at, revoked_at"),
        {"id": _new_id(), "u": user_id, "p": provider, "k": box.seal(api_key), "h": box.hint(api_key)},
    ).one()
    return credential_json(row)


def _json(value) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


def create_job(session, timings: QueueTimings, req: dict) -> tuple[dict, bool]:
    """Insert a pending job; ``(job, created)``. A repeated idempotency key
    (same user, type, target) returns the existing job with ``created=False``."""
    version = req.get("outputSchemaVersion") or schemas.DEFAULT_VERSION
    if not schemas.known_version(req["jobType"], version):
        raise AiJobError("VALIDATION_ERROR", f"outputSchemaVersion: no schema {version!r} for {req['jobType']}")
    if req.get("snapshotId"):
        snap = session.execute(text("SELECT user_id FROM ai_snapshot WHERE id = :id"),
                               {"id": req["snapshotId"]}).first()
        if snap is None:
            raise AiJobError("VALIDATION_ERROR", f"snapshotId: snapshot {req['snapshotId']} does not exist")
        if snap.user_id != req["userId"]:
            raise AiJobError("VALIDATION_ERROR", "snapshotId: the snapshot belongs to another user")
    mode = req.get("apiKeyMode") or "platform_key"
    if mode == "user_deepseek_key":
        if not req.get("credentialId"):
            raise AiJobError("VALIDATION_ERROR", "credentialId: required with apiKeyMode=user_deepseek_key")
        cred = session.execute(text("SELECT user_id, revoked_at FROM ai_credential WHERE id = :id"),
                               {"id": req["credentialId"]}).first()
        if cred is None or cred.user_id != req["userId"] or cred.revoked_at is not None:
            raise AiJobError("VALIDATION_ERROR", "credentialId: no usable credential of this user")
    elif req.get("credentialId"):
        raise AiJobError("VALIDATION_ERROR", "credentialId: only with apiKeyMode=user_deepseek_key")
    params = {
        "id": _new_id(), "user_id": req["userId"], "job_type": req["jobType"],
        "target_type": req["targetType"], "target_id": req["targetId"],
        "snapshot_id": req.get("snapshotId"), "params": _json(req.get("params") or {}),
        "priority": req.get("priority", 0), "idempotency_key": req.get("idempotencyKey"),
        "api_key_mode": mode, "credential_id": req.get("credentialId"),
        "model_provider": req.get("modelProvider") or "deepseek",
        "model_name": req.get("modelName") or "deepseek-chat",
        "prompt_version": req.get("promptVersion") or "v1", "output_schema_version": version,
        "max_retry_count": req.get("maxRetryCount", 3),
        "timeout_seconds": req.get("timeoutSeconds") or timings.default_timeout_seconds,
        "retried_from_job_id": req.get("retriedFromJobId"),
    }
    row = session.execute(
        text(f"""
        INSERT INTO ai_runtime_job (id, user_id, job_type, target_type, target_id, snapshot_id, params,
            priority, idempotency_key, api_key_mode, credential_id, model_provider, model_name,
            prompt_version, output_schema_version, max_retry_count, timeout_seconds, retried_from_job_id)
        VALUES (:id, :user_id, :job_type, :target_type, :target_id, :snapshot_id, CAST(:params AS jsonb),
            :priority, :idempotency_key, :api_key_mode, :credential_id, :model_provider, :model_name,
            :prompt_version, :output_schema_version, :max_retry_count, :timeout_seconds,
            :retried_from_job_id)
        ON CONFLICT (user_id, job_type, target_type, target_id, idempotency_key)
            WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING {JOB_COLUMNS}
        """),
        params,
    ).first()
    if row is None:
        existing = session.execute(
            text(f"SELECT {JOB_COLUMNS} FROM ai_runtime_job WHERE user_id = :user_id AND job_type = :job_type"
                 " AND target_type = :target_type AND target_id = :target_id"
                 " AND idempotency_key = :idempotency_key"),
            params,
        ).one()
        return job_json(existing), False
    _transition(session, row.id, None, "pending")
    return job_json(row), True


def get_job(session, job_id: str) -> dict:
    row = session.execute(text(f"SELECT {JOB_COLUMNS} FROM ai_runtime_job WHERE id = :id"), {"id": job_id}).first()
    if row is None:
        raise AiJobError("NOT_FOUND", f"AI job {job_id} does not exist")
    job = job_json(row)
    job["transitions"] = [
        {k: v for k, v in {"from": t.from_status, "to": t.to_status, "at": iso(t.at),
                           "errorCode": t.error_code, "runtimeInstanceId": t.runtime_instance_id,
                           "attemptNo": t.attempt_no}.items() if v is not None or k in ("from",)}
        for t in session.execute(
            text("SELECT * FROM ai_job_transition WHERE job_id = :id ORDER BY id"), {"id": job_id})
    ]
    result = session.execute(
        text("SELECT * FROM ai_runtime_result WHERE job_id = :id"
             " ORDER BY (status = 'succeeded') DESC, created_at DESC LIMIT 1"), {"id": job_id}
    ).first()
    job["result"] = result_json(result) if result else None
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
        text(f"SELECT {JOB_COLUMNS} FROM ai_runtime_job {clause} ORDER BY created_at, id LIMIT :limit"),
        params,
    ).all()
    more = len(rows) > limit
    rows = rows[:limit]
    return {"items": [job_json(r) for r in rows],
            "nextCursor": _cursor_encode(rows[-1].created_at, rows[-1].id) if more else None}


def cancel_job(session, timings: QueueTimings, job_id: str) -> dict:
    """pending → cancelled; locked/running → cancel requested; terminal → refused."""
    job = _job_for_update(session, job_id, timings)
    if job.status in TERMINAL:
        raise AiJobError("INVALID_TRANSITION", f"AI job {job_id} is {job.status}; it cannot be cancelled")
    if job.status == "pending":
        session.execute(
            text("UPDATE ai_runtime_job SET status = 'cancelled', finished_at = now(), lock_until = NULL,"
                 " updated_at = now() WHERE id = :id"), {"id": job_id})
        _transition(session, job_id, "pending", "cancelled")
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


def counts_by_status(session) -> dict[str, int]:
    rows = session.execute(text("SELECT status, count(*) FROM ai_runtime_job GROUP BY status"))
    return {status: n for status, n in rows}


RECENT_FAILURES = 20


def queue_stats(session, start: datetime, end: datetime, now: datetime) -> dict:
    """The queue at a glance: depth by status, jobs finished per hour in the
    window, and the latest failures with their error codes."""
    counts = counts_by_status(session)
    hours = session.execute(text(
        "SELECT date_trunc('hour', finished_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour, "
        "count(*) FILTER (WHERE status = 'succeeded') AS succeeded, "
        "count(*) FILTER (WHERE status = 'failed') AS failed "
        "FROM ai_runtime_job WHERE finished_at IS NOT NULL AND finished_at >= :s AND finished_at < :e "
        "GROUP BY 1 ORDER BY 1"), {"s": start, "e": min(end, now)}).all()
    failures = session.execute(text(
        "SELECT j.id, j.job_type, j.error_code, j.error_message, j.finished_at, j.attempt_no, "
        "j.retry_count, (SELECT r.id FROM ai_runtime_job r WHERE r.retried_from_job_id = j.id "
        "  ORDER BY r.created_at, r.id LIMIT 1) AS rerun_job_id "
        "FROM ai_runtime_job j WHERE j.status = 'failed' AND j.finished_at IS NOT NULL "
        "ORDER BY j.finished_at DESC, j.id LIMIT :n"), {"n": RECENT_FAILURES}).all()
    observed_hours = max(0.0, (min(end, now) - start).total_seconds()) / 3600
    succeeded = sum(r.succeeded for r in hours)
    return {
        "from": iso(start), "to": iso(end),
        "byStatus": {s: counts.get(s, 0) for s in JOB_STATUSES},
        "hourly": hourly(start, end, {r.hour: r for r in hours}, ("succeeded", "failed")),
        "throughputPerHour": round(succeeded / observed_hours, 3) if observed_hours > 0 else None,
        "recentFailures": [wire.AI_FAILURE.dump(r) for r in failures],
    }


def rerun_job(session, timings: QueueTimings, job_id: str) -> tuple[dict, bool]:
    """A failed job → a new pending job with ``retriedFromJobId``; (job, created).
    A failed job is rerun once: asking again (a double click, a retried request)
    answers the rerun it already has. Its lock serialises concurrent reruns."""
    job = _job_for_update(session, job_id)
    if job.status != "failed":
        raise AiJobError("INVALID_TRANSITION", f"only a failed job can be rerun; {job_id} is {job.status}")
    earlier = session.execute(text(
        "SELECT id FROM ai_runtime_job WHERE retried_from_job_id = :id ORDER BY created_at, id LIMIT 1"),
        {"id": job.id}).scalar()
    if earlier is not None:
        return get_job(session, earlier), False
    if job.api_key_mode == "user_deepseek_key":
        cred = session.execute(text("SELECT revoked_at FROM ai_credential WHERE id = :id"),
                               {"id": job.credential_id}).first()
        if cred is None or cred.revoked_at is not None:
            raise AiJobError("INVALID_TRANSITION", "the job's credential has been revoked")
    req = {
        "userId": job.user_id, "jobType": job.job_type, "targetType": job.target_type,
        "targetId": job.target_id, "snapshotId": job.snapshot_id, "params": job.params,
        "priority": job.priority, "apiKeyMode": job.api_key_mode, "credentialId": job.credential_id,
        "modelProvider": job.model_provider, "modelName": job.model_name,
        "promptVersion": job.prompt_version, "outputSchemaVersion": job.output_schema_version,
        "maxRetryCount": job.max_retry_count, "timeoutSeconds": job.timeout_seconds,
        "retriedFromJobId": job.id,
    }
    new_job, _ = create_job(session, timings, req)
    return new_job, True


# -- runtime side --------------------------------------------------------------------


def poll_sql(claim: bool, serves: bool = False) -> str:
    """The poll statement: one index range scan per capability
    (``ix_ai_runtime_job_poll`` is ``(job_type, priority, created_at) WHERE
    status='pending'``), merged by ``priority, created_at``. With ``claim`` the
    picked rows are locked (SKIP LOCKED, so concurrent claimers take different
    rows) and leased in the same statement. With ``serves`` only jobs whose
    (modelProvider, apiKeyMode) the runtime declared it can serve are seen."""
    lock_clause = "FOR UPDATE SKIP LOCKED" if claim else ""
    serves_clause = """AND EXISTS (
                SELECT 1 FROM unnest(CAST(:serve_providers AS text[]), CAST(:serve_modes AS text[]))
                    AS s(provider, mode)
                WHERE (s.provider = '*' OR s.provider = j.model_provider) AND s.mode = j.api_key_mode)
    """ if serves else ""
    pick = f"""
        SELECT c.* FROM unnest(CAST(:caps AS text[])) AS cap(job_type)
        CROSS JOIN LATERAL (
            SELECT id, priority, created_at FROM ai_runtime_job j
            WHERE j.status = 'pending' AND j.job_type = cap.job_type AND j.available_at <= now()
            {serves_clause}
            ORDER BY j.priority, j.created_at
            LIMIT :limit {lock_clause}
        ) AS c
        ORDER BY c.priority, c.created_at
        LIMIT :limit
    """
    if not claim:
        return (f"SELECT {JOB_COLUMNS} FROM ai_runtime_job WHERE id IN (SELECT id FROM ({pick}) p)"
                " ORDER BY priority, created_at")
    return f"""
        WITH picked AS ({pick}), upd AS (
            UPDATE ai_runtime_job j SET status = 'locked', locked_by = :rid, locked_at = now(),
                   lock_until = now() + make_interval(secs => :lease), attempt_no = j.attempt_no + 1,
                   updated_at = now()
            FROM picked WHERE j.id = picked.id AND j.status = 'pending'
            RETURNING j.*
        ), t AS (
            INSERT INTO ai_job_transition (job_id, from_status, to_status, runtime_instance_id, attempt_no)
            SELECT id, 'pending', 'locked', :rid, attempt_no FROM upd RETURNING 1
        )
        SELECT {JOB_COLUMNS} FROM upd ORDER BY priority, created_at
    """


def poll_params(capabilities, limit: int, runtime_id: str, timings: QueueTimings,
                serves: list[tuple[str, str]] | None = None) -> dict:
    params = {"caps": list(capabilities), "limit": limit, "rid": runtime_id, "lease": timings.lock_seconds}
    if serves:
        params["serve_providers"] = [p for p, _ in serves]
        params["serve_modes"] = [m for _, m in serves]
    return params


def poll(session, timings: QueueTimings, runtime_id: str, capabilities: list[str],
         limit: int = POLL_LIMIT_DEFAULT, claim: bool = False,
         serves: list[tuple[str, str]] | None = None) -> list[dict]:
    """Pending, available jobs of the given types, ``priority ASC, createdAt ASC``
    (see :func:`poll_sql`); expiry is applied first. ``serves`` is a list of
    ``(modelProvider or "*", apiKeyMode)`` the runtime can serve; None: any."""
    if not 1 <= limit <= POLL_LIMIT_MAX:
        raise AiJobError("VALIDATION_ERROR", f"limit: must be 1..{POLL_LIMIT_MAX}")
    expire_if_any_due(session, timings)
    rows = session.execute(text(poll_sql(claim, bool(serves))),
                           poll_params(capabilities, limit, runtime_id, timings, serves)).all()
    return [poll_item(r, claimed=claim) for r in rows]


def lock(session, timings: QueueTimings, job_id: str, runtime_id: str) -> dict:
    """Seed 000's lock: the conditional UPDATE; zero rows → JOB_ALREADY_LOCKED.
    A held job whose lease ran out is expired and the UPDATE tried once more."""
    row = _lock_update(session, timings, job_id, runtime_id)
    if row is None and expire_due(session, timings, job_id):
        row = _lock_update(session, timings, job_id, runtime_id)
    if row is None:
        status = session.execute(text("SELECT status FROM ai_runtime_job WHERE id = :id"), {"id": job_id}).scalar()
        if status is None:
            raise AiJobError("NOT_FOUND", f"AI job {job_id} does not exist")
        raise AiJobError("JOB_ALREADY_LOCKED", f"AI job {job_id} is {status}, not pending")
    return {"jobId": row.id, "status": row.status, "lockUntil": iso(row.lock_until), "attemptNo": row.attempt_no}


def _lock_update(session, timings: QueueTimings, job_id: str, runtime_id: str):
    return session.execute(
        text("""
        WITH upd AS (
            UPDATE ai_runtime_job SET status = 'locked', locked_by = :rid, locked_at = now(),
                   lock_until = now() + make_interval(secs => :lease), attempt_no = attempt_no + 1,
                   updated_at = now()
            WHERE id = :id AND status = 'pending' AND (lock_until IS NULL OR lock_until < now())
            RETURNING id, status, lock_until, attempt_no
        ), t AS (
            INSERT INTO ai_job_transition (job_id, from_status, to_status, runtime_instance_id, attempt_no)
            SELECT id, 'pending', 'locked', :rid, attempt_no FROM upd RETURNING 1
        ) SELECT * FROM upd"""),
        {"id": job_id, "rid": runtime_id, "lease": timings.lock_seconds},
    ).first()


def _holds(job, runtime_id: str, attempt_no: int | None) -> bool:
    return (job.status in HELD and job.locked_by == runtime_id
            and (attempt_no is None or job.attempt_no == attempt_no))


def _check_holder(job, runtime_id: str, attempt_no: int | None) -> None:
    if not _holds(job, runtime_id, attempt_no):
        raise AiJobError("LOCK_LOST", f"{runtime_id} does not hold attempt "
                         f"{attempt_no if attempt_no is not None else job.attempt_no} of AI job {job.id}")


def _cancel_held(session, job) -> None:
    session.execute(
        text("UPDATE ai_runtime_job SET status = 'cancelled', finished_at = now(), lock_until = NULL,"
             " locked_by = NULL, updated_at = now() WHERE id = :id"), {"id": job.id})
    _transition(session, job.id, job.status, "cancelled", runtime=job.locked_by, attempt=job.attempt_no)


def _start(session, timings, job):
    """locked → running (the first heartbeat, or a result without one), with
    its transition, in one statement; → the new ``lock_until``."""
    return session.execute(
        text("""
        WITH upd AS (
            UPDATE ai_runtime_job SET status = 'running', started_at = now(), updated_at = now(),
                   lock_until = LEAST(now() + make_interval(secs => :lease),
                                      now() + make_interval(secs => timeout_seconds))
            WHERE id = :id RETURNING id, lock_until
        ), t AS (
            INSERT INTO ai_job_transition (job_id, from_status, to_status, runtime_instance_id, attempt_no)
            SELECT id, 'locked', 'running', :rid, :attempt FROM upd RETURNING 1
        ) SELECT lock_until FROM upd"""),
        {"id": job.id, "lease": timings.lock_seconds, "rid": job.locked_by, "attempt": job.attempt_no},
    ).scalar()


def heartbeat(session, timings: QueueTimings, job_id: str, runtime_id: str, attempt_no: int | None) -> dict:
    """Extend the lease (never past the execution timeout); the first one starts the job.
    A pending cancel takes effect here: the job → cancelled, CANCEL_REQUESTED."""
    job = _job_for_update(session, job_id, timings)
    _check_holder(job, runtime_id, attempt_no)
    if job.cancel_requested:
        _cancel_held(session, job)
        raise AiJobError("CANCEL_REQUESTED", f"AI job {job_id} was cancelled; stop working on it")
    if job.status == "locked":
        until = _start(session, timings, job)
    else:
        until = session.execute(
            text("UPDATE ai_runtime_job SET updated_at = now(),"
                 " lock_until = LEAST(now() + make_interval(secs => :lease),"
                 "                    started_at + make_interval(secs => timeout_seconds))"
                 " WHERE id = :id RETURNING lock_until"), {"id": job_id, "lease": timings.lock_seconds}).scalar()
    return {"jobId": job_id, "lockUntil": iso(until)}


def _stored_result(session, key: str):
    return session.execute(text("SELECT * FROM ai_runtime_result WHERE idempotency_key = :k"), {"k": key}).first()


def _result_reply(stored, duplicate: bool) -> dict:
    if stored.error_code == "INVALID_SCHEMA" and stored.output_hash is not None:
        raise AiJobError("INVALID_SCHEMA", stored.error_message)
    return {"jobId": stored.job_id, "attemptNo": stored.attempt_no, "status": stored.status,
            "resultId": stored.id, "duplicate": duplicate}


def submit_result(session, timings: QueueTimings, job_id: str, runtime_id: str, attempt_no: int,
                  status: str, output=None, claimed_hash: str | None = None,
                  error_code: str | None = None, error_message: str | None = None) -> dict:
    """Record an attempt's outcome (idempotent on ``jobId:attemptNo:outputHash``)."""
    if status == "succeeded":
        actual = output_hash(output)
        if claimed_hash != actual:
            raise AiJobError("OUTPUT_HASH_MISMATCH",
                             "outputHash is not the SHA-256 of the output's canonical JSON")
        key = result_idempotency_key(job_id, attempt_no, actual)
    else:
        if error_code not in RETRYABLE:
            raise AiJobError("VALIDATION_ERROR", f"errorCode: {error_code!r} is not one of {sorted(RETRYABLE)}")
        key = result_idempotency_key(job_id, attempt_no, f"failed-{error_code}")
    job = _job_for_update(session, job_id, timings)
    if not _holds(job, runtime_id, attempt_no):
        # While the attempt is held no result of it is stored (any result ends
        # the hold), so only a caller that no longer holds it may be repeating.
        stored = _stored_result(session, key)
        if stored is not None:
            return _result_reply(stored, duplicate=True)
        if job.status == "succeeded":
            raise AiJobError("RESULT_ALREADY_EXISTS", f"AI job {job_id} already has a different succeeded result")
        _check_holder(job, runtime_id, attempt_no)
    if job.cancel_requested:
        _cancel_held(session, job)
        raise AiJobError("CANCEL_REQUESTED", f"AI job {job_id} was cancelled; the result is discarded")
    if job.status == "locked":
        _start(session, timings, job)
    if status == "succeeded":
        violations = schemas.schema_errors(job.job_type, job.output_schema_version, output)
        if violations:
            message = "output breaks the schema: " + "; ".join(violations)
            _store_result(session, key, job, runtime_id, "failed", output, actual, "INVALID_SCHEMA", message)
            _fail(session, timings, job, "INVALID_SCHEMA", message, runtime_id)
            raise AiJobError("INVALID_SCHEMA", message)
        result_id = _new_id()
        session.execute(
            text("""
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
            SELECT id, 'running', 'succeeded', :r, :a FROM u"""),
            {"rid": result_id, "id": job_id, "a": attempt_no, "k": key, "r": runtime_id,
             "o": _json(output), "h": actual})
        return {"jobId": job_id, "attemptNo": attempt_no, "status": "succeeded",
                "resultId": result_id, "duplicate": False}
    result_id = _store_result(session, key, job, runtime_id, "failed", None, None, error_code, error_message)
    new_status = _fail(session, timings, job, error_code, error_message, runtime_id)
    return {"jobId": job_id, "attemptNo": attempt_no, "status": "failed", "resultId": result_id,
            "duplicate": False, "jobStatus": new_status}


def _store_result(session, key, job, runtime_id, status, output, digest, error_code, error_message) -> str:
    result_id = _new_id()
    session.execute(
        text("INSERT INTO ai_runtime_result (id, job_id, attempt_no, idempotency_key, runtime_instance_id,"
             " status, output, output_hash, error_code, error_message)"
             " VALUES (:id, :j, :a, :k, :r, :s, CAST(:o AS jsonb), :h, :ec, :em)"),
        {"id": result_id, "j": job.id, "a": job.attempt_no, "k": key, "r": runtime_id, "s": status,
         "o": None if output is None else _json(output), "h": digest, "ec": error_code,
         "em": (error_message or "")[:2000] or None},
    )
    return result_id


def _fail(session, timings, job, error_code, error_message, runtime_id) -> str:
    """A reported failure: retryable and retries left → pending (retryCount+1), else failed."""
    retryable = RETRYABLE[error_code]
    new_status = session.execute(
        text(f"UPDATE ai_runtime_job j SET {_RETRY_OR_FAIL.format(retryable=':retryable')},"
             " error_code = :code, error_message = :msg WHERE j.id = :id RETURNING j.status"),
        {"id": job.id, "retryable": retryable, "code": error_code, "msg": (error_message or "")[:2000] or None,
         **_backoff_params(timings)},
    ).scalar()
    _transition(session, job.id, "running", new_status, error_code=error_code, runtime=runtime_id,
                attempt=job.attempt_no)
    return new_status


def snapshot_for_runtime(session, timings: QueueTimings, snapshot_id: str, runtime_id: str, job_id: str) -> dict:
    """A runtime reads a snapshot only while it holds a job that names it."""
    expire_due(session, timings, job_id)
    snap = session.execute(text("SELECT * FROM ai_snapshot WHERE id = :id"), {"id": snapshot_id}).first()
    if snap is None:
        raise AiJobError("NOT_FOUND", f"snapshot {snapshot_id} does not exist")
    held = session.execute(
        text("SELECT 1 FROM ai_runtime_job WHERE id = :j AND snapshot_id = :s AND locked_by = :r"
             " AND status IN ('locked', 'running') AND lock_until >= now()"),
        {"j": job_id, "s": snapshot_id, "r": runtime_id}).first()
    if held is None:
        raise AiJobError("FORBIDDEN", f"{runtime_id} holds no job {job_id} naming snapshot {snapshot_id}")
    return snapshot_json(snap)


def credential_for_runtime(session, timings: QueueTimings, box, job_id: str, runtime_id: str,
                           attempt_no: int) -> dict:
    """The plain user key, only for the holder of the job's current attempt."""
    job = _job_for_update(session, job_id, timings)
    _check_holder(job, runtime_id, attempt_no)
    if job.api_key_mode != "user_deepseek_key" or not job.credential_id:
        raise AiJobError("NOT_FOUND", f"AI job {job_id} uses the platform key")
    cred = session.execute(text("SELECT provider, encrypted_key, revoked_at FROM ai_credential WHERE id = :id"),
                           {"id": job.credential_id}).one()
    if cred.revoked_at is not None:
        raise AiJobError("FORBIDDEN", "the credential has been revoked")
    return {"provider": cred.provider, "apiKey": box.open(cred.encrypted_key)}
