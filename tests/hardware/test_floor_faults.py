"""The simulator's faults as a floor has them (deploy/REGISTER_MAP.md,
deploy/OPCUA_MAP.md): the emergency stop, the PLC restart, the abort of a
running cycle, a fault mid-cycle, each driven as a host would, over Modbus and
over OPC UA (the same tests on both protocols; what only one PLC has stays
Modbus-only). The simulator's clock is the test's, so a cycle ends exactly when
the test says (no race with a poll).

What the simulator's model does and OPC UA only shows again runs once, over
Modbus (``MODEL_ONLY``): an e-stop ending a hung robot action, an aborted hung
cycle, a fault's aborted cycle and its restart, a faulted batch. Each thing
those cases show or call over OPC UA is proven there by another case (the
e-stop's faults, robot state and refused start; the abort; the slots' fields)
or through the service by tests/hardware/test_faults.py (the hangs, a machine
fault refusing a start) and test_actions.py (an inspection's verdict)."""

from __future__ import annotations

import time
from contextlib import closing

import pytest

from services.hardware import plc as P
from services.hardware.sim.control import OpcUaSimControl, SimControl
from services.hardware.sim.opcua_server import OpcUaLineSimulator
from services.hardware.sim.server import LineSimulator
from tests.hardware.conftest import PROTOCOLS, SPEED
from tests.support.opcua_host import OpcUaHost
from tests.support.plc_host import PlcHost
from tests.support.ports import free_port
from tests.support.register_map_plc import RegisterMapPlc
from tests.support.waiting import wait_for

MACHINES = ("MC1", "MC2", "WASH1", "INSP1")
MACHINE_FAULT = 6  # PLC error code "machine fault"
MODEL_ONLY = pytest.mark.parametrize("protocol", ["modbus"])  # the model's alone (see above)


class TestClock:
    """Wall seconds as the test sets them; the simulator plays them × SPEED."""

    __test__ = False

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def advance(self, simulated_seconds: float) -> None:
        self.t += simulated_seconds / SPEED


@pytest.fixture
def clock():
    return TestClock()


@pytest.fixture(params=PROTOCOLS)
def protocol(request):
    return request.param


@pytest.fixture
def paused_sim(layout, sim_options, clock, protocol):
    simulator = OpcUaLineSimulator if protocol == "opcua" else LineSimulator
    started = simulator(layout, sim_options, "127.0.0.1", free_port(), clock=clock).start()
    yield started
    started.stop()


def client_of(sim, protocol, layout, opcua_client, modbus_client):
    """A client of ``sim`` in its protocol, by its address or by its host and port."""
    return (opcua_client(layout, sim.address) if protocol == "opcua"
            else modbus_client(layout, sim.host, sim.port))


@pytest.fixture
def host(layout, paused_sim, protocol):
    with closing(client_of(paused_sim, protocol, layout, OpcUaHost, PlcHost)) as plc:
        yield plc


@pytest.fixture
def inject(layout, paused_sim, protocol):
    with closing(client_of(paused_sim, protocol, layout, OpcUaSimControl, SimControl)) as ctl:
        yield ctl


def shown(host: PlcHost | OpcUaHost, slot: dict) -> dict:
    """``slot`` with the fields ``host`` shows (OPC UA has no START flag)."""
    return {k: v for k, v in slot.items() if k in host.SLOT_FIELDS}


def load(host: PlcHost | OpcUaHost, clock: TestClock, buffer_slot: int, machine: str, slot: int, job: int) -> None:
    """A piece from the dock through the buffer into a machine slot."""
    action = host.dock_to_buffer(buffer_slot)
    clock.advance(6.1)
    host.ok(action)
    action = host.buffer_to_machine(buffer_slot, machine, slot, job)
    clock.advance(8.1)
    host.ok(action)


def works_again(host, clock):
    """A robot move onto buffer slot 2 and a whole cycle of MC1 (its job 41) succeed."""
    action = host.dock_to_buffer(2)
    clock.advance(6.1)
    host.ok(action)
    assert host.start("MC1", {1: 41})["error"] == 0
    clock.advance(12.1)
    assert host.machine("MC1")["slots"][0]["done"] == 1


