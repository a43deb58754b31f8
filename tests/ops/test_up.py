"""``linectl up`` as a real process: the start-up summary, what a line's
processes hold (their line's login, their own data directory), readiness, a killed
process restarted, a truthful /readyz, a PostgreSQL restart survived, an
orderly stop on SIGTERM, and a second ``up`` that resumes on the same data,
passes SIGHUP on to the gateway and stops cleanly (SIGTERM) within 2 s: no
service waits out a message drain's timeout, nor the interpreter's teardown, on
its way out. (The hangup and the timed stop were a test of their own, on a
stack of their own: the second ``up`` here is as idle, and one start less.)"""

import os
import re
import signal
import subprocess
import sys
import time
from urllib.parse import quote

import psycopg2

from shared.config import mask_url
from shared.db.embedded import EmbeddedPostgres
from tests.ops.line_holdings import credentials_held, environ_of, held_files, named_paths, refused, try_writes
from tests.ops.stack import NAMES
from tests.support.ports import free_port
from tests.support.processes import stop_process
from tests.support.waiting import wait_for

CLEAN_STOP_SECONDS = 2.0


def check_the_summary_and_processes(stack) -> tuple[str, dict]:
    """The start-up summary and every process running; the output and the pids."""
    stack.wait_line("linectl: ready")
    out = stack.output()
    # The embedded server needs a password on TCP; the summary never prints it.
    assert f"database: postgresql://postgres:***@127.0.0.1:{stack.pg_port}/" in out
    assert (stack.data_dir / "pg.password").read_text().strip() not in out
    assert f"page: http://127.0.0.1:{stack.http_port}/" in out
    assert "processes: sim, hardware, line_controller, gateway, retention" in out
    assert "operator: " in out  # the tokens generated on first start
    pids = {name: stack.process(name) for name in NAMES}
    assert all(pids.values()), pids
    ps = stack.ps()
    for name, pid in pids.items():
        assert any(line.split()[0] == str(pid) and name in line for line in ps.splitlines()[1:])
    assert stack.get("/readyz") == (200, {"status": "ready"})
    return out, pids


def hardware_frozen_then_killed(stack, pids: dict) -> int:
    """Frozen, /readyz says so and recovers; killed, it is restarted. Its new pid."""
    # A frozen hardware service: /readyz says so, by name, and recovers.
    os.kill(pids["hardware"], signal.SIGSTOP)
    try:
        # (a 503 may first name the PLC, whose last word the frozen service cannot update)
        code, body = wait_for(lambda: (r := stack.get("/readyz", timeout=15))[0] == 503
                              and "hardware (" in r[1]["error"]["message"] and r, 30,
                              message="a 503 naming the hardware service")
        assert body["error"]["code"] == "UNAVAILABLE"
    finally:
        os.kill(pids["hardware"], signal.SIGCONT)
    stack.wait_ready()

    # kill -9: the supervisor restarts it, /readyz follows.
    os.kill(pids["hardware"], signal.SIGKILL)
    stack.wait_line("hardware exited")
    restarted = wait_for(lambda: (p := stack.process("hardware")) not in (None, pids["hardware"]) and p,
                         60, 0.1, "hardware restarted")
    stack.wait_ready()
    return restarted


def postgres_restarted(stack, out: str) -> tuple[str, dict]:
    """A PostgreSQL restart loses nothing, and the first command after it goes
    through; the operator's token and that command's order."""
    # A crash-like PostgreSQL restart: nothing committed is lost, the services reconnect.
    token = stack.token("operator")
    code, before = stack.request("POST", "/api/work-orders", {"productId": "SHAFT-B", "quantity": 1},
                                 token)
    assert code == 201, before
    EmbeddedPostgres(stack.data_dir / "pg").restart("immediate")
    stack.wait_ready()
    assert stack.get(f"/api/work-orders/{before['id']}", token)[1]["code"] == before["code"]

    # /readyz may still answer from its 1 s cache; wait until the line_controller
    # consumes its RPC queue again (before that, a command is a 503 "try again").
    database = re.search(r"database: postgresql://postgres:\*\*\*@127\.0\.0\.1:\d+/(\S+)",
                         out).group(1)
    url = (f"postgresql://postgres:{quote((stack.data_dir / 'pg.password').read_text().strip(), safe='')}"
           f"@127.0.0.1:{stack.pg_port}/{database}")
    wait_for(lambda: live_rpc_consumers(url, "line_controller") > 0, 60, 0.1,
             "the line_controller consuming again")
    # The first command after it goes through: a pooled client whose connection died
    # is replaced and the command sent again (same id: it runs once).
    code, order = stack.request("POST", "/api/work-orders", {"productId": "SHAFT-B", "quantity": 1},
                                token, timeout=30)
    assert code == 201, order
    return token, order


