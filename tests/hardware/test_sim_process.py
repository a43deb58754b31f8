"""``linectl sim`` as its own process, and the simulator model's machine timing."""

import os
import signal
import subprocess
import sys

from services.hardware import plc as P
from services.hardware.plc import PlcLink, PlcUnavailable
from services.hardware.sim.model import LineModel, SimOptions
from tests.support.ports import free_port
from tests.support.waiting import wait_for


def stop(proc) -> str:
    """SIGINT, as an operator's Ctrl-C: the sim ends by itself (killed, and failed, if not)."""
    proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired:
        proc.kill()  # never left running (and spinning) after the suite
        proc.communicate()
        raise


def test_linectl_sim_runs_as_its_own_process(layout):
    port = free_port()
    env = {**os.environ, "LINECTL_SIM_SPEED": "100", "LINECTL_LOG_LEVEL": "WARNING"}
    proc = subprocess.Popen([sys.executable, "-m", "services.stack.cli", "sim", "--port", str(port),
                             "--seed", "3", "--pallet-size", "6"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    link = PlcLink("127.0.0.1", port, layout.plc.unit_id)

    def dock():
        try:
            return link.read(layout.plc.dock_base, 2)
        except PlcUnavailable:
            return None

    try:
        assert wait_for(dock, 30, message="linectl sim listening") == [6, 1]
    finally:
        link.close()
        out = stop(proc)
    assert f"Modbus TCP on 127.0.0.1:{port}" in out


def test_linectl_sim_serves_opc_ua_as_its_own_process(layout):
    from services.hardware.device.opcua import OpcUaPort

    port = free_port()
    env = {**os.environ, "LINECTL_SIM_SPEED": "100", "LINECTL_LOG_LEVEL": "WARNING",
           "LINECTL_SIM_PROTOCOL": "opcua"}
    proc = subprocess.Popen([sys.executable, "-m", "services.stack.cli", "sim", "--port", str(port),
                             "--seed", "3", "--pallet-size", "6"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client = OpcUaPort(f"opc.tcp://127.0.0.1:{port}", layout, timeout=2.0)

    def dock():
        try:
            return client.read_state()["dock"]
        except PlcUnavailable:
            return None

    try:
        assert wait_for(dock, 30, message="linectl sim serving OPC UA") == {"pieces": 6, "arrivals": 1}
    finally:
        client.close()
        out = stop(proc)
    assert f"OPC UA on opc.tcp://127.0.0.1:{port}, security none" in out


def test_linectl_sim_rejects_a_bad_flag():
    proc = subprocess.run([sys.executable, "-m", "services.stack.cli", "sim", "--scrap-rate", "2"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--scrap-rate" in proc.stderr


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_single_machines_run_slots_one_after_another_batch_machines_together(layout):
    clock = Clock()
    model = LineModel(layout, SimOptions(speed=1.0, seed=1), clock)
    m = layout.plc
    for name in ("MC1", "WASH1"):
        e = m.for_equipment(name)
        for slot in (1, 2):
            model.mem[e.base + 8 + 8 * (slot - 1) + P.S_OCCUPIED] = 1
        model.on_request(e.base + P.M_START_ID, [1])
        assert model.mem[e.base + P.M_ACK_ID] == 1 and model.mem[e.base + P.M_ERROR_CODE] == 0

    def done(name, slot):
        e = m.for_equipment(name)
        return model.mem[e.base + 8 + 8 * (slot - 1) + P.S_DONE]

    clock.t = 12.5  # one machining cycle (12 s); the washer needs 20 s
    model.on_request(0, None)
    assert (done("MC1", 1), done("MC1", 2), done("WASH1", 1), done("WASH1", 2)) == (1, 0, 0, 0)
    clock.t = 24.5
    model.on_request(0, None)
    assert (done("MC1", 2), done("WASH1", 1), done("WASH1", 2)) == (1, 1, 1)
    # a start with nothing left to run is refused with a PLC error code
    e = m.for_equipment("MC1")
    model.on_request(e.base + P.M_START_ID, [2])
    assert model.mem[e.base + P.M_ERROR_CODE] == 7
