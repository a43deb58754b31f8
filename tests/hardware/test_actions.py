"""Every hardware action end to end: RPC → Modbus handshake with the simulator
→ exactly one result event on the transport."""

import pytest
from nameko.standalone.rpc import ServiceRpcProxy

from shared import events as ev
from tests.hardware.conftest import PROTOCOLS, call, line_of, outcome

# What crosses the PLC runs on both protocols; what the service decides by itself
# (refusals, its status, its books, the fence) once, on Modbus (the fixture's default).
BOTH = pytest.mark.parametrize("protocol", PROTOCOLS)


def run_ok(container, received, method, *args, **kwargs):
    event_type, payload = outcome(container, received, method, *args, **kwargs)
    assert payload["correlationId"] == str(args[0])
    assert event_type.endswith("Succeeded"), payload
    return event_type, payload


@BOTH
def test_every_action_kind_produces_its_success_event(hardware, received, sim):
    t, p = run_ok(hardware, received, "dock_to_buffer", "t1", 1, job_id=41)
    assert (t, p["action"]) == (ev.ROBOT_ACTION_SUCCEEDED, ev.DOCK_TO_BUFFER)
    t, p = run_ok(hardware, received, "scan", "t2", 1, job_id=41)
    label = sim.model.label_prefix + "00000041"  # this run's labels (unique across runs and lines)
    assert (t, p["action"], p["data"]["code"]) == (ev.TOOL_ACTION_SUCCEEDED, ev.SCAN, label)
    t, p = run_ok(hardware, received, "mark", "t3", 1, "BRACKET-A 41", job_id=41)
    assert (t, p["action"]) == (ev.TOOL_ACTION_SUCCEEDED, ev.MARK)
    assert sim.model.marks == [(1, "BRACKET-A 41")]
    t, p = run_ok(hardware, received, "buffer_to_equipment", "t4", 1, "MC1", 1, job_id=41)
    assert p["action"] == ev.BUFFER_TO_EQUIPMENT
    t, p = run_ok(hardware, received, "start_machine", "t5", "MC1", jobs={"1": 41})
    assert (t, p["action"]) == (ev.MACHINE_START_SUCCEEDED, ev.START_MACHINE)
    received.wait(ev.MACHINE_DONE, machineId="MC1", slotNo=1, jobId=41)
    t, p = run_ok(hardware, received, "equipment_to_buffer", "t6", "MC1", 1, 2, job_id=41)
    assert p["action"] == ev.EQUIPMENT_TO_BUFFER
    # a second piece, then swap: the finished piece out to slot 3, the new one in from slot 4
    run_ok(hardware, received, "dock_to_buffer", "t7", 4, job_id=42)
    run_ok(hardware, received, "buffer_to_equipment", "t8", 4, "MC1", 2, job_id=42)
    run_ok(hardware, received, "start_machine", "t9", "MC1")
    received.wait(ev.MACHINE_DONE, machineId="MC1", slotNo=2, jobId=42)
    run_ok(hardware, received, "dock_to_buffer", "t10", 5, job_id=43)
    t, p = run_ok(hardware, received, "swap", "t11", "MC1", 2, 3, 5, unload_job_id=42, load_job_id=43)
    assert (t, p["action"]) == (ev.ROBOT_ACTION_SUCCEEDED, ev.SWAP)

    state = call(hardware, "plc_state")
    assert state["connected"] is True
    mc1 = next(e for e in state["equipment"] if e["id"] == "MC1")
    assert mc1["slots"][1] == {"slotNo": 2, "occupied": True, "running": False, "done": False, "jobId": 43}
    assert mc1["slots"][0]["occupied"] is False
    assert [b["occupied"] for b in state["buffer"]][:5] == [False, True, True, False, False]
    # exactly one result per accepted action
    results = [p["actionId"] for t, p in received.events if t in ev.WORKER_RESULTS]
    assert len(results) == len(set(results)) == 11


@BOTH
def test_batch_machine_finishes_all_slots_at_once_and_inspection_reports(hardware, received, sim):
    for n in (1, 2, 3):
        run_ok(hardware, received, "dock_to_buffer", f"d{n}", n, job_id=100 + n)
        run_ok(hardware, received, "buffer_to_equipment", f"l{n}", n, "WASH1", n, job_id=100 + n)
    run_ok(hardware, received, "start_machine", "s", "WASH1")
    for n in (1, 2, 3):
        received.wait(ev.MACHINE_DONE, machineId="WASH1", slotNo=n, jobId=100 + n)
    wash = next(e for e in call(hardware, "plc_state")["equipment"] if e["id"] == "WASH1")
    assert [s["done"] for s in wash["slots"]] == [True, True, True, False]

    run_ok(hardware, received, "equipment_to_buffer", "u", "WASH1", 1, 5, job_id=101)
    run_ok(hardware, received, "buffer_to_equipment", "i", 5, "INSP1", 1, job_id=101)
    run_ok(hardware, received, "start_machine", "si", "INSP1", jobs={1: 101})
    verdict = received.wait(ev.INSPECTION_RESULT, machineId="INSP1", jobId=101)
    assert verdict["pass"] is True  # scrap rate 0
    assert received.of(ev.MACHINE_DONE, machineId="INSP1", jobId=101)[0]["pass"] is True


