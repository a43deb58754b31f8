"""Another OPC UA stack reads the simulator from deploy/OPCUA_MAP.md alone:
node-opcua (pinned by tests/opcua-tools/package-lock.json) browses the tree,
reads the documented variables and their types, subscribes, and calls
``Robot.Execute`` (tests/opcua-tools/check_simulator.mjs)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import eventlet
import pytest

from services.hardware.sim.opcua_server import OpcUaLineSimulator
from tests.support.ports import free_port

TOOLS = Path(__file__).resolve().parents[1] / "opcua-tools"


def _tools_or_skip():
    missing = None
    if shutil.which("node") is None:
        missing = "node is not installed"
    elif not (TOOLS / "node_modules" / "node-opcua-client").is_dir():
        missing = "tests/opcua-tools/node_modules is missing: `npm ci` there (make test-tools)"
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs the OPC UA test tools: {missing}")
        pytest.skip(missing)


def test_node_opcua_drives_the_simulator_as_the_map_documents(layout, sim_options):
    _tools_or_skip()
    lock = json.loads((TOOLS / "package-lock.json").read_text())
    pinned = json.loads((TOOLS / "package.json").read_text())["devDependencies"]["node-opcua-client"]
    assert lock["packages"]["node_modules/node-opcua-client"]["version"] == pinned, "npm ci again"
    sim = OpcUaLineSimulator(layout, sim_options, "127.0.0.1", free_port()).start()
    try:
        proc = subprocess.Popen(["node", str(TOOLS / "check_simulator.mjs"), sim.address], cwd=TOOLS,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            eventlet.sleep(0.05)  # the simulator runs in this process's hub meanwhile
        if proc.poll() is None:
            proc.kill()
        out, err = proc.communicate(timeout=10)
    finally:
        sim.stop()
    results = [line[len("RESULT "):] for line in out.splitlines() if line.startswith("RESULT ")]
    assert results, f"no result from node: {out[-2000:]}\n{err[-2000:]}"
    report = json.loads(results[-1])
    assert report["ok"], report
    assert {"Cell", "Robot", "Dock", "Buffer", "MC1", "MC2", "WASH1", "INSP1", "SimControl"} <= set(report["devices"])
    assert report["values"]["Cell.Identity"] == layout.id  # the simulator serves its line's id
    assert {"AckId", "MachineryItemState", "Slot1", "Start", "Abort"} <= set(report["mc1Children"])
    assert report["values"]["Dock.Pieces"] == sim_options.pallet_size
    assert report["values"]["MC1.MachineryItemState"] == "NotExecuting"
    assert report["values"]["INSP1.Slot1.ResultEvaluation"] == 0
    assert report["accepted"] is True and report["errorCode"] == 0
    assert 1 in report["seen"]["doneId"] and report["seen"]["slot1"][-1] is True
    assert sim.model.mem[layout.plc.buffer_base] == 1  # the piece is on buffer slot 1
