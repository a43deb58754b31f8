"""Served gateways for the suite, forked from one process that has imported them.

A ``python -m gateway`` spends about 0.8 CPU-s importing Flask, SQLAlchemy,
nameko, gunicorn and the gateway's own modules before it serves anything; the
suite starts some fifty. A test shard therefore starts this module once
(``python -m tests.support.gateway_zygote``): it imports ``gateway.__main__``
and then forks a child per request, which becomes that gateway: its own
process group (which the test kills), its log on stdout and stderr, its
environment, then the real ``gateway.__main__.main`` with the arguments given.
Nothing differs from ``python -m gateway`` after the imports: the zygote runs
no thread and opens no socket, so nothing crosses the fork (the gateway forks
its workers the same way).

Requests and replies are JSON lines on the zygote's stdin and stdout. The zygote
ignores SIGCHLD, so the kernel reaps the gateways it forked: a gateway has
exited once its ``/proc`` entry is gone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class ForkedProcess:
    """What the suite uses of a ``Popen`` for a process it did not fork itself."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not _alive(self.pid):
            self.returncode = -1  # its status went to the zygote (reaped by the kernel)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(0.01)
        return self.returncode


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


class GatewayZygote:
    """The client side: one zygote per test process, started on first use."""

    _instance: GatewayZygote | None = None
    _instance_lock = threading.Lock()

    @classmethod
    def shared(cls) -> GatewayZygote:
        with cls._instance_lock:
            if cls._instance is None or cls._instance.proc.poll() is not None:
                cls._instance = cls()
            return cls._instance

    def __init__(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("LINECTL_")}
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.gateway_zygote"], cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._lock = threading.Lock()

    def spawn(self, args: list[str], env: dict, log_path: Path) -> ForkedProcess:
        """``python -m gateway *args`` with ``env``, its output to ``log_path``."""
        request = {"args": args, "env": env, "log": str(log_path), "cwd": os.getcwd()}
        with self._lock:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            reply = self.proc.stdout.readline()
        if not reply:
            raise RuntimeError("the gateway zygote exited")
        return ForkedProcess(json.loads(reply)["pid"])


# -- the zygote -----------------------------------------------------------------------


def _become_gateway(request: dict, main) -> None:
    """In the forked child: become ``python -m gateway`` as asked. It leaves as that
    would: its exit (or its traceback) goes up through the interpreter's own end."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = [sys.modules[main.__module__].__file__, *request["args"]]  # as under -m
    sys.exit(main(request["args"]))


def serve() -> None:
    from gateway.__main__ import main  # the imports every gateway would make

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the gateways
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            os.setpgid(0, 0)
            _become_gateway(request, main)
        try:
            os.setpgid(pid, pid)  # here too, as a shell does: the group exists before the reply
        except OSError:
            pass  # the child made it first (or has already gone)
        sys.stdout.write(json.dumps({"pid": pid}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
