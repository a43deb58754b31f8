"""``linectl up`` as a real process tree for tests: free ports, a temp data
directory, its own message vhost; the processes it starts are found by the
data directory in their environment (a line's processes: their line's
directory under it), never by a broad name, and every one of them is killed
at the end, also when a test fails."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from shared.db.embedded import EmbeddedPostgres
from tests.support.ports import free_port, free_port_run
from tests.support.waiting import wait_for

NAMES = ("sim", "hardware", "line_controller", "gateway", "retention")


def _environ(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


class Stack:
    def __init__(self, data_dir: Path, transport_env: dict[str, str], *, sim_speed: float = 200.0,
                 extra_env: dict[str, str] | None = None, command: list[str] | None = None,
                 cwd: Path | None = None, lines: int = 1, retention: bool = False):
        self.data_dir = data_dir
        self.http_port, self.pg_port = free_port(), free_port()
        # A plant's simulators listen on LINECTL_SIM_PORT plus each line's place in it.
        self.sim_port = free_port_run(lines, avoid=(self.http_port, self.pg_port))
        self.env = {**os.environ, **transport_env, "LINECTL_DATA_DIR": str(data_dir),
                    "LINECTL_HTTP_PORT": str(self.http_port), "LINECTL_SIM_PORT": str(self.sim_port),
                    "LINECTL_EMBEDDED_PG_PORT": str(self.pg_port), "LINECTL_SIM_SPEED": str(sim_speed),
                    "PYTHONUNBUFFERED": "1",
                    # The retention job only where a test asks for it: one process start less.
                    **({} if retention else {"LINECTL_RETENTION_INTERVAL_SECONDS": "0"}),
                    **(extra_env or {})}
        self.env.pop("LINECTL_DATABASE_URL", None)
        self.marker = f"LINECTL_DATA_DIR={data_dir}".encode()
        # ``linectl up`` of this checkout, or (``command``) of an installed linectl.
        self.command = command or [sys.executable, "-m", "services.stack.cli", "up"]
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.base = f"http://127.0.0.1:{self.http_port}"

    # -- life cycle -------------------------------------------------------------------

    def up(self) -> Stack:
        self.lines = []
        self.proc = subprocess.Popen(self.command, env=self.env, cwd=self.cwd,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True, bufsize=1)
        self._reader = threading.Thread(target=self._read, args=(self.proc,), daemon=True)
        self._reader.start()
        return self

    def _read(self, proc):
        for line in proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_line(self, text: str, timeout: float = 120.0, after: int = 0) -> int:
        """Index of the first output line (from ``after``) containing ``text``."""
        def found():
            for i in range(after, len(self.lines)):
                if text in self.lines[i]:
                    return i + 1
            if self.proc.poll() is not None:
                raise AssertionError(f"linectl up exited ({self.proc.returncode}):\n{self.output()[-4000:]}")
            return None
        return wait_for(found, timeout, 0.1,
                        lambda: f"{text!r} from linectl up, which said:\n{self.output()[-4000:]}") - 1

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM; the exit status once ``up`` has ended and its last line is read
        (the reader thread may still be behind the process's exit)."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        self._reader.join(timeout)
        return code

    def cleanup(self) -> None:
        """Stop ``up`` (SIGTERM, then SIGKILL), kill whatever it left behind, and
        delete its database cluster: as root it lives apart from the data
        directory (shared.db.embedded), perhaps in memory (tests/support/cluster_storage.py)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.terminate(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.kill_all()
        if (self.data_dir / "pg").exists():
            EmbeddedPostgres(self.data_dir / "pg").remove()

    def kill_all(self) -> None:
        """``kill -9`` every process left of the stack."""
        for pid in self.pids():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass

    # -- what runs ---------------------------------------------------------------------

    def pids(self) -> list[str]:
        """Every live process started for this stack (they carry its data dir, a
        line's processes their line's directory under it)."""
        own = str(os.getpid())
        return [p for p in os.listdir("/proc") if p.isdigit() and p != own
                and any(entry == self.marker or entry.startswith(self.marker + b"/")
                        for entry in _environ(p).split(b"\0"))]

    def process(self, name: str) -> int | None:
        """The pid of the stack's process ``name`` (its command line names it)."""
        for pid in self.pids():
            args = _cmdline(pid).split()
            if name in args and pid != str(self.proc.pid):
                return int(pid)
        return None

    def ps(self) -> str:
        # -ww: ps cuts args at $COLUMNS (80 when CI sets it), which hides a long venv path's name.
        return subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout

    # -- HTTP ------------------------------------------------------------------------------

    def get(self, path: str, token: str | None = None, timeout: float = 10.0) -> tuple[int, dict]:
        return self.request("GET", path, None, token, timeout)

    def request(self, method, path, body=None, token=None, timeout=10.0) -> tuple[int, dict]:
        req = urllib.request.Request(self.base + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {token}"} if token else {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")
        except OSError:
            return 0, {}

    def database_url(self) -> str:
        """The embedded PostgreSQL's URL, as the start-up summary prints it."""
        printed = next(line.split()[1] for line in self.lines if line.startswith("database: "))
        if ":***@" not in printed:
            return printed
        # The summary masks the password; the embedded server keeps it in the data directory.
        from urllib.parse import quote

        password = (self.data_dir / "pg.password").read_text().strip()
        return printed.replace(":***@", f":{quote(password, safe='')}@")

    def amqp_uri(self) -> str:
        """The transport the stack runs on (pgsql:// on its database unless told otherwise)."""
        return self.env.get("LINECTL_AMQP_URI") or "pgsql://" + self.database_url().split("://", 1)[1]

    def token(self, role: str = "operator") -> str:
        """A token from the file ``up`` generated (``role:token,role:token``)."""
        for pair in (self.data_dir / "tokens").read_text().strip().split(","):
            name, _, token = pair.strip().partition(":")
            if name == role:
                return token
        raise AssertionError(f"no {role} token in {self.data_dir / 'tokens'}")

    def ready(self) -> bool:
        return self.get("/readyz", timeout=5)[0] == 200

    def wait_ready(self, timeout: float = 90.0) -> None:
        wait_for(self.ready, timeout, 0.2, "/readyz 200")


def settle(seconds: float) -> None:
    """Let a process run for a while on purpose (a random kill moment), not to synchronise."""
    time.sleep(seconds)
