"""Seed 000 through the HTTP endpoints: consent, an admin's rerun, creation
(idempotent, validated), roles, snapshots and runtime credentials, unknown
things."""

from __future__ import annotations

from sqlalchemy import text

from tests.ai.conftest import ADMIN, OPERATOR, PLATFORM, RUNTIME
from tests.support.responses import err


def test_consent_withdrawal(api):
    pending = api.create(userId="alice", targetId="p")
    running = api.create(userId="alice", targetId="r")
    other = api.create(userId="bob")
    api.lock(running["id"])
    api.heartbeat(running["id"], attempt=1)
    r = api.c.post("/api/ai/users/alice/revoke", headers=PLATFORM)
    assert r.status_code == 200
    assert r.get_json()["cancelled"] == [pending["id"]] and r.get_json()["cancelRequested"] == [running["id"]]
    assert api.job(pending["id"])["status"] == "cancelled"
    assert api.job(other["id"])["status"] == "pending"
    assert err(api.heartbeat(running["id"], attempt=1)) == (409, "CANCEL_REQUESTED")
    assert api.job(running["id"])["status"] == "cancelled"


def test_admin_rerun(api):
    job = api.create(priority=2, params={"count": 4}, maxRetryCount=0, idempotencyKey="k1")
    assert err(api.c.post(f"/api/admin/ai/jobs/{job['id']}/rerun", headers=ADMIN)) == (409, "INVALID_TRANSITION")
    api.lock(job["id"])
    api.fail(job["id"], 1, "MODEL_TIMEOUT")  # maxRetryCount=0 → failed at once
    assert api.job(job["id"])["status"] == "failed"
    assert err(api.c.post(f"/api/admin/ai/jobs/{job['id']}/rerun", headers=PLATFORM)) == (403, "FORBIDDEN")
    r = api.c.post(f"/api/admin/ai/jobs/{job['id']}/rerun", headers=ADMIN)
    assert r.status_code == 201
    new = r.get_json()
    assert new["id"] != job["id"] and new["retriedFromJobId"] == job["id"] and new["status"] == "pending"
    assert (new["priority"], new["params"], new["maxRetryCount"]) == (2, {"count": 4}, 0)
    assert new["attemptNo"] == 0 and new["retryCount"] == 0 and new["idempotencyKey"] is None
    assert api.job(job["id"])["status"] == "failed"
    again = api.c.post(f"/api/admin/ai/jobs/{job['id']}/rerun", headers=ADMIN)  # a double click
    assert again.status_code == 200 and again.get_json()["id"] == new["id"]
    failures = api.c.get("/api/ai/stats", headers=ADMIN).get_json()["recentFailures"]
    assert [(f["id"], f["errorCode"], f["rerunJobId"]) for f in failures] == \
        [(job["id"], "MODEL_TIMEOUT", new["id"])]


def test_idempotent_creation(api):
    a = api.create(idempotencyKey="same")
    b = api.create(expect=200, idempotencyKey="same")
    assert a["id"] == b["id"]
    c = api.create(idempotencyKey="same", targetId="other-target")
    assert c["id"] != a["id"]
    d, e = api.create(), api.create()
    assert d["id"] != e["id"]
    r = api.c.get("/api/ai/jobs", headers=PLATFORM, query_string={"userId": "u1", "limit": 2})
    page = r.get_json()
    assert len(page["items"]) == 2 and page["nextCursor"]
    rest = api.c.get("/api/ai/jobs", headers=PLATFORM,
                     query_string={"userId": "u1", "cursor": page["nextCursor"]}).get_json()
    assert len(rest["items"]) == 2 and rest["nextCursor"] is None
    assert {j["id"] for j in page["items"] + rest["items"]} == {a["id"], c["id"], d["id"], e["id"]}


def test_creation_validation(api):
    for bad in ({"jobType": "essay"}, {"priority": 10}, {"targetType": "planet"}, {"userId": ""},
                {"apiKeyMode": "user_deepseek_key"}, {"snapshotId": "missing"}, {"maxRetryCount": -1},
                {"timeoutSeconds": 0}, {"outputSchemaVersion": "99"}, {"surprise": 1}):
        body = {"userId": "u1", "jobType": "learning_state_analysis", "targetType": "user",
                "targetId": "t1", **bad}
        r = api.c.post("/api/ai/jobs", json=body, headers=PLATFORM)
        assert err(r) == (400, "VALIDATION_ERROR"), bad
    r = api.c.post("/api/ai/jobs", data="[1]", headers={**PLATFORM, "Content-Type": "application/json"})
    assert err(r) == (400, "VALIDATION_ERROR")
    assert api.c.get("/api/ai/jobs", headers=PLATFORM).get_json()["items"] == []


