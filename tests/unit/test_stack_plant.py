"""What ``linectl up`` runs for a plant (PRODUCT.md, "Plant (several lines)"):
per line its simulator, hardware and line_controller, with the line id on
their command lines and the line's settings in their environment; ``--lines``
and ``--no-lines``; without a plant file, exactly the processes of before.
No process is started here."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from services.stack.cli import build_parser
from services.stack.commands import sim as sim_command
from services.stack.line_files import make_line_data_dirs
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
    assert all(s.env["LINECTL_DATABASE_URL"] == URL for s in specs)
    assert [s.env.get("LINECTL_DATA_DIR") for s in specs] == ["var/lines/demo-cell"] * 3 + [None] * 2
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
    assert by_name["hardware@cell-b"].env.items() >= {
        "LINECTL_DATABASE_URL": URL, "LINECTL_LINE_FILE": str(DEPLOY / "lines/cell-b.yaml"),
        "LINECTL_PLC": "sim", "LINECTL_SIM_PROTOCOL": "opcua", "LINECTL_SIM_PORT": "6001",
        "LINECTL_PLANT_FILE": str(plant_file), "LINECTL_DATA_DIR": "var/lines/cell-b"}.items()
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


def test_each_line_s_processes_get_their_line_s_url_only(plant_file):
    """"Line credentials": the owner's URL is the gateway's; a line's processes get their
    line's own login, the pgsql:// transport on it, and no libpq password of the supervisor's."""
    own = {i: f"postgresql://linectl_line_{i}:pw-{i}@db:5432/linectl" for i in ("cell-a", "cell-b", "cell-c")}
    settings = settings_of(PLANT_FILE=plant_file, RETENTION_INTERVAL_SECONDS=60)
    plant, ids = plant_here(settings)
    for spec in stack_processes(settings, URL, plant, ids, line_urls=own):
        kind, _, line_id = spec.name.partition("@")
        if not line_id:
            assert spec.env == {"LINECTL_DATABASE_URL": URL}
            continue
        assert spec.env["LINECTL_DATABASE_URL"] == own[line_id]
        assert spec.env["LINECTL_AMQP_URI"] == "pgsql://" + own[line_id].split("://")[1]
        assert spec.env["PGPASSWORD"] is None  # not inherited (services.stack.supervisor)
    rabbit = settings_of(PLANT_FILE=plant_file, AMQP_URI="amqp://mq:5672/linectl")
    spec = stack_processes(rabbit, URL, plant, ["cell-b"], central=False, line_urls=own)[0]
    assert "LINECTL_AMQP_URI" not in spec.env
    # Without a plant file: the one line's URL.
    specs = stack_processes(settings_of(), URL, None, line_urls={"demo-cell": own["cell-a"]})
    assert [s.env["LINECTL_DATABASE_URL"] for s in specs] == [own["cell-a"]] * 3 + [URL] * 2


def test_a_line_s_processes_read_their_line_s_own_data_directory_and_no_central_secret(
        plant_file, tmp_path, monkeypatch):
    """"Line credentials": the data directory holds the superuser's password, every line's and
    the tokens; a line's processes get their line's own directory under it (0700), the OPC UA
    certificates where they were, none of the central processes' secrets, and a LINECTL_CONFIG
    file's settings (it may hold the owner's URL) as variables, not the file."""
    data = tmp_path / "data"
    config = tmp_path / "linectl.yaml"
    config.write_text(f"LINECTL_DATABASE_URL: {URL}\nTOKENS: operator:{'t' * 24}\nSIM_SPEED: 7\nLOG_LEVEL: ERROR\n")
    central = {"LINECTL_CONFIG": str(config), "LINECTL_DATA_DIR": str(data), "LINECTL_PLANT_FILE": str(plant_file),
               "LINECTL_LOG_LEVEL": "WARNING", "LINECTL_TLS_CERT": str(tmp_path / "cert.pem"),
               "LINECTL_AI_CREDENTIAL_KEY": "k" * 44}
    for name in list(os.environ):
        if name.startswith("LINECTL_"):
            monkeypatch.delenv(name)
    for name, value in central.items():
        monkeypatch.setenv(name, value)
    settings = settings_of(CONFIG=config, DATA_DIR=data, PLANT_FILE=plant_file)
    plant, ids = plant_here(settings)
    own = {"cell-b": "postgresql://linectl_line_cell-b:pw@db:5432/linectl"}
    for spec in stack_processes(settings, URL, plant, ids, line_urls=own):
        kind, _, line_id = spec.name.partition("@")
        # what the supervisor hands the process: its environment, over linectl up's
        env = {k: v for k, v in {**os.environ, **spec.env}.items() if v is not None}
        if not line_id:
            assert env["LINECTL_CONFIG"] == str(config) and env["LINECTL_DATA_DIR"] == str(data)
            continue
        assert "LINECTL_CONFIG" not in env and "LINECTL_TLS_CERT" not in env and "LINECTL_AI_CREDENTIAL_KEY" not in env
        assert env["LINECTL_DATA_DIR"] == str(data / "lines" / line_id)
        seen = load_settings(env)
        assert seen.data_dir == data / "lines" / line_id
        assert seen.opcua_cert_directory == data / "opcua"  # one pair for a line's hardware and simulator
        assert (seen.sim_speed, seen.log_level, seen.tokens) == (7.0, "WARNING", {})  # the environment wins
        assert seen.database_url == own.get(line_id, URL)  # (cell-a and cell-c here without a login: the roles off)
    make_line_data_dirs(settings, plant.line_ids)
    make_line_data_dirs(settings, plant.line_ids)  # again: a second up
    assert sorted(p.name for p in (data / "lines").iterdir()) == ["cell-a", "cell-b", "cell-c"]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in (data / "lines").iterdir())


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


def test_a_plant_file_s_secrets_file_gives_line_urls_or_one_line_naming_what_is_wrong(plant_file, tmp_path):
    from services.stack.line_credentials import LineCredentialsError, given_logins, given_urls
    from shared.plant import load_plant

    secrets = tmp_path / "line-secrets.yaml"
    with_secrets = tmp_path / "plant-s.yaml"
    with_secrets.write_text(plant_file.read_text() + "secrets: line-secrets.yaml\n")
    url_b = "postgresql://linectl_line_cell-b:s3cret@db1:5432,db2:5432/linectl?target_session_attrs=read-write"
    secrets.write_text(f"lines:\n  cell-b: {url_b}\n")
    secrets.chmod(0o600)
    plant = load_plant(with_secrets)
    assert plant.secrets_file == secrets and given_urls(plant) == {"cell-b": url_b}
    settings = settings_of(PLANT_FILE=with_secrets)
    assert given_logins(settings, plant, ["cell-b"]) == {"cell-b": url_b}  # a line host: nothing to migrate
    assert given_logins(settings, plant, ["cell-a", "cell-b"]) is None  # cell-a has none: the owner migrates
    own_a = "postgresql://linectl_line_cell-a:pw@db1:5432/linectl"
    assert given_logins(settings_of(PLANT_FILE=with_secrets, DATABASE_URL=own_a), plant, ["cell-a", "cell-b"]) == {
        "cell-a": own_a, "cell-b": url_b}
    for text, mode, said in (
            (f"lines:\n  cell-b: {url_b}\n", 0o644, "others may read it (mode 644); run chmod 600 on it"),
            (f"lines:\n  cell-x: {url_b}\n", 0o600, "lines.cell-x: the plant has no such line"),
            ("lines:\n  cell-a: postgresql://postgres:pw@db1/linectl\n", 0o600,
             "lines.cell-a: expected linectl_line_cell-a and its password in the URL, got postgresql://postgres:***@"),
            ("users: {}\n", 0o600, "expected 'lines:' mapping line ids to database URLs")):
        secrets.write_text(text)
        secrets.chmod(mode)
        with pytest.raises(LineCredentialsError) as err:
            given_urls(plant)
        assert said in str(err.value) and "\n" not in str(err.value)
        assert "s3cret" not in str(err.value)
