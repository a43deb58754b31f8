"""What ``linectl up`` runs for a plant (PRODUCT.md, "Plant (several lines)"):
per line its simulator, hardware and line_controller, with the line id on
their command lines and the line's settings in their environment; ``--lines``
and ``--no-lines``; without a plant file, exactly the processes of before.
No process is started here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from services.stack.cli import build_parser
from services.stack.commands import sim as sim_command
from services.stack.plant_lines import plant_here, sim_port
from services.stack.processes import stack_processes
from shared.config import load_settings
from shared.plant import PlantError

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
URL = "postgresql://owner@127.0.0.1:5432/linectl"
PY = sys.executable


def settings_of(**env):
    return load_settings({f"LINECTL_{k}": str(v) for k, v in env.items()})


def processes(settings, lines=None, no_lines=False):
    plant, ids = plant_here(settings, lines, no_lines)
    return stack_processes(settings, URL, plant, ids, central=not lines)


@pytest.fixture
def plant_file(tmp_path):
    """Two Modbus lines on the demo layouts, and a third whose PLC is real, on OPC UA."""
    path = tmp_path / "plant.yaml"
    path.write_text(f"plant: {{id: p, name: P}}\nlines:\n"
                    f"  - {{layout: {DEPLOY / 'lines/cell-a.yaml'}, plc: sim}}\n"
                    f"  - {{layout: {DEPLOY / 'lines/cell-b.yaml'}, plc: sim, simProtocol: opcua}}\n"
                    f"  - {{layout: {DEPLOY / 'lines/cell-c.yaml'}, plc: 'opc.tcp://10.0.0.7:4840'}}\n")
    return path


def test_without_a_plant_file_the_processes_are_those_of_before():
    specs = processes(settings_of(PLC="sim", RETENTION_INTERVAL_SECONDS=60))
    assert [s.name for s in specs] == ["sim", "hardware", "line_controller", "gateway", "retention"]
    assert [s.argv for s in specs] == [
        [PY, "-m", "services.stack.cli", "sim"],
        [PY, "-m", "services.stack.run_service", "hardware"],
        [PY, "-m", "services.stack.run_service", "line_controller"],
        [PY, "-m", "gateway", "--name", "gateway"],
        [PY, "-m", "services.stack.cli", "retention"]]
    assert all(s.env == {"LINECTL_DATABASE_URL": URL} for s in specs)
    assert [s.name for s in processes(settings_of(PLC="127.0.0.1:502", RETENTION_INTERVAL_SECONDS=0))] == [
        "hardware", "line_controller", "gateway"]
    # --no-lines: the gateway and retention; --lines with the one line's id: its processes only.
    assert [s.name for s in processes(settings_of(), no_lines=True)] == ["gateway", "retention"]
    assert plant_here(settings_of(), "demo-cell") == (None, ("demo-cell",))
    assert [s.name for s in processes(settings_of(), "demo-cell")] == ["sim", "hardware", "line_controller"]


def test_with_a_plant_file_every_line_has_its_processes_then_one_gateway(plant_file):
    settings = settings_of(PLANT_FILE=plant_file, SIM_PORT=6000, RETENTION_INTERVAL_SECONDS=60)
    specs = processes(settings)
    assert [s.name for s in specs] == [
        "sim@cell-a", "hardware@cell-a", "line_controller@cell-a",
        "sim@cell-b", "hardware@cell-b", "line_controller@cell-b",
        "hardware@cell-c", "line_controller@cell-c",  # a real PLC: no simulator
        "gateway", "retention"]
    by_name = {s.name: s for s in specs}
    assert by_name["sim@cell-b"].argv == [PY, "-m", "services.stack.cli", "sim", "--line", "cell-b", "--port", "6001"]
    assert by_name["hardware@cell-b"].argv == [PY, "-m", "services.stack.run_service", "hardware", "--line", "cell-b"]
    assert by_name["line_controller@cell-a"].argv[-3:] == ["line_controller", "--line", "cell-a"]
    assert by_name["hardware@cell-b"].env == {
        "LINECTL_DATABASE_URL": URL, "LINECTL_LINE_FILE": str(DEPLOY / "lines/cell-b.yaml"),
        "LINECTL_PLC": "sim", "LINECTL_SIM_PROTOCOL": "opcua", "LINECTL_SIM_PORT": "6001",
        "LINECTL_PLANT_FILE": str(plant_file)}
    assert by_name["hardware@cell-c"].env["LINECTL_PLC"] == "opc.tcp://10.0.0.7:4840"
    for spec in specs[:-2]:  # each of a line's processes names its kind and its line
        kind, _, line_id = spec.name.partition("@")
        assert kind in spec.argv and line_id in spec.argv
        assert spec.env["LINECTL_SIM_PORT"] == str(6000 + ("cell-a", "cell-b", "cell-c").index(line_id))
    assert by_name["hardware@cell-a"].grace_seconds > by_name["line_controller@cell-a"].grace_seconds
    assert by_name["gateway"].takes_hangup and by_name["retention"].independent
    assert by_name["gateway"].env == {"LINECTL_DATABASE_URL": URL}


def test_lines_runs_only_those_lines_and_no_lines_only_the_gateway(plant_file):
    settings = settings_of(PLANT_FILE=plant_file, SIM_PORT=6000, RETENTION_INTERVAL_SECONDS=60)
    specs = processes(settings, "cell-c, cell-b")
    assert [s.name for s in specs] == ["sim@cell-b", "hardware@cell-b", "line_controller@cell-b",
                                       "hardware@cell-c", "line_controller@cell-c"]
    # A line's simulator port is its place in the plant's, whatever runs beside it.
    assert specs[0].argv[-1] == "6001" == str(sim_port(settings, plant_here(settings)[0],
                                                       plant_here(settings)[0].line("cell-b")))
    assert [s.name for s in processes(settings, no_lines=True)] == ["gateway", "retention"]


def test_an_unknown_line_or_a_bad_plant_file_is_one_line_naming_it(plant_file, tmp_path):
    settings = settings_of(PLANT_FILE=plant_file)
    with pytest.raises(PlantError, match=r"^--lines cell-x: the plant has no such line \(its lines: "
                                         r"cell-a, cell-b, cell-c\)$"):
        processes(settings, "cell-a,cell-x")
    with pytest.raises(PlantError, match="^--lines: expected"):
        processes(settings, " , ")
    bad = tmp_path / "bad.yaml"
    bad.write_text("lines: [{layout: nowhere.yaml}]\n")
    with pytest.raises(PlantError, match=r"bad\.yaml: lines\[1\]: layout") as err:
        processes(settings_of(PLANT_FILE=bad))
    assert "\n" not in str(err.value)
    with pytest.raises(PlantError, match="port 65536"):
        processes(settings_of(PLANT_FILE=plant_file, SIM_PORT=65534))


def test_the_command_line_of_up_and_sim():
    parser = build_parser()
    args = parser.parse_args(["up", "--lines", "cell-a,cell-b"])
    assert (args.lines, args.no_lines) == ("cell-a,cell-b", False)
    assert parser.parse_args(["up", "--no-lines"]).no_lines
    assert parser.parse_args(["up"]).lines is None
    with pytest.raises(SystemExit):
        parser.parse_args(["up", "--lines", "cell-a", "--no-lines"])
    assert parser.parse_args(["sim", "--line", "cell-b"]).line == "cell-b"


def test_sim_of_a_line_takes_its_layout_protocol_and_port(plant_file):
    settings = settings_of(PLANT_FILE=plant_file, SIM_PORT=6000)
    parser = build_parser()
    layout, layout_file, port, protocol = sim_command._line(settings, parser.parse_args(["sim", "--line", "cell-b"]))
    assert (layout.id, layout_file, port, protocol) == ("cell-b", DEPLOY / "lines/cell-b.yaml", 6001, "opcua")
    args = parser.parse_args(["sim", "--line", "cell-b", "--port", "7000", "--protocol", "modbus"])
    assert sim_command._line(settings, args)[2:] == (7000, "modbus")
    with pytest.raises(PlantError, match=r"^--line cell-x: the plant has no such line"):
        sim_command._line(settings, parser.parse_args(["sim", "--line", "cell-x"]))
    # Without --line: LINECTL_LINE_FILE, LINECTL_SIM_PORT and LINECTL_SIM_PROTOCOL, as before.
    plain = settings_of(SIM_PORT=6000, LINE_FILE=DEPLOY / "lines/cell-c.yaml")
    layout, _file, port, protocol = sim_command._line(plain, parser.parse_args(["sim"]))
    assert (layout.id, port, protocol) == ("cell-c", 6000, "modbus")
