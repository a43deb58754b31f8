"""The AI job queue in SQL: the only package that writes the ai_* tables.

Every function takes an open SQLAlchemy session (the caller's unit of work:
one transaction per call) and uses raw SQL, because the queue's safety *is*
the SQL: the lock is the seed's conditional UPDATE (zero rows →
``JOB_ALREADY_LOCKED``), claims use ``FOR UPDATE SKIP LOCKED``, and per-job
operations (heartbeat, result, cancel) hold the row lock while they decide.

Expiry (lease or execution timeout) is applied by :func:`expire_due`, which the
sweeper calls on a timer and every operation calls first, so correctness
never waits on the sweeper. A refusal (:class:`AiJobError`) does not undo the
transaction: the caller commits it, so an expiry noticed on the way, or a
decided outcome (schema violation, a cancel taking effect), is kept. The
execution timeout is folded into the lease: a heartbeat never extends
``lock_until`` past ``started_at + timeoutSeconds``.

By responsibility: ``rows`` (the job's columns, the failure rule, transitions),
``expiry``, ``platform`` (snapshots, credentials, creating, listing, cancelling
and rerunning jobs), ``stats``, ``leases`` (poll, lock, heartbeat and what a
holder may read) and ``results`` (a runtime's outcome).
"""

from services.ai_jobs.repository.expiry import expire_due, expire_if_any_due
from services.ai_jobs.repository.leases import (
    credential_for_runtime,
    heartbeat,
    lock,
    poll,
    poll_params,
    poll_sql,
    snapshot_for_runtime,
)
from services.ai_jobs.repository.platform import (
    cancel_job,
    create_credential,
    create_job,
    create_snapshot,
    get_job,
    list_jobs,
    rerun_job,
    revoke_user,
)
from services.ai_jobs.repository.results import submit_result
from services.ai_jobs.repository.rows import JOB_COLUMNS
from services.ai_jobs.repository.stats import RECENT_FAILURES, counts_by_status, queue_figures, queue_stats

__all__ = [
    "JOB_COLUMNS", "RECENT_FAILURES", "cancel_job", "counts_by_status", "queue_figures", "create_credential",
    "create_job", "create_snapshot", "credential_for_runtime", "expire_due", "expire_if_any_due",
    "get_job", "heartbeat", "list_jobs", "lock", "poll", "poll_params", "poll_sql", "queue_stats",
    "rerun_job", "revoke_user", "snapshot_for_runtime", "submit_result",
]
