"""The runtimes' side of a job's lease: poll (and claim), lock, heartbeat, the
holder checks, and what only a holder may read (the snapshot, the user's key)."""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy import text

from services.ai_jobs.domain import (
    HELD,
    POLL_LIMIT_DEFAULT,
    POLL_LIMIT_MAX,
    AiJobError,
    QueueTimings,
)
from services.ai_jobs.repository.expiry import expire_due, expire_if_any_due, job_for_update
from services.ai_jobs.repository.rows import transition
from shared import wire
from shared.wire import iso

_SERVES = """AND EXISTS (
                SELECT 1 FROM unnest(CAST(:serve_providers AS text[]), CAST(:serve_modes AS text[]))
                    AS s(provider, mode)
                WHERE (s.provider = '*' OR s.provider = j.model_provider) AND s.mode = j.api_key_mode)
    """


# Only the columns a poll item carries: a page of 50 jobs converts 50 times
# every column it fetches (timestamps, the params JSON), and the item is half
# of the job's columns.
POLL_COLUMNS = ", ".join(f.attr for f in wire.AI_POLL_ITEM.fields)
CLAIMED_COLUMNS = ", ".join(f.attr for f in wire.AI_CLAIMED_ITEM.fields)

# A job offered by a poll is skipped by other runtimes' polls while the offer
# lasts (the caller's own polls still see it); anyone may still lock it.
_NOT_OFFERED_TO_OTHERS = "(j.offered_until IS NULL OR j.offered_until < now() OR j.offered_to = :rid)"

# How many of a poll's jobs are offered to its caller alone: the first one. A
# runtime works a job at a time per free slot, and each offered job is hidden
# from every other poller while the offer lasts; offering the whole page would
# hide the queue from the fleet (200 runtimes x 50 jobs) for jobs nobody locks.
OFFERED_PER_POLL = 1


@lru_cache(maxsize=4)
def poll_statement(claim: bool, serves: bool = False):
    """:func:`poll_sql` as a statement, made once (SQLAlchemy parses a text's
    binds on construction: a measurable part of a poll)."""
    return text(poll_sql(claim, serves))


def poll_sql(claim: bool, serves: bool = False) -> str:
    """The poll statement: one index range scan per capability
    (``ix_ai_runtime_job_poll`` is ``(job_type, priority, created_at) WHERE
    status='pending'``), merged by ``priority, created_at``, skipping jobs
    offered to another runtime while the offer lasts.

    Without ``claim`` (seed 000's poll), the first of those jobs not being
    offered by a concurrent poll right now (``SKIP LOCKED``, looked for from
    the front of the queue however many polls run at once, not only within
    the page) is offered to the caller for ``offer_seconds``, and the page
    starts at it: the jobs before it are exactly the ones other pollers are
    being given, so concurrent pollers get different first jobs instead of
    all racing for the same one. The page stays in ``priority, createdAt``
    order; a poll after the offer ran out sees the job again. With no job to
    offer (every pending one is being offered right now) the page is the
    front of the queue.

    With ``claim`` the picked rows are locked (SKIP LOCKED, so concurrent
    claimers take different rows) and leased in the same statement. With
    ``serves`` only jobs whose (modelProvider, apiKeyMode) the runtime
    declared it can serve are seen."""
    serves_clause = _SERVES if serves else ""
    return _claim_sql(serves_clause) if claim else _offer_sql(serves_clause)


def _pick(serves_clause: str, limit: str, lock: str, after: str = "",
          columns: str = "id, priority, created_at") -> str:
    """Per capability, the first ``limit`` jobs in the seed's order (from
    ``after`` on), merged in that order."""
    return f"""
        SELECT c.* FROM unnest(CAST(:caps AS text[])) AS cap(job_type)
        CROSS JOIN LATERAL (
            SELECT {columns} FROM ai_runtime_job j
            WHERE j.status = 'pending' AND j.job_type = cap.job_type AND j.available_at <= now()
              AND {_NOT_OFFERED_TO_OTHERS} {after}
            {serves_clause}
            ORDER BY j.priority, j.created_at
            LIMIT {limit} {lock}
        ) AS c
        ORDER BY c.priority, c.created_at
        LIMIT {limit}"""


