from tests.ai.conftest import transitions


def test_happy_path(api):
    snap = api.snapshot()
    job = api.create(snapshotId=snap["id"])
    assert job["status"] == "pending"
    polled = api.poll().get_json()["jobs"]
    assert [j["id"] for j in polled] == [job["id"]]
    r = api.lock(job["id"])
    assert r.status_code == 200, r.get_json()
    locked = r.get_json()
    assert locked["status"] == "locked" and locked["attemptNo"] == 1
    assert api.heartbeat(job["id"], attempt=1).status_code == 204
    r = api.succeed(job["id"], 1)
    assert r.status_code == 200, r.get_json()
    done = api.job(job["id"])
    assert done["status"] == "succeeded"
    assert transitions(done) == [(None, "pending"), ("pending", "locked"), ("locked", "running"),
                                 ("running", "succeeded")]
