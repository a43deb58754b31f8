"""AI job helpers for ``linectl shell``: ``ai.jobs()``, ``ai.job(id)``,
``ai.counts()``, ``ai.cancel(id)``, ``ai.rerun(id)``, ``ai.revoke(user)``.

They call :class:`AiJobQueue` on PostgreSQL directly, as the gateway does (no
RPC: no service hosts AI writes), with the gateway's role
``linectl_gateway``, so the shell can write AI tables and nothing else.
"""

from __future__ import annotations

import json

from services.ai_jobs.domain import AiJobError
from services.ai_jobs.queue import AiJobQueue, AiQueueConfig
from shared.db import roles
from shared.db.engine import make_engine


class AiShell:
    def __init__(self, settings):
        engine = make_engine(settings.database_url, role=settings.db_role(roles.GATEWAY), pool_size=1)
        self.queue = AiJobQueue(engine, AiQueueConfig.from_settings(settings))

    def __repr__(self) -> str:
        return "ai: jobs(status=None, user=None) job(id) counts() cancel(id) rerun(id) revoke(user)"

    def _run(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except AiJobError as exc:
            print(f"refused: {exc.code}: {exc.message}")
            return None

    def jobs(self, status=None, user=None, limit=50):
        """AI jobs, oldest first, one line each."""
        page = self._run(self.queue.list_jobs, user_id=user, status=status, limit=limit)
        for j in (page or {}).get("items", []):
            print(f"{j['id']}  {j['status']:<10} {j['jobType']:<24} user={j['userId']:<12}"
                  f" attempt={j['attemptNo']} retries={j['retryCount']}/{j['maxRetryCount']}"
                  f" {j['errorCode'] or ''}")

    def job(self, job_id):
        """One job with its transitions and result."""
        found = self._run(self.queue.get_job, job_id)
        if found is not None:
            print(json.dumps(found, indent=2, ensure_ascii=False, default=str))

    def counts(self):
        for status, n in sorted(self.queue.counts().items()):
            print(f"{status:<12} {n}")

    def cancel(self, job_id):
        done = self._run(self.queue.cancel_job, job_id)
        if done is not None:
            print(f"{job_id}: {done['status']}{' (cancel requested)' if done['cancelRequested'] else ''}")

    def rerun(self, job_id):
        out = self._run(self.queue.rerun_job, job_id)
        if out is not None:
            new, created = out
            print(f"{job_id} rerun as {new['id']}{'' if created else ' (already)'}")

    def revoke(self, user_id):
        out = self._run(self.queue.revoke_user, user_id)
        if out is not None:
            print(json.dumps(out, indent=2))
