"""``/internal/runtime/*``: the AI Runtime workers' protocol (role ``runtime``)."""

from __future__ import annotations

from flask_smorest import Blueprint
from marshmallow import fields, validate

from gateway.api.ai_common import TEXT, Strict, call_ai, not_null
from gateway.auth import require
from gateway.errors import ApiError
from services.line_controller.ai_jobs.domain import JOB_TYPES, POLL_LIMIT_MAX, RETRYABLE

blp = Blueprint("runtime", __name__, url_prefix="/internal/runtime", description="AI Runtime protocol")

ATTEMPT = validate.Range(1, 2**31 - 1)


class PollIn(Strict):
    runtimeInstanceId = fields.String(required=True, validate=TEXT)
    capabilities = fields.List(fields.String(validate=validate.OneOf(JOB_TYPES)), required=True,
                               validate=validate.Length(min=1, max=len(JOB_TYPES) * 4))
    limit = fields.Integer(strict=True, load_default=20, validate=validate.Range(1, POLL_LIMIT_MAX))
    claim = fields.Boolean(load_default=False)


class LockIn(Strict):
    runtimeInstanceId = fields.String(required=True, validate=TEXT)


class HeartbeatIn(Strict):
    runtimeInstanceId = fields.String(required=True, validate=TEXT)
    attemptNo = fields.Integer(strict=True, validate=ATTEMPT)


class ResultIn(Strict):
    runtimeInstanceId = fields.String(required=True, validate=TEXT)
    attemptNo = fields.Integer(strict=True, required=True, validate=ATTEMPT)
    status = fields.String(required=True, validate=validate.OneOf(("succeeded", "failed")))
    output = fields.Raw(validate=not_null)
    outputHash = fields.String(validate=validate.Regexp(r"^[0-9a-f]{64}$", error="must be 64 lowercase hex digits"))
    errorCode = fields.String(validate=validate.OneOf(sorted(RETRYABLE)))
    errorMessage = fields.String(validate=validate.Length(max=2000), allow_none=True)


class SnapshotQuery(Strict):
    runtimeInstanceId = fields.String(required=True, validate=TEXT)
    jobId = fields.String(required=True, validate=TEXT)


class CredentialQuery(Strict):
    runtimeInstanceId = fields.String(required=True, validate=TEXT)
    attemptNo = fields.Integer(required=True, validate=ATTEMPT)


def _bad(field: str, why: str):
    raise ApiError(400, "VALIDATION_ERROR", f"{field}: {why}")


@blp.route("/jobs/poll", methods=["POST"])
@require("runtime")
@blp.arguments(PollIn)
def poll(body):
    """Pending jobs for these capabilities; ``claim: true`` also locks them."""
    return call_ai("ai_poll", runtime_instance_id=body["runtimeInstanceId"],
                   capabilities=body["capabilities"], limit=body["limit"], claim=body["claim"])


@blp.route("/jobs/<job_id>/lock", methods=["POST"])
@require("runtime")
@blp.arguments(LockIn)
def lock(body, job_id):
    return call_ai("ai_lock", job_id=job_id, runtime_instance_id=body["runtimeInstanceId"])


@blp.route("/jobs/<job_id>/heartbeat", methods=["POST"])
@require("runtime")
@blp.arguments(HeartbeatIn)
def heartbeat(body, job_id):
    call_ai("ai_heartbeat", job_id=job_id, runtime_instance_id=body["runtimeInstanceId"],
            attempt_no=body.get("attemptNo"))
    return "", 204


@blp.route("/jobs/<job_id>/result", methods=["POST"])
@require("runtime")
@blp.arguments(ResultIn)
def result(body, job_id):
    if body["status"] == "succeeded":
        if "output" not in body:
            _bad("output", "is required when status is succeeded")
        if "outputHash" not in body:
            _bad("outputHash", "is required when status is succeeded")
        if "errorCode" in body:
            _bad("errorCode", "only with status failed")
    else:
        if "errorCode" not in body:
            _bad("errorCode", "is required when status is failed")
        if "output" in body:
            _bad("output", "only with status succeeded")
    return call_ai("ai_submit_result", job_id=job_id, runtime_instance_id=body["runtimeInstanceId"],
                   attempt_no=body["attemptNo"], status=body["status"], output=body.get("output"),
                   output_hash=body.get("outputHash"), error_code=body.get("errorCode"),
                   error_message=body.get("errorMessage"))


@blp.route("/snapshots/<snapshot_id>", methods=["GET"])
@require("runtime")
@blp.arguments(SnapshotQuery, location="query")
def snapshot(query, snapshot_id):
    """Readable only while the caller holds a job naming this snapshot."""
    return call_ai("ai_get_snapshot_for_runtime", snapshot_id=snapshot_id,
                   runtime_instance_id=query["runtimeInstanceId"], job_id=query["jobId"])


@blp.route("/jobs/<job_id>/credential", methods=["GET"])
@require("runtime")
@blp.arguments(CredentialQuery, location="query")
def credential(query, job_id):
    """The user's own model key, for the holder of the job's current attempt only."""
    return call_ai("ai_get_credential_for_runtime", job_id=job_id,
                   runtime_instance_id=query["runtimeInstanceId"], attempt_no=query["attemptNo"])
