"""A runtime holding a lease through a gateway restart (``python -m gateway``,
SIGTERM, started again on the same port): the lease lives in PostgreSQL, so
the runtime keeps it (heartbeat 204, result 200, attempt 1), or, when the
lease ran out while the gateway was away, loses it cleanly: LOCK_LOST for the
old attempt, and the job is another runtime's to take."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from services.ai_runtime.client import ProtocolError, RuntimeClient
from tests.support.ai_jobs import insert_pending_jobs
from tests.support.ports import free_port
from tests.support.processes import kill_group, stop_process
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "runtime-token-restart1"
CAPS = ["learning_state_analysis"]
OUTPUT = {"summary": "kept through a restart", "masteryLevel": 0.5}


@pytest.fixture
def gateway_process(db_url, tmp_path):
    port = free_port()
    started = []

    def start(lock_seconds: float = 30):
        env = {k: v for k, v in os.environ.items() if not k.startswith("LINECTL_")}
        env.update({"LINECTL_DATABASE_URL": db_url, "LINECTL_TOKENS": f"runtime:{TOKEN}",
                    "LINECTL_HTTP_PORT": str(port), "LINECTL_DATA_DIR": str(tmp_path),
                    "LINECTL_GATEWAY_WORKERS": "1", "LINECTL_AI_LOCK_SECONDS": str(lock_seconds),
                    "LINECTL_AI_RETRY_BACKOFF_SECONDS": "0", "LINECTL_LOG_LEVEL": "WARNING"})
        proc = subprocess.Popen([sys.executable, "-m", "gateway", "--name", "restart-gateway"], env=env,
                                cwd=ROOT, start_new_session=True)
        started.append(proc)
        client = RuntimeClient(f"http://127.0.0.1:{port}", TOKEN, "rt-kept", timeout=5)

        def up():
            try:
                client.poll(CAPS, limit=1)
                return True
            except (ProtocolError, OSError):
                assert proc.poll() is None, "the gateway exited"
                return False

        wait_for(up, timeout=60, interval=0.1, message="the gateway to answer")
        return proc, client

    yield start
    for proc in started:
        if proc.poll() is None:
            kill_group(proc)


def test_a_lease_is_kept_through_a_gateway_restart(engine, gateway_process):
    with engine.begin() as c:
        insert_pending_jobs(c, 1, "learning_state_analysis")
    proc, client = gateway_process()
    [job] = client.poll(CAPS, limit=1)
    lease = client.lock(job["id"])
    client.heartbeat(job["id"], lease["attemptNo"])
    stop_process(proc, timeout=30)
    assert proc.returncode == 0

    _proc, client = gateway_process()
    client.heartbeat(job["id"], lease["attemptNo"])  # 204: still the holder
    reply = client.succeed(job["id"], lease["attemptNo"], OUTPUT)
    assert reply["status"] == "succeeded" and reply["attemptNo"] == 1 and reply["duplicate"] is False
    with engine.connect() as c:
        row = c.execute(text("SELECT status, attempt_no, locked_by FROM ai_runtime_job")).one()
    assert tuple(row) == ("succeeded", 1, "rt-kept")


def test_a_lease_that_ran_out_during_the_restart_is_lost_cleanly(engine, gateway_process):
    with engine.begin() as c:
        insert_pending_jobs(c, 1, "learning_state_analysis")
    proc, client = gateway_process(lock_seconds=1)
    [job] = client.poll(CAPS, limit=1)
    lease = client.lock(job["id"])
    stop_process(proc, timeout=30)
    def ran_out():  # on the database's clock (the old gateway's sweeper may have expired it on its way out)
        with engine.connect() as c:
            return c.execute(text("SELECT lock_until IS NULL OR lock_until < clock_timestamp()"
                                  " FROM ai_runtime_job")).scalar()

    wait_for(ran_out, timeout=20, message="the lease to run out")

    _proc, client = gateway_process(lock_seconds=1)
    for call in (lambda: client.heartbeat(job["id"], lease["attemptNo"]),
                 lambda: client.succeed(job["id"], lease["attemptNo"], OUTPUT)):
        with pytest.raises(ProtocolError) as lost:
            call()
        assert (lost.value.status, lost.value.code) == (409, "LOCK_LOST")
    other = RuntimeClient(client.base.removesuffix("/internal/runtime"), TOKEN, "rt-other", timeout=5)
    assert other.lock(job["id"])["attemptNo"] == 2
    with engine.connect() as c:
        row = c.execute(text("SELECT status, attempt_no, locked_by, retry_count FROM ai_runtime_job")).one()
    assert tuple(row) == ("locked", 2, "rt-other", 1)
