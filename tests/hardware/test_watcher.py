"""The signal watcher: one event per edge, never one per poll."""

import time
from datetime import UTC, datetime, timedelta

import pytest
from nameko.testing.services import entrypoint_hook

from services.hardware.device import PlcUnavailable, open_port
from services.hardware.watcher import ERROR_TEXT_MAX, SignalWatcher
from services.line_controller.messages import new_message
from shared import events as ev
from tests.hardware.conftest import PROTOCOLS, line_of, more_polls, settle
from tests.support.waiting import wait_for

# Every case on both protocols (a poll over Modbus, a notification over OPC UA), but
# the dock's refill: a second pallet is the simulator's model, and its PALLET_ARRIVED
# edge over OPC UA is test_watcher_edges_directly_against_the_simulator's.
BOTH = pytest.mark.parametrize("protocol", PROTOCOLS)


def run(container, received, method, *args):
    with entrypoint_hook(container, method) as rpc:
        return received.result(rpc(*args)["actionId"])


@BOTH
def test_done_edges_are_reported_once_each(hardware, received, sim):
    for slot, job in ((1, 11), (2, 12)):
        run(hardware, received, "dock_to_buffer", f"d{slot}", slot, job)
        run(hardware, received, "buffer_to_equipment", f"l{slot}", slot, "MC1", slot, job)
    run(hardware, received, "start_machine", "s", "MC1", {1: 11, 2: 12})
    received.wait(ev.MACHINE_DONE, jobId=11)
    received.wait(ev.MACHINE_DONE, jobId=12)
    more_polls(line_of(hardware).watcher, 3)  # each sees the slots still done
    done = received.of(ev.MACHINE_DONE)
    assert [(d["slotNo"], d["jobId"]) for d in done] == [(1, 11), (2, 12)]
    assert len(received.of(ev.PALLET_ARRIVED)) == 1
    assert len(received.of(ev.PLC_CONNECTION)) == 1


def _untimed(signals):
    """Signals without their observation time (checked once, below)."""
    return [(t, {k: v for k, v in p.items() if k not in ("observedAt", "plcState")}) for t, p in signals]


@BOTH
def test_watcher_edges_directly_against_the_simulator(layout, sim):
    watcher = SignalWatcher(open_port(sim.address, layout, timeout=5.0), layout)
    before = datetime.now(UTC)
    first = settle(watcher, expect=2)
    assert _untimed(first) == [(ev.PLC_CONNECTION, {"connected": True}), (ev.PALLET_ARRIVED, {"count": 4})]
    assert before <= datetime.fromisoformat(first[1][1]["observedAt"]) <= datetime.now(UTC)
    assert first[0][1]["plcState"]["dock"] == {"pieces": 4, "arrivals": 1}  # what the PLC holds, to check
    assert settle(watcher) == [] and settle(watcher) == []
    # a done slot and a new pallet appear between two polls: one event each
    model = sim.model
    wash = layout.plc.for_equipment("WASH1")
    model.mem[wash.base + 8 + 8 + 1] = 1  # slot 2 done
    model.mem[layout.plc.dock_base + 1] += 1  # another pallet arrival
    assert _untimed(settle(watcher, expect=2)) == [(ev.PALLET_ARRIVED, {"count": 4}),
                                        (ev.MACHINE_DONE, {"machineId": "WASH1", "slotNo": 2})]
    assert settle(watcher) == []
    model.mem[wash.base + 8 + 8 + 1] = 0  # unloaded: the falling edge is silent
    assert settle(watcher) == []
    model.mem[wash.base + 8 + 8 + 1] = 1
    assert len(settle(watcher, expect=1)) == 1
    watcher.port.close()


def test_the_dock_refills_after_it_runs_empty(hardware, received):
    for slot in range(1, 5):
        assert run(hardware, received, "dock_to_buffer", f"d{slot}", slot)[0] == ev.ROBOT_ACTION_SUCCEEDED
    wait_for(lambda: len(received.of(ev.PALLET_ARRIVED)) == 2, 20, message="a second pallet")
    assert [p["count"] for p in received.of(ev.PALLET_ARRIVED)] == [4, 4]