def _offer_sql(serves_clause: str) -> str:
    # The offer walks the queue from its front to the first job no concurrent
    # poll is offering (SKIP LOCKED), however many polls run at once; the page
    # is read from that job on, an index range scan that starts there rather
    # than at the front.
    offer = _pick(serves_clause, str(OFFERED_PER_POLL), "FOR UPDATE OF j SKIP LOCKED")
    from_offer = _pick(serves_clause, ":limit", "",
                       "AND (j.priority, j.created_at) >= (o.priority, o.created_at)", POLL_COLUMNS)
    front = _pick(serves_clause, ":limit", "", columns=POLL_COLUMNS)
    return f"""
        WITH offer AS ({offer}
        ), offered AS (
            UPDATE ai_runtime_job j SET offered_to = :rid,
                   offered_until = now() + make_interval(secs => :offer_seconds)
            FROM offer WHERE j.id = offer.id
            RETURNING j.id
        ), page AS (
            SELECT p.* FROM offer o CROSS JOIN LATERAL ({from_offer}) AS p
            UNION ALL
            -- no offer (every pending job is being offered by a concurrent
            -- poll right now): the page from the front
            SELECT f.* FROM ({front}) AS f
            WHERE NOT EXISTS (SELECT 1 FROM offer)
        )
        -- the page's rows as the index scans read them: no join back to the
        -- table, whose plan would depend on the table's size when planned
        SELECT {POLL_COLUMNS} FROM page ORDER BY priority, created_at"""


def _claim_sql(serves_clause: str) -> str:
    return f"""
        WITH picked AS ({_pick(serves_clause, ":limit", "FOR UPDATE SKIP LOCKED")}), upd AS (
            UPDATE ai_runtime_job j SET status = 'locked', locked_by = :rid, locked_at = now(),
                   lock_until = now() + make_interval(secs => :lease), attempt_no = j.attempt_no + 1,
                   offered_until = NULL, updated_at = now()
            -- by key (an index scan whatever the table's size when planned,
            -- where a join to picked could be planned as a scan of the table)
            WHERE j.id = ANY(ARRAY(SELECT id FROM picked)) AND j.status = 'pending'
            RETURNING j.*
        ), t AS (
            INSERT INTO ai_job_transition (job_id, from_status, to_status, runtime_instance_id,
                                           attempt_no)
            SELECT id, 'pending', 'locked', :rid, attempt_no FROM upd RETURNING 1
        )
        SELECT {CLAIMED_COLUMNS} FROM upd ORDER BY priority, created_at
    """


def poll_params(capabilities, limit: int, runtime_id: str, timings: QueueTimings,
                serves: list[tuple[str, str]] | None = None) -> dict:
    params = {"caps": list(capabilities), "limit": limit, "rid": runtime_id,
              "lease": timings.lock_seconds, "offer_seconds": timings.offer_seconds}
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
    rows = session.execute(poll_statement(claim, bool(serves)),
                           poll_params(capabilities, limit, runtime_id, timings, serves)).all()
    item = wire.AI_CLAIMED_ITEM if claim else wire.AI_POLL_ITEM
    return [item.dump(r) for r in rows]


# Seed 000's lock, the conditional UPDATE, and in the same statement what the
# refusal needs when it takes no row: whether the job exists, its status, and
# whether a lease ran out that expiry has not applied yet. A lost race costs
# this one statement, no more.
_LOCK = text("""
    WITH upd AS (
        UPDATE ai_runtime_job SET status = 'locked', locked_by = :rid, locked_at = now(),
               lock_until = now() + make_interval(secs => :lease), attempt_no = attempt_no + 1,
               offered_until = NULL, updated_at = now()
        WHERE id = :id AND status = 'pending' AND (lock_until IS NULL OR lock_until < now())
        RETURNING id, status, lock_until, attempt_no
    ), t AS (
        INSERT INTO ai_job_transition (job_id, from_status, to_status, runtime_instance_id,
                                       attempt_no)
        SELECT id, 'pending', 'locked', :rid, attempt_no FROM upd RETURNING 1
    )
    SELECT true AS taken, id, status, lock_until, attempt_no, false AS lease_over FROM upd
    UNION ALL
    SELECT false, id, status, lock_until, attempt_no,
           status IN ('locked', 'running') AND lock_until < now()
    FROM ai_runtime_job WHERE id = :id AND NOT EXISTS (SELECT 1 FROM upd)""")


def lock(session, timings: QueueTimings, job_id: str, runtime_id: str) -> dict:
    """Seed 000's lock: the conditional UPDATE; zero rows → JOB_ALREADY_LOCKED.
    A held job whose lease ran out is expired and the UPDATE tried once more."""
    params = {"id": job_id, "rid": runtime_id, "lease": timings.lock_seconds}
    row = session.execute(_LOCK, params).first()
    if row is not None and row.lease_over and expire_due(session, timings, job_id):
        row = session.execute(_LOCK, params).first()
    if row is None:
        raise AiJobError("NOT_FOUND", f"AI job {job_id} does not exist")
    if not row.taken:
        # The status as this statement's snapshot saw it: "pending" means a
        # concurrent lock committed first.
        now = "locked by another runtime" if row.status == "pending" else row.status
        raise AiJobError("JOB_ALREADY_LOCKED", f"AI job {job_id} is {now}, not pending")
    return {"jobId": row.id, "status": row.status, "lockUntil": iso(row.lock_until),
            "attemptNo": row.attempt_no}


