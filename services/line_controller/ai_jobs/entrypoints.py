"""The line_controller's AI-job RPCs and the expiry sweeper, as a mixin.

``class LineControllerService(AiJobsEntrypoints, ...)`` gets every ``ai_*``
RPC. Entrypoints are thin: validate, open one unit of work, call the
repository. A domain refusal comes back as ``{"error": {"code", "message"}}``
(the gateway maps the code to an HTTP status with ``domain.HTTP_STATUS``);
anything else is a bug and raises.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from nameko.extensions import DependencyProvider
from nameko.rpc import rpc
from nameko.timer import timer

from services.line_controller.ai_jobs import repository as repo
from services.line_controller.ai_jobs import schemas, validation
from services.line_controller.ai_jobs.credentials import CredentialBox
from services.line_controller.ai_jobs.domain import (
    JOB_TYPES,
    TARGET_TYPES,
    AiJobError,
    QueueTimings,
)
from shared.config import load_settings
from shared.db.dependency import Database

log = logging.getLogger(__name__)

SWEEP_INTERVAL_SECONDS = 1.0


@dataclass(frozen=True)
class AiQueue:
    timings: QueueTimings
    box: CredentialBox


class AiQueueConfig(DependencyProvider):
    """Lease, timeout, back-off and the credential key, from the settings;
    ``LINECTL_AI_*`` keys in the nameko config override them (tests do)."""

    def setup(self):
        settings = load_settings()
        cfg = self.container.config
        overrides = {
            "ai_lock_seconds": cfg.get("LINECTL_AI_LOCK_SECONDS"),
            "ai_timeout_seconds": cfg.get("LINECTL_AI_TIMEOUT_SECONDS"),
            "ai_retry_backoff_seconds": cfg.get("LINECTL_AI_RETRY_BACKOFF_SECONDS"),
            "ai_credential_key": cfg.get("LINECTL_AI_CREDENTIAL_KEY"),
            "data_dir": cfg.get("LINECTL_DATA_DIR"),
        }
        settings = settings.replace(**{k: v for k, v in overrides.items() if v is not None})
        self.queue = AiQueue(
            timings=QueueTimings(
                lock_seconds=float(settings.ai_lock_seconds),
                default_timeout_seconds=int(settings.ai_timeout_seconds),
                retry_backoff_seconds=float(settings.ai_retry_backoff_seconds),
            ),
            box=CredentialBox.from_settings(settings),
        )

    def get_dependency(self, worker_ctx):
        return self.queue


class AiJobsEntrypoints:
    ai_db = Database(pool_size=10)
    ai_queue = AiQueueConfig()

    def _ai_unit(self, fn, *args, **kwargs):
        """One transaction; a refusal still commits what was decided before it."""
        session = self.ai_db()
        try:
            with session.begin():
                try:
                    return fn(session, *args, **kwargs)
                except AiJobError as exc:
                    refusal = exc
            return refusal.as_dict()
        finally:
            session.close()

    def _ai_checked(self, check):
        """Run argument checks; a refusal as the RPC's error reply, else None."""
        try:
            check()
        except AiJobError as exc:
            return exc.as_dict()
        return None

    # -- platform ------------------------------------------------------------------

    @rpc
    def ai_create_snapshot(self, user_id, target_type, target_id, data):
        def check():
            validation.text("userId", user_id)
            validation.choice("targetType", target_type, TARGET_TYPES)
            validation.text("targetId", target_id)
            if not isinstance(data, dict):
                raise AiJobError("VALIDATION_ERROR", "data: must be an object")
        return self._ai_checked(check) or self._ai_unit(repo.create_snapshot, user_id, target_type, target_id, data)

    @rpc
    def ai_create_credential(self, user_id, api_key, provider="deepseek"):
        def check():
            validation.text("userId", user_id)
            validation.text("apiKey", api_key, limit=500)
            validation.choice("provider", provider, ("deepseek",))
        return self._ai_checked(check) or self._ai_unit(repo.create_credential, self.ai_queue.box, user_id,
                                                  provider, api_key)

    @rpc
    def ai_create_job(self, request):
        """→ ``{"job": {...}, "created": bool}`` (False: an earlier job with the same idempotency key)."""
        try:
            req = validation.create_job_request(request)
        except AiJobError as exc:
            return exc.as_dict()

        def create(session):
            job, created = repo.create_job(session, self.ai_queue.timings, req)
            return {"job": job, "created": created}
        return self._ai_unit(create)

    @rpc
    def ai_get_job(self, job_id):
        return self._ai_unit(repo.get_job, str(job_id))

    @rpc
    def ai_list_jobs(self, user_id=None, status=None, job_type=None, limit=50, cursor=None):
        def check():
            validation.status_filter(status)
            validation.choice("jobType", job_type, JOB_TYPES, required=False)
            validation.integer("limit", limit, 1, 500)
        return self._ai_checked(check) or self._ai_unit(
            repo.list_jobs, user_id=user_id, status=status, job_type=job_type, limit=limit, cursor=cursor)

    @rpc
    def ai_cancel_job(self, job_id):
        return self._ai_unit(repo.cancel_job, self.ai_queue.timings, str(job_id))

    @rpc
    def ai_revoke_user(self, user_id):
        error = self._ai_checked(lambda: validation.text("userId", user_id))
        return error or self._ai_unit(repo.revoke_user, self.ai_queue.timings, user_id)

    @rpc
    def ai_rerun_job(self, job_id):
        return self._ai_unit(repo.rerun_job, self.ai_queue.timings, str(job_id))

    @rpc
    def ai_schema(self, job_type, version=None):
        schema = schemas.schema_for(job_type, version) if job_type in JOB_TYPES else None
        if schema is None:
            return AiJobError("NOT_FOUND", f"no output schema for {job_type} v{version or '1'}").as_dict()
        return schema

    # -- runtime -------------------------------------------------------------------

    @rpc
    def ai_poll(self, runtime_instance_id, capabilities, limit=20, claim=False):
        try:
            validation.text("runtimeInstanceId", runtime_instance_id)
            caps = validation.capabilities(capabilities)
            limit = validation.poll_limit(limit)
        except AiJobError as exc:
            return exc.as_dict()

        def poll(session):
            return {"jobs": repo.poll(session, self.ai_queue.timings, runtime_instance_id, caps,
                                      limit, bool(claim))}
        return self._ai_unit(poll)

    @rpc
    def ai_lock(self, job_id, runtime_instance_id):
        error = self._ai_checked(lambda: validation.text("runtimeInstanceId", runtime_instance_id))
        return error or self._ai_unit(repo.lock, self.ai_queue.timings, str(job_id), runtime_instance_id)

    @rpc
    def ai_heartbeat(self, job_id, runtime_instance_id, attempt_no=None):
        def check():
            validation.text("runtimeInstanceId", runtime_instance_id)
            validation.integer("attemptNo", attempt_no, 1, 2**31 - 1)
        return self._ai_checked(check) or self._ai_unit(repo.heartbeat, self.ai_queue.timings, str(job_id),
                                                  runtime_instance_id, attempt_no)

    @rpc
    def ai_submit_result(self, job_id, runtime_instance_id, attempt_no, status, output=None,
                         output_hash=None, error_code=None, error_message=None):
        def check():
            validation.text("runtimeInstanceId", runtime_instance_id)
            if attempt_no is None:
                raise AiJobError("VALIDATION_ERROR", "attemptNo: is required")
            validation.integer("attemptNo", attempt_no, 1, 2**31 - 1)
            validation.choice("status", status, ("succeeded", "failed"))
            if status == "succeeded":
                if output is None:
                    raise AiJobError("VALIDATION_ERROR", "output: is required when status=succeeded")
                validation.text("outputHash", output_hash, limit=64)
            else:
                validation.text("errorCode", error_code, limit=64)
                validation.text("errorMessage", error_message, required=False, limit=2000)
        return self._ai_checked(check) or self._ai_unit(
            repo.submit_result, self.ai_queue.timings, str(job_id), runtime_instance_id, attempt_no, status,
            output=output, claimed_hash=output_hash, error_code=error_code, error_message=error_message)

    @rpc
    def ai_get_snapshot_for_runtime(self, snapshot_id, runtime_instance_id, job_id):
        def check():
            validation.text("runtimeInstanceId", runtime_instance_id)
            validation.text("jobId", job_id)
        return self._ai_checked(check) or self._ai_unit(repo.snapshot_for_runtime, self.ai_queue.timings,
                                                  str(snapshot_id), runtime_instance_id, job_id)

    @rpc
    def ai_get_credential_for_runtime(self, job_id, runtime_instance_id, attempt_no):
        def check():
            validation.text("runtimeInstanceId", runtime_instance_id)
            validation.integer("attemptNo", attempt_no, 1, 2**31 - 1)
            if attempt_no is None:
                raise AiJobError("VALIDATION_ERROR", "attemptNo: is required")
        return self._ai_checked(check) or self._ai_unit(repo.credential_for_runtime, self.ai_queue.timings,
                                                  self.ai_queue.box, str(job_id), runtime_instance_id,
                                                  attempt_no)

    # -- sweeper -------------------------------------------------------------------

    @timer(interval=SWEEP_INTERVAL_SECONDS)
    def ai_sweep(self):
        """Expire leases and execution timeouts even when no runtime calls in."""
        expired = self._ai_unit(repo.expire_due, self.ai_queue.timings)
        for item in expired:
            log.info("AI job %s expired (%s): %s -> %s", item["jobId"], item["errorCode"],
                     item["from"], item["to"])
        return len(expired)
