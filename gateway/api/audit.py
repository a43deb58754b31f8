"""``GET /api/audit`` (role ``admin``): who did what, newest first; and the
rows of commands, written here at the edge, where the actor (the person
signed in, else the token's holder), their role, the source address and the
outcome are all known."""

from __future__ import annotations

import logging

from flask import g, request
from marshmallow import Schema, fields, validate

from gateway import schemas
from gateway.api.blueprint import Blueprint
from gateway.api.common import QUERY_ERRORS, document_errors, parse_instant, reply
from gateway.auth import require
from gateway.context import current_line, gateway_context
from gateway.errors import ApiError
from services.identity import audit

log = logging.getLogger(__name__)
blp = Blueprint("audit", __name__, description="who did what (admin)")

# A command's payload field -> the audit row's target type.
TARGETS = (("manualActionId", "manual_action"), ("workOrderId", "work_order"), ("alarmId", "alarm"),
           ("jobId", "job"))


class AuditArgsSchema(schemas.ListArgsSchema):
    from_ = fields.String(data_key="from", validate=validate.Length(min=1, max=64), metadata={"format": "date-time"})
    to = fields.String(validate=validate.Length(min=1, max=64), metadata={"format": "date-time"})
    actor = fields.String(validate=validate.Length(min=1, max=200))
    action = fields.String(validate=validate.Length(min=1, max=64))


class AuditItemSchema(Schema):
    at = fields.String(metadata={"format": "date-time"})
    actor = fields.String()
    role = fields.String(allow_none=True)
    action = fields.String()
    targetType = fields.String()
    targetId = fields.String(allow_none=True)
    lineId = fields.String(allow_none=True)
    outcome = fields.String()
    source = fields.String(allow_none=True)


@blp.route("/api/audit", methods=["GET"])
@require("admin")
@blp.arguments(AuditArgsSchema, location="query")
@blp.response(200, schemas.page_of(AuditItemSchema))
@document_errors(blp, *QUERY_ERRORS)
def list_audit(args):
    """Commands, manual-action answers, sign-ins and -outs, failed sign-ins and
    user changes, newest first; ``from``/``to`` bound ``at``."""
    cursor = int(args["cursor"]) if args.get("cursor") else None
    if cursor is not None and cursor > schemas.MAX_ID:
        raise ApiError(400, "VALIDATION_ERROR", "cursor: not a cursor")
    query = audit.AuditQuery(start=parse_instant("from", args.get("from_")), end=parse_instant("to", args.get("to")),
                             actor=args.get("actor"), action=args.get("action"), limit=args["limit"],
                             before_id=cursor)
    with gateway_context().people.engine.connect() as conn:
        items, next_id = audit.read_page(conn, query)
    return reply({"items": items, "nextCursor": None if next_id is None else str(next_id)})


def _outcome(response) -> str:
    if response.status_code == 202:
        return "QUEUED"
    if response.status_code < 300:
        return "HANDLED"
    body = response.get_json(silent=True) or {}
    return (body.get("error") or {}).get("code") or str(response.status_code)


def _target(payload: dict, response) -> tuple[str, str | None]:
    for field, target_type in TARGETS:
        if payload.get(field) is not None:
            return target_type, str(payload[field])
    if response.status_code == 201:  # a created order: its new id
        return "work_order", str((response.get_json(silent=True) or {}).get("id") or "") or None
    return "line", None


def audit_command(response):
    """After a command (``run_command`` set ``g.command``): its audit row. A row
    that cannot be written is logged, not turned into a failed answer: the
    command has happened."""
    command = g.pop("command", None)
    if command is None:
        return response
    command_type, payload = command
    ctx = gateway_context()
    target_type, target_id = _target(payload, response)
    entry = audit.AuditEntry(g.get("holder") or "unknown", g.get("role"), command_type, _outcome(response),
                             target_type, target_id, current_line().id, request.remote_addr)
    try:
        audit.record_now(ctx.people.engine, entry)
    except Exception as exc:  # noqa: BLE001 - the database away: the loop's own audit_log still has it
        log.warning("audit row of %s not written: %s", command_type, type(exc).__name__)
    return response
