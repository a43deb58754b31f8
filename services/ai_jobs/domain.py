"""The vocabulary of AI jobs and the rules that need no database."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from shared.db.models import AI_API_KEY_MODES, AI_JOB_STATUSES, AI_JOB_TYPES, AI_TARGET_TYPES

JOB_TYPES = AI_JOB_TYPES
JOB_STATUSES = AI_JOB_STATUSES
TARGET_TYPES = AI_TARGET_TYPES
API_KEY_MODES = AI_API_KEY_MODES
TERMINAL = ("succeeded", "failed", "cancelled")
HELD = ("locked", "running")

# Seed 6.3: the error codes a runtime may report, and whether they are retried.
RETRYABLE = {
    "MODEL_TIMEOUT": True,
    "MODEL_RATE_LIMIT": True,
    "NETWORK_ERROR": True,
    "TEMPORARY_PROVIDER_ERROR": True,
    "INVALID_SNAPSHOT": False,
    "INVALID_SCHEMA": False,
    "INVALID_CREDENTIAL": False,
    "JOB_TIMEOUT": True,
}

# Error code -> HTTP status, shared by the RPC side (which names the code) and
# the gateway (which answers with the status).
HTTP_STATUS = {
    "VALIDATION_ERROR": 400,
    "OUTPUT_HASH_MISMATCH": 400,
    "FORBIDDEN": 403,
    "NOT_FOUND": 404,
    "JOB_ALREADY_LOCKED": 409,
    "LOCK_LOST": 409,
    "CANCEL_REQUESTED": 409,
    "RESULT_ALREADY_EXISTS": 409,
    "INVALID_TRANSITION": 409,
    "INVALID_SCHEMA": 422,
}

POLL_LIMIT_MAX = 50
POLL_LIMIT_DEFAULT = 20


class AiJobError(Exception):
    """A domain refusal; the RPC returns it as ``{"error": {"code", "message"}}``."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

    def as_dict(self) -> dict:
        return {"error": {"code": self.code, "message": self.message}}


def canonical_json(value) -> bytes:
    """The spec's canonical form: sorted keys, no insignificant whitespace, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def output_hash(value) -> str:
    return hashlib.sha256(canonical_json(value)).hexdigest()


def result_idempotency_key(job_id: str, attempt_no: int, outcome: str) -> str:
    """Seed 8.2: ``jobId:attemptNo:outputHash`` (a failure uses ``failed-<code>``)."""
    return f"{job_id}:{attempt_no}:{outcome}"


@dataclass(frozen=True)
class QueueTimings:
    """Lease, default execution timeout, retry back-off and how long a polled
    job stays offered to its poller alone, in seconds."""

    lock_seconds: float = 60.0
    default_timeout_seconds: int = 120
    retry_backoff_seconds: float = 2.0
    retry_backoff_max_seconds: float = 60.0
    # Long enough for a runtime to lock what its poll offered it (a few ms, a
    # second under load), short enough that a job offered to a runtime that
    # went away is soon seen by the others.
    offer_seconds: float = 2.0

    def backoff(self, retry_count: int) -> float:
        """Exponential back-off before retry number ``retry_count`` (1-based) is pollable."""
        if self.retry_backoff_seconds <= 0:
            return 0.0
        return min(self.retry_backoff_seconds * 2 ** max(retry_count - 1, 0), self.retry_backoff_max_seconds)
