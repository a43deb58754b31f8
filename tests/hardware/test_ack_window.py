"""A PLC restart inside the acknowledgement window (issue 41): the PLC took the
command, then restarted before the host saw its acknowledged id. The hardware
reports the outcome unknown (the PLC may have started it), never "not sent"
(the line would send it again as if nothing had happened).

On both protocols, the OPC UA simulator publishing slowly (a 60 ms publishing
interval: its ``AckId`` notification comes up to 60 ms after ``Accepted``), the
restart 0 and 50 ms after the PLC accepted. docs/state-machines.md, "How each
protocol closes the acknowledgement window"."""

from __future__ import annotations

import logging

import pytest

from services.hardware import plc as P
from services.hardware.action_requests import ActionRequest, CommandBuilder
from services.hardware.device import DevicePort, MachineAnswer, RobotStatus, open_port
from services.hardware.robot import ActionRunner
from services.hardware.sim.model import SimOptions
from shared import events as ev
from tests.hardware.conftest import PROTOCOLS, plc_address, start_simulator
from tests.support.plc_restarts import after_machine_start, after_robot_command
from tests.support.waiting import wait_for

SLOW_PUBLISHING_MS = 60
DOWN = 0.3  # seconds the restarted PLC refuses connections


@pytest.fixture
def sim_options():
    # 20x: a move takes 0.3-0.4 s and a cycle 0.6 s, longer than the restart's delay
    return SimOptions(speed=20.0, scrap_rate=0.0, seed=7, pallet_size=4, pallet_seconds=30.0)


@pytest.fixture
def sim(layout, sim_options, sim_port, protocol):
    slow = {"publishing_interval": SLOW_PUBLISHING_MS} if protocol == "opcua" else {}
    simulator = start_simulator(protocol, layout, sim_options, sim_port, **slow)
    yield simulator
    simulator.stop()


@pytest.fixture
def runner(layout, sim, sim_port, protocol):
    port = open_port(plc_address(protocol, sim_port), layout, timeout=2.0, poll_interval=0.02)
    yield ActionRunner(port, layout, action_timeout=10.0, poll_interval=0.02, reconnect_grace=3.0)
    port.close()


def load_mc1(runner, build) -> None:
    assert runner.run(ActionRequest("d", 1, build.dock_to_buffer(1, 51))).ok
    assert runner.run(ActionRequest("l", 2, build.buffer_to_equipment(1, "MC1", 1, 51))).ok


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("delay", [0.0, 0.05])
def test_a_restart_right_after_an_accepted_robot_move_is_an_unknown_outcome(layout, sim, runner, delay):
    build = CommandBuilder(layout)
    assert runner.run(ActionRequest("d", 1, build.dock_to_buffer(1, 51))).ok
    accepted = after_robot_command(sim, delay, DOWN)
    result = runner.run(ActionRequest("l", 2, build.buffer_to_equipment(1, "MC1", 1, 51)))
    assert accepted == [2]
    # the move was in flight (0.4 s here): forgotten by the restart, it never reports
    assert (result.ok, result.error_code) == (False, ev.OUTCOME_UNKNOWN), result


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("delay", [0.0, 0.05])
def test_a_restart_right_after_an_accepted_machine_start_is_never_not_sent(layout, sim, runner, delay):
    build = CommandBuilder(layout)
    load_mc1(runner, build)
    mc1 = layout.plc.for_equipment("MC1")
    accepted = after_machine_start(sim, delay, DOWN)
    result = runner.run(ActionRequest("s", 3, build.start_machine("MC1", {"1": 51})))
    assert accepted == [3]
    # Started (its AckId seen before the restart), or unknown: the restart stopped the
    # cycle either way, and the machine's own question (a cycle that stopped) follows.
    assert result.ok or result.error_code == ev.OUTCOME_UNKNOWN, result
    if delay == 0.0:
        assert (result.ok, result.error_code) == (False, ev.OUTCOME_UNKNOWN), result
    wait_for(lambda: sim.model.mem[mc1.base + P.M_ACK_ID] == 0, 5, message="the restart")


@pytest.mark.parametrize("protocol", ["opcua"])
def test_the_driver_asks_for_every_edge_and_says_what_the_server_granted(runner, caplog):
    caplog.set_level(logging.INFO, logger="services.hardware.device.opcua")
    runner.port.read_state()
    def lines():
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("OPC UA subscription")]
    (line,) = wait_for(lines, 5, message="the subscription's line")
    assert f"publishing every {SLOW_PUBLISHING_MS} ms (asked 10)" in line, line
    # asyncua's server grants its publishing interval as the sampling (it reports every write)
    assert f"sampling {SLOW_PUBLISHING_MS} ms (asked 0: the fastest), queues of 64 (asked 64)" in line, line


class _PlcThatRestartsUnseen(DevicePort):
    """Shows the robot's action acknowledged, then (a restart and a reconnect the
    link never reported) acknowledged ids back at 0: no real PLC here can make a
    loss go unseen, so this is a stand-in for exactly that."""

    protocol = "fake"
    address = "fake"

    def __init__(self):
        self.reads = 0

    def robot_status(self) -> RobotStatus:
        self.reads += 1
        if self.reads == 1:
            return RobotStatus(0, 0, P.ROBOT_IDLE, 0, 0)  # before the command
        return RobotStatus(0, 7, P.ROBOT_BUSY, 0, 0) if self.reads == 2 else RobotStatus(0, 0, P.ROBOT_IDLE, 0, 0)

    def send_robot_command(self, action_id, command) -> bool:
        return True

    def scan_text(self): return ""
    def start_machine(self, equipment_id, action_id, jobs): return True
    def machine_answer(self, equipment_id): return MachineAnswer(0, 0)
    def abort_machine(self, equipment_id, action_id): return True
    def abort_answer(self, equipment_id): return 0
    def answered_action_ids(self): return [0, 0]
    def read_state(self): return {}
    def wait_for_change(self, timeout): return False
    def wait_for_answer(self, timeout): pass
    def close(self): pass


def test_an_acknowledged_id_gone_without_a_loss_seen_is_an_unknown_outcome(layout):
    runner = ActionRunner(_PlcThatRestartsUnseen(), layout, action_timeout=2.0, poll_interval=0.01)
    result = runner.run(ActionRequest("m", 7, CommandBuilder(layout).dock_to_buffer(1, 51)))
    assert (result.ok, result.error_code) == (False, ev.OUTCOME_UNKNOWN), result
