"""The PLC written from deploy/REGISTER_MAP.md alone (tests/support/register_map_plc.py),
driven by a host that uses the hardware service's offsets (services.hardware.plc):
the two agreeing is the register map being honest."""

from __future__ import annotations

import time

import pytest

from services.hardware import plc as P
from tests.support.plc_host import PlcHost
from tests.support.ports import free_port
from tests.support.register_map_plc import RegisterMapPlc
from tests.support.waiting import wait_for

MACHINES = ("MC1", "MC2", "WASH1", "INSP1")
MACHINE_FAULT = 6  # PLC error code "machine fault"


@pytest.fixture
def make_plc(layout):
    """Start a RegisterMapPlc (keywords as its constructor's); returns it and a host on it."""
    started: list[tuple[RegisterMapPlc, PlcHost]] = []

    def make(**options) -> tuple[RegisterMapPlc, PlcHost]:
        plc = RegisterMapPlc(layout, "127.0.0.1", free_port(), **options).start()
        started.append((plc, PlcHost(layout, plc.host, plc.port)))
        return started[-1]

    yield make
    for plc, host in started:
        host.close()
        plc.stop()


def done(host: PlcHost, machine: str, slot: int) -> bool:
    return host.machine(machine)["slots"][slot - 1]["done"] == 1


def test_robot_moves_and_machine_cycles_follow_the_map(make_plc):
    plc, host = make_plc()
    assert host.dock() == (4, 1)  # the first pallet
    for slot in (1, 2, 3, 4):
        host.ok(host.dock_to_buffer(slot))
    assert host.buffer()[:5] == [1, 1, 1, 1, 0]
    refused = host.finished(host.dock_to_buffer(5))  # the dock is empty until the next pallet
    assert (refused["state"], refused["error"]) == (P.ROBOT_ERROR, P.ERR_SOURCE_EMPTY)
    wait_for(lambda: host.dock() == (4, 2), 10, message="the next pallet")

    action = host.send(P.CMD_SCAN, (plc.map.buffer_station, 1), job=41)
    host.ok(action)
    text = host.link.read(plc.map.robot_base + P.R_TEXT_OUT, P.TEXT_REGISTERS)
    assert "41" in P.decode_text(text)
    host.link.write(plc.map.robot_base + P.R_TEXT_IN, P.encode_text("BRACKET-A 41"))
    host.ok(host.send(P.CMD_MARK, (plc.map.buffer_station, 1), job=41))
    assert plc.marks == [(1, "BRACKET-A 41")]

    host.ok(host.buffer_to_machine(1, "MC1", 1, job=41))
    host.ok(host.buffer_to_machine(2, "MC1", 2, job=42))
    mc1 = host.start("MC1")  # no START flags: every loaded slot not done
    assert (mc1["error"], mc1["running"]) == (0, 1)
    wait_for(lambda: done(host, "MC1", 2), 10, message="MC1 slot 2 done")
    assert host.machine("MC1")["slots"][0]["done"] == 1 and host.machine("MC1")["running"] == 0
    assert host.start("MC1")["error"] == 7  # nothing left to start
    host.ok(host.machine_to_buffer("MC1", 1, 1))
    assert host.machine("MC1")["slots"][0] == {"occupied": 0, "done": 0, "result": 0, "job": 0, "running": 0,
                                                "start": 0}

    host.ok(host.buffer_to_machine(3, "WASH1", 1, job=43))
    host.ok(host.buffer_to_machine(4, "WASH1", 2, job=44))
    assert host.start("WASH1", {1: 43, 2: 44})["error"] == 0
    wait_for(lambda: done(host, "WASH1", 1), 10, message="the washer's batch")
    assert done(host, "WASH1", 2)  # a batch ends together

    swap = host.send(P.CMD_SWAP, (plc.map.for_equipment("MC1").station, 2), (plc.map.buffer_station, 2),
                     aux_slot=1, job=42, job2=45)
    host.ok(swap)
    assert host.machine("MC1")["slots"][1]["job"] == 45
    host.ok(host.machine_to_buffer("MC1", 2, 1))
    host.ok(host.buffer_to_machine(1, "INSP1", 1, job=45))
    host.start("INSP1", {1: 45})
    wait_for(lambda: done(host, "INSP1", 1), 10, message="the inspection")
    assert host.machine("INSP1")["slots"][0]["result"] == P.RESULT_PASS
    host.ok(host.send(P.CMD_BUFFER_TO_DOCK, (plc.map.buffer_station, 2), (plc.map.dock_station, 0)))
    assert host.buffer()[1] == 0