@BOTH
def test_a_new_piece_done_on_the_same_slot_between_two_polls_is_an_edge(layout, sim):
    """At high speed unload, load and a whole cycle can fall between two polls:
    the slot looks done both times, but it is another piece."""
    from services.hardware import plc as P
    watcher = SignalWatcher(open_port(sim.address, layout, timeout=5.0), layout)
    settle(watcher)
    slot = layout.plc.for_equipment("MC1").base + 8  # slot 1
    sim.model.mem[slot + P.S_OCCUPIED] = 1
    sim.model._set_u32(slot + P.S_JOB_ID, 21)
    sim.model.mem[slot + P.S_DONE] = 1
    assert settle(watcher, expect=1) == [(ev.MACHINE_DONE, {"machineId": "MC1", "slotNo": 1, "jobId": 21})]
    sim.model._set_u32(slot + P.S_JOB_ID, 22)  # still done, another job
    assert settle(watcher, expect=1) == [(ev.MACHINE_DONE, {"machineId": "MC1", "slotNo": 1, "jobId": 22})]
    assert settle(watcher) == []
    watcher.port.close()


@BOTH
def test_buffer_to_dock_takes_a_finished_piece_out(hardware, received, sim):
    run(hardware, received, "dock_to_buffer", "d", 3, 31)
    assert sim.model.mem[layout_buffer(sim, 3)] == 1
    assert run(hardware, received, "buffer_to_dock", "o", 3, 31)[0] == ev.ROBOT_ACTION_SUCCEEDED
    assert sim.model.mem[layout_buffer(sim, 3)] == 0
    t, p = run(hardware, received, "buffer_to_dock", "o2", 3, 31)  # nothing there any more
    assert (t, p["errorCode"]) == (ev.ROBOT_ACTION_FAILED, "SOURCE_EMPTY")


def layout_buffer(sim, slot_no):
    return sim.model.map.buffer_base + slot_no - 1


@BOTH
def test_a_machine_fault_is_reported_when_it_comes_and_when_it_clears(layout, sim):
    from services.hardware import plc as P

    mc2 = layout.plc.for_equipment("MC2")
    sim.model.mem[mc2.base + P.M_FAULT] = 6  # in fault before the first poll: an edge too
    # a request timeout (and with it OPC UA's keep-alive probe) a loaded machine does not
    # reach: a CI run once lost the session here to a 5 s probe, and the edges below
    # are about the fault, not the link
    watcher = SignalWatcher(open_port(sim.address, layout, timeout=15.0), layout)
    first = [s for s in _untimed(settle(watcher)) if s[0] == ev.MACHINE_FAULT]
    assert first == [(ev.MACHINE_FAULT, {"machineId": "MC2", "fault": 6})]
    assert [s for s in settle(watcher) if s[0] != ev.PLC_CONNECTION] == []  # still in fault: no new edge
    sim.model.mem[mc2.base + P.M_FAULT] = 0
    assert _untimed(settle(watcher, expect=1)) == [(ev.MACHINE_FAULT, {"machineId": "MC2", "fault": None})]
    assert [s for s in settle(watcher) if s[0] != ev.PLC_CONNECTION] == []
    watcher.port.close()


def test_a_dropped_link_is_an_edge_the_line_controller_takes(layout, sim, control):
    """A connection the PLC closes mid-read is lost in pymodbus' own words, longer
    than the line_controller takes: cut, or the loop refuses the edge and the line
    never hears that its PLC went away (no PLC_DISCONNECTED, work sent into the gap)."""
    watcher = SignalWatcher(open_port(sim.address, layout, timeout=5.0), layout)
    assert settle(watcher, expect=1)[0][1]["connected"] is True
    control.drop(2.0)
    lost = wait_for(lambda: [p for t, p in watcher.watch(0.1) if t == ev.PLC_CONNECTION], 10,
                    message="the link's loss")
    assert len(watcher.error) > ERROR_TEXT_MAX, watcher.error  # the case: pymodbus' words are long
    body = new_message(ev.PLC_CONNECTION, lost[0]).parse()  # as the line_controller's loop parses it
    assert body.connected is False and watcher.error.startswith(body.error[:-1]) and body.error.endswith("…")
    watcher.port.close()