def test_roles(api):
    job = api.create()
    assert api.c.post("/api/ai/jobs", json={}).status_code == 401
    assert err(api.c.get("/api/ai/jobs", headers=RUNTIME)) == (403, "FORBIDDEN")
    assert err(api.c.get("/api/ai/jobs", headers=OPERATOR)) == (403, "FORBIDDEN")
    assert err(api.c.post(f"/internal/runtime/jobs/{job['id']}/lock", headers=PLATFORM,
                          json={"runtimeInstanceId": "x"})) == (403, "FORBIDDEN")
    assert api.c.get("/api/ai/jobs", headers=ADMIN).status_code == 200


def test_snapshot_access_rule(api):
    snap = api.snapshot()
    job = api.create(snapshotId=snap["id"])
    url = f"/internal/runtime/snapshots/{snap['id']}"
    q = {"runtimeInstanceId": "rt-1", "jobId": job["id"]}
    assert err(api.c.get(url, headers=RUNTIME, query_string=q)) == (403, "FORBIDDEN")  # not locked yet
    api.lock(job["id"])
    assert api.c.get(url, headers=RUNTIME, query_string=q).status_code == 200
    assert err(api.c.get(url, headers=RUNTIME, query_string={**q, "runtimeInstanceId": "rt-2"})) == \
        (403, "FORBIDDEN")
    assert err(api.c.get(url, headers=RUNTIME, query_string={"runtimeInstanceId": "rt-1"})) == \
        (400, "VALIDATION_ERROR")
    api.succeed(job["id"], 1)
    assert err(api.c.get(url, headers=RUNTIME, query_string=q)) == (403, "FORBIDDEN")


def test_credentials_encrypted_and_only_for_the_holder(api, engine):
    r = api.c.post("/api/ai/credentials", headers=PLATFORM, json={"userId": "u1", "apiKey": "sk-secret-123456"})
    assert r.status_code == 201
    cred = r.get_json()
    assert "apiKey" not in cred and cred["keyHint"] == "…3456"
    with engine.connect() as c:
        stored = bytes(c.execute(text("SELECT encrypted_key FROM ai_credential")).scalar())
    assert b"sk-secret" not in stored
    job = api.create(apiKeyMode="user_deepseek_key", credentialId=cred["id"])
    assert "sk-secret" not in str(api.job(job["id"]))
    url = f"/internal/runtime/jobs/{job['id']}/credential"
    assert err(api.c.get(url, headers=RUNTIME, query_string={"runtimeInstanceId": "rt-1", "attemptNo": 1})) == \
        (409, "LOCK_LOST")
    api.lock(job["id"])
    r = api.c.get(url, headers=RUNTIME, query_string={"runtimeInstanceId": "rt-1", "attemptNo": 1})
    assert r.status_code == 200 and r.get_json()["apiKey"] == "sk-secret-123456"
    other_user = api.create(userId="u2", apiKeyMode="user_deepseek_key", credentialId=cred["id"], expect=400)
    assert other_user["error"]["code"] == "VALIDATION_ERROR"


def test_unknown_things_are_404(api):
    assert err(api.c.get("/api/ai/jobs/nope", headers=PLATFORM)) == (404, "NOT_FOUND")
    assert err(api.c.get("/api/ai/schemas/essay", headers=PLATFORM)) == (404, "NOT_FOUND")
    assert err(api.c.post("/api/admin/ai/jobs/nope/rerun", headers=ADMIN)) == (404, "NOT_FOUND")
    assert err(api.heartbeat("nope")) == (404, "NOT_FOUND")
    assert err(api.c.get("/internal/runtime/snapshots/nope", headers=RUNTIME,
                         query_string={"runtimeInstanceId": "rt-1", "jobId": "j"})) == (404, "NOT_FOUND")
