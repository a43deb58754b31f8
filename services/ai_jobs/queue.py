"""``AiJobQueue``: the AI job queue's operations, one short transaction each.

This is seed 000's "API" layer, used by every gateway process (the HTTP
endpoints), the expiry sweeper and ``linectl shell``. Each method checks its
arguments, opens one unit of work on PostgreSQL and calls the repository,
whose conditional SQL is what keeps many concurrent writers safe: there is no
single owner to go through (that is the line_controller's job for production
state, not for this queue).

A domain refusal raises :class:`AiJobError`; the transaction still commits
what was decided before it (an expiry noticed on the way, a schema violation
recorded as the job's failure). Mapping the code to an HTTP status happens
once, at the gateway's edge.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.engine import Engine

from services.ai_jobs import repository as repo
from services.ai_jobs import validation
from services.ai_jobs.credentials import CredentialBox
from services.ai_jobs.domain import JOB_TYPES, TARGET_TYPES, AiJobError, QueueTimings
from services.ai_jobs.prepared import prepared_unit

ATTEMPT_MAX = 2**31 - 1


@dataclass(frozen=True)
class AiQueueConfig:
    timings: QueueTimings
    box: CredentialBox

    @classmethod
    def from_settings(cls, settings) -> AiQueueConfig:
        return cls(
            timings=QueueTimings(
                lock_seconds=float(settings.ai_lock_seconds),
                default_timeout_seconds=int(settings.ai_timeout_seconds),
                retry_backoff_seconds=float(settings.ai_retry_backoff_seconds),
            ),
            box=CredentialBox.from_settings(settings),
        )


class AiJobQueue:
    """``engine``: the writer's engine. Operations use SQLAlchemy Core
    connections, not ORM sessions: the repository is plain SQL, and a request
    here is hot enough that the ORM's bookkeeping showed in the profile."""

    def __init__(self, engine: Engine, config: AiQueueConfig):
        self.engine = engine
        self.config = config

    @property
    def timings(self) -> QueueTimings:
        return self.config.timings

    def _unit(self, fn: Callable, *args, **kwargs):
        """One transaction; a refusal still commits what was decided before it."""
        refusal = None
        with self.engine.connect() as conn:
            with conn.begin():
                try:
                    return fn(conn, *args, **kwargs)
                except AiJobError as exc:
                    refusal = exc
        raise refusal

    def _hot_unit(self, fn: Callable, *args, transaction: bool = True, **kwargs):
        """As :meth:`_unit`, on the bare driver with prepared statements
        (``services.ai_jobs.prepared``): for what runtimes call all the time.
        ``transaction=False`` for an operation made of statements that each
        stand alone (each is atomic, none decides under another's row lock)."""
        refusal = None
        with prepared_unit(self.engine, transaction=transaction) as unit:
            try:
                return fn(unit, *args, **kwargs)
            except AiJobError as exc:
                refusal = exc
        raise refusal

    def _read(self, fn: Callable, *args, **kwargs):
        """A read: no expiry, nothing to commit."""
        with self.engine.connect() as conn:
            try:
                return fn(conn, *args, **kwargs)
            finally:
                conn.rollback()

    # -- the learning platform's side ----------------------------------------------

    def create_snapshot(self, user_id, target_type, target_id, data) -> dict:
        validation.text("userId", user_id)
        validation.choice("targetType", target_type, TARGET_TYPES)
        validation.text("targetId", target_id)
        if not isinstance(data, dict):
            raise AiJobError("VALIDATION_ERROR", "data: must be an object")
        return self._unit(repo.create_snapshot, user_id, target_type, target_id, data)

    def create_credential(self, user_id, api_key, provider="deepseek") -> dict:
        validation.text("userId", user_id)
        validation.text("apiKey", api_key, limit=500)
        validation.choice("provider", provider, ("deepseek",))
        return self._unit(repo.create_credential, self.config.box, user_id, provider, api_key)

    def create_job(self, request: dict) -> tuple[dict, bool]:
        """``(job, created)``; ``created`` is False for a repeated idempotency key."""
        req = validation.create_job_request(request)
        return self._unit(repo.create_job, self.timings, req)

    def get_job(self, job_id) -> dict:
        return self._read(repo.get_job, validation.text("jobId", job_id))

    def list_jobs(self, user_id=None, status=None, job_type=None, limit=50, cursor=None) -> dict:
        validation.text("userId", user_id, required=False)
        validation.status_filter(status)
        validation.choice("jobType", job_type, JOB_TYPES, required=False)
        validation.integer("limit", limit, 1, 500)
        return self._read(repo.list_jobs, user_id=user_id, status=status, job_type=job_type,
                          limit=limit, cursor=cursor)

    def cancel_job(self, job_id) -> dict:
        return self._unit(repo.cancel_job, self.timings, validation.text("jobId", job_id))

    def revoke_user(self, user_id) -> dict:
        return self._unit(repo.revoke_user, self.timings, validation.text("userId", user_id))

    def rerun_job(self, job_id) -> tuple[dict, bool]:
        return self._unit(repo.rerun_job, self.timings, validation.text("jobId", job_id))

    def stats(self, start, end, now) -> dict:
        """``GET /api/ai/stats`` (the page's AI queue panel)."""
        return self._read(repo.queue_stats, start, end, now)

    def counts(self) -> dict[str, int]:
        return self._read(repo.counts_by_status)

    def figures(self) -> dict:
        """Depth by status, the oldest pending job's age, jobs finished lately (for /metrics)."""
        return self._read(repo.queue_figures)

    # -- the runtimes' side ------------------------------------------------------------

    def poll(self, runtime_id, capabilities, limit=20, claim=False, serves=None) -> list[dict]:
        validation.text("runtimeInstanceId", runtime_id)
        caps = validation.capabilities(capabilities)
        limit = validation.poll_limit(limit)
        if not isinstance(claim, bool):
            raise AiJobError("VALIDATION_ERROR", "claim: must be a boolean")
        serves = validation.serves(serves)
        # Expiry, then the poll (or claim): each one statement, atomic alone.
        return self._hot_unit(repo.poll, self.timings, runtime_id, caps, limit, claim, serves,
                              transaction=False)

    def lock(self, job_id, runtime_id) -> dict:
        validation.text("runtimeInstanceId", runtime_id)
        # The conditional UPDATE alone (and, rarely, an expiry and the UPDATE again).
        return self._hot_unit(repo.lock, self.timings, validation.text("jobId", job_id), runtime_id,
                              transaction=False)

    def heartbeat(self, job_id, runtime_id, attempt_no) -> dict:
        validation.text("runtimeInstanceId", runtime_id)
        validation.required_integer("attemptNo", attempt_no, 1, ATTEMPT_MAX)
        return self._hot_unit(repo.heartbeat, self.timings, validation.text("jobId", job_id),
                          runtime_id, attempt_no)

    def submit_result(self, job_id, runtime_id, attempt_no, status, output=None, output_hash=None,
                      error_code=None, error_message=None) -> dict:
        validation.text("runtimeInstanceId", runtime_id)
        validation.required_integer("attemptNo", attempt_no, 1, ATTEMPT_MAX)
        validation.choice("status", status, ("succeeded", "failed"))
        if status == "succeeded":
            if output is None:
                raise AiJobError("VALIDATION_ERROR", "output: is required when status=succeeded")
            validation.text("outputHash", output_hash, limit=64)
        else:
            validation.text("errorCode", error_code, limit=64)
            validation.text("errorMessage", error_message, required=False, limit=2000)
        return self._hot_unit(repo.submit_result, self.timings, validation.text("jobId", job_id),
                          runtime_id, attempt_no, status, output=output, claimed_hash=output_hash,
                          error_code=error_code, error_message=error_message)

    def snapshot_for_runtime(self, snapshot_id, runtime_id, job_id) -> dict:
        validation.text("runtimeInstanceId", runtime_id)
        return self._unit(repo.snapshot_for_runtime, self.timings,
                          validation.text("snapshotId", snapshot_id), runtime_id,
                          validation.text("jobId", job_id))

    def credential_for_runtime(self, job_id, runtime_id, attempt_no) -> dict:
        validation.text("runtimeInstanceId", runtime_id)
        validation.required_integer("attemptNo", attempt_no, 1, ATTEMPT_MAX)
        return self._unit(repo.credential_for_runtime, self.timings, self.config.box,
                          validation.text("jobId", job_id), runtime_id, attempt_no)

    # -- expiry ---------------------------------------------------------------------------

    def expire_due(self, limit: int = 200) -> list[dict]:
        """One sweep: every held job whose lease or timeout ran out. Safe to run
        in many processes at once (``FOR UPDATE SKIP LOCKED``: each expiry
        happens in exactly one of them)."""
        return self._unit(repo.expire_due, self.timings, None, limit)
