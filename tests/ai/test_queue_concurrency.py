"""The queue's SQL under contention, at the repository level against the real
database: 50 runtimes (green threads; eventlet's monkey patch makes
psycopg2 cooperative, so their statements interleave in PostgreSQL) racing for 400 jobs, with
the seed's poll-then-lock protocol (trying the page in order, as the docs
say) and with ``claim``. A naive runtime trying its page at random runs the same
SQL, only with more collisions: that race is tests/ai/test_own_context.py's, over
HTTP (50 runtimes, pages shuffled, one holder per attempt). Also: the
poll is served by an index at 100k pending jobs, and expiry is re-checked by
the operations themselves (no sweeper here). A race needs many runtimes at once,
not many of them for long: 200 runtimes and thousands of jobs, each done exactly
once, are tests/bench/bench_ai_jobs.py's (its figures are per fleet size)."""

from __future__ import annotations

import collections
import time

import eventlet
import pytest
from sqlalchemy import text

from services.ai_jobs import repository as repo
from services.ai_jobs.domain import AiJobError, QueueTimings, output_hash
from shared.db.engine import make_engine, make_sessionmaker
from tests.support.ai_jobs import insert_pending_jobs
from tests.support.db import connection_budget

TIMINGS = QueueTimings(lock_seconds=30, retry_backoff_seconds=0)
OUTPUT = {"summary": "ok", "masteryLevel": 0.5}


def seed_jobs(engine, n, job_type="learning_state_analysis"):
    with engine.begin() as c:
        insert_pending_jobs(c, n, job_type)


def unit(sm, fn, *args, **kwargs):
    with sm() as s, s.begin():
        return fn(s, *args, **kwargs)


def race(db_url, runtimes, claim):
    # Fewer connections on a server the shards share: the runtimes then queue for
    # them as they would for a gateway's pool; the other tests need the rest.
    engine = make_engine(db_url, pool_size=connection_budget(db_url, runtimes + 2),
                         max_overflow=0, pool_timeout=120)
    sm = make_sessionmaker(engine)
    locks = collections.Counter()  # (job, attempt) -> holders
    successes = collections.Counter()
    refused = collections.Counter()

    def runtime(rid):
        idle = 0
        while idle < 3:
            jobs = unit(sm, repo.poll, TIMINGS, rid, ["learning_state_analysis"], 50 if not claim else 10, claim)
            if not jobs:
                idle += 1
                eventlet.sleep(0.01)
                continue
            idle = 0
            for job in jobs:
                if claim:
                    attempt = job["attemptNo"]
                else:
                    try:
                        attempt = unit(sm, repo.lock, TIMINGS, job["id"], rid)["attemptNo"]
                    except AiJobError as exc:
                        assert exc.code == "JOB_ALREADY_LOCKED"
                        refused[rid] += 1
                        continue
                locks[(job["id"], attempt)] += 1
                unit(sm, repo.heartbeat, TIMINGS, job["id"], rid, attempt)
                reply = unit(sm, repo.submit_result, TIMINGS, job["id"], rid, attempt, "succeeded",
                             output=OUTPUT, claimed_hash=output_hash(OUTPUT))
                assert reply["duplicate"] is False
                successes[job["id"]] += 1
                if not claim:
                    break  # one job at a time: the rest of this page is stale by now

    pool = eventlet.GreenPool(runtimes)
    for i in range(runtimes):
        pool.spawn(runtime, f"rt-{i}")
    pool.waitall()
    engine.dispose()
    return locks, successes, refused


@pytest.mark.parametrize("claim", [False, True], ids=["poll-then-lock", "claim"])
def test_50_runtimes_race_for_the_jobs(db_url, engine, claim):
    runtimes, jobs = 50, 400
    seed_jobs(engine, jobs)
    locks, successes, refused = race(db_url, runtimes, claim)
    assert len(successes) == jobs, "every job ran"
    assert set(successes.values()) == {1}, "no job succeeded twice"
    assert set(locks.values()) == {1}, "one holder per attempt"
    assert {attempt for _job, attempt in locks} == {1}
    with engine.connect() as c:
        assert c.execute(text("SELECT status, count(*) FROM ai_runtime_job GROUP BY status")).all() == \
            [("succeeded", jobs)]
        assert c.execute(text("SELECT count(*) FROM ai_runtime_result")).scalar() == jobs
        assert c.execute(text("SELECT count(*) FROM ai_job_transition WHERE to_status = 'locked'")).scalar() == jobs
    if not claim:
        # Each poll offers its first job to its caller alone: taking it, runtimes
        # rarely collide (a few do, where an offer ran out or came between a
        # poll's read and its offer). Collisions come with the runtimes, not with the
        # jobs (44 of 400 once, on a loaded host): at most two per runtime, as when
        # this raced for 1000 jobs with a bound of a tenth of them.
        assert sum(refused.values()) < runtimes * 2, sum(refused.values())


def test_expiry_is_applied_by_the_operations_themselves(db_url, engine):
    seed_jobs(engine, 1)
    sm = make_sessionmaker(engine)
    short = QueueTimings(lock_seconds=0.2, retry_backoff_seconds=0)
    [job] = unit(sm, repo.poll, short, "old", ["learning_state_analysis"])
    assert unit(sm, repo.lock, short, job["id"], "old")["attemptNo"] == 1
    deadline = time.monotonic() + 20
    while True:  # the old lease runs out; no sweeper runs in this test
        try:
            taken = unit(sm, repo.lock, short, job["id"], "new")
            break
        except AiJobError as exc:
            assert exc.code == "JOB_ALREADY_LOCKED" and time.monotonic() < deadline
            eventlet.sleep(0.05)
    assert taken["attemptNo"] == 2
    with pytest.raises(AiJobError) as lost:
        unit(sm, repo.heartbeat, short, job["id"], "old", 1)
    assert lost.value.code == "LOCK_LOST"
    with sm() as s:
        row = s.execute(text("SELECT retry_count, error_code FROM ai_runtime_job")).one()
    assert tuple(row) == (1, "LOCK_EXPIRED")


def test_poll_uses_the_index_at_100k_pending(engine):
    seed_jobs(engine, 100_000)
    seed_jobs(engine, 2_000, "quiz_generation")
    with engine.begin() as c:
        c.execute(text("ANALYZE ai_runtime_job"))
    sm = make_sessionmaker(engine)
    with sm() as s:
        for caps, claim in ((["learning_state_analysis"], False),
                            (["quiz_generation", "learning_state_analysis", "flashcard_generation"], False),
                            (["quiz_generation"], True)):
            plan = "\n".join(s.execute(text("EXPLAIN " + repo.poll_sql(claim)),
                                       repo.poll_params(caps, 20, "rt", TIMINGS)).scalars())
            assert "Seq Scan on ai_runtime_job" not in plan, plan
            assert "ix_ai_runtime_job_poll" in plan, plan
            s.rollback()
        jobs = repo.poll(s, TIMINGS, "rt", ["quiz_generation", "learning_state_analysis"], 50)
        assert len(jobs) == 50
        keys = [(j["priority"], j["createdAt"]) for j in jobs]
        assert keys == sorted(keys)
