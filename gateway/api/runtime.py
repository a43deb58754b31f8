"""``/internal/runtime/*``: the AI Runtime workers' protocol (role ``runtime``)."""

from __future__ import annotations

from marshmallow import fields, validate

from gateway.api.ai_common import TEXT, JsonBoolean, Strict, ai_queue, not_null
from gateway.api.blueprint import Blueprint
from gateway.auth import require
from gateway.errors import ApiError
from services.ai_jobs.domain import API_KEY_MODES, JOB_TYPES, POLL_LIMIT_MAX, RETRYABLE
from services.ai_jobs.validation import result_rule_broken

blp = Blueprint("runtime", __name__, url_prefix="/internal/runtime", description="AI Runtime protocol")

ATTEMPT = validate.Range(1, 2**31 - 1)


class ServesIn(Strict):
    """One (modelProvider, apiKeyModes) pair a runtime can serve; ``*`` is any
    provider (a stand-in model such as ``linectl runtime --provider offline``)."""

    modelProvider = fields.String(required=True, validate=validate.Length(min=1, max=64))
    apiKeyModes = fields.List(fields.String(validate=validate.OneOf(API_KEY_MODES)),
                              load_default=lambda: list(API_KEY_MODES),
                              validate=validate.Length(min=1, max=len(API_KEY_MODES)))


class PollIn(Strict):
    runtimeInstanceId = fields.String(required=True, validate=TEXT)
    capabilities = fields.List(fields.String(validate=validate.OneOf(JOB_TYPES)), required=True,
                               validate=validate.Length(min=1, max=len(JOB_TYPES) * 4))
    limit = fields.Integer(strict=True, load_default=20, validate=validate.Range(1, POLL_LIMIT_MAX))
    # A JSON boolean only: "yes", "true" or 1 must not lock jobs.
    claim = JsonBoolean(load_default=False)
    # Optional (not in seed 000): only jobs this runtime can serve are returned.
    serves = fields.List(fields.Nested(ServesIn), validate=validate.Length(min=1, max=16))


class LockIn(Strict):
    runtimeInstanceId = fields.String(required=True, validate=TEXT)


class HeartbeatIn(Strict):
    runtimeInstanceId = fields.String(required=True, validate=TEXT)
    attemptNo = fields.Integer(strict=True, required=True, validate=ATTEMPT)


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
    return {"jobs": ai_queue().poll(body["runtimeInstanceId"], body["capabilities"], body["limit"],
                                    body["claim"], body.get("serves"))}


@blp.route("/jobs/<job_id>/lock", methods=["POST"])
@require("runtime")
@blp.arguments(LockIn)
def lock(body, job_id):
    return ai_queue().lock(job_id, body["runtimeInstanceId"])


@blp.route("/jobs/<job_id>/heartbeat", methods=["POST"])
@require("runtime")
@blp.arguments(HeartbeatIn)
def heartbeat(body, job_id):
    ai_queue().heartbeat(job_id, body["runtimeInstanceId"], body["attemptNo"])
    return "", 204


@blp.route("/jobs/<job_id>/result", methods=["POST"])
@require("runtime")
@blp.arguments(ResultIn)
def result(body, job_id):
    if broken := result_rule_broken(body):  # the rules between the fields
        _bad(*broken)
    return ai_queue().submit_result(job_id, body["runtimeInstanceId"], body["attemptNo"], body["status"],
                                    output=body.get("output"), output_hash=body.get("outputHash"),
                                    error_code=body.get("errorCode"),
                                    error_message=body.get("errorMessage"))


@blp.route("/snapshots/<snapshot_id>", methods=["GET"])
@require("runtime")
@blp.arguments(SnapshotQuery, location="query")
def snapshot(query, snapshot_id):
    """Readable only while the caller holds a job naming this snapshot."""
    return ai_queue().snapshot_for_runtime(snapshot_id, query["runtimeInstanceId"], query["jobId"])


@blp.route("/jobs/<job_id>/credential", methods=["GET"])
@require("runtime")
@blp.arguments(CredentialQuery, location="query")
def credential(query, job_id):
    """The user's own model key, for the holder of the job's current attempt only."""
    return ai_queue().credential_for_runtime(job_id, query["runtimeInstanceId"], query["attemptNo"])
