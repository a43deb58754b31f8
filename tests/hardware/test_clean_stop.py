"""A clean stop (SIGTERM → nameko's graceful stop) of the hardware service: it
says so first, answers every queued action NOT_EXECUTED (nothing reached the
PLC), lets the executing one finish and report within a bound, and no
action is lost without an answer."""

from __future__ import annotations

import time

import eventlet
from nameko.standalone.rpc import ServiceRpcProxy

from shared import events as ev
from tests.hardware.conftest import line_of
from tests.support.waiting import wait_for


def _send_four(hw_config) -> list[int]:
    with ServiceRpcProxy("hardware", hw_config, timeout=20) as proxy:
        answers = [proxy.dock_to_buffer(f"c{slot}", slot) for slot in (1, 2, 3, 4)]
    assert all(a["accepted"] for a in answers), answers
    return [a["actionId"] for a in answers]


def test_a_clean_stop_finishes_the_executing_action_and_answers_the_queued(
        make_hardware, received, control, sim, hw_config):
    hardware = make_hardware(LINECTL_HW_STOP_GRACE=20.0)
    control.delay(0.4)  # every Modbus answer late: one robot action takes a few seconds
    first, *queued = _send_four(hw_config)
    robot = line_of(hardware).robot
    wait_for(lambda: robot.current is not None and robot.current.action_id == first, 10,
             message="the first action executing")
    stopper = eventlet.spawn(hardware.stop)

    assert received.wait(ev.HARDWARE_STOPPING)["instanceId"] == line_of(hardware).instance_id
    stopper.wait()
    assert received.result(first)[0] == ev.ROBOT_ACTION_SUCCEEDED
    # While nameko stops the entrypoints the robot may take one more; what the
    # drain found queued never reached the PLC and is answered NOT_EXECUTED.
    outcomes = {a: received.result(a) for a in queued}
    not_executed = [a for a, (t, p) in outcomes.items() if p.get("errorCode") == ev.NOT_EXECUTED]
    executed = [a for a, (t, p) in outcomes.items() if t == ev.ROBOT_ACTION_SUCCEEDED]
    assert not_executed and sorted(not_executed + executed) == sorted(queued), outcomes
    assert [entry[0] for entry in sim.model.robot_log] == [first, *executed]
    answered = [p["actionId"] for t, p in received.events if t in ev.WORKER_RESULTS]
    assert sorted(answered) == sorted([first, *queued])  # exactly one answer each
    assert line_of(hardware).known_actions()["open"] == []


def test_an_action_that_outlasts_the_grace_is_left_open_and_the_stop_is_bounded(
        make_hardware, received, control, hw_config):
    hardware = make_hardware(LINECTL_HW_STOP_GRACE=1.0, LINECTL_HW_ACTION_TIMEOUT=60.0)
    control.robot_hang()
    first, *queued = _send_four(hw_config)
    robot = line_of(hardware).robot
    wait_for(lambda: robot.current is not None, 10, message="the first action executing")
    started = time.monotonic()
    hardware.stop()
    assert time.monotonic() - started < 10  # the grace bounds the stop, not the 60 s action timeout
    for action_id in queued:
        assert received.result(action_id)[1]["errorCode"] == ev.NOT_EXECUTED
    assert not [p for t, p in received.events if t in ev.WORKER_RESULTS and p["actionId"] == first]
    control.clear()
