"""AI-job fixtures: the gateway (Flask test client) serving the AI queue
straight from the test's PostgreSQL, as every gateway process does: no nameko
service is involved. ``start_ai(lock_seconds=…)`` sets the queue's timings and
starts the expiry sweeper, as a serving gateway process does."""

from __future__ import annotations

import dataclasses

import pytest

from gateway.app import create_app
from services.ai_jobs.domain import output_hash
from services.ai_jobs.queue import AiJobQueue, AiQueueConfig
from services.ai_jobs.sweeper import ExpirySweeper
from shared.config import load_settings

PLATFORM = {"Authorization": "Bearer platform-token-1"}
RUNTIME = {"Authorization": "Bearer runtime-token-00001"}
ADMIN = {"Authorization": "Bearer admin-token-000001"}
OPERATOR = {"Authorization": "Bearer operator-token-1"}
TOKENS = ("platform:platform-token-1,runtime:runtime-token-00001,admin:admin-token-000001,"
          "operator:operator-token-1")


def ai_settings(db_url, tmp_path):
    return load_settings({"LINECTL_DATABASE_URL": db_url, "LINECTL_TOKENS": TOKENS,
                          "LINECTL_DATA_DIR": str(tmp_path), "LINECTL_AI_LOCK_SECONDS": "30",
                          "LINECTL_AI_RETRY_BACKOFF_SECONDS": "0"})


@pytest.fixture
def gateway(db_url, tmp_path):
    app = create_app(ai_settings(db_url, tmp_path))
    yield app
    app.extensions["linectl"].close()


@pytest.fixture
def start_ai(gateway):
    """``start_ai(lock_seconds=…, retry_backoff_seconds=…)``: the gateway's queue
    with those timings, and its expiry sweeper running → the sweeper."""

    def start(**ai):
        ctx = gateway.extensions["linectl"]
        base = ctx.ai.config
        timings = dataclasses.replace(base.timings, **{k: v for k, v in ai.items()
                                                       if k in ("lock_seconds", "retry_backoff_seconds")})
        if "timeout_seconds" in ai:
            timings = dataclasses.replace(timings, default_timeout_seconds=ai["timeout_seconds"])
        ctx.ai = AiJobQueue(ctx.ai.engine, AiQueueConfig(timings=timings, box=base.box))
        ctx.sweeper = ExpirySweeper(ctx.ai, interval=0.2).start()
        return ctx.sweeper

    return start


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

    def heartbeat(self, job_id, rid="rt-1", attempt=1):
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
