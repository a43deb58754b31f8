"""Alarms: the active list and the history (filters), acknowledge, shelve and
unshelve (ISA-18.2: a shelved alarm is hidden from the active list for a
while and changes nothing else)."""

from __future__ import annotations

from gateway import schemas
from gateway.api.blueprint import Blueprint
from gateway.api.common import (
    COMMAND_ERRORS,
    QUERY_ERRORS,
    check_id,
    document_errors,
    page,
    parse_instant,
    parse_statuses,
    run_command,
)
from gateway.auth import require
from gateway.errors import ApiError
from shared import serialize
from shared.db.models import ALARM_SEVERITIES, ALARM_STATUSES, Alarm

blp = Blueprint("alarms", __name__, description="alarms")


@blp.route("/api/alarms", methods=["GET"])
@require("operator")
@blp.arguments(schemas.AlarmListArgsSchema, location="query")
@blp.response(200, schemas.page_of(schemas.AlarmSchema))
@document_errors(blp, *QUERY_ERRORS)
def list_alarms(args):
    """``?status=RAISED,ACKNOWLEDGED`` is the active list; with ``code``,
    ``equipmentId``, ``severity`` and ``from``/``to`` (raised within) the history."""
    statuses = parse_statuses(args.get("status"), ALARM_STATUSES)
    filters = [Alarm.status.in_(statuses)] if statuses else []
    severities = parse_statuses(args.get("severity"), ALARM_SEVERITIES, "severity")
    if severities:
        filters.append(Alarm.severity.in_(severities))
    if "code" in args:
        filters.append(Alarm.code == args["code"])
    if "equipmentId" in args:
        filters.append(Alarm.equipment_id == args["equipmentId"])
    start, end = parse_instant("from", args.get("from_")), parse_instant("to", args.get("to"))
    if start is not None and end is not None and start >= end:
        raise ApiError(400, "VALIDATION_ERROR", "from: must be before to")
    if start is not None:
        filters.append(Alarm.raised_at >= start)
    if end is not None:
        filters.append(Alarm.raised_at < end)
    return page(Alarm, Alarm.id, args, serialize.alarm, *filters)


@blp.route("/api/alarms/<int:alarm_id>/acknowledge", methods=["POST"])
@require("operator")
@blp.arguments(schemas.NoteSchema, required=False)
@blp.response(200, schemas.AlarmSchema)
@blp.alt_response(202, schema=schemas.AcceptedSchema, description="the loop did not answer in time")
@document_errors(blp, *COMMAND_ERRORS)
def acknowledge_alarm(body, alarm_id):
    return run_command("AcknowledgeAlarm", {"alarmId": check_id(alarm_id, "alarm"), **(body or {})})


@blp.route("/api/alarms/<int:alarm_id>/shelve", methods=["POST"])
@require("operator")
@blp.arguments(schemas.ShelveSchema)
@blp.response(200, schemas.AlarmSchema)
@blp.alt_response(202, schema=schemas.AcceptedSchema, description="the loop did not answer in time")
@document_errors(blp, *COMMAND_ERRORS)
def shelve_alarm(body, alarm_id):
    return run_command("ShelveAlarm", {"alarmId": check_id(alarm_id, "alarm"), **body})


@blp.route("/api/alarms/<int:alarm_id>/unshelve", methods=["POST"])
@require("operator")
@blp.arguments(schemas.NoteSchema, required=False)
@blp.response(200, schemas.AlarmSchema)
@blp.alt_response(202, schema=schemas.AcceptedSchema, description="the loop did not answer in time")
@document_errors(blp, *COMMAND_ERRORS)
def unshelve_alarm(body, alarm_id):
    return run_command("UnshelveAlarm", {"alarmId": check_id(alarm_id, "alarm"), **(body or {})})
