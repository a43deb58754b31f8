"""The backup-and-restore drill, with real processes: ``linectl up`` on the
embedded PostgreSQL runs an order against a cell (a ``linectl sim`` of its own,
the plant, which outlives the box); ``linectl backup`` while the order runs;
the box is lost (every process of the stack ``kill -9``); ``linectl restore``
into a NEW data directory, with the tokens and the AI credential key kept
beside the backup; ``linectl up`` there. The start-up checks compare the
restored state with the cell, the automated operator answers what they ask,
and the order completes with exact counts.

The hardware service is frozen (SIGSTOP) for the backup: the cell then does
nothing the database does not know of (actions it had already accepted end in
the cell unseen, which is what the start-up checks ask about). Without it the
cell could move a piece after the backup's snapshot with no task on record:
the start-up checks would ask about it on the buffer (or the dock short of
it; tests/line_controller/test_recovery_buffer_and_dock.py), but this
operator cannot take a piece off a slot by hand.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlalchemy import text

from tests.ops.crashing import Line, completes_exactly, reported, start_order
from tests.ops.operator import resolve_open_recovery
from tests.support.ports import free_port
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
SIM_SPEED = 50.0
QUANTITY = 4


@pytest.fixture
def cell(tmp_path):
    """The plant: ``linectl sim`` on a free port, stopped (by its pid) at the end."""
    port = free_port()
    env = {**os.environ, "LINECTL_SIM_SPEED": str(SIM_SPEED), "LINECTL_DATA_DIR": str(tmp_path / "cell")}
    env.pop("LINECTL_DATABASE_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "services.stack.cli", "sim", "--port", str(port),
                             "--seed", "5", "--pallet-size", str(QUANTITY * 2)], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    try:
        wait_for(lambda: any("Modbus TCP on" in line for line in lines) or proc.poll() is not None, 60, 0.05,
                 "the simulator listening")
        assert proc.poll() is None, "".join(lines)
        yield f"127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(10)


def linectl(stack, *args: str) -> subprocess.CompletedProcess:
    """A ``linectl`` command with a stack's settings (its data directory, its embedded port)."""
    return subprocess.run([sys.executable, "-m", "services.stack.cli", *args], env=stack.env, cwd=REPO,
                          capture_output=True, text=True, timeout=180)


def box_lost(stack) -> None:
    """Every process of the stack killed, its supervisor first (so nothing is restarted)."""
    os.kill(stack.proc.pid, signal.SIGKILL)
    stack.proc.wait(10)
    stack.kill_all()
    wait_for(lambda: not stack.pids(), 30, 0.05, "the stack's processes gone")


@pytest.mark.slow
def test_an_order_backed_up_while_running_completes_on_the_restored_database(stack_factory, cell):
    env = {"LINECTL_PLC": cell}
    first = stack_factory(sim_speed=SIM_SPEED, extra_env=env).up()
    first.wait_line("linectl: ready", 180)
    token = first.token("operator")
    line = Line(first.database_url(), first.amqp_uri())
    with reported(first, line):
        order = start_order(first, token, "SHAFT-B", QUANTITY)
        wait_for(line.running_machine, 90, 0.02, "a machine cycle (the order mid-run)", steady=True)
        os.kill(first.process("hardware"), signal.SIGSTOP)
        backup = linectl(first, "backup")
        assert backup.returncode == 0, backup.stderr
        with line.engine.connect() as c:  # the backup holds the order as running
            assert c.execute(text("SELECT status FROM work_order WHERE id = :id"),
                             {"id": order["id"]}).scalar() == "RUNNING"
    dumps = list((first.data_dir / "backups").glob("linectl-*.dump"))
    assert len(dumps) == 1, backup.stdout
    box_lost(first)

    second = stack_factory(sim_speed=SIM_SPEED, extra_env=env)
    second.data_dir.mkdir()
    # What docs/operations.md says to keep beside the backup (the embedded password is not needed).
    for secret in ("tokens", "ai_credential.key"):
        if (first.data_dir / secret).exists():
            shutil.copy2(first.data_dir / secret, second.data_dir / secret)
    restored = linectl(second, "restore", str(dumps[0]))
    assert restored.returncode == 0, restored.stderr + restored.stdout

    second.up()
    second.wait_line("linectl: ready", 180)
    second.wait_line("recovery check:", 120)
    line = Line(second.database_url(), second.amqp_uri())
    answered = []
    with reported(second, line):
        completes_exactly(second, token, line, order, QUANTITY, timeout=240,
                          answer=lambda: answered.append(resolve_open_recovery(second, token, second.amqp_uri())))
        print(f"recovery answers: {sum(answered)}")
        print("\n".join(out for out in second.lines if "recovery check:" in out))
        assert second.terminate() == 0
