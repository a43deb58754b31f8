"""A bad call changes nothing and says so (deploy/OPCUA_MAP.md, "Commands: the
rules"): ActionId 0 and a MARK text over 32 characters answer BadInvalidArgument,
never a command taken or a text cut short."""

from __future__ import annotations

import pytest

from services.hardware import opcua_map as M
from services.hardware import plc as P
from services.hardware.device.opcua import OpcUaPort
from services.hardware.device.port import PlcUnavailable


@pytest.fixture
def protocol():
    return "opcua"


def _execute(action_id: int, text: str, buffer_station: int) -> list:
    values = [action_id, P.CMD_MARK, buffer_station, 1, 0, 0, 0]
    return [(v, M.UINT16) for v in values] + [(0, M.UINT32), (0, M.UINT32), (text, M.STRING)]


def test_action_id_0_and_a_mark_text_over_32_characters_are_bad_calls(layout, sim):
    port = OpcUaPort(sim.address, layout, timeout=5.0)
    ids = M.node_ids(layout)
    station = layout.plc.buffer_station
    try:
        before = port.robot_status()
        assert before.ack_id == 0  # a fresh PLC: an id 0 would look acknowledged
        for action_id, text in ((0, "ok"), (7, "X" * 33)):
            with pytest.raises(PlcUnavailable, match="BadInvalidArgument"):
                port.call(ids[M.ROBOT], ids["Robot.Execute"], _execute(action_id, text, station))
        for method, args in (("MC1.Start", [(0, M.UINT16), ([], "UInt16[]"), ([], "UInt32[]")]),
                             ("MC1.Abort", [(0, M.UINT16)])):
            with pytest.raises(PlcUnavailable, match="BadInvalidArgument"):
                port.call(ids["MC1"], ids[method], args)
        # a 32-character text is taken, whole
        assert port.call(ids[M.ROBOT], ids["Robot.Execute"], _execute(8, "Y" * 32, station)) is True
    finally:
        port.close()
    assert sim.model.robot_log[0][0] == 8 and len(sim.model.robot_log) == 1
