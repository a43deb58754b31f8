"""The commands the docs show for running a service by hand work as written:
``nameko run --config deploy/nameko.yaml services.<name>.service`` for each
service (a ``status()`` call answered over the transport) and ``nameko shell``
with the same config."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from nameko.standalone.rpc import ClusterRpcProxy

from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
NAMEKO = str(Path(sys.executable).with_name("nameko"))
CONFIG = str(ROOT / "deploy" / "nameko.yaml")

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def service_env(db_url, nameko_config):
    # What deploy/nameko.yaml reads from the environment.
    return {**os.environ, "LINECTL_DATABASE_URL": db_url, "LINECTL_AMQP_URI": nameko_config["AMQP_URI"]}


def _run(module: str, env) -> subprocess.Popen:
    return subprocess.Popen([NAMEKO, "run", "--config", CONFIG, module], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out


def _status(nameko_config, service):
    try:
        with ClusterRpcProxy(nameko_config, timeout=5) as rpc:
            return getattr(rpc, service).status()
    except Exception:  # noqa: BLE001 - not up yet
        return None


# The line_controller's ``nameko run`` is the next test's: it runs it the same way, waits
# for the same status() over the transport and checks the same output, then adds the shell.
@pytest.mark.parametrize("service, module", [
    ("hardware", "services.hardware.service"),
])
def test_nameko_run_with_the_shipped_config_serves(service, module, service_env, nameko_config):
    proc = _run(module, service_env)
    try:
        status = wait_for(lambda: proc.poll() is None and _status(nameko_config, service), 90, 0.5,
                          f"{service}.status() over the transport")
    finally:
        out = _stop(proc)
    assert isinstance(status, dict), out
    assert "must define a name" not in out


def test_nameko_shell_with_the_shipped_config_reaches_a_service(service_env, nameko_config):
    """Also the line_controller's ``nameko run`` with the shipped config (see above)."""
    proc = _run("services.line_controller.service", service_env)
    try:
        status = wait_for(lambda: proc.poll() is None and _status(nameko_config, "line_controller"), 90, 0.5,
                          "line_controller.status() over the transport")
        shell = subprocess.run([NAMEKO, "shell", "--config", CONFIG], env=service_env, cwd=ROOT,
                               input="print('lastSeq', n.rpc.line_controller.status()['lastSeq'])\n",
                               capture_output=True, text=True, timeout=90)
    finally:
        out = _stop(proc)
    assert isinstance(status, dict), out
    assert "must define a name" not in out
    assert re.search(r"lastSeq \d+", shell.stdout), shell.stdout + shell.stderr


def test_linectl_shell_helpers_shelve_and_print_the_figures(service_env, nameko_config, engine):
    from sqlalchemy import text

    with engine.begin() as conn:
        alarm_id = conn.execute(text("INSERT INTO equipment (id, name, kind, slot_count) "
                                     "VALUES ('MC1', 'MC1', 'machining', 2) ON CONFLICT DO NOTHING; "
                                     "INSERT INTO alarm (code, message) VALUES ('DOOR_OPEN', 'door') "
                                     "RETURNING id")).scalar()
    proc = _run("services.line_controller.service", service_env)
    try:
        wait_for(lambda: _status(nameko_config, "line_controller"), 90, 0.5, "the line_controller up")
        shell = subprocess.run(
            [str(Path(sys.executable).with_name("linectl")), "shell"], env=service_env, cwd=ROOT,
            input=f"shelve({alarm_id}, 5, 'door sensor swap')\nstats(1)\ntimeline('MC1')\nalarms()\n",
            capture_output=True, text=True, timeout=90)
    finally:
        _stop(proc)
    out = shell.stdout
    assert '"status": "HANDLED"' in out and '"SHELVED"' in out, out + shell.stderr
    assert re.search(r"line: completed 0, scrapped 0", out), out
    assert re.search(r"^MC1 +0\.0% +100\.0%", out, re.M), out  # the loop started it: IDLE since
    assert re.search(r"^MC1 +IDLE ", out, re.M), out
    assert re.search(rf"^(>>> )? +{alarm_id} SHELVED ", out, re.M), out
    with engine.connect() as conn:
        assert conn.execute(text("SELECT status FROM alarm")).scalar() == "SHELVED"
