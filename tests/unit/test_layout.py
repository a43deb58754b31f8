import pytest

from shared.config import Settings
from shared.layout import LayoutError, load_layout, parse_layout


def test_the_demo_layout_loads():
    layout = load_layout(Settings().line_file)
    assert layout.buffer_slots == 8
    ids = [e.id for e in layout.equipment]
    assert ids == ["MC1", "MC2", "WASH1", "INSP1"]
    assert layout.equipment_by_id("WASH1").batch
    assert layout.product("BRACKET-A").route[0].op == "scan"
    assert layout.to_json()["equipment"][0]["slots"] == 2
    assert layout.products_json()[1]["route"][0] == {"op": "process", "equipmentKind": "machining"}


def test_a_route_naming_missing_equipment_is_rejected():
    data = {
        "line": {"bufferSlots": 8},
        "equipment": [{"id": "M", "kind": "machining"}],
        "products": [{"id": "P", "route": [{"op": "process", "equipmentKind": "grinding"}]}],
    }
    with pytest.raises(LayoutError, match="grinding"):
        parse_layout(data)


def _with_plc(**changes):
    data = {
        "line": {"bufferSlots": 8},
        "plc": {"robot": {"base": 100}, "dock": {"base": 80, "station": 1},
                "buffer": {"base": 60, "station": 2}},
        "equipment": [{"id": "M", "kind": "machining", "slots": 2, "plc": {"station": 10, "base": 200}}],
        "products": [{"id": "P", "route": [{"op": "process", "equipmentKind": "machining"}]}],
    }
    data["plc"].update(changes.get("plc", {}))
    if "equipment_plc" in changes:
        data["equipment"][0]["plc"] = changes["equipment_plc"]
    return data


def test_the_demo_layout_has_a_register_map():
    plc = load_layout(Settings().line_file).plc
    assert (plc.unit_id, plc.robot_base, plc.dock_station, plc.buffer_station) == (1, 100, 1, 2)
    wash = plc.for_equipment("WASH1")
    assert (wash.station, wash.base, wash.slots) == (13, 400, 4)
    assert plc.by_station(14).equipment_id == "INSP1"


def test_a_layout_without_plc_keys_still_loads():
    data = _with_plc()
    del data["plc"]
    assert parse_layout(data).plc is None


def test_bad_register_maps_are_rejected():
    with pytest.raises(LayoutError, match="overlaps"):
        parse_layout(_with_plc(equipment_plc={"station": 10, "base": 120}))  # inside the robot block
    with pytest.raises(LayoutError, match="station 1 is already used"):
        parse_layout(_with_plc(equipment_plc={"station": 1, "base": 200}))
    with pytest.raises(LayoutError, match="equipment M: plc"):
        parse_layout(_with_plc(equipment_plc={}))
    with pytest.raises(LayoutError, match="plc.robot.base"):
        parse_layout(_with_plc(plc={"robot": {"base": -1}}))
    assert parse_layout(_with_plc()).plc.for_equipment("M").size == 24


def test_the_simulator_control_block_takes_16_registers():
    assert parse_layout(_with_plc(plc={"simControl": {"base": 184}})).plc.sim_control_base == 184
    with pytest.raises(LayoutError, match="overlaps plc.simControl"):  # 190..205 reaches the machine at 200
        parse_layout(_with_plc(plc={"simControl": {"base": 190}}))


def test_plc_identity_is_a_short_ascii_string_and_its_block_a_register_block():
    plc = parse_layout(_with_plc(plc={"identity": "PLC-CELL-7"})).plc
    assert (plc.identity, plc.identity_base) == ("PLC-CELL-7", 0)
    assert parse_layout(_with_plc()).plc.identity is None  # optional
    for bad, says in ((123, "expected a string"), ("", "expected a string"), ("x" * 33, "at most 32"),
                      ("zelle-ä", "printable ASCII"), (" a", "printable ASCII")):
        with pytest.raises(LayoutError, match=f"plc.identity: {says}"):
            parse_layout(_with_plc(plc={"identity": bad}))
    with pytest.raises(LayoutError, match=r"overlaps plc.identityBlock \(0..19\) \(at 0 unless plc.identityBlock"):
        parse_layout(_with_plc(plc={"buffer": {"base": 10, "station": 2}}))
    assert parse_layout(_with_plc(plc={"buffer": {"base": 10, "station": 2},
                                       "identityBlock": {"base": 30}})).plc.identity_base == 30
