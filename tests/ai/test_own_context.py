"""The AI queue as its own context, served by the gateway straight from
PostgreSQL: who may write what is enforced by PostgreSQL's grants, expiry
with many gateway processes happens exactly once, runtimes take only the
jobs they can serve, and strict booleans and fencing on every path."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from psycopg2.errors import InsufficientPrivilege
from sqlalchemy import exc, text

from services.ai_jobs.queue import AiJobQueue
from services.ai_jobs.sweeper import ExpirySweeper
from services.ai_runtime.client import RuntimeClient
from services.ai_runtime.providers import DeepSeekProvider, OfflineProvider
from services.ai_runtime.worker import RuntimeWorker
from shared.db import roles
from shared.db.engine import make_engine
from tests.ai.conftest import PLATFORM, RUNTIME, TOKENS, Api
from tests.ai.test_runtime_worker import http_gateway, run_worker, settle  # noqa: F401 - fixtures
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


def err(r):
    return r.status_code, r.get_json()["error"]["code"]


# -- who may write what -----------------------------------------------------------


def test_a_gateway_connection_cannot_write_line_control(gateway, engine):
    ctx = gateway.extensions["linectl"]
    with engine.begin() as c:
        c.execute(text("INSERT INTO work_order (code, product_id, route, quantity, priority)"
                       " VALUES ('WO-1', 'SHAFT-B', '[]', 1, 5)"))
    for sessions in (ctx.ai.engine.connect, ctx.db):  # the AI writer and the read-only reader alike
        with sessions() as s:
            assert s.execute(text("SELECT current_user")).scalar() == roles.GATEWAY
            assert s.execute(text("SELECT count(*) FROM work_order")).scalar() == 1  # reads are fine
    with ctx.ai.engine.connect() as s:
        # The AI writer may write AI tables, but PostgreSQL itself refuses line control.
        for sql in ("UPDATE job SET status = 'COMPLETED'", "UPDATE work_order SET status = 'CANCELLED'",
                    "DELETE FROM event_log", "INSERT INTO alarm (code, severity, message) VALUES ('X', 'LOW', 'x')"):
            with pytest.raises(exc.ProgrammingError) as refused:
                s.execute(text(sql))
            assert isinstance(refused.value.orig, InsufficientPrivilege), sql
            s.rollback()
    with engine.connect() as c:
        assert c.execute(text("SELECT status FROM work_order")).scalar() == "CREATED"


def test_the_line_controller_cannot_touch_ai_tables(db_url):
    controller = make_engine(db_url, role=roles.CONTROLLER, pool_size=1)
    try:
        with controller.connect() as c:
            assert c.execute(text("SELECT count(*) FROM job")).scalar() == 0
            with pytest.raises(exc.ProgrammingError):
                c.execute(text("SELECT count(*) FROM ai_runtime_job"))
    finally:
        controller.dispose()


def _imports(package: Path) -> set[str]:
    found = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
    return found


def test_line_control_and_ai_jobs_do_not_import_each_other():
    from services.line_controller.service import LineControllerService

    assert not [m for m in _imports(ROOT / "services" / "line_controller") if "ai_jobs" in m]
    assert not [m for m in _imports(ROOT / "services" / "ai_jobs") if m.startswith("services.line_controller")]
    assert not [name for name in dir(LineControllerService) if name.startswith("ai_")]


# -- many gateway processes ----------------------------------------------------------


def test_several_sweepers_expire_each_lease_exactly_once(gateway, start_ai, db_url, engine):
    start_ai(lock_seconds=0.3).stop()  # leases of 0.3 s; only our sweepers below expire them
    ctx = gateway.extensions["linectl"]
    api = Api(gateway.test_client())
    jobs = [api.create(targetId=f"t{i}") for i in range(40)]
    for job in jobs:
        assert api.lock(job["id"]).status_code == 200
    engines = [make_engine(db_url, role=roles.GATEWAY, pool_size=2) for _ in range(4)]
    sweepers = [ExpirySweeper(AiJobQueue(e, ctx.ai.config)) for e in engines]
    expired: list[dict] = []
    lock = threading.Lock()
    all_expired = threading.Event()

    def sweep(sweeper):
        while not all_expired.wait(0.005):
            got = sweeper.sweep_once()
            with lock:
                expired.extend(got)
                if len(expired) >= len(jobs):
                    all_expired.set()

    try:
        threads = [threading.Thread(target=sweep, args=(s,)) for s in sweepers]
        for t in threads:
            t.start()
        assert all_expired.wait(30), f"{len(expired)} of {len(jobs)} expired"
        for t in threads:
            t.join(10)
    finally:
        for e in engines:
            e.dispose()
    assert sorted(e["jobId"] for e in expired) == sorted(j["id"] for j in jobs)
    with engine.connect() as c:
        per_job = c.execute(text("SELECT job_id, count(*) FROM ai_job_transition WHERE to_status = 'expired'"
                                 " GROUP BY job_id")).all()
        pending = c.execute(text("SELECT count(*) FROM ai_runtime_job WHERE status = 'pending'"
                                 " AND retry_count = 1")).scalar()
    assert len(per_job) == 40 and {n for _, n in per_job} == {1}
    assert pending == 40


# -- strict input on the runtime path ---------------------------------------------------


@pytest.mark.parametrize("claim", ["yes", "true", 1, 0, None, [], {}])
def test_claim_must_be_a_json_boolean(api, claim):
    job = api.create()
    r = api.c.post("/internal/runtime/jobs/poll", headers=RUNTIME, json={
        "runtimeInstanceId": "rt-1", "capabilities": ["learning_state_analysis"], "claim": claim})
    assert err(r) == (400, "VALIDATION_ERROR") and "claim" in r.get_json()["error"]["message"]
    assert api.job(job["id"])["status"] == "pending"


def test_heartbeat_without_attempt_is_refused_and_extends_nothing(api):
    job = api.create()
    api.lock(job["id"])
    before = api.job(job["id"])
    r = api.heartbeat(job["id"], attempt=None)
    assert err(r) == (400, "VALIDATION_ERROR") and "attemptNo" in r.get_json()["error"]["message"]
    after = api.job(job["id"])
    assert after["status"] == "locked" and after["lockUntil"] == before["lockUntil"]


def test_withdrawing_consent_revokes_the_users_keys(api):
    r = api.c.post("/api/ai/credentials", headers=PLATFORM, json={"userId": "alice", "apiKey": "sk-alice-123456"})
    cred = r.get_json()
    job = api.create(userId="alice", apiKeyMode="user_deepseek_key", credentialId=cred["id"])
    api.lock(job["id"])
    revoked = api.c.post("/api/ai/users/alice/revoke", headers=PLATFORM).get_json()
    assert revoked["credentialsRevoked"] == [cred["id"]]
    url = f"/internal/runtime/jobs/{job['id']}/credential"
    assert err(api.c.get(url, headers=RUNTIME, query_string={"runtimeInstanceId": "rt-1", "attemptNo": 1})) \
        == (403, "FORBIDDEN")
    again = api.create(userId="alice", apiKeyMode="user_deepseek_key", credentialId=cred["id"], expect=400)
    assert again["error"]["code"] == "VALIDATION_ERROR"


# -- runtimes take only what they can serve ---------------------------------------------


def test_poll_serves_filters_by_provider_and_key_mode(api):
    platform = api.create(targetId="platform")
    r = api.c.post("/api/ai/credentials", headers=PLATFORM, json={"userId": "u1", "apiKey": "sk-u1-12345678"})
    own = api.create(targetId="own", apiKeyMode="user_deepseek_key", credentialId=r.get_json()["id"])
    offline = api.create(targetId="offline", modelProvider="offline")

    def ids(serves):
        r = api.poll(serves=serves)
        assert r.status_code == 200, r.get_json()
        return {j["id"] for j in r.get_json()["jobs"]}

    assert ids([{"modelProvider": "deepseek", "apiKeyModes": ["user_deepseek_key"]}]) == {own["id"]}
    assert ids([{"modelProvider": "offline"}]) == {offline["id"]}
    assert ids([{"modelProvider": "*"}]) == {platform["id"], own["id"], offline["id"]}
    assert err(api.poll(serves=[{"modelProvider": "deepseek", "apiKeyModes": ["nope"]}])) == \
        (400, "VALIDATION_ERROR")
    assert err(api.poll(serves=[])) == (400, "VALIDATION_ERROR")


def test_a_runtime_without_the_platform_key_leaves_those_jobs_alone(gateway, start_ai, http_gateway,  # noqa: F811
                                                                  run_worker):  # noqa: F811
    start_ai()
    api = Api(gateway.test_client())
    platform_jobs = [api.create(targetId=f"p{i}") for i in range(3)]
    r = api.c.post("/api/ai/credentials", headers=PLATFORM, json={"userId": "u1", "apiKey": "sk-u1-12345678"})
    offline_job = api.create(targetId="o", modelProvider="offline")
    worker = run_worker(http_gateway, {"deepseek": DeepSeekProvider("http://127.0.0.1:9", None, timeout=1),
                                       "offline": OfflineProvider()})
    assert settle(api, offline_job["id"])["status"] == "succeeded"
    own = api.create(targetId="own", apiKeyMode="user_deepseek_key", credentialId=r.get_json()["id"])
    # The user's own key is served (the fake host refuses: a network error, retried, not a burnt job).
    wait_for(lambda: api.job(own["id"])["attemptNo"] >= 1, timeout=20)
    for job in platform_jobs:
        now = api.job(job["id"])
        assert now["status"] == "pending" and now["attemptNo"] == 0, now
    assert all(outcome != "failed:INVALID_CREDENTIAL" for _, _, outcome in worker.outcomes)


def test_offline_demo_runtime_finishes_default_jobs(gateway, start_ai, http_gateway, tmp_path):  # noqa: F811
    """The docs' demo: default jobs (modelProvider deepseek), then `linectl runtime`
    with no DeepSeek key: the offline stand-in answers them all."""
    start_ai()
    api = Api(gateway.test_client())
    jobs = [api.create(targetId=f"demo{i}") for i in range(5)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINECTL_")}
    env.update({"LINECTL_TOKENS": TOKENS, "LINECTL_RUNTIME_URL": http_gateway, "LINECTL_DATA_DIR": str(tmp_path)})
    proc = subprocess.Popen([sys.executable, "-m", "services.stack.cli", "runtime", "--poll-interval", "0.1"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        for job in jobs:
            assert settle(api, job["id"])["status"] == "succeeded"
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=30)[0].decode()
    assert proc.returncode == 0, out
    assert "offline stand-in" in out


def test_runtime_client_poll_sends_serves(http_gateway, gateway):  # noqa: F811
    api = Api(gateway.test_client())
    api.create(targetId="x")
    client = RuntimeClient(http_gateway, "runtime-token-00001", "rt-serves")
    worker = RuntimeWorker(client, {"deepseek": DeepSeekProvider("http://127.0.0.1:9", None)})
    assert worker.serves == [{"modelProvider": "deepseek", "apiKeyModes": ["user_deepseek_key"]}]
    assert client.poll(["learning_state_analysis"], serves=worker.serves) == []
    assert len(client.poll(["learning_state_analysis"])) == 1


def test_shell_helpers_reach_the_queue_directly(api, db_url, tmp_path, capsys):
    from services.ai_jobs.shell import AiShell
    from tests.ai.conftest import ai_settings

    job = api.create(targetId="shell")
    ai = AiShell(ai_settings(db_url, tmp_path))
    ai.jobs()
    assert job["id"] in capsys.readouterr().out
    ai.cancel(job["id"])
    assert "cancelled" in capsys.readouterr().out
    assert api.job(job["id"])["status"] == "cancelled"
    ai.cancel(job["id"])
    assert "refused: INVALID_TRANSITION" in capsys.readouterr().out


@pytest.mark.parametrize("claim", [False, True], ids=["seed", "claim"])
def test_50_runtimes_race_over_http(gateway, start_ai, http_gateway, engine, claim):  # noqa: F811
    """Exactly one holder per attempt, exactly one success per job, none lost."""
    from services.ai_jobs.domain import output_hash

    start_ai()
    api = Api(gateway.test_client())
    jobs = {api.create(targetId=f"r{i}")["id"] for i in range(200)}
    outcomes: list[tuple[str, int, int]] = []  # (job, attempt, status of the result)
    output = {"summary": "ok", "masteryLevel": 0.5}

    def runtime(i):
        client = RuntimeClient(http_gateway, "runtime-token-00001", f"race-{i}")
        idle = 0
        while idle < 3:
            page = client.poll(["learning_state_analysis"], limit=1 if claim else 20, claim=claim)
            if not page:
                idle += 1
                continue
            idle = 0
            import random

            random.shuffle(page)
            for job in page:
                if not claim:
                    r = client.http.post(f"{client.base}/jobs/{job['id']}/lock",
                                         json={"runtimeInstanceId": client.runtime_id})
                    if r.status_code == 409:
                        continue
                    assert r.status_code == 200, r.text
                    job = {**job, "attemptNo": r.json()["attemptNo"]}
                client.heartbeat(job["id"], job["attemptNo"])
                r = client.http.post(f"{client.base}/jobs/{job['id']}/result", json={
                    "runtimeInstanceId": client.runtime_id, "attemptNo": job["attemptNo"],
                    "status": "succeeded", "output": output, "outputHash": output_hash(output)})
                outcomes.append((job["id"], job["attemptNo"], r.status_code))
                break

    threads = [threading.Thread(target=runtime, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(j for j, _, status in outcomes if status == 200) == sorted(jobs)
    assert {status for _, _, status in outcomes} == {200}
    with engine.connect() as c:
        holders = c.execute(text("SELECT job_id, attempt_no, count(*) FROM ai_job_transition"
                                 " WHERE to_status = 'locked' GROUP BY job_id, attempt_no")).all()
        states = c.execute(text("SELECT status, count(*) FROM ai_runtime_job GROUP BY status")).all()
        results = c.execute(text("SELECT count(*), count(DISTINCT job_id) FROM ai_runtime_result"
                                 " WHERE status = 'succeeded'")).one()
    assert len(holders) == 200 and {n for *_, n in holders} == {1}
    assert states == [("succeeded", 200)]
    assert tuple(results) == (200, 200)
