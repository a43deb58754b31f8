"""linectl installed the way users install it, outside the checkout: the wheel
into a fresh venv (``deploy/install.sh`` under a scratch root), the systemd
units it installs verified by ``systemd-analyze``, and ``linectl up`` from an
empty directory running a one-piece order end to end on the embedded
PostgreSQL. It builds a wheel and installs every dependency from the package
index (a few minutes), so it runs when ``LINECTL_TEST_INSTALL=1`` (``.ci/run``
sets it for one of its runs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ops.stack import Stack
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(os.environ.get("LINECTL_TEST_INSTALL") != "1",
                       reason="set LINECTL_TEST_INSTALL=1: builds the wheel and installs it from the "
                              "package index (minutes; .ci/run does)"),
]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """deploy/install.sh of a freshly built wheel under a scratch root."""
    work = tmp_path_factory.mktemp("install")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(ROOT), "-w",
                    str(work / "dist")], check=True, cwd=work, timeout=300)
    (wheel,) = (work / "dist").glob("linectl-*.whl")
    root = work / "root"
    out = subprocess.run(["bash", str(ROOT / "deploy" / "install.sh"), str(wheel), "--python", sys.executable],
                         env={**os.environ, "LINECTL_INSTALL_ROOT": str(root)}, cwd=work,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    return root


def test_the_installed_units_verify_and_the_env_file_is_usable(installed):
    from shared.config import load_settings

    env_file = installed / "etc" / "linectl" / "linectl.env"
    values = dict(line.split("=", 1) for line in env_file.read_text().splitlines()
                  if line and not line.startswith("#"))
    tokens_file = installed / values["LINECTL_TOKENS_FILE"].lstrip("/")
    settings = load_settings({"LINECTL_TOKENS_FILE": str(tokens_file)})  # generated: accepted
    assert {h.role for h in settings.tokens.values()} == {"operator", "admin", "runtime", "platform"}
    assert oct(env_file.stat().st_mode & 0o777) == "0o600"
    assert oct(tokens_file.stat().st_mode & 0o777) == "0o600"
    units = sorted((installed / "etc" / "systemd" / "system").glob("linectl*"))
    assert {u.name for u in units} >= {"linectl.target", "linectl-retention.timer", "linectl-gateway.service"}
    for unit in units:  # every ExecStart names a program the venv has
        for line in unit.read_text().splitlines():
            if line.startswith("ExecStart="):
                program = line.split("=", 1)[1].split()[0]
                assert (installed / program.lstrip("/")).exists(), (unit.name, program)
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    # The units as installed, with their /opt and /etc paths moved under the scratch root.
    moved = installed / "verify"
    moved.mkdir(exist_ok=True)
    for unit in units:
        text = unit.read_text().replace("/opt/linectl", f"{installed}/opt/linectl") \
            .replace("/etc/linectl", f"{installed}/etc/linectl")
        (moved / unit.name).write_text(text)
    out = subprocess.run(["systemd-analyze", "verify", *[str(moved / u.name) for u in units]],
                         capture_output=True, text=True, timeout=120)
    problems = [line for line in (out.stdout + out.stderr).splitlines()
                if "linectl" in line and "User=linectl" not in line]
    assert out.returncode == 0 and not problems, out.stdout + out.stderr


def test_the_installed_linectl_runs_an_order_from_an_empty_directory(installed, tmp_path):
    venv = installed / "opt" / "linectl" / ".venv"
    version = subprocess.run([str(venv / "bin" / "linectl"), "--version"], capture_output=True,
                             text=True, timeout=60, cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == "linectl 0.1.0", version
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LINECTL_", "PYTHON", "VIRTUAL_ENV"))}
    stack = Stack(empty / "var", {}, sim_speed=50.0, command=[str(venv / "bin" / "linectl"), "up"],
                  cwd=empty)
    stack.env = {**env, **{k: v for k, v in stack.env.items() if k.startswith("LINECTL_")}}
    try:
        stack.up()
        stack.wait_line("linectl: ready", 240)
        out = stack.output()
        assert str(ROOT) not in out  # nothing of the checkout: the layout came with the package
        token = stack.token("operator")
        code, order = stack.request("POST", "/api/work-orders", {"productId": "SHAFT-B", "quantity": 1}, token)
        assert code == 201, order
        assert stack.request("POST", f"/api/work-orders/{order['id']}/start", {}, token)[0] == 200
        wait_for(lambda: stack.get(f"/api/work-orders/{order['id']}", token)[1].get("status") == "COMPLETED",
                 240, 0.5, "the one-piece order to complete")
        assert stack.terminate() == 0
    except BaseException:
        print(stack.output()[-20000:])
        raise
    finally:
        stack.cleanup()
