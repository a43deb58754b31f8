"""Alarms: list and acknowledge."""

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
from shared.db.models import ALARM_STATUSES, Alarm

blp = Blueprint("alarms", __name__, description="alarms")


@blp.route("/api/alarms", methods=["GET"])
@require("operator")
@blp.arguments(schemas.StatusListArgsSchema, location="query")
@blp.response(200, schemas.page_of(schemas.AlarmSchema))
@document_errors(blp, *QUERY_ERRORS)
def list_alarms(args):
    statuses = parse_statuses(args.get("status"), ALARM_STATUSES)
    filters = [Alarm.status.in_(statuses)] if statuses else []
    return page(Alarm, Alarm.id, args, serialize.alarm, *filters)


@blp.route("/api/alarms/<int:alarm_id>/acknowledge", methods=["POST"])
@require("operator")
@blp.arguments(schemas.NoteSchema, required=False)
@blp.response(200, schemas.AlarmSchema)
@blp.alt_response(202, schema=schemas.AcceptedSchema, description="the loop did not answer in time")
@document_errors(blp, *COMMAND_ERRORS)
def acknowledge_alarm(body, alarm_id):
    return run_command("AcknowledgeAlarm", {"alarmId": check_id(alarm_id, "alarm"), **(body or {})})