# Modbus only: over OPC UA a failed verdict is the same InspectionResult read as a
# passed one (test_batch_machine_... above), and failed verdicts over OPC UA are proven
# end to end by tests/flow/test_mock_e2e.py (its rabbitmq-opcua order scraps pieces).
def test_scrap_rate_fails_inspection(hardware, received, control):
    control.scrap_rate(1.0)
    run_ok(hardware, received, "dock_to_buffer", "d", 1, job_id=7)
    run_ok(hardware, received, "buffer_to_equipment", "l", 1, "INSP1", 1, job_id=7)
    run_ok(hardware, received, "start_machine", "s", "INSP1", jobs={1: 7})
    assert received.wait(ev.INSPECTION_RESULT, jobId=7)["pass"] is False


@BOTH
def test_the_robot_runs_concurrent_requests_one_at_a_time_in_order(hardware, received, sim, hw_config):
    requests = [("dock_to_buffer", ("c1", 1)), ("scan", ("c2", 1)), ("dock_to_buffer", ("c3", 2)),
                ("mark", ("c4", 2, "X")), ("scan", ("c5", 2)), ("dock_to_buffer", ("c6", 3))]
    with ServiceRpcProxy("hardware", hw_config, timeout=20) as proxy:
        # all in flight at once: each is accepted long before the robot finishes the first
        pending = [getattr(proxy, method).call_async(*args) for method, args in requests]
        answers = [reply.result() for reply in pending]
    assert all(a["accepted"] for a in answers), answers
    ids = [a["actionId"] for a in answers]
    assert ids == sorted(ids)
    for action_id in ids:
        assert received.result(action_id)[0].endswith("Succeeded")
    log = sim.model.robot_log
    assert [entry[0] for entry in log] == ids  # executed in request order
    for previous, current in zip(log, log[1:], strict=False):
        assert current[2] >= previous[3]  # never started before the previous one ended
    finished = [p["actionId"] for t, p in received.events if t in ev.WORKER_RESULTS]
    assert sorted(finished) == ids  # one result each (result types use separate queues: no order across them)


def test_invalid_requests_are_rejected_without_an_event(hardware, received):
    bad = [
        ("dock_to_buffer", ("t", 0)),
        ("dock_to_buffer", ("t", 9)),
        ("dock_to_buffer", ("", 1)),
        ("dock_to_buffer", ("t", "one")),
        ("buffer_to_equipment", ("t", 1, "NOPE", 1)),
        ("buffer_to_equipment", ("t", 1, "MC1", 3)),
        ("swap", ("t", "MC1", 1, 2, 2)),
        ("mark", ("t", 1, "")),
        ("mark", ("t", 1, "x" * 33)),
        ("mark", ("t", 1, "größe")),
        ("start_machine", ("t", "WASH1", {"5": 1})),
        ("start_machine", ("t", "WASH1", [1])),
        ("scan", ("t", 1), {"job_id": -4}),
    ]
    for method, args, *kwargs in bad:
        answer = call(hardware, method, *args, **(kwargs[0] if kwargs else {}))
        assert answer["accepted"] is False, (method, args)
        assert answer["errorCode"] == "REJECTED" and answer["errorMessage"]
    # a valid action after them: its result is the only one
    answer = call(hardware, "scan", "ok", 1)
    received.result(answer["actionId"])
    assert len([t for t, _ in received.events if t in ev.WORKER_RESULTS]) == 1
    assert line_of(hardware).robot.current is None


# Modbus only: what this adds is the transport's RPC (the same whatever the PLC speaks);
# RPCs over the transport to an OPC UA PLC run in test_the_robot_runs_concurrent_requests...
def test_rpc_over_the_transport(hardware, received, hw_config):
    with ServiceRpcProxy("hardware", hw_config, timeout=20) as proxy:
        answer = proxy.dock_to_buffer("17", 8, job_id=5)
        assert answer["accepted"] is True
        assert received.result(answer["actionId"])[0] == ev.ROBOT_ACTION_SUCCEEDED
        state = proxy.plc_state()
    assert state["connected"] is True
    assert [e["id"] for e in state["equipment"]] == ["MC1", "MC2", "WASH1", "INSP1"]
    assert state["buffer"][7] == {"slotNo": 8, "occupied": True}
    assert state["dock"]["pieces"] == 3


