"""A line commands only its own PLC (PRODUCT.md, "PLC identity"): the hardware
reads the PLC's identity on every connect and reconnect before anything else,
and a PLC that is not the line's gets nothing and is named, on both protocols."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gateway.api.health import plc_down
from services.hardware.device import PLC_IDENTITY_MISMATCH, PlcUnavailable, open_port
from services.hardware.device.identity import IdentityCheck
from services.hardware.service import HardwareService
from services.hardware.watcher import SignalWatcher
from services.line_controller.messages import new_message
from shared import events as ev
from shared.layout import load_layout
from tests.hardware.conftest import PROTOCOLS, call, outcome, start_simulator
from tests.support.ports import free_port
from tests.support.register_map_plc import RegisterMapPlc
from tests.support.waiting import wait_for

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"

# Soon: an action for a refused PLC waits this long for the line's own to answer.
QUICK = {"LINECTL_HW_RECONNECT_GRACE": 0.3}


@pytest.fixture
def other_line():
    """Another line of the demo plant, on the same register map (cell-b)."""
    return load_layout(DEPLOY / "lines" / "cell-b.yaml")


def _refused(received) -> dict:
    return received.wait(ev.PLC_CONNECTION, connected=False, errorCode=PLC_IDENTITY_MISMATCH)


def _says_who(error: str, found: str) -> None:
    assert error.startswith(PLC_IDENTITY_MISMATCH), error
    assert "line demo-cell expects the PLC 'demo-cell'" in error and f"found {found}" in error, error


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_line_pointed_at_another_lines_simulator_sends_nothing_and_says_why(
        protocol, other_line, sim_options, sim_port, container_factory, hw_config, received):
    other = start_simulator(protocol, other_line, sim_options, sim_port)  # cell-b's, where demo-cell looks
    try:
        container = container_factory(HardwareService, {**hw_config, **QUICK})
        container.start()
        _says_who(_refused(received)["error"], "'cell-b'")
        status = call(container, "status")
        assert (status["plcConnected"], status["plcIdentity"]) == (False, "cell-b")
        _says_who(status["plcError"], "'cell-b'")
        assert plc_down(status) == f"plc at {other.address} ({status['plcError']})"  # what /readyz says
        kind, result = outcome(container, received, "dock_to_buffer", "task-1", 1)
        assert (kind, result["errorCode"]) == (ev.ROBOT_ACTION_FAILED, ev.NOT_SENT)
        assert call(container, "plc_state")["connected"] is False
        assert other.model.writes == 0  # not one register written, not one method called
        assert not received.of(ev.PLC_CONNECTION, connected=True)
    finally:
        container.stop()
        other.stop()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_plc_that_restarts_as_another_gets_nothing_until_the_lines_own_is_back(
        protocol, make_hardware, sim, received):
    container = make_hardware(**QUICK)
    assert call(container, "status")["plcIdentity"] == "demo-cell"
    writes = sim.model.writes
    sim.restart(0.2, identity="cell-b")  # a swapped cable, another program: another PLC at the address
    _says_who(_refused(received)["error"], "'cell-b'")
    kind, result = outcome(container, received, "dock_to_buffer", "task-2", 1)
    assert (kind, result["errorCode"]) == (ev.ROBOT_ACTION_FAILED, ev.NOT_SENT)
    assert sim.model.writes == writes

    back = len(received.of(ev.PLC_CONNECTION, connected=True))
    sim.restart(0.1, identity="demo-cell")  # the line's own again: it goes on by itself
    wait_for(lambda: len(received.of(ev.PLC_CONNECTION, connected=True)) > back, 20, message="the PLC back")
    kind, _result = outcome(container, received, "dock_to_buffer", "task-3", 1)
    assert kind == ev.ROBOT_ACTION_SUCCEEDED and sim.model.writes > writes


def test_a_plc_without_the_identity_block_is_refused_and_without_plc_identity_only_reported(layout, sim_port):
    # The register map's own PLC (tests/support), with no identity block.
    plc = RegisterMapPlc(layout, "127.0.0.1", sim_port, identity=None).start()
    try:
        expecting = IdentityCheck("PLC-7", layout.id, plc.address)
        port = open_port(plc.address, layout, identity=expecting)
        with pytest.raises(PlcUnavailable) as refused:
            port.read_state()
        assert refused.value.code == PLC_IDENTITY_MISMATCH
        assert "found no identity (a PLC without the identity block)" in refused.value.message
        port.close()
        reporting = IdentityCheck(None, layout.id, plc.address)  # no plc.identity, a real PLC: reported
        port = open_port(plc.address, layout, identity=reporting)
        assert port.read_state()["connected"] is True and reporting.found is None
        port.close()
    finally:
        plc.stop()
    named = RegisterMapPlc(layout, "127.0.0.1", free_port(), identity="PLC-7").start()
    try:
        port = open_port(named.address, layout, identity=IdentityCheck("PLC-7", layout.id, named.address))
        assert port.read_state()["connected"] is True
        port.close()
    finally:
        named.stop()


def test_the_alarm_names_both_identities_however_long_the_names(layout):
    """The line's alarm carries at most 200 characters of the refusal: the longest
    names a plant allows (a 32-character line id and identities), a long OPC UA
    address, and a PLC publishing more than an identity still leave both named."""
    address = "opc.tcp://plc-cell-7.hall-2.north.plant.example.com:4840/freeopcua/server/"
    check = IdentityCheck("P" * 32, "l" * 32, address)
    for found in ("Q" * 32, "R" * 300, None):
        with pytest.raises(PlcUnavailable) as refused:
            check.check(found)

        class Refused:
            def state_changes(self):
                raise refused.value

        [(_, lost)] = SignalWatcher(Refused(), layout).poll()
        body = new_message(ev.PLC_CONNECTION, lost).parse()  # as the line_controller's loop takes it
        named = repr(found)[:40] if found else "found no identity"
        assert f"line {'l' * 32} expects the PLC {'P' * 32!r}" in body.error and named in body.error, body.error


def test_a_refused_plc_is_tried_again_less_and_less_often_and_the_right_one_found(
        layout, other_line, sim_options, sim_port):
    """The watcher polls 10 times a second; while the PLC at the address is another's,
    its link backs off (a pause doubling from the poll interval to 2 s) instead of
    connecting to it at every poll, and still checks each connection it makes."""
    other = start_simulator("modbus", other_line, sim_options, sim_port)
    try:
        watcher = SignalWatcher(open_port(other.address, layout, poll_interval=0.1,
                                          identity=IdentityCheck(layout.id, layout.id, other.address)), layout)
        began = time.monotonic()
        for _ in range(40):  # 4 s or more: without the back-off, 40 connections
            watcher.watch(0.1)
        elapsed = time.monotonic() - began
        # at 0, 0.1, 0.3, 0.7, 1.5, 3.1 s, then every 2 s
        assert 2 <= other.connections_accepted <= 7 + elapsed / 2, (other.connections_accepted, elapsed)
        assert watcher.connected is False and watcher.error.startswith(PLC_IDENTITY_MISMATCH)
        assert other.model.writes == 0

        # Refused just now: no connection for 2 s. An action waiting for its PLC tries
        # again at once, whatever the pause: its grace (5 s; 0.3 s in these tests) must
        # not run out behind it once the line's own PLC answers.
        tried = other.connections_accepted
        wait_for(lambda: watcher.watch(0.1) is not None and other.connections_accepted > tried, 5, 0,
                 message="the next try")
        other.restart(0.1, identity=layout.id)  # the line's own PLC at the address now
        wait_for(lambda: _answers_after_waiting(watcher.port), 1.2, 0, message="the line's own PLC, for an action")
        assert watcher.port.identity.found == layout.id
        assert [s[1]["connected"] for s in watcher.poll() if s[0] == ev.PLC_CONNECTION] == [True]
        watcher.port.close()
    finally:
        other.stop()


def _answers_after_waiting(port) -> bool:
    """As an action in flight asks (robot.py): wait for the link, then read."""
    port.wait_for_link(0.1)
    try:
        port.robot_status()
    except PlcUnavailable:
        return False
    return True