def test_an_emergency_stop_faults_every_machine_and_the_robot_until_clear(host, clock, inject):
    load(host, clock, 1, "MC1", 1, job=41)
    assert host.start("MC1", {1: 41})["error"] == 0
    in_flight = host.dock_to_buffer(2)
    assert host.robot()["state"] == P.ROBOT_BUSY

    inject.emergency_stop()

    for name in MACHINES:
        assert host.machine(name)["fault"] == P.ERR_EMERGENCY_STOP, name
    mc1 = host.machine("MC1")
    assert mc1["running"] == 0
    assert mc1["slots"][0] == shown(host, {"occupied": 1, "done": 0, "result": 0, "job": 41, "running": 0,
                                           "start": 0})
    robot = host.robot()  # the action in flight ended at once, having moved nothing
    assert robot == {"fault": 8, "ack": in_flight, "state": P.ROBOT_ERROR, "done": in_flight, "error": 8}
    assert host.buffer()[1] == 0 and host.dock()[0] == 3
    # a command strobed during the stop is acknowledged and fails at once (no time passes)
    refused = host.dock_to_buffer(2)
    assert host.robot() == {"fault": 8, "ack": refused, "state": P.ROBOT_ERROR, "done": refused, "error": 8}
    assert host.start("MC2")["error"] == P.ERR_EMERGENCY_STOP
    clock.advance(30)
    assert host.machine("MC1")["slots"][0]["done"] == 0  # the aborted cycle never ends

    inject.clear()
    assert [host.machine(name)["fault"] for name in MACHINES] == [0, 0, 0, 0]
    assert host.robot()["fault"] == 0
    works_again(host, clock)


@MODEL_ONLY
def test_an_emergency_stop_ends_a_hung_robot_action_too(host, paused_sim, inject):
    inject.robot_hang()
    hung = host.dock_to_buffer(1)
    paused_sim.model.emergency_stop()  # the in-process way, as over Modbus
    assert host.robot() == {"fault": 8, "ack": hung, "state": P.ROBOT_ERROR, "done": hung, "error": 8}


def test_a_piece_taken_off_the_buffer_by_hand_leaves_its_slot_free(host, clock, inject):
    """What a REMOVE_FINISHED_PIECE action asks a person to do, injected: the
    piece an e-stop left on the buffer is taken out, and the slot takes the next."""
    action = host.dock_to_buffer(1)
    clock.advance(6.1)
    host.ok(action)
    assert host.buffer()[0] == 1
    inject.take_from_buffer(1)
    inject.take_from_buffer(2)  # an empty slot: nothing to take, nothing changes
    assert host.buffer()[:2] == [0, 0]
    action = host.dock_to_buffer(1)
    clock.advance(6.1)
    host.ok(action)
    assert host.buffer()[0] == 1


def test_a_plc_restart_refuses_connections_then_comes_back_reset_with_the_pieces_in_place(host, clock, inject):
    load(host, clock, 1, "MC1", 1, job=41)
    assert host.start("MC1", {1: 41})["error"] == 0
    host.dock_to_buffer(2)  # in flight at the restart: forgotten, never reports
    inject.machine_fault("MC2")
    inject.robot_error(3)  # would fail the next action; a restart forgets it
    assert host.dock() == (3, 1)

    asked = time.monotonic()
    inject.restart_plc(0.6)
    wait_for(lambda: not host.reachable(), 5, message="the PLC going down")
    wait_for(host.reachable, 10, interval=0.05, message="the PLC coming back")
    assert time.monotonic() - asked >= 0.6

    empty = {"occupied": 0, "done": 0, "result": 0, "job": 0, "running": 0, "start": 0}
    assert host.reset_slots("MC1") == [shown(host, {**empty, "occupied": 1}), shown(host, empty)]
    assert host.machine("MC2")["fault"] == 0
    # pieces where they were: the one in MC1, none moved by the forgotten action
    assert host.buffer() == [0] * 8 and host.dock() == (3, 0)
    clock.advance(30)
    assert host.robot()["done"] == 0 and host.machine("MC1")["slots"][0]["done"] == 0

    works_again(host, clock)  # the injected robot error went with the restart


def test_the_in_process_restart_drops_the_connection_at_once(host, paused_sim, clock):
    load(host, clock, 1, "WASH1", 3, job=7)
    paused_sim.restart(0.3)
    assert not host.reachable()
    wait_for(host.reachable, 10, interval=0.05, message="the simulator coming back")
    assert host.machine("WASH1")["slots"][2]["occupied"] == 1


def test_an_abort_stops_running_and_queued_cycles_and_a_start_runs_them_from_the_beginning(host, clock):
    load(host, clock, 1, "MC1", 1, job=41)
    load(host, clock, 2, "MC1", 2, job=42)
    assert host.start("MC1", {1: 41, 2: 42})["running"] == 1  # slot 2 queued behind slot 1
    clock.advance(6)

    mc1 = host.abort("MC1")

    assert mc1["running"] == 0 and mc1["fault"] == 0
    assert [(s["occupied"], s["running"], s["done"], s["job"]) for s in mc1["slots"]] == [(1, 0, 0, 41),
                                                                                        (1, 0, 0, 42)]
    assert host.abort("MC1")["running"] == 0  # nothing running: answered all the same
    # started again before the aborted cycle would have ended (at 12 s): a full cycle from now
    assert host.start("MC1", {1: 41})["error"] == 0
    clock.advance(6.5)
    assert host.machine("MC1")["slots"][0]["done"] == 0
    clock.advance(6)
    mc1 = host.machine("MC1")
    assert (mc1["slots"][0]["done"], mc1["slots"][1]["done"], mc1["running"]) == (1, 0, 0)


