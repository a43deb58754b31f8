"""AI-job fixtures: the composed service in a real nameko container on the
test's transport and database, and the gateway (Flask test client) talking to
it over a real RPC pool."""

from __future__ import annotations

import pytest

from gateway.app import create_app
from gateway.rpc import RpcPool
from services.line_controller.ai_jobs.domain import output_hash
from services.line_controller.ai_jobs.entrypoints import AiJobsEntrypoints
from shared.config import load_settings

PLATFORM = {"Authorization": "Bearer platform-token-1"}
RUNTIME = {"Authorization": "Bearer runtime-token-1"}
ADMIN = {"Authorization": "Bearer admin-token-1"}
OPERATOR = {"Authorization": "Bearer operator-token-1"}
TOKENS = ("platform:platform-token-1,runtime:runtime-token-1,admin:admin-token-1,"
          "operator:operator-token-1")


class LineControllerAi(AiJobsEntrypoints):
    name = "line_controller"


def service_config(nameko_config, tmp_path, **ai):
    config = dict(nameko_config)
    config.setdefault("LINECTL_AI_LOCK_SECONDS", 30)
    config.setdefault("LINECTL_AI_RETRY_BACKOFF_SECONDS", 0)
    config["LINECTL_DATA_DIR"] = str(tmp_path)
    config.update({f"LINECTL_AI_{k.upper()}": v for k, v in ai.items()})
    return config


@pytest.fixture
def start_ai(container_factory, nameko_config, tmp_path):
    """``start_ai(lock_seconds=…, retry_backoff_seconds=…)`` → a started container."""

    def start(**ai):
        container = container_factory(LineControllerAi, service_config(nameko_config, tmp_path, **ai))
        container.start()
        return container

    return start


@pytest.fixture
def gateway(db_url, nameko_config):
    settings = load_settings({"LINECTL_DATABASE_URL": db_url, "LINECTL_TOKENS": TOKENS})
    pool = RpcPool(nameko_config, size=8, timeout=30)
    app = create_app(settings, rpc_pool=pool)
    yield app
    pool.close()


@pytest.fixture
def api(gateway, start_ai):
    """The HTTP API over a service with a 30 s lease and no retry back-off."""
    start_ai()
    return Api(gateway.test_client())


class Api:
    """Small helpers over the Flask test client, so tests read as the protocol."""

    def __init__(self, client):
        self.c = client

    def snapshot(self, user="u1", data=None, **kw):
        body = {"userId": user, "targetType": "user", "targetId": "t1",
                "data": data if data is not None else {"scores": [0.5, 0.75], "topics": ["fractions"]}, **kw}
        r = self.c.post("/api/ai/snapshots", json=body, headers=PLATFORM)
        assert r.status_code == 201, r.get_json()
        return r.get_json()

    def create(self, expect=201, **kw):
        body = {"userId": "u1", "jobType": "learning_state_analysis", "targetType": "user",
                "targetId": "t1", **kw}
        r = self.c.post("/api/ai/jobs", json=body, headers=PLATFORM)
        assert r.status_code == expect, r.get_json()
        return r.get_json()

    def job(self, job_id):
        r = self.c.get(f"/api/ai/jobs/{job_id}", headers=PLATFORM)
        assert r.status_code == 200, r.get_json()
        return r.get_json()

    def poll(self, rid="rt-1", caps=None, **kw):
        return self.c.post("/internal/runtime/jobs/poll", headers=RUNTIME,
                           json={"runtimeInstanceId": rid, "capabilities": caps or ["learning_state_analysis"],
                                 **kw})

    def lock(self, job_id, rid="rt-1"):
        return self.c.post(f"/internal/runtime/jobs/{job_id}/lock", headers=RUNTIME,
                           json={"runtimeInstanceId": rid})

    def heartbeat(self, job_id, rid="rt-1", attempt=None):
        body = {"runtimeInstanceId": rid}
        if attempt is not None:
            body["attemptNo"] = attempt
        return self.c.post(f"/internal/runtime/jobs/{job_id}/heartbeat", headers=RUNTIME, json=body)

    def succeed(self, job_id, attempt, output=None, rid="rt-1", digest=None):
        output = output if output is not None else {"summary": "steady progress", "masteryLevel": 0.6}
        return self.c.post(f"/internal/runtime/jobs/{job_id}/result", headers=RUNTIME, json={
            "runtimeInstanceId": rid, "attemptNo": attempt, "status": "succeeded", "output": output,
            "outputHash": digest or output_hash(output)})

    def fail(self, job_id, attempt, code="MODEL_TIMEOUT", rid="rt-1"):
        return self.c.post(f"/internal/runtime/jobs/{job_id}/result", headers=RUNTIME, json={
            "runtimeInstanceId": rid, "attemptNo": attempt, "status": "failed", "errorCode": code,
            "errorMessage": "provider said no"})

    def cancel(self, job_id):
        return self.c.post(f"/api/ai/jobs/{job_id}/cancel", headers=PLATFORM)


def transitions(job) -> list[tuple]:
    return [(t["from"], t["to"]) for t in job["transitions"]]
