"""Alarm shelving through the loop (ISA-18.2): shelve for a time with a reason,
unshelve by hand or when the time is up, each with its event on the stream;
shelving changes nothing but the alarm."""

from __future__ import annotations

from sqlalchemy import text

SNAPSHOT = ("SELECT id, status, position_type, step_index, version FROM job ORDER BY id",
            "SELECT equipment_id, slot_no, status, current_job_id FROM equipment_slot ORDER BY 1, 2",
            "SELECT id, status, version FROM equipment ORDER BY id",
            "SELECT id, status, resolution FROM manual_action ORDER BY id")


def _events(harness, type_):
    return [e for _, frames in harness.published for e in frames if e["type"] == type_]


def _line(harness):
    return [harness.rows(sql) for sql in SNAPSHOT]


def _unexpected_signal_alarm(harness):
    harness.ok("MachineDone", {"machineId": "MC1", "slotNo": 2})  # no piece there → alarm + manual action
    (alarm,) = harness.alarms()
    return alarm


def test_shelve_and_unshelve_by_hand_change_only_the_alarm(harness):
    harness.started_order(quantity=2)
    alarm = _unexpected_signal_alarm(harness)
    harness.ok("AcknowledgeAlarm", {"alarmId": alarm.id})
    before = _line(harness)

    shelved = harness.ok("ShelveAlarm", {"alarmId": alarm.id, "minutes": 15, "reason": "known sensor"},
                         actor="alice")
    assert (shelved["status"], shelved["shelveReason"], shelved["shelvedBy"]) == \
        ("SHELVED", "known sensor", "alice")
    (event,) = _events(harness, "AlarmShelved")
    assert event["payload"]["id"] == alarm.id and event["payload"]["shelvedUntil"] == shelved["shelvedUntil"]
    assert harness.send("AcknowledgeAlarm", {"alarmId": alarm.id}).error["code"] == "INVALID_TRANSITION"
    assert _line(harness) == before

    back = harness.ok("UnshelveAlarm", {"alarmId": alarm.id})
    assert back["status"] == "ACKNOWLEDGED" and back["shelvedUntil"] is None  # what it was
    assert _events(harness, "AlarmUnshelved")[0]["payload"]["unshelvedBy"] == "op1"
    assert harness.send("UnshelveAlarm", {"alarmId": alarm.id}).error["code"] == "INVALID_TRANSITION"
    assert _line(harness) == before
    audit = harness.rows("SELECT action, outcome FROM audit_log WHERE action ILIKE '%shelve%' ORDER BY id")
    assert [tuple(a) for a in audit] == [("ShelveAlarm", "HANDLED"), ("UnshelveAlarm", "HANDLED"),
                                         ("UnshelveAlarm", "REJECTED")]


def test_a_shelved_alarm_returns_by_itself_when_its_time_is_up(harness):
    alarm = _unexpected_signal_alarm(harness)
    harness.ok("ShelveAlarm", {"alarmId": alarm.id, "minutes": 1, "reason": "maintenance"})
    harness.ok("ScheduleTick")
    assert harness.alarms()[0].status == "SHELVED" and not _events(harness, "AlarmUnshelved")
    # The minute passes (the row's deadline moves instead of the test waiting for it).
    with harness.engine.begin() as conn:
        conn.execute(text("UPDATE alarm SET shelved_until = now() - interval '1 second'"))
    harness.ok("ScheduleTick")
    assert harness.alarms()[0].status == "RAISED"
    (event,) = _events(harness, "AlarmUnshelved")
    assert (event["payload"]["id"], event["payload"]["status"], event["payload"]["unshelvedBy"]) == \
        (alarm.id, "RAISED", "expiry")
    harness.ok("ScheduleTick")
    assert len(_events(harness, "AlarmUnshelved")) == 1  # once


def test_shelving_again_sets_a_new_time_and_keeps_the_status_to_return_to(harness):
    alarm = _unexpected_signal_alarm(harness)
    first = harness.ok("ShelveAlarm", {"alarmId": alarm.id, "minutes": 5, "reason": "a"})
    second = harness.ok("ShelveAlarm", {"alarmId": alarm.id, "minutes": 60, "reason": "b"})
    assert second["shelvedUntil"] > first["shelvedUntil"] and second["shelveReason"] == "b"
    assert harness.ok("UnshelveAlarm", {"alarmId": alarm.id})["status"] == "RAISED"


def test_bad_shelve_commands_are_rejected(harness):
    alarm = _unexpected_signal_alarm(harness)
    for payload, field in [({"alarmId": alarm.id, "minutes": 0, "reason": "x"}, "minutes"),
                           ({"alarmId": alarm.id, "minutes": 1441, "reason": "x"}, "minutes"),
                           ({"alarmId": alarm.id, "minutes": 5}, "reason"),
                           ({"alarmId": alarm.id, "minutes": True, "reason": "x"}, "minutes")]:
        out = harness.send("ShelveAlarm", payload)
        assert out.error["code"] == "VALIDATION_ERROR" and field in out.error["message"], payload
    assert harness.send("ShelveAlarm", {"alarmId": 99999, "minutes": 5, "reason": "x"}).error["code"] == "NOT_FOUND"
    assert harness.alarms()[0].status == "RAISED"
