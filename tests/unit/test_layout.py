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