@BOTH
def test_a_restarted_service_continues_after_the_plcs_action_ids(make_hardware, received):
    first = make_hardware()
    answer = call(first, "dock_to_buffer", "a", 1)
    received.result(answer["actionId"])
    first.stop()
    second = make_hardware()
    again = call(second, "scan", "b", 1)
    assert again["actionId"] > answer["actionId"]
    assert received.result(again["actionId"])[0] == ev.TOOL_ACTION_SUCCEEDED


def test_status_reports_the_plc_link_and_action_durations(hardware, received, sim):
    run_ok(hardware, received, "dock_to_buffer", "s1", 1, job_id=51)
    answer = call(hardware, "buffer_to_equipment", "s2", 7, "NOPE", 1)  # refused: not an action
    assert answer["accepted"] is False
    status = call(hardware, "status")
    assert status["plcConnected"] is True
    series = status["actions"]["series"]
    assert set(series) == {ev.DOCK_TO_BUFFER}
    one = series[ev.DOCK_TO_BUFFER]
    assert (one["count"], one["failures"]) == (1, 0) and one["sum"] > 0
    assert one["buckets"][-1] == 1 and len(one["buckets"]) == len(status["actions"]["le"])


def test_known_actions_lists_what_is_held_and_what_was_answered(hardware, received):
    first = call(hardware, "dock_to_buffer", "k1", 1, job_id=1)
    second = call(hardware, "dock_to_buffer", "k2", 2, job_id=2)  # queued behind the first
    known = call(hardware, "known_actions")
    assert set(known["open"]) == {"k1", "k2"} and known["answered"] == []
    received.result(first["actionId"])
    received.result(second["actionId"])
    known = call(hardware, "known_actions")
    assert (known["open"], known["answered"]) == ([], ["k1", "k2"])
    assert known["instanceStartedAt"]


def test_a_replaced_line_controller_is_fenced_out(hardware, received, nameko_config):
    from nameko.standalone.rpc import ClusterRpcProxy

    def as_controller(instance):
        return ClusterRpcProxy(nameko_config, timeout=10, context_data={ev.CONTROLLER_CONTEXT_KEY: instance})

    with as_controller("old") as rpc:  # before any instance has read known_actions: accepted
        assert rpc.hardware.dock_to_buffer("f1", 1, job_id=1)["accepted"] is True
    with as_controller("new") as rpc:  # a restarted controller reads what the hardware holds
        assert "f1" in {*rpc.hardware.known_actions()["open"], *rpc.hardware.known_actions()["answered"]}
    with as_controller("old") as rpc:  # a request the old one had in flight arrives late
        late = rpc.hardware.dock_to_buffer("f2", 2, job_id=2)
    assert (late["accepted"], late["errorCode"]) == (False, "REJECTED") and "replaced" in late["errorMessage"]
    with as_controller("new") as rpc:
        assert rpc.hardware.dock_to_buffer("f3", 3, job_id=3)["accepted"] is True
    assert call(hardware, "dock_to_buffer", "f4", 4, job_id=4)["accepted"] is True  # no controller named
    assert "f2" not in call(hardware, "known_actions")["open"]


def test_a_request_asked_again_with_its_correlation_id_runs_once(hardware, received):
    """A caller that lost the answer (the transport's database failing over) asks
    again with the same correlation id: the service says it has it, and the action
    runs, and reports, once."""
    first = call(hardware, "start_machine", "again-1", "MC1", {"1": 7})
    assert first["accepted"] is True
    again = call(hardware, "start_machine", "again-1", "MC1", {"1": 7})  # still running, or done
    assert again["accepted"] is True and again["repeated"] is True
    received.result(first["actionId"])
    after = call(hardware, "start_machine", "again-1", "MC1", {"1": 7})  # answered already
    assert after["accepted"] is True and after["repeated"] is True
    results = [p for t, p in received.events if p.get("correlationId") == "again-1"]
    assert len(results) == 1, results


def test_an_event_the_transport_refused_is_offered_again_until_it_is_sent():
    """The transport's database failing over: a result or a watcher's edge exists
    only in the hardware service, so its publish is repeated, not dropped (a lost
    MachineDone left a cycle "overdue" in the failover drill)."""
    from services.hardware.dependencies import LineHardware

    sent, refusals = [], [OSError("connection refused"), OSError("session is read-only")]

    def dispatch(source, event_type, payload):
        if refusals:
            raise refusals.pop(0)
        sent.append((source, event_type, payload))

    LineHardware.send(dispatch, ev.MACHINE_DONE, {"machineId": "INSP1"})
    assert sent == [(ev.HARDWARE, ev.MACHINE_DONE, {"machineId": "INSP1"})] and refusals == []
