"""Every transition and error path of seed 000 through the HTTP endpoints
(gateway → the AI queue → PostgreSQL, no RPC on the way)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from services.ai_jobs.domain import output_hash
from tests.ai.conftest import ADMIN, OPERATOR, PLATFORM, RUNTIME, Api, transitions
from tests.support.waiting import wait_for


def err(r):
    return r.status_code, r.get_json()["error"]["code"]


def test_happy_path_pending_locked_running_succeeded(api):
    snap = api.snapshot()
    job = api.create(snapshotId=snap["id"], priority=3)
    assert job["status"] == "pending" and job["attemptNo"] == 0 and job["retryCount"] == 0
    assert job["timeoutSeconds"] == 120 and job["maxRetryCount"] == 3
    [item] = api.poll().get_json()["jobs"]
    assert item["id"] == job["id"] and item["snapshotId"] == snap["id"] and item["priority"] == 3
    r = api.lock(job["id"])
    assert r.status_code == 200
    body = r.get_json()
    assert body["status"] == "locked" and body["attemptNo"] == 1 and body["lockUntil"]
    assert api.job(job["id"])["status"] == "locked"
    r = api.c.get(f"/internal/runtime/snapshots/{snap['id']}", headers=RUNTIME,
                  query_string={"runtimeInstanceId": "rt-1", "jobId": job["id"]})
    assert r.status_code == 200 and r.get_json()["data"] == snap["data"]
    assert api.heartbeat(job["id"], attempt=1).status_code == 204
    running = api.job(job["id"])
    assert running["status"] == "running" and running["startedAt"]
    output = {"summary": "steady", "masteryLevel": 0.5}
    r = api.succeed(job["id"], 1, output)
    assert r.status_code == 200 and r.get_json()["status"] == "succeeded"
    done = api.job(job["id"])
    assert done["status"] == "succeeded" and done["finishedAt"] and done["lockUntil"] is None
    assert done["result"]["output"] == output and done["result"]["outputHash"] == output_hash(output)
    assert transitions(done) == [(None, "pending"), ("pending", "locked"), ("locked", "running"),
                                 ("running", "succeeded")]
    assert done["transitions"][1]["runtimeInstanceId"] == "rt-1" and done["transitions"][1]["attemptNo"] == 1
    assert api.poll().get_json()["jobs"] == []


def test_poll_order_capabilities_and_limits(api):
    low = api.create(priority=5, targetId="a")
    first = api.create(priority=1, targetId="b")
    second = api.create(priority=1, targetId="c")
    quiz = api.create(jobType="quiz_generation", priority=0, targetId="d")
    ids = [j["id"] for j in api.poll().get_json()["jobs"]]
    assert ids == [first["id"], second["id"], low["id"]]
    both = [j["id"] for j in api.poll(caps=["quiz_generation", "learning_state_analysis"]).get_json()["jobs"]]
    assert both == [quiz["id"], first["id"], second["id"], low["id"]]
    assert [j["id"] for j in api.poll(limit=1).get_json()["jobs"]] == [first["id"]]
    for bad in ({"limit": 0}, {"limit": 51}, {"capabilities": []}, {"capabilities": ["painting"]}):
        body = {"runtimeInstanceId": "rt-1", "capabilities": ["quiz_generation"], **bad}
        r = api.c.post("/internal/runtime/jobs/poll", headers=RUNTIME, json=body)
        assert err(r) == (400, "VALIDATION_ERROR"), bad


def test_claim_locks_what_it_returns(api):
    jobs = [api.create(targetId=f"t{i}") for i in range(3)]
    r = api.poll(rid="rt-c", limit=2, claim=True)
    claimed = r.get_json()["jobs"]
    assert [j["id"] for j in claimed] == [jobs[0]["id"], jobs[1]["id"]]
    assert all(j["status"] == "locked" and j["attemptNo"] == 1 and j["lockUntil"] for j in claimed)
    assert [j["id"] for j in api.poll().get_json()["jobs"]] == [jobs[2]["id"]]
    assert err(api.lock(jobs[0]["id"], rid="rt-other")) == (409, "JOB_ALREADY_LOCKED")
    assert api.heartbeat(jobs[0]["id"], rid="rt-c", attempt=1).status_code == 204


def test_lock_conflicts_and_missing(api):
    job = api.create()
    assert api.lock(job["id"]).status_code == 200
    assert err(api.lock(job["id"], rid="rt-2")) == (409, "JOB_ALREADY_LOCKED")
    assert err(api.lock(job["id"])) == (409, "JOB_ALREADY_LOCKED")  # re-locking one's own
    assert err(api.lock("no-such-job")) == (404, "NOT_FOUND")
    assert err(api.c.post(f"/internal/runtime/jobs/{job['id']}/lock", headers=RUNTIME, json={})) == \
        (400, "VALIDATION_ERROR")


def test_heartbeat_and_result_fencing(api):
    job = api.create()
    api.lock(job["id"])
    assert err(api.heartbeat(job["id"], rid="rt-2")) == (409, "LOCK_LOST")
    assert err(api.heartbeat(job["id"], attempt=2)) == (409, "LOCK_LOST")
    assert err(api.succeed(job["id"], 1, rid="rt-2")) == (409, "LOCK_LOST")
    assert err(api.succeed(job["id"], 2)) == (409, "LOCK_LOST")
    pending = api.create(targetId="other")
    assert err(api.heartbeat(pending["id"])) == (409, "LOCK_LOST")
    assert api.job(job["id"])["status"] == "locked"


def test_result_without_heartbeat_runs_implicitly(api):
    job = api.create()
    api.lock(job["id"])
    assert api.succeed(job["id"], 1).status_code == 200
    assert transitions(api.job(job["id"]))[-2:] == [("locked", "running"), ("running", "succeeded")]


def test_result_idempotency_and_conflict(api, engine):
    job = api.create()
    api.lock(job["id"])
    out = {"summary": "ok", "masteryLevel": 0.9}
    first = api.succeed(job["id"], 1, out)
    again = api.succeed(job["id"], 1, out)
    assert first.status_code == again.status_code == 200
    assert again.get_json()["duplicate"] is True
    assert again.get_json()["resultId"] == first.get_json()["resultId"]
    other = api.succeed(job["id"], 1, {"summary": "different", "masteryLevel": 0.1})
    assert err(other) == (409, "RESULT_ALREADY_EXISTS")
    with engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM ai_runtime_result")).scalar() == 1


def test_hash_mismatch_changes_nothing(api):
    job = api.create()
    api.lock(job["id"])
    r = api.succeed(job["id"], 1, {"summary": "x", "masteryLevel": 0.5}, digest="0" * 64)
    assert err(r) == (400, "OUTPUT_HASH_MISMATCH")
    assert api.job(job["id"])["status"] == "locked"
    r = api.succeed(job["id"], 1, {"summary": "x", "masteryLevel": 0.5}, digest="XYZ")
    assert err(r) == (400, "VALIDATION_ERROR")


def test_canonical_hash_is_the_contracts():
    import hashlib
    import json
    value = {"b": [1, 2, {"z": "é", "a": None}], "a": 1.5}
    expected = hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":"),
                                         ensure_ascii=False).encode("utf-8")).hexdigest()
    assert output_hash(value) == expected


def test_schema_violation_fails_non_retryably(api):
    job = api.create(maxRetryCount=3)
    api.lock(job["id"])
    bad = {"summary": "too confident", "masteryLevel": 7}
    r = api.succeed(job["id"], 1, bad)
    assert err(r) == (422, "INVALID_SCHEMA")
    assert "masteryLevel" in r.get_json()["error"]["message"]
    failed = api.job(job["id"])
    assert failed["status"] == "failed" and failed["errorCode"] == "INVALID_SCHEMA"
    assert failed["retryCount"] == 0
    assert err(api.succeed(job["id"], 1, bad)) == (422, "INVALID_SCHEMA")  # the repeat: same answer


@pytest.mark.parametrize("job_type,output", [
    ("weak_point_analysis", [{"knowledgePointId": "kp1", "reason": "r", "confidence": 0.4}]),
    ("next_action_planning", [{"actionType": "review", "title": "Review fractions"}]),
    ("quiz_generation", [{"question": "2+2?", "options": ["3", "4"], "answerIndex": 1}]),
    ("flashcard_generation", [{"front": "f", "back": "b"}]),
])
def test_every_job_type_round_trip_and_schema(api, job_type, output):
    schema = api.c.get(f"/api/ai/schemas/{job_type}", headers=PLATFORM)
    assert schema.status_code == 200 and schema.get_json()["type"] == "array"
    job = api.create(jobType=job_type)
    api.lock(job["id"])
    assert api.succeed(job["id"], 1, output).status_code == 200
    wrong = api.create(jobType=job_type, targetId="x")
    api.lock(wrong["id"])
    assert err(api.succeed(wrong["id"], 1, [{"nothing": "here"}])) == (422, "INVALID_SCHEMA")


def test_retryable_failure_returns_to_pending_then_exhausts(api):
    job = api.create(maxRetryCount=1)
    api.lock(job["id"])
    r = api.fail(job["id"], 1, "MODEL_RATE_LIMIT")
    assert r.status_code == 200 and r.get_json()["jobStatus"] == "pending"
    again = api.job(job["id"])
    assert again["status"] == "pending" and again["retryCount"] == 1 and again["errorCode"] == "MODEL_RATE_LIMIT"
    assert api.lock(job["id"]).get_json()["attemptNo"] == 2
    assert api.fail(job["id"], 2, "NETWORK_ERROR").get_json()["jobStatus"] == "failed"
    final = api.job(job["id"])
    assert final["status"] == "failed" and final["retryCount"] == 1 and final["finishedAt"]
    assert transitions(final)[-1] == ("running", "failed")


def test_non_retryable_failure_and_unknown_code(api):
    job = api.create()
    api.lock(job["id"])
    assert err(api.fail(job["id"], 1, "SOMETHING_ELSE")) == (400, "VALIDATION_ERROR")
    assert api.fail(job["id"], 1, "INVALID_CREDENTIAL").get_json()["jobStatus"] == "failed"
    assert api.job(job["id"])["retryCount"] == 0
    r = api.c.post(f"/internal/runtime/jobs/{job['id']}/result", headers=RUNTIME,
                   json={"runtimeInstanceId": "rt-1", "attemptNo": 1, "status": "succeeded"})
    assert err(r) == (400, "VALIDATION_ERROR")


def test_cancel_pending_and_terminal(api):
    job = api.create()
    r = api.cancel(job["id"])
    assert r.status_code == 200 and r.get_json()["status"] == "cancelled"
    assert api.poll().get_json()["jobs"] == []
    assert err(api.lock(job["id"])) == (409, "JOB_ALREADY_LOCKED")
    assert err(api.cancel(job["id"])) == (409, "INVALID_TRANSITION")
    assert err(api.cancel("missing")) == (404, "NOT_FOUND")


def test_cancel_mid_run_is_told_at_next_heartbeat(api):
    job = api.create()
    api.lock(job["id"])
    api.heartbeat(job["id"], attempt=1)
    r = api.cancel(job["id"])
    assert r.status_code == 200 and r.get_json()["status"] == "running" and r.get_json()["cancelRequested"]
    assert err(api.heartbeat(job["id"], attempt=1)) == (409, "CANCEL_REQUESTED")
    final = api.job(job["id"])
    assert final["status"] == "cancelled"
    assert transitions(final)[-1] == ("running", "cancelled")
    assert err(api.succeed(job["id"], 1)) == (409, "LOCK_LOST")


def test_result_after_cancel_request_is_discarded(api):
    job = api.create()
    api.lock(job["id"])
    api.cancel(job["id"])
    assert err(api.succeed(job["id"], 1)) == (409, "CANCEL_REQUESTED")
    final = api.job(job["id"])
    assert final["status"] == "cancelled" and final["result"] is None


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


def test_lease_expiry_takeover_and_fencing(gateway, start_ai):
    start_ai(lock_seconds=1)
    api = Api(gateway.test_client())
    job = api.create(maxRetryCount=2)
    assert api.lock(job["id"], rid="old").status_code == 200
    expired = wait_for(lambda: (j := api.job(job["id"]))["status"] == "pending" and j, timeout=20,
                       message="the sweeper to expire the lease")
    assert expired["retryCount"] == 1 and expired["errorCode"] == "LOCK_EXPIRED"
    assert transitions(expired)[-2:] == [("locked", "expired"), ("expired", "pending")]
    r = api.lock(job["id"], rid="new")
    assert r.status_code == 200 and r.get_json()["attemptNo"] == 2
    assert err(api.heartbeat(job["id"], rid="old", attempt=1)) == (409, "LOCK_LOST")
    assert err(api.succeed(job["id"], 1, rid="old")) == (409, "LOCK_LOST")
    assert api.succeed(job["id"], 2, rid="new").status_code == 200
    assert api.job(job["id"])["result"]["runtimeInstanceId"] == "new"


def test_expiry_exhausts_retries_and_respects_cancel(gateway, start_ai):
    start_ai(lock_seconds=0.5)
    api = Api(gateway.test_client())
    job = api.create(maxRetryCount=1)
    for attempt in (1, 2):
        wait_for(lambda: api.lock(job["id"]).status_code == 200, timeout=20, message=f"lock {attempt}")
    final = wait_for(lambda: (j := api.job(job["id"]))["status"] == "failed" and j, timeout=20)
    assert final["retryCount"] == 1 and final["attemptNo"] == 2 and final["errorCode"] == "LOCK_EXPIRED"
    assert [t for t in transitions(final) if t[1] == "expired"] == [("locked", "expired")] * 2
    cancelled = api.create(targetId="c")
    api.lock(cancelled["id"])
    api.cancel(cancelled["id"])
    done = wait_for(lambda: (j := api.job(cancelled["id"]))["status"] == "cancelled" and j, timeout=20)
    assert done["retryCount"] == 0 and transitions(done)[-1] == ("expired", "cancelled")


def test_execution_timeout_is_job_timeout(gateway, start_ai):
    start_ai(lock_seconds=30)
    api = Api(gateway.test_client())
    job = api.create(timeoutSeconds=1, maxRetryCount=0)
    api.lock(job["id"])
    assert api.heartbeat(job["id"], attempt=1).status_code == 204
    final = wait_for(lambda: (j := api.job(job["id"]))["status"] == "failed" and j, timeout=20)
    assert final["errorCode"] == "JOB_TIMEOUT"
    assert transitions(final)[-2:] == [("running", "expired"), ("expired", "failed")]


def test_expiry_is_rechecked_without_the_sweeper(gateway, start_ai):
    start_ai(lock_seconds=0.3).stop()  # no sweeper: the operations expire by themselves
    api = Api(gateway.test_client())
    job = api.create()
    api.lock(job["id"], rid="old")
    # the lease runs out; the next lock by someone else applies the expiry itself
    r = wait_for(lambda: (x := api.lock(job["id"], rid="new")).status_code == 200 and x, timeout=20)
    assert r.get_json()["attemptNo"] == 2
    assert transitions(api.job(job["id"]))[-3:] == [("locked", "expired"), ("expired", "pending"),
                                                    ("pending", "locked")]


def test_unknown_things_are_404(api):
    assert err(api.c.get("/api/ai/jobs/nope", headers=PLATFORM)) == (404, "NOT_FOUND")
    assert err(api.c.get("/api/ai/schemas/essay", headers=PLATFORM)) == (404, "NOT_FOUND")
    assert err(api.c.post("/api/admin/ai/jobs/nope/rerun", headers=ADMIN)) == (404, "NOT_FOUND")
    assert err(api.heartbeat("nope")) == (404, "NOT_FOUND")
    assert err(api.c.get("/internal/runtime/snapshots/nope", headers=RUNTIME,
                         query_string={"runtimeInstanceId": "rt-1", "jobId": "j"})) == (404, "NOT_FOUND")


def test_retry_back_off_delays_the_poll(gateway, start_ai):
    start_ai(retry_backoff_seconds=60)
    api = Api(gateway.test_client())
    job = api.create()
    api.lock(job["id"])
    api.fail(job["id"], 1, "TEMPORARY_PROVIDER_ERROR")
    waiting = api.job(job["id"])
    assert waiting["status"] == "pending" and waiting["availableAt"] > waiting["updatedAt"]
    assert api.poll().get_json()["jobs"] == []
    assert api.poll(claim=True).get_json()["jobs"] == []
