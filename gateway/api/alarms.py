"""Alarms: the active list and the history (filters), acknowledge, shelve and
unshelve (ISA-18.2: a shelved alarm is hidden from the active list for a
while and changes nothing else)."""

from __future__ import annotations

from gateway import schemas
from gateway.api.blueprint import LineBlueprint
from gateway.api.common import (
    check_id,
    command_view,
    page,
    parse_instant,
    query_view,
    run_command,
    status_filter,
)
from gateway.errors import ApiError
from shared import serialize
from shared.db.models import ALARM_SEVERITIES, ALARM_STATUSES, Alarm

blp = LineBlueprint("alarms", __name__, description="alarms")


@query_view(blp, "/alarms", schemas.AlarmListArgsSchema, schemas.page_of(schemas.AlarmSchema))
def list_alarms(args):
    """``?status=RAISED,ACKNOWLEDGED`` is the active list; with ``code``,
    ``equipmentId``, ``severity`` and ``from``/``to`` (raised within) the history."""
    filters = [*status_filter(Alarm.status, args.get("status"), ALARM_STATUSES),
               *status_filter(Alarm.severity, args.get("severity"), ALARM_SEVERITIES, "severity")]
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


@command_view(blp, "/alarms/<int:alarm_id>/acknowledge", schemas.NoteSchema, schemas.AlarmSchema,
              required=False)
def acknowledge_alarm(body, alarm_id):
    return run_command("AcknowledgeAlarm", {"alarmId": check_id(alarm_id, "alarm"), **(body or {})})


@command_view(blp, "/alarms/<int:alarm_id>/shelve", schemas.ShelveSchema, schemas.AlarmSchema)
def shelve_alarm(body, alarm_id):
    return run_command("ShelveAlarm", {"alarmId": check_id(alarm_id, "alarm"), **body})


@command_view(blp, "/alarms/<int:alarm_id>/unshelve", schemas.NoteSchema, schemas.AlarmSchema,
              required=False)
def unshelve_alarm(body, alarm_id):
    return run_command("UnshelveAlarm", {"alarmId": check_id(alarm_id, "alarm"), **(body or {})})
