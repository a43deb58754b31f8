"""Seed 000 through the HTTP endpoints with the AI service running: leases
expire and are taken over (fenced), retries run out, timeouts and back-off."""

from __future__ import annotations

from tests.ai.conftest import Api, transitions
from tests.support.responses import err
from tests.support.waiting import wait_for


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
