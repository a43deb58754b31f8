"""Gateway fixtures: a seeded line database, the stand-in line_controller on
the suite's transport, the Flask app (test client) and a real served gateway
(``python -m gateway`` in its own process, on a free port)."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from gateway.app import create_app
from shared.config import load_settings
from shared.db.engine import make_engine, make_sessionmaker
from tests.gateway.standin import EventWriter, StandInHardware, StandInLineController, seed_line
from tests.identity.conftest import FAST_ARGON2
from tests.support.gateway_zygote import GatewayZygote
from tests.support.ports import free_port
from tests.support.processes import Started, kill_group
from tests.support.waiting import wait_for

OPERATOR = "operator-token-0123"
ADMIN = "admin-token-000123"
RUNTIME = "runtime-token-0123"
TOKENS = f"operator:{OPERATOR},admin:{ADMIN},runtime:{RUNTIME}"
AUTH = {"Authorization": f"Bearer {OPERATOR}"}


@pytest.fixture
def writable(db_url):
    """A read-write sessionmaker on the test database, with the line seeded."""
    engine = make_engine(db_url, pool_size=2)
    maker = make_sessionmaker(engine)
    seed_line(maker)
    yield maker
    engine.dispose()


@pytest.fixture
def standin(container_factory, nameko_config, writable):
    StandInLineController.answer_queued = False
    container = container_factory(StandInLineController, nameko_config)
    container.start()
    container_factory(StandInHardware, nameko_config).start()
    yield container
    StandInLineController.answer_queued = False


@pytest.fixture
def gateway_env(db_url, nameko_config):
    return {
        "LINECTL_DATABASE_URL": db_url,
        "LINECTL_AMQP_URI": nameko_config["AMQP_URI"],
        "LINECTL_TOKENS": TOKENS,
        "LINECTL_COMMAND_WAIT_SECONDS": "5",
        # A sign-in's hash work as cheap as argon2 allows (the fuzz signs in a few dozen
        # times, at 0.2 s each with the production parameters); a test of that work sets its own.
        **FAST_ARGON2,
    }


@contextmanager
def gateway_app(env: dict):
    """The gateway's Flask app on ``env``'s settings, closed (its pools, relay and
    RPC clients) as the block ends."""
    app = create_app(load_settings(env))
    try:
        yield app
    finally:
        app.extensions["linectl"].close()


@pytest.fixture
def app(gateway_env, standin):
    with gateway_app(gateway_env) as app:
        yield app


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def events(writable, nameko_config):
    return EventWriter(writable, nameko_config)



class ServedGateway:
    """A ``python -m gateway`` process on a free port (one worker unless told)."""

    def __init__(self, env: dict, tmp_path, threads: int = 300, workers: int = 1,
                 open_files: int | None = None, wait: bool = True):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp_path / f"gateway-{self.port}.log"
        env = {**os.environ, **env, "LINECTL_HTTP_PORT": str(self.port),
               "LINECTL_DATA_DIR": str(tmp_path), "LINECTL_LOG_LEVEL": "WARNING"}
        self._log = open(self.log_path, "wb")
        argv = [sys.executable, "-m", "gateway", "--name", "gateway", "--threads", str(threads),
                "--workers", str(workers)]
        if open_files is not None:  # the gateway under a lower open-file limit (soft = hard)
            argv = [sys.executable, "-c", "import os, resource, sys; resource.setrlimit("
                    f"resource.RLIMIT_NOFILE, ({open_files}, {open_files})); os.execv(sys.argv[1], sys.argv[1:])",
                    *argv]
        if open_files is None:  # forked from the shard's zygote: the same gateway, imported once
            self.proc = GatewayZygote.shared().spawn(argv[3:], env, self.log_path)
        else:
            self.proc = subprocess.Popen(argv, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.workers = workers
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Serving /healthz, with every worker forked and past its app's load (its
        background threads running): one worker answering is not all of them up."""
        wait_for(self._up, timeout=30, message="the gateway to serve /healthz")
        wait_for(lambda: len(pids := self.worker_pids()) == self.workers and all(map(self._loaded, pids)),
                 timeout=30, message=f"{self.workers} gateway workers loaded")

    @staticmethod
    def _loaded(pid: int) -> bool:
        # A worker is one thread until load() starts its background (the AI expiry sweeper first).
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return False
        return int(status.split("Threads:")[1].split()[0]) >= 2

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(self.log_path.read_text())
        try:
            return requests.get(self.base + "/healthz", timeout=1).ok
        except requests.RequestException:
            return False

    def worker_pids(self) -> list[int]:
        """gunicorn's worker processes (the children of the master)."""
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        return [int(p) for p in children]

    def stop(self) -> None:
        kill_group(self.proc)  # the master and its workers
        self._log.close()


@pytest.fixture
def gateway_server(gateway_env, standin, tmp_path):
    """``gateway_server(threads=, **env)`` starts a served gateway with extra settings."""
    def serve(threads: int = 300, workers: int = 1, open_files: int | None = None, wait: bool = True,
              **env) -> ServedGateway:
        return ServedGateway({**gateway_env, **env}, tmp_path, threads, workers, open_files, wait)

    start = Started(serve, ServedGateway.stop)
    yield start
    start.stop_all()


@pytest.fixture
def served_gateway(gateway_server):
    """``python -m gateway`` serving on a free port; yields its base URL."""
    return gateway_server().base