def holds(job, runtime_id: str, attempt_no: int | None) -> bool:
    return (job.status in HELD and job.locked_by == runtime_id
            and (attempt_no is None or job.attempt_no == attempt_no))


def check_holder(job, runtime_id: str, attempt_no: int | None) -> None:
    if not holds(job, runtime_id, attempt_no):
        attempt = attempt_no if attempt_no is not None else job.attempt_no
        raise AiJobError("LOCK_LOST", f"{runtime_id} does not hold attempt {attempt} of AI job {job.id}")


def cancel_held(session, job) -> None:
    """A requested cancel takes effect on a held job."""
    session.execute(
        text("UPDATE ai_runtime_job SET status = 'cancelled', finished_at = now(),"
             " lock_until = NULL, locked_by = NULL, updated_at = now() WHERE id = :id"),
        {"id": job.id})
    transition(session, job.id, job.status, "cancelled", runtime=job.locked_by,
               attempt=job.attempt_no)


def start(session, timings, job):
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
            INSERT INTO ai_job_transition (job_id, from_status, to_status, runtime_instance_id,
                                           attempt_no)
            SELECT id, 'locked', 'running', :rid, :attempt FROM upd RETURNING 1
        ) SELECT lock_until FROM upd"""),
        {"id": job.id, "lease": timings.lock_seconds, "rid": job.locked_by,
         "attempt": job.attempt_no},
    ).scalar()


_EXTEND = text("UPDATE ai_runtime_job SET updated_at = now(),"
               " lock_until = LEAST(now() + make_interval(secs => :lease),"
               "                    started_at + make_interval(secs => timeout_seconds))"
               " WHERE id = :id RETURNING lock_until")


def heartbeat(session, timings: QueueTimings, job_id: str, runtime_id: str,
              attempt_no: int | None) -> dict:
    """Extend the lease (never past the execution timeout); the first one starts the job.
    A pending cancel takes effect here: the job → cancelled, CANCEL_REQUESTED."""
    job = job_for_update(session, job_id, timings)
    check_holder(job, runtime_id, attempt_no)
    if job.cancel_requested:
        cancel_held(session, job)
        raise AiJobError("CANCEL_REQUESTED", f"AI job {job_id} was cancelled; stop working on it")
    if job.status == "locked":
        until = start(session, timings, job)
    else:
        until = session.execute(_EXTEND, {"id": job_id, "lease": timings.lock_seconds}).scalar()
    return {"jobId": job_id, "lockUntil": iso(until)}


def snapshot_for_runtime(session, timings: QueueTimings, snapshot_id: str, runtime_id: str,
                         job_id: str) -> dict:
    """A runtime reads a snapshot only while it holds a job that names it."""
    expire_due(session, timings, job_id)
    snap = session.execute(text("SELECT * FROM ai_snapshot WHERE id = :id"),
                           {"id": snapshot_id}).first()
    if snap is None:
        raise AiJobError("NOT_FOUND", f"snapshot {snapshot_id} does not exist")
    held = session.execute(
        text("SELECT 1 FROM ai_runtime_job WHERE id = :j AND snapshot_id = :s AND locked_by = :r"
             " AND status IN ('locked', 'running') AND lock_until >= now()"),
        {"j": job_id, "s": snapshot_id, "r": runtime_id}).first()
    if held is None:
        raise AiJobError("FORBIDDEN",
                         f"{runtime_id} holds no job {job_id} naming snapshot {snapshot_id}")
    return wire.AI_SNAPSHOT.dump(snap)


def credential_for_runtime(session, timings: QueueTimings, box, job_id: str, runtime_id: str,
                           attempt_no: int) -> dict:
    """The plain user key, only for the holder of the job's current attempt."""
    job = job_for_update(session, job_id, timings)
    check_holder(job, runtime_id, attempt_no)
    if job.api_key_mode != "user_deepseek_key" or not job.credential_id:
        raise AiJobError("NOT_FOUND", f"AI job {job_id} uses the platform key")
    cred = session.execute(
        text("SELECT provider, encrypted_key, revoked_at FROM ai_credential WHERE id = :id"),
        {"id": job.credential_id}).one()
    if cred.revoked_at is not None:
        raise AiJobError("FORBIDDEN", "the credential has been revoked")
    return {"provider": cred.provider, "apiKey": box.open(cred.encrypted_key)}
