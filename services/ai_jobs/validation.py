"""Checks of the queue's arguments (the gateway's schemas validate too; the
queue is also an API, e.g. from ``linectl shell``). Each raises
``AiJobError("VALIDATION_ERROR")`` naming the field."""

from __future__ import annotations

from services.ai_jobs.domain import (
    API_KEY_MODES,
    JOB_STATUSES,
    JOB_TYPES,
    POLL_LIMIT_MAX,
    TARGET_TYPES,
    AiJobError,
)

MAX_TEXT = 200


def _bad(field: str, why: str):
    raise AiJobError("VALIDATION_ERROR", f"{field}: {why}")


def result_rule_broken(body: dict) -> tuple[str, str] | None:
    """The rules between a result's fields (the seed's result shape): the field and
    why, for the first one broken, else None. Both of the gateway's paths use it."""
    if body.get("status") == "succeeded":
        for field in ("output", "outputHash"):
            if field not in body:
                return field, "is required when status is succeeded"
        if "errorCode" in body:
            return "errorCode", "only with status failed"
        return None
    if "errorCode" not in body:
        return "errorCode", "is required when status is failed"
    if "output" in body:
        return "output", "only with status succeeded"
    return None


def text(field: str, value, *, required: bool = True, limit: int = MAX_TEXT) -> str | None:
    if value is None:
        if required:
            _bad(field, "is required")
        return None
    if not isinstance(value, str) or not value.strip():
        _bad(field, "must be a non-empty string")
    if len(value) > limit:
        _bad(field, f"must be at most {limit} characters")
    return value


def integer(field: str, value, lo: int, hi: int, default: int | None = None) -> int | None:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        _bad(field, f"must be an integer {lo}..{hi}")
    return value


def required_integer(field: str, value, lo: int, hi: int) -> int:
    if value is None:
        _bad(field, "is required")
    return integer(field, value, lo, hi)


def choice(field: str, value, choices, *, required: bool = True) -> str | None:
    if value is None and not required:
        return None
    if value not in choices:
        _bad(field, f"must be one of {', '.join(choices)}")
    return value


def capabilities(value) -> list[str]:
    if not isinstance(value, list) or not value:
        _bad("capabilities", "must be a non-empty list of job types")
    for cap in value:
        choice("capabilities", cap, JOB_TYPES)
    return sorted(set(value))


def poll_limit(value) -> int:
    return integer("limit", value, 1, POLL_LIMIT_MAX, default=20)


def status_filter(value) -> str | None:
    return choice("status", value, JOB_STATUSES, required=False)


def create_job_request(req) -> dict:
    if not isinstance(req, dict):
        _bad("body", "must be an object")
    out = {
        "userId": text("userId", req.get("userId")),
        "jobType": choice("jobType", req.get("jobType"), JOB_TYPES),
        "targetType": choice("targetType", req.get("targetType"), TARGET_TYPES),
        "targetId": text("targetId", req.get("targetId")),
        "snapshotId": text("snapshotId", req.get("snapshotId"), required=False),
        "priority": integer("priority", req.get("priority"), 0, 9, default=0),
        "idempotencyKey": text("idempotencyKey", req.get("idempotencyKey"), required=False),
        "apiKeyMode": choice("apiKeyMode", req.get("apiKeyMode") or "platform_key", API_KEY_MODES),
        "credentialId": text("credentialId", req.get("credentialId"), required=False),
        "maxRetryCount": integer("maxRetryCount", req.get("maxRetryCount"), 0, 10, default=3),
        "timeoutSeconds": integer("timeoutSeconds", req.get("timeoutSeconds"), 1, 86400),
        "modelProvider": text("modelProvider", req.get("modelProvider"), required=False, limit=64),
        "modelName": text("modelName", req.get("modelName"), required=False, limit=64),
        "promptVersion": text("promptVersion", req.get("promptVersion"), required=False, limit=32),
        "outputSchemaVersion": text("outputSchemaVersion", req.get("outputSchemaVersion"),
                                    required=False, limit=32),
    }
    params = req.get("params")
    if params is not None and not isinstance(params, dict):
        _bad("params", "must be an object")
    out["params"] = params or {}
    return out


def serves(value) -> list[tuple[str, str]] | None:
    """``[{"modelProvider": name | "*", "apiKeyModes": [mode, ...]}, ...]`` →
    ``[(provider, mode), ...]``; None when the runtime declared nothing."""
    if value is None:
        return None
    if not isinstance(value, list) or not value or len(value) > 16:
        _bad("serves", "must be a non-empty list of at most 16 entries")
    pairs = []
    for entry in value:
        if not isinstance(entry, dict) or set(entry) - {"modelProvider", "apiKeyModes"}:
            _bad("serves", "entries are {modelProvider, apiKeyModes}")
        provider = text("serves.modelProvider", entry.get("modelProvider"), limit=64)
        modes = entry.get("apiKeyModes", list(API_KEY_MODES))
        if not isinstance(modes, list) or not modes:
            _bad("serves.apiKeyModes", "must be a non-empty list")
        for mode in modes:
            pairs.append((provider, choice("serves.apiKeyModes", mode, API_KEY_MODES)))
    return sorted(set(pairs))