def test_a_fault_aborts_the_cycle_an_abort_is_answered_a_start_runs_it_again(make_plc):
    plc, host = make_plc()
    host.ok(host.dock_to_buffer(1))
    host.ok(host.buffer_to_machine(1, "MC1", 1, job=41))
    plc.hang("MC1")  # in its cycle until the fault, whatever the machine's load
    host.start("MC1", {1: 41})
    assert host.machine("MC1")["running"] == 1

    plc.fault("MC1")
    mc1 = host.machine("MC1")
    assert (mc1["fault"], mc1["running"]) == (MACHINE_FAULT, 0)
    assert mc1["slots"][0] == {"occupied": 1, "done": 0, "result": 0, "job": 41, "running": 0, "start": 0}
    assert host.start("MC1", {1: 41})["error"] == MACHINE_FAULT
    plc.clear()  # a hung cycle would end on a clear; the aborted one does not
    assert host.machine("MC1")["fault"] == 0
    assert host.start("MC1", {1: 41})["error"] == 0
    wait_for(lambda: done(host, "MC1", 1), 10, message="MC1 done after its restart")

    host.ok(host.dock_to_buffer(2))
    host.ok(host.buffer_to_machine(2, "MC2", 1, job=42))
    plc.hang("MC2")
    host.start("MC2", {1: 42})
    mc2 = host.abort("MC2")
    assert mc2["running"] == 0 and mc2["slots"][0]["occupied"] == 1 and mc2["slots"][0]["running"] == 0
    assert host.abort("MC2")["abort_ack"] != 0  # nothing running: answered all the same
    plc.clear()
    assert host.start("MC2", {1: 42})["error"] == 0
    wait_for(lambda: done(host, "MC2", 1), 10, message="MC2 done after its restart")


def test_an_emergency_stop_ends_the_robot_action_and_every_cycle_until_clear(make_plc):
    plc, host = make_plc()
    host.ok(host.dock_to_buffer(1))
    plc.hang("MC1")
    host.ok(host.buffer_to_machine(1, "MC1", 1, job=41))
    host.start("MC1", {1: 41})
    plc.robot_hang()  # in flight, however long the stop takes to come
    in_flight = host.dock_to_buffer(2)
    assert host.robot()["state"] == P.ROBOT_BUSY

    plc.emergency_stop()

    assert [host.machine(name)["fault"] for name in MACHINES] == [P.ERR_EMERGENCY_STOP] * 4
    assert host.machine("MC1")["slots"][0]["running"] == 0
    assert host.robot() == {"fault": 8, "ack": in_flight, "state": P.ROBOT_ERROR, "done": in_flight,
                            "error": 8}
    assert host.buffer()[1] == 0  # nothing moved
    refused = host.dock_to_buffer(2)
    assert host.robot() == {"fault": 8, "ack": refused, "state": P.ROBOT_ERROR, "done": refused, "error": 8}
    plc.clear()
    assert host.robot()["fault"] == 0 and host.machine("MC1")["fault"] == 0
    host.ok(host.dock_to_buffer(2))


def test_a_restart_drops_connections_and_resets_the_registers_but_not_the_pieces(make_plc):
    plc, host = make_plc()
    host.ok(host.dock_to_buffer(1))
    host.ok(host.buffer_to_machine(1, "MC1", 1, job=41))
    plc.hang("MC1")
    host.start("MC1", {1: 41})
    plc.fault("MC2")
    plc.robot_hang()
    host.dock_to_buffer(2)  # in flight at the restart: forgotten

    asked = time.monotonic()
    plc.restart(0.5)
    assert not host.reachable()
    wait_for(host.reachable, 10, interval=0.05, message="the PLC coming back")
    assert time.monotonic() - asked >= 0.5

    assert host.reset_slots("MC1")[0] == {"occupied": 1, "done": 0, "result": 0, "job": 0, "running": 0, "start": 0}
    assert host.machine("MC2")["fault"] == 0
    assert host.dock() == (3, 0) and host.buffer()[:2] == [0, 0]
    host.ok(host.dock_to_buffer(3))  # the hang went with the restart too
    assert host.buffer()[:3] == [0, 0, 1]
    assert host.start("MC1", {1: 41})["error"] == 0  # the hang went with the restart
    wait_for(lambda: done(host, "MC1", 1), 10, message="MC1 done")


def test_a_hung_robot_action_is_made_on_clear(make_plc):
    plc, host = make_plc()
    plc.robot_hang()
    action = host.dock_to_buffer(1)
    assert host.robot()["state"] == P.ROBOT_BUSY
    assert host.robot()["ack"] != host.dock_to_buffer(2)  # busy: a second command is never acknowledged
    plc.clear()
    host.ok(action)
    assert host.buffer()[:2] == [1, 0]
