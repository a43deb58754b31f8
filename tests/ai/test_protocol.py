"""Every transition and error path of seed 000 through the HTTP endpoints
(gateway → the AI queue → PostgreSQL, no RPC on the way): the job's life,
results and failures, cancelling. Access and leases are in
test_protocol_access.py and test_protocol_leases.py."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from services.ai_jobs.domain import output_hash
from tests.ai.conftest import PLATFORM, RUNTIME, transitions
from tests.support.responses import err


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
