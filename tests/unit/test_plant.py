"""The plant file (PRODUCT.md, "Plant (several lines)"): the shipped demo plant,
and every way a plant file can be wrong, each stopping with one line that names
it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from shared.plant import PlantError, load_plant, single_line_plant

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_the_demo_plant_has_three_lines_on_two_layouts_at_least():
    plant = load_plant(DEPLOY / "plant.yaml")
    assert (plant.id, plant.name) == ("demo-plant", "Demo plant")
    assert plant.line_ids == ("cell-a", "cell-b", "cell-c")
    assert plant.default_line.id == "cell-a"
    assert plant.line("cell-c").sim_protocol == "opcua" and plant.line("cell-a").plc == "sim"
    layouts = {(len(line.layout.equipment), line.layout.buffer_slots) for line in plant.lines}
    assert len(layouts) >= 2
    with pytest.raises(KeyError):
        plant.line("cell-z")


def test_without_a_plant_file_the_plant_is_the_one_line():
    plant = single_line_plant(DEPLOY / "line.yaml", plc="127.0.0.1:5020")
    assert plant.line_ids == ("demo-cell",) and plant.id == "demo-cell"
    assert plant.default_line.plc == "127.0.0.1:5020"


@pytest.fixture
def plant_dir(tmp_path):
    for name in ("cell-a", "cell-b"):
        shutil.copy(DEPLOY / "lines" / f"{name}.yaml", tmp_path / f"{name}.yaml")
    return tmp_path


@pytest.mark.parametrize(("text", "named"), [
    ("plant: {id: p}\nlines:\n  - {layout: cell-a.yaml}\n  - {layout: cell-a.yaml}\n", "'cell-a' is already"),
    ("plant: {id: p}\nlines: [{layout: cell-a.yaml}]\nline: {}\n", "unknown key 'line'"),
    ("plant: {id: p, colour: red}\nlines: [{layout: cell-a.yaml}]\n", "plant: unknown key 'colour'"),
    ("lines: [{layout: cell-a.yaml, plcc: sim}]\n", "lines[1]: unknown key 'plcc'"),
    ("lines: [{layout: cell-a.yaml}, {layout: nowhere.yaml}]\n", "lines[2]: layout"),
    ("lines: [{layout: broken.yaml}]\n", "broken.yaml"),
    ("lines: [{layout: cell-a.yaml, plc: 'modbus://x'}]\n", "lines[1].plc"),
    ("lines: [{layout: cell-a.yaml, simProtocol: profinet}]\n", "lines[1].simProtocol"),
    ("lines: [{layout: bad-id.yaml}]\n", "'1st cell' is not a line id"),
    ("lines: []\n", "at least one line"),
    ("plant: {id: 'a plant'}\nlines: [{layout: cell-a.yaml}]\n", "plant.id"),
    ("- just a list\n", "expected a mapping"),
    ("lines: [{layout: cell-a.yaml}\n", "plant.yaml"),
])
def test_a_wrong_plant_file_stops_with_one_line_naming_it(plant_dir, text, named):
    (plant_dir / "broken.yaml").write_text("line: {id: x\n")
    (plant_dir / "bad-id.yaml").write_text((plant_dir / "cell-a.yaml").read_text()
                                           .replace("id: cell-a", "id: 1st cell"))
    path = plant_dir / "plant.yaml"
    path.write_text(text)
    with pytest.raises(PlantError) as err:
        load_plant(path)
    message = str(err.value)
    assert named in message and "\n" not in message, message


def test_the_first_line_is_the_default_and_order_is_kept(plant_dir):
    path = plant_dir / "plant.yaml"
    path.write_text("lines:\n  - {layout: cell-b.yaml}\n  - {layout: cell-a.yaml, plc: '10.0.0.5:502'}\n")
    plant = load_plant(path)
    assert plant.line_ids == ("cell-b", "cell-a") and plant.default_line.id == "cell-b"
    assert plant.id == "cell-b"  # no plant header: named after its first line
    assert plant.line("cell-a").plc == "10.0.0.5:502"