class ScriptedPort:
    """A port whose pictures and losses are given: what a notified driver (OPC UA)
    hands over after a burst, the pictures bearing the times they were read."""

    address = "scripted"

    def __init__(self, *batches):
        self.batches = list(batches)

    def state_changes(self):
        return self.batches.pop(0)


def picture(at: datetime, robot_fault=None) -> dict:
    return {"robot": {"fault": robot_fault}, "dock": {"pieces": 0, "arrivals": 0}, "equipment": [],
            "observedAt": at.isoformat()}


def test_link_and_robot_edges_bear_strictly_increasing_times(layout):
    """The line_controller drops an edge seen before the last one it applied
    (they are delivered separately), so the watcher's order must show in the
    stamps: a loss is stamped "now", later than the pictures buffered after it."""
    read = datetime.now(UTC) - timedelta(seconds=5)
    port = ScriptedPort([picture(read)], [PlcUnavailable("PLC_ERROR", "gone"), picture(read + timedelta(seconds=1), 8)],
                        [picture(read + timedelta(seconds=2), None)])
    watcher = SignalWatcher(port, layout)
    signals = watcher.poll() + watcher.poll() + watcher.poll()
    edges = [(t, p.get("connected", p.get("fault"))) for t, p in signals]
    assert edges == [(ev.PLC_CONNECTION, True), (ev.PLC_CONNECTION, False), (ev.PLC_CONNECTION, True),
                     (ev.ROBOT_FAULT, 8), (ev.ROBOT_FAULT, None)]
    stamps = [datetime.fromisoformat(p["observedAt"]) for _, p in signals]
    assert stamps == sorted(set(stamps)) and stamps[0] == read
    assert signals[2][1]["plcState"]["observedAt"] == (read + timedelta(seconds=1)).isoformat()  # as read


def test_a_quiet_modbus_plc_is_read_once_a_second_and_an_action_hurries_the_reads(layout, sim, monkeypatch):
    # Issue 55: an idle line's hardware service does not read its PLC ten times a
    # second; its latched signals still come, at most QUIET_POLL_SECONDS late.
    from services.hardware import watcher as watching

    monkeypatch.setattr(watching, "BUSY_SECONDS", 2.0)  # quiet sooner than the service's 5 s: the same rule
    watcher = SignalWatcher(open_port(sim.address, layout, timeout=5.0, poll_interval=0.1), layout)
    settle(watcher, expect=2)  # connected, the first pallet
    wait_for(lambda: watcher.watch(0.5) == [] and watcher._next_poll > 0,
             timeout=watching.BUSY_SECONDS + 5, message="the watcher quiet")
    polls, started = watcher.polls, time.monotonic()
    while time.monotonic() - started < 2.5:
        assert watcher.watch(0.5) == []
    assert watcher.polls - polls <= 3  # once a second, not 25 times

    sim.model.mem[layout.plc.dock_base + 1] += 1  # a pallet arrives at the quiet line
    seen = time.monotonic()
    assert _untimed(settle(watcher, expect=1)) == [(ev.PALLET_ARRIVED, {"count": 4})]
    assert time.monotonic() - seen < watching.QUIET_POLL_SECONDS + 1.0

    watcher.hurry()
    polls, started = watcher.polls, time.monotonic()
    for _ in range(5):
        watcher.watch(0.5)
    assert watcher.polls - polls == 5 and time.monotonic() - started < 2.0  # at the port's rate again
