"""Manual actions (resolve with one of their choices) and recovery confirmation."""

from __future__ import annotations

from gateway import schemas
from gateway.api.blueprint import LineBlueprint
from gateway.api.common import (
    check_id,
    command_view,
    page,
    query_view,
    run_command,
    status_filter,
)
from shared import serialize
from shared.db.models import MANUAL_ACTION_STATUSES, ManualAction

blp = LineBlueprint("manual", __name__, description="manual actions and recovery")


@query_view(blp, "/manual-actions", schemas.StatusListArgsSchema,
            schemas.page_of(schemas.ManualActionSchema))
def list_manual_actions(args):
    filters = status_filter(ManualAction.status, args.get("status"), MANUAL_ACTION_STATUSES)
    return page(ManualAction, ManualAction.id, args, serialize.manual_action, *filters)


@command_view(blp, "/manual-actions/<int:action_id>/resolve", schemas.ResolveSchema,
              schemas.ManualActionSchema)
def resolve_manual_action(body, action_id):
    payload = {"manualActionId": check_id(action_id, "manual action"), **body}
    return run_command("ResolveManualAction", payload)


@command_view(blp, "/recovery/confirm", schemas.RecoveryConfirmSchema, schemas.ConfirmedSchema,
              required=False)
def confirm_recovery(body):
    return run_command("ConfirmRecovery", dict(body or {}))
