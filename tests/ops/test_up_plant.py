"""``linectl up``, ``linectl migrate`` and ``linectl sim`` with a plant file
(PRODUCT.md, "Plant (several lines)"; issue 38), as real processes on a real
PostgreSQL:

- a two-line plant on three hosts: ``up --no-lines`` (the gateway; its migrate
  step registers both lines, schema and role), and ``up --lines ID`` per line,
  each given only its line's URL (``linectl lines credentials``; issue 56):
  as LINECTL_DATABASE_URL, or in the plant file's secrets file. Each line runs
  its simulator (on LINECTL_SIM_PORT plus the line's place in the plant),
  hardware and line_controller, each with the line id on its command line;
  ``/readyz`` (every line's services and PLC) turns 200; the second line's
  controller answers under its own name, and takes a work order through
  ``/api/lines/<id>/…``. Whatever a line's process holds (its environment, the
  files it names, the files under the directories it names: its data directory
  is its line's own) writes no other line's rows, nor the people, audit or AI
  tables ("Line credentials"). SIGTERM stops every host's processes. (A line's process is supervised as any other:
  tests/unit/test_supervisor.py, tests/ops/test_plant.py's respawned controller.)
- ``migrate`` registers the plant's lines, and sets each line's login.
- a line the plant does not have, or a bad plant file, stops ``up`` before
  anything starts, with one line naming it (exit status 2).
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from urllib.parse import urlsplit

import psycopg2
import pytest

from shared.config import mask_url
from tests.ops.line_holdings import credentials_held, environ_of, held_files, named_paths, refused, try_writes
from tests.support.ports import answers
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
LINES = ("cell-a", "cell-b")
KINDS = ("sim", "hardware", "line_controller")


@pytest.fixture
def plant_file(tmp_path) -> Path:
    path = tmp_path / "plant.yaml"
    path.write_text("plant: {id: two-cells, name: Two cells}\nlines:\n"
                    + "".join(f"  - {{layout: {ROOT / 'deploy' / 'lines' / f'{i}.yaml'}, plc: sim}}\n"
                              for i in LINES))
    return path


def line_pid(stack, kind: str, line_id: str) -> int | None:
    """The pid of ``line_id``'s ``kind`` process: both are words of its command line."""
    for pid in stack.pids():
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if kind in args and line_id in args and int(pid) != stack.proc.pid:
            return int(pid)
    return None


