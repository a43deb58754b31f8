"""A PLC refused for its identity (PRODUCT.md, "PLC identity") is its own alarm,
not "the PLC does not answer": it names what the line expects and what it found,
the line holds new work while it lasts, and it clears once the line's own PLC
is back."""

from tests.line_controller.scripted import Refill

MISMATCH = ("PLC_IDENTITY_MISMATCH: line demo-cell expects the PLC 'demo-cell', found 'cell-b' "
            "at 127.0.0.1:5020; nothing is sent to it")


def test_a_plc_refused_for_its_identity_raises_its_own_alarm_and_holds_new_work(harness):
    _, (job,) = harness.started_order(quantity=1)
    harness.ok("PlcConnection", {"connected": False, "error": "connection refused"})  # restarting...
    harness.ok("PlcConnection", {"connected": False, "error": MISMATCH, "errorCode": "PLC_IDENTITY_MISMATCH"})
    (alarm,) = harness.alarms("PLC_IDENTITY_MISMATCH")  # ...and back as another PLC
    assert alarm.status == "RAISED" and "expects the PLC 'demo-cell'" in alarm.message
    assert "found 'cell-b'" in alarm.message
    harness.scheduler.queued.append(Refill(job, 1))
    harness.loop.schedule()
    assert harness.hardware.requests == []  # held

    harness.ok("PlcConnection", {"connected": True})  # the line's own PLC again
    assert [a.status for a in harness.alarms("PLC_IDENTITY_MISMATCH") + harness.alarms("PLC_DISCONNECTED")] == [
        "CLEARED", "CLEARED"]
    assert len(harness.hardware.requests) == 1