def line_holds_its_own_login_only(stack, pids: dict) -> None:
    """"Line credentials", one line: its processes' data directory is the line's own,
    and nothing they hold (their environment, the files it names, the files under the
    directories it names) is the superuser's password or a token, or writes the
    people, audit or AI tables."""
    superuser = (stack.data_dir / "pg.password").read_text().strip()
    tokens = [pair.split(":")[-1] for pair in (stack.data_dir / "tokens").read_text().strip().split(",")]
    for kind in ("sim", "hardware", "line_controller"):
        env = environ_of(pids[kind])
        named = {name: path.resolve() for name, path in named_paths(pids[kind], env).items()}
        assert named["LINECTL_DATA_DIR"] == (stack.data_dir / "lines" / "demo-cell").resolve(), (kind, named)
        assert stack.data_dir.resolve() not in named.values(), (kind, named)
        files = held_files(pids[kind], env)
        for secret in (superuser, *tokens):
            assert not any(secret in text for text in (*env.values(), *files.values())), (kind, secret[:4])
        writes = ["INSERT INTO people_user DEFAULT VALUES", "INSERT INTO people_audit DEFAULT VALUES",
                  "DELETE FROM ai_credential"]
        for url in credentials_held(env, files, ("postgres", "linectl_line_demo-cell")):
            assert all(map(refused, try_writes(url, writes))), (kind, mask_url(url), try_writes(url, writes))


def test_up_runs_supervises_stops_and_resumes(stack_factory):
    stack = stack_factory(retention=True).up()
    out, pids = check_the_summary_and_processes(stack)
    line_holds_its_own_login_only(stack, pids)

    restarted = hardware_frozen_then_killed(stack, pids)

    # kill -9 the line_controller: restarted, it checks the state before it schedules.
    mark = len(stack.lines)
    os.kill(pids["line_controller"], signal.SIGKILL)
    stack.wait_line("line_controller exited", after=mark)
    stack.wait_line("recovery check: 0 inconsistencies", after=mark)
    stack.wait_ready()

    token, order = postgres_restarted(stack, out)
    # State survives the stop: that order is there after the second up.

    assert stack.terminate() == 0
    out = stack.output()
    stops = [out.index(f"stopped {name}") for name in reversed(NAMES)]
    assert stops == sorted(stops), "stopped in reverse start order"
    assert "embedded PostgreSQL stopped" in out
    assert wait_for(lambda: not stack.pids(), 30, 0.1, "no process of the stack left")
    assert restarted != pids["hardware"]

    stack.up()  # the same data directory: the same database, recovered
    stack.wait_line("linectl: ready")
    assert "tokens (generated once" not in stack.output()
    code, body = stack.get(f"/api/work-orders/{order['id']}", token)
    assert code == 200 and body["code"] == order["code"]
    hangup_then_a_clean_stop(stack)


def hangup_then_a_clean_stop(stack) -> None:
    """SIGHUP reaches the gateway (reloaded, not restarted); SIGTERM stops it all
    within CLEAN_STOP_SECONDS, nothing killed for being slow."""
    gateway = stack.process("gateway")
    mark = len(stack.lines)
    stack.proc.send_signal(signal.SIGHUP)
    stack.wait_line("SIGHUP: the workers re-read the tokens", timeout=30, after=mark)
    assert stack.proc.poll() is None and stack.process("gateway") == gateway

    started = time.monotonic()
    assert stack.terminate(timeout=30) == 0
    took = time.monotonic() - started
    assert took <= CLEAN_STOP_SECONDS, f"clean stop took {took:.2f}s:\n" + "\n".join(stack.lines[-30:])
    assert "embedded PostgreSQL stopped" in stack.output()
    assert "did not stop in" not in stack.output()  # nothing was killed for being slow
    wait_for(lambda: not stack.pids(), 10, 0.05, "no process of the stack left")


def live_rpc_consumers(url: str, service: str) -> int:
    """Consumers of the service's RPC queue whose database session is alive."""
    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM mq_consumer c JOIN pg_stat_activity a"
                        " ON a.pid = c.backend_pid AND a.backend_start = c.backend_started"
                        " WHERE c.queue = %s", (f"rpc-{service}",))
            return cur.fetchone()[0]
    finally:
        conn.close()


def test_a_simulator_port_taken_before_start_up_stops_up_with_one_line_naming_it(tmp_path):
    # Another stack's simulator, as far as a port can tell: a small process holds it.
    holder = subprocess.Popen([sys.executable, "-c", "import socket, sys, time\n"
                               "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
                               "print(s.getsockname()[1], flush=True); time.sleep(120)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(holder.stdout.readline())
        env = {**os.environ, "LINECTL_DATA_DIR": str(tmp_path / "data"), "LINECTL_SIM_PORT": str(port),
               "LINECTL_HTTP_PORT": str(free_port()), "LINECTL_EMBEDDED_PG_PORT": str(free_port())}
        env.pop("LINECTL_DATABASE_URL", None)
        up = subprocess.run([sys.executable, "-m", "services.stack.cli", "up"], env=env, capture_output=True,
                            text=True, timeout=60)
    finally:
        stop_process(holder, 5)
    said = [line for line in (up.stdout + up.stderr).splitlines() if line.strip()]
    assert up.returncode != 0
    assert said == [f"linectl up: the simulator cannot listen on 127.0.0.1:{port} (Address already in use): "
                    "another simulator or stack holds the port; stop it, or set LINECTL_SIM_PORT"], said
    assert not (tmp_path / "data" / "pg").exists()  # it stopped before anything started