@MODEL_ONLY
def test_an_aborted_hung_cycle_never_reports_done(host, clock, inject, paused_sim):
    load(host, clock, 1, "MC2", 1, job=5)
    inject.machine_hang("MC2")
    host.start("MC2")
    clock.advance(40)
    assert host.machine("MC2")["slots"][0]["running"] == 1
    assert host.abort("MC2")["slots"][0]["running"] == 0
    inject.clear()  # hung cycles finish on a clear, but not an aborted one
    clock.advance(40)
    assert host.machine("MC2")["slots"][0]["done"] == 0
    host.start("MC2", {1: 5})
    clock.advance(12.1)
    assert host.machine("MC2")["slots"][0]["done"] == 1
    ends = [entry[4] for entry in paused_sim.model.cycle_log if entry[:2] == ["MC2", 1]]
    assert ends == ["aborted", "done"]


@MODEL_ONLY
def test_a_machine_fault_mid_cycle_aborts_it_and_a_start_after_clear_runs_it_again(host, clock, inject,
                                                                                  paused_sim):
    load(host, clock, 1, "MC1", 1, job=41)
    host.start("MC1", {1: 41})
    clock.advance(6)
    inject.machine_fault("MC1")
    mc1 = host.machine("MC1")
    assert (mc1["fault"], mc1["running"]) == (6, 0)
    assert mc1["slots"][0] == shown(host, {"occupied": 1, "done": 0, "result": 0, "job": 41, "running": 0,
                                           "start": 0})
    assert host.start("MC1", {1: 41})["error"] == MACHINE_FAULT
    inject.clear()
    started = paused_sim.model.now()
    assert host.start("MC1", {1: 41})["error"] == 0
    clock.advance(6.5)  # past the faulted cycle's end: its timer must not finish this one
    assert host.machine("MC1")["slots"][0]["done"] == 0
    clock.advance(6)
    assert host.machine("MC1")["slots"][0]["done"] == 1
    log = [entry for entry in paused_sim.model.cycle_log if entry[:2] == ["MC1", 1]]
    assert [entry[4] for entry in log] == ["aborted", "done"]
    assert log[1][3] - started >= 12.0


@MODEL_ONLY
def test_a_fault_stops_a_whole_batch_and_an_inspection_without_a_verdict(host, clock, inject):
    for n in (1, 2, 3, 4):
        load(host, clock, n, "WASH1", n, job=60 + n)
    clock.advance(30)  # the next pallet
    action = host.dock_to_buffer(5)
    clock.advance(6.1)
    host.ok(action)
    action = host.buffer_to_machine(5, "INSP1", 1, 70)
    clock.advance(8.1)
    host.ok(action)
    assert host.start("WASH1")["error"] == 0 and host.start("INSP1")["error"] == 0
    clock.advance(2)

    inject.machine_fault("WASH1")
    inject.machine_fault("INSP1")
    clock.advance(30)  # past both cycles' ends

    wash, insp = host.machine("WASH1"), host.machine("INSP1")
    assert [(s["occupied"], s["running"], s["done"]) for s in wash["slots"]] == [(1, 0, 0)] * 4
    assert insp["slots"][0] == shown(host, {"occupied": 1, "done": 0, "result": 0, "job": 70, "running": 0,
                                            "start": 0})
    inject.clear()
    assert host.start("WASH1", {n: 60 + n for n in (1, 2, 3, 4)})["error"] == 0
    clock.advance(19)
    assert [s["done"] for s in host.machine("WASH1")["slots"]] == [0, 0, 0, 0]
    clock.advance(1.1)
    assert [s["done"] for s in host.machine("WASH1")["slots"]] == [1, 1, 1, 1]


@pytest.mark.parametrize("make", ["simulator", "register_map_plc"])
def test_both_plcs_take_the_same_in_process_injections(make, layout, sim_options, clock):
    """LineSimulator and RegisterMapPlc share fault/emergency_stop/clear/restart, so a
    test can run on either."""
    port = free_port()
    plc = (LineSimulator(layout, sim_options, "127.0.0.1", port, clock=clock) if make == "simulator"
           else RegisterMapPlc(layout, "127.0.0.1", port)).start()
    host = PlcHost(layout, "127.0.0.1", port)
    try:
        plc.fault("MC2")
        assert host.machine("MC2")["fault"] == MACHINE_FAULT
        plc.emergency_stop()
        assert host.machine("MC1")["fault"] == host.robot()["fault"] == P.ERR_EMERGENCY_STOP
        plc.clear()
        assert host.machine("MC2")["fault"] == host.robot()["fault"] == 0
        plc.restart(0.2)
        wait_for(host.reachable, 10, interval=0.05, message="back from the restart")
        assert host.dock() == (4, 0)
    finally:
        host.close()
        plc.stop()