def linectl(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "services.stack.cli", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def rows(url: str, sql: str, *params) -> list[tuple]:
    with closing(psycopg2.connect(url)) as conn, conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def placements(url: str) -> dict[str, tuple[str, str]]:
    return {line_id: (schema, role) for line_id, schema, role
            in rows(url, "SELECT id, schema_name, role_name FROM plant_line")}


def scalar(url: str, sql: str, *params):
    return rows(url, sql, *params)[0][0]


def controller_status(amqp_uri: str, service: str) -> dict | None:
    from nameko.standalone.rpc import ClusterRpcProxy  # nameko's eventlet only where a test asks

    try:
        with ClusterRpcProxy({"AMQP_URI": amqp_uri, "serializer": "json"}, timeout=5) as rpc:
            return getattr(rpc, service).status()
    except Exception:  # noqa: BLE001 - not consuming yet: ask again
        return None


def test_up_with_a_plant_runs_every_line_under_its_own_names(stack_factory, plant_file, tmp_path, rabbit_uri):
    # Three hosts on one machine, on RabbitMQ (tests/ops/test_plant.py runs a plant under one
    # `up` on pgsql://): the gateway's (`up --no-lines`, the owner's URL: it migrates and
    # registers both lines), and one line host per line, each given only its line's URL, as
    # `linectl lines credentials` prints it: cell-a's as LINECTL_DATABASE_URL, cell-b's in the
    # plant file's secrets file. A line host migrates nothing and starts no database.
    transport = {"LINECTL_AMQP_URI": rabbit_uri}
    central = stack_factory(extra_env={"LINECTL_PLANT_FILE": str(plant_file), **transport},
                            command=UP + ["--no-lines"]).up()
    central.wait_line("linectl is up", 60)
    assert "processes: gateway" in central.output()
    owner_url = central.database_url()
    urls = {line_id: linectl_ok("lines", "credentials", line_id, env=central.env).stdout.strip() for line_id in LINES}
    assert {line_id: login_of(url) for line_id, url in urls.items()} == {i: f"linectl_line_{i}" for i in LINES}

    secrets = tmp_path / "line-secrets.yaml"
    secrets.write_text(f"lines:\n  cell-b: {urls['cell-b']}\n")
    secrets.chmod(0o600)
    host_b_plant = tmp_path / "plant-b.yaml"
    host_b_plant.write_text(plant_file.read_text() + f"secrets: {secrets.name}\n")
    host_a = stack_factory(extra_env={"LINECTL_PLANT_FILE": str(plant_file), **transport}, lines=len(LINES),
                           command=UP + ["--lines", "cell-a"])
    host_a.env["LINECTL_DATABASE_URL"] = urls["cell-a"]
    host_b = stack_factory(extra_env={"LINECTL_PLANT_FILE": str(host_b_plant), **transport}, lines=len(LINES),
                           command=UP + ["--lines", "cell-b"])
    hosts = {"cell-a": host_a.up(), "cell-b": host_b.up()}
    for line_id, host in hosts.items():
        host.wait_line("linectl is up", 60)
        assert f"processes: sim@{line_id}, hardware@{line_id}, line_controller@{line_id}" in host.output()
        assert "database: each line's own login (nothing migrated here)" in host.output()
        assert not (host.data_dir / "pg").exists()  # no database of its own
    central.wait_line("linectl: ready", 60)  # /readyz 200: both lines' services and PLCs

    pids = {(kind, i): line_pid(hosts[i], kind, i) for i in LINES for kind in KINDS}
    assert all(pids.values()), f"a line's process is missing: {pids}\n{central.ps()}"
    ps = central.ps().splitlines()[1:]
    for (kind, line_id), pid in pids.items():  # ps shows the line beside the kind
        assert any(line.split()[0] == str(pid) and f"{kind} --line {line_id}" in line for line in ps), \
            (kind, line_id)
    assert central.process("gateway")
    assert answers(host_a.sim_port) and answers(host_b.sim_port + 1)  # each line's place in the plant
    assert central.get("/readyz") == (200, {"status": "ready"})

    # The migrate step registered both lines: the default one keeps public.
    assert placements(owner_url) == {"cell-a": ("public", "linectl_controller"),
                                     "cell-b": ("line_cell-b", "linectl_line_cell-b")}
    # The second line's controller answers under its own name on the transport (the
    # default line's keeps its plain one; /readyz asked both).
    assert isinstance(wait_for(lambda: controller_status(central.amqp_uri(), "line_controller@cell-b"), 20, 0.2,
                               "line_controller@cell-b.status()"), dict)

    # A work order of the second line, its code generated: a row of cell-b's schema, none of public's.
    token = central.token("operator")
    code, order = central.request("POST", "/api/lines/cell-b/work-orders", {"productId": "SHAFT-B", "quantity": 1},
                                  token)
    assert code == 201 and order["lineId"] == "cell-b" and order["code"].startswith("WO-"), order
    assert central.get(f"/api/lines/cell-a/work-orders/{order['id']}", token)[0] == 404
    assert scalar(owner_url, 'SELECT count(*) FROM "line_cell-b".work_order WHERE code = %s', order["code"]) == 1
    assert scalar(owner_url, "SELECT count(*) FROM public.work_order WHERE code = %s", order["code"]) == 0

    # Line credentials: whatever a line's process holds (its environment, every file it names
    # and every file under every directory it names) writes neither another line's rows nor
    # the people, audit or AI tables. Its data directory is its line's own (0700), never the
    # host's, which holds the embedded server's and every line's password and the tokens.
    superuser_password = urlsplit(owner_url).password
    for (kind, line_id), pid in pids.items():
        env = environ_of(pid)
        named = {name: path.resolve() for name, path in named_paths(pid, env).items()}
        assert named["LINECTL_DATA_DIR"] == (hosts[line_id].data_dir / "lines" / line_id).resolve(), (kind, named)
        assert stat.S_IMODE(named["LINECTL_DATA_DIR"].stat().st_mode) == 0o700
        assert not {hosts[line_id].data_dir.resolve(), central.data_dir.resolve()} & set(named.values()), \
            f"{kind}@{line_id} is pointed at a host's data directory: {named}"
        files = held_files(pid, env)
        held = credentials_held(env, files, ("postgres", *(f"linectl_line_{i}" for i in LINES)))
        assert urls[line_id] in held, (kind, line_id, held)  # it holds its line's URL, and logs in with it
        assert try_writes(urls[line_id], [f"DELETE FROM {TABLE_OF[line_id]}.loop_message WHERE false"]) == [None]
        assert not any(superuser_password in value for value in env.values()), (kind, line_id)
        assert not any(superuser_password in text for text in files.values()), (kind, line_id)
        for url in held:
            writes = forbidden_writes(line_id)
            for sql, answer in zip(writes, try_writes(url, writes), strict=True):
                assert refused(answer), f"{kind}@{line_id} with {mask_url(url)}: {sql}: {answer or 'it wrote'}"

    for stack in (host_a, host_b):  # two hosts: each stops on its own, so both at once
        stack.proc.send_signal(signal.SIGTERM)
    for stack in (host_a, host_b, central):
        assert stack.terminate(30) == 0  # (a second SIGTERM asks nothing more)
        assert wait_for(lambda stack=stack: not stack.pids(), 20, 0.1, "no process of the stack left")


UP = [sys.executable, "-m", "services.stack.cli", "up"]
TABLE_OF = {"cell-a": "public", "cell-b": '"line_cell-b"'}


def login_of(url: str) -> str | None:
    return urlsplit(url).username


def linectl_ok(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    done = linectl(*args, env=env)
    assert done.returncode == 0, done.stderr
    return done


def forbidden_writes(line_id: str) -> list[str]:
    other = TABLE_OF["cell-b" if line_id == "cell-a" else "cell-a"]
    return [f"INSERT INTO {other}.work_order DEFAULT VALUES", f"UPDATE {other}.work_order SET priority = 1",
            f"DELETE FROM {other}.job", f"INSERT INTO {other}.audit_log DEFAULT VALUES",
            f"DELETE FROM {other}.event_log",
            "INSERT INTO people_user DEFAULT VALUES", "DELETE FROM people_session",
            "INSERT INTO people_audit DEFAULT VALUES",
            "INSERT INTO ai_runtime_job DEFAULT VALUES", "DELETE FROM ai_credential"]


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINECTL_")}
    return {**env, **extra}


def test_migrate_registers_the_plants_lines(db_url, plant_file, tmp_path):
    env = base_env(LINECTL_DATABASE_URL=db_url, LINECTL_PLANT_FILE=str(plant_file),
                   LINECTL_DATA_DIR=str(tmp_path / "data"))
    done = linectl("migrate", env=env)
    assert done.returncode == 0, done.stderr
    data = tmp_path / "data"
    assert (f"line cell-a: schema public, role linectl_controller, login linectl_line_cell-a"
            f" (password in {data / 'lines' / 'cell-a.password'})") in done.stdout
    assert "line cell-b: schema line_cell-b, role linectl_line_cell-b, login linectl_line_cell-b" in done.stdout
    assert (data / "lines" / "cell-b.password").stat().st_mode & 0o077 == 0
    assert placements(db_url) == {"cell-a": ("public", "linectl_controller"),
                                  "cell-b": ("line_cell-b", "linectl_line_cell-b")}


def test_an_unknown_line_or_a_bad_plant_file_stops_up_before_anything_starts(plant_file, tmp_path):
    # No database URL: anything past the check would start an embedded PostgreSQL in the data dir.
    data = tmp_path / "data"
    env = base_env(LINECTL_PLANT_FILE=str(plant_file), LINECTL_DATA_DIR=str(data))
    refused = linectl("up", "--lines", "cell-b,cell-x", env=env)
    assert refused.returncode == 2
    assert refused.stderr.strip() == ("linectl up: --lines cell-x: the plant has no such line "
                                      "(its lines: cell-a, cell-b)")
    bad = tmp_path / "bad.yaml"
    bad.write_text(plant_file.read_text() + "  - {layout: nowhere.yaml}\n")
    refused = linectl("up", env={**env, "LINECTL_PLANT_FILE": str(bad)})
    assert refused.returncode == 2
    assert len(refused.stderr.strip().splitlines()) == 1
    assert refused.stderr.startswith(f"linectl up: {bad}: lines[3]: layout ")
    assert not (data / "pg").exists()
