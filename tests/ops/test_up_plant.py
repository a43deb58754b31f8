"""``linectl up``, ``linectl migrate`` and ``linectl sim`` with a plant file
(PRODUCT.md, "Plant (several lines)"; issue 38), as real processes on a real
PostgreSQL:

- ``up`` with a two-line plant runs, per line, its simulator (on LINECTL_SIM_PORT
  plus the line's place in the plant), hardware and line_controller, each with
  the line id on its command line, then one gateway; its migrate step has
  registered both lines (schema and role) before they start; ``/readyz`` (every
  line's services and PLC) turns 200; the second line's controller answers under
  its own name, and takes a work order through ``/api/lines/<id>/…``; SIGTERM
  stops every line's processes. (A line's process is supervised as any other:
  tests/unit/test_supervisor.py, tests/ops/test_plant.py's respawned controller.)
- ``migrate`` registers the plant's lines.
- a line the plant does not have, or a bad plant file, stops ``up`` before
  anything starts, with one line naming it (exit status 2).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import psycopg2
import pytest

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


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


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


def test_up_with_a_plant_runs_every_line_under_its_own_names(stack_factory, plant_file, rabbit_uri):
    # On RabbitMQ (tests/ops/test_plant.py runs a plant on pgsql://): a line's names work
    # the same on both.
    stack = stack_factory(extra_env={"LINECTL_PLANT_FILE": str(plant_file), "LINECTL_AMQP_URI": rabbit_uri},
                          lines=len(LINES))
    stack.up()
    stack.wait_line("linectl: ready", 60)  # /readyz 200: both lines' services and PLCs
    out = stack.output()
    assert f"plant: {plant_file} (two-cells: cell-a, cell-b)" in out
    assert ("processes: sim@cell-a, hardware@cell-a, line_controller@cell-a, "
            "sim@cell-b, hardware@cell-b, line_controller@cell-b, gateway") in out
    pids = {(kind, i): line_pid(stack, kind, i) for i in LINES for kind in KINDS}
    assert all(pids.values()), f"a line's process is missing: {pids}\n{stack.ps()}"
    ps = stack.ps().splitlines()[1:]
    for (kind, line_id), pid in pids.items():  # ps shows the line beside the kind
        assert any(line.split()[0] == str(pid) and f"{kind} --line {line_id}" in line for line in ps), \
            (kind, line_id)
    assert stack.process("gateway")
    assert all(listening(stack.sim_port + n) for n in range(len(LINES)))
    assert stack.get("/readyz") == (200, {"status": "ready"})

    # The migrate step registered both lines: the default one keeps public.
    assert placements(stack.database_url()) == {"cell-a": ("public", "linectl_controller"),
                                                "cell-b": ("line_cell-b", "linectl_line_cell-b")}
    # The second line's controller answers under its own name on the transport (the
    # default line's keeps its plain one; /readyz asked both).
    assert isinstance(wait_for(lambda: controller_status(stack.amqp_uri(), "line_controller@cell-b"), 20, 0.2,
                               "line_controller@cell-b.status()"), dict)

    # A work order of the second line, its code generated: a row of cell-b's schema, none of public's.
    token = stack.token("operator")
    code, order = stack.request("POST", "/api/lines/cell-b/work-orders", {"productId": "SHAFT-B", "quantity": 1},
                                token)
    assert code == 201 and order["lineId"] == "cell-b" and order["code"].startswith("WO-"), order
    assert stack.get(f"/api/lines/cell-a/work-orders/{order['id']}", token)[0] == 404
    assert scalar(stack.database_url(), 'SELECT count(*) FROM "line_cell-b".work_order WHERE code = %s',
                  order["code"]) == 1
    assert scalar(stack.database_url(), "SELECT count(*) FROM public.work_order WHERE code = %s",
                  order["code"]) == 0

    assert stack.terminate(30) == 0
    assert wait_for(lambda: not stack.pids(), 20, 0.1, "no process of the stack left")


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINECTL_")}
    return {**env, **extra}


def test_migrate_registers_the_plants_lines(db_url, plant_file, tmp_path):
    env = base_env(LINECTL_DATABASE_URL=db_url, LINECTL_PLANT_FILE=str(plant_file),
                   LINECTL_DATA_DIR=str(tmp_path / "data"))
    done = linectl("migrate", env=env)
    assert done.returncode == 0, done.stderr
    assert "line cell-a: schema public, role linectl_controller" in done.stdout
    assert "line cell-b: schema line_cell-b, role linectl_line_cell-b" in done.stdout
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
