"""Manual actions (resolve with one of their choices) and recovery confirmation."""

from __future__ import annotations

from gateway import schemas
from gateway.api.blueprint import Blueprint
from gateway.api.common import (
    COMMAND_ERRORS,
    QUERY_ERRORS,
    check_id,
    document_errors,
    page,
    parse_statuses,
    run_command,
)
from gateway.auth import require
from shared import serialize
from shared.db.models import MANUAL_ACTION_STATUSES, ManualAction

blp = Blueprint("manual", __name__, description="manual actions and recovery")


@blp.route("/api/manual-actions", methods=["GET"])
@require("operator")
@blp.arguments(schemas.StatusListArgsSchema, location="query")
@blp.response(200, schemas.page_of(schemas.ManualActionSchema))
@document_errors(blp, *QUERY_ERRORS)
def list_manual_actions(args):
    statuses = parse_statuses(args.get("status"), MANUAL_ACTION_STATUSES)
    filters = [ManualAction.status.in_(statuses)] if statuses else []
    return page(ManualAction, ManualAction.id, args, serialize.manual_action, *filters)


@blp.route("/api/manual-actions/<int:action_id>/resolve", methods=["POST"])
@require("operator")
@blp.arguments(schemas.ResolveSchema)
@blp.response(200, schemas.ManualActionSchema)
@blp.alt_response(202, schema=schemas.AcceptedSchema, description="the loop did not answer in time")
@document_errors(blp, *COMMAND_ERRORS)
def resolve_manual_action(body, action_id):
    payload = {"manualActionId": check_id(action_id, "manual action"), **body}
    return run_command("ResolveManualAction", payload)


@blp.route("/api/recovery/confirm", methods=["POST"])
@require("operator")
@blp.arguments(schemas.RecoveryConfirmSchema, required=False)
@blp.response(200, schemas.ConfirmedSchema)
@blp.alt_response(202, schema=schemas.AcceptedSchema, description="the loop did not answer in time")
@document_errors(blp, *COMMAND_ERRORS)
def confirm_recovery(body):
    return run_command("ConfirmRecovery", dict(body or {}))
