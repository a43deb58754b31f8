"""``/api/ai/*``: the learning platform's side of AI jobs (role ``platform``)."""

from __future__ import annotations

from marshmallow import fields, validate

from gateway.api.ai_common import TEXT, NoteIn, Strict, ai_queue
from gateway.api.blueprint import Blueprint
from gateway.api.common import window_of
from gateway.auth import require
from gateway.errors import ApiError
from gateway.schemas import WindowArgsSchema
from services.ai_jobs import schemas
from services.ai_jobs.domain import (
    API_KEY_MODES,
    JOB_STATUSES,
    JOB_TYPES,
    TARGET_TYPES,
)

blp = Blueprint("ai", __name__, url_prefix="/api/ai", description="AI jobs (learning platform)")


class SnapshotIn(Strict):
    userId = fields.String(required=True, validate=TEXT)
    targetType = fields.String(required=True, validate=validate.OneOf(TARGET_TYPES))
    targetId = fields.String(required=True, validate=TEXT)
    data = fields.Dict(required=True)


class CredentialIn(Strict):
    userId = fields.String(required=True, validate=TEXT)
    apiKey = fields.String(required=True, validate=validate.Length(min=8, max=500))
    provider = fields.String(load_default="deepseek", validate=validate.OneOf(("deepseek",)))


class JobIn(Strict):
    userId = fields.String(required=True, validate=TEXT)
    jobType = fields.String(required=True, validate=validate.OneOf(JOB_TYPES))
    targetType = fields.String(required=True, validate=validate.OneOf(TARGET_TYPES))
    targetId = fields.String(required=True, validate=TEXT)
    snapshotId = fields.String(validate=TEXT, allow_none=True)
    params = fields.Dict(allow_none=True)
    priority = fields.Integer(strict=True, validate=validate.Range(0, 9))
    idempotencyKey = fields.String(validate=TEXT, allow_none=True)
    apiKeyMode = fields.String(validate=validate.OneOf(API_KEY_MODES))
    credentialId = fields.String(validate=TEXT, allow_none=True)
    maxRetryCount = fields.Integer(strict=True, validate=validate.Range(0, 10))
    timeoutSeconds = fields.Integer(strict=True, validate=validate.Range(1, 86400))
    modelProvider = fields.String(validate=validate.Length(min=1, max=64))
    modelName = fields.String(validate=validate.Length(min=1, max=64))
    promptVersion = fields.String(validate=validate.Length(min=1, max=32))
    outputSchemaVersion = fields.String(validate=validate.Length(min=1, max=32))


class JobQuery(Strict):
    userId = fields.String(validate=TEXT)
    status = fields.String(validate=validate.OneOf(JOB_STATUSES))
    jobType = fields.String(validate=validate.OneOf(JOB_TYPES))
    limit = fields.Integer(load_default=50, validate=validate.Range(1, 500))
    cursor = fields.String(validate=validate.Length(min=1, max=500))



class SchemaQuery(Strict):
    version = fields.String(validate=validate.Length(min=1, max=32))


@blp.route("/snapshots", methods=["POST"])
@require("platform")
@blp.arguments(SnapshotIn)
def create_snapshot(body):
    snap = ai_queue().create_snapshot(body["userId"], body["targetType"], body["targetId"], body["data"])
    return snap, 201


@blp.route("/credentials", methods=["POST"])
@require("platform")
@blp.arguments(CredentialIn)
def create_credential(body):
    """Store a user's own model key, encrypted; the answer shows only a hint."""
    cred = ai_queue().create_credential(body["userId"], body["apiKey"], body["provider"])
    return cred, 201


@blp.route("/jobs", methods=["POST"])
@require("platform")
@blp.arguments(JobIn)
def create_job(body):
    job, created = ai_queue().create_job(body)
    return job, 201 if created else 200


@blp.route("/jobs", methods=["GET"])
@require("platform")
@blp.arguments(JobQuery, location="query")
def list_jobs(query):
    return ai_queue().list_jobs(user_id=query.get("userId"), status=query.get("status"),
                                job_type=query.get("jobType"), limit=query["limit"],
                                cursor=query.get("cursor"))


@blp.route("/stats", methods=["GET"])
@require("platform")
@blp.arguments(WindowArgsSchema, location="query")
def get_queue_stats(args):
    """Depth by status, finished jobs per hour over the window (default the last
    8 hours), and the latest failures with their error codes."""
    window = window_of(args)
    return ai_queue().stats(window.start, window.end, window.now)


@blp.route("/jobs/<job_id>", methods=["GET"])
@require("platform")
def get_job(job_id):
    return ai_queue().get_job(job_id)


@blp.route("/jobs/<job_id>/cancel", methods=["POST"])
@require("platform")
@blp.arguments(NoteIn, required=False)
def cancel_job(_body, job_id):
    return ai_queue().cancel_job(job_id)


@blp.route("/users/<user_id>/revoke", methods=["POST"])
@require("platform")
@blp.arguments(NoteIn, required=False)
def revoke_user(_body, user_id):
    if len(user_id) > 200:
        raise ApiError(400, "VALIDATION_ERROR", "userId: must be at most 200 characters")
    return ai_queue().revoke_user(user_id)


@blp.route("/schemas/<job_type>", methods=["GET"])
@require("platform", "runtime")
@blp.arguments(SchemaQuery, location="query")
def output_schema(query, job_type):
    schema = schemas.schema_for(job_type, query.get("version")) if job_type in JOB_TYPES else None
    if schema is None:
        raise ApiError(404, "NOT_FOUND", f"no output schema for {job_type} version {query.get('version', '1')}")
    return schema
