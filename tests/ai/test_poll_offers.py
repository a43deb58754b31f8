"""The poll's "offered to" hint and the lost lock's cost, at the repository
level: concurrent pollers get different first jobs, the page keeps the
seed's order, an offer that runs out hides nothing, anyone may still lock an
offered job, and a lock that loses costs one statement."""

from __future__ import annotations

import threading
import time

import eventlet
import pytest
from sqlalchemy import event, text

from services.ai_jobs import repository as repo
from services.ai_jobs.domain import AiJobError, QueueTimings
from shared.db.engine import make_engine, make_sessionmaker
from tests.support.ai_jobs import insert_pending_jobs

TIMINGS = QueueTimings(lock_seconds=30, retry_backoff_seconds=0, offer_seconds=30)
CAPS = ["learning_state_analysis"]


@pytest.fixture
def sm(engine):
    with engine.begin() as c:
        insert_pending_jobs(c, 30, "learning_state_analysis")
    return make_sessionmaker(engine)


def poll(sm, rid, limit=20, timings=TIMINGS):
    with sm() as s, s.begin():
        return repo.poll(s, timings, rid, CAPS, limit)


def lock(sm, job_id, rid):
    with sm() as s, s.begin():
        return repo.lock(s, TIMINGS, job_id, rid)


def order(engine) -> list[str]:
    with engine.connect() as c:
        return c.execute(text("SELECT id FROM ai_runtime_job WHERE status = 'pending'"
                              " ORDER BY priority, created_at")).scalars().all()


def keys(page):
    return [(j["priority"], j["createdAt"]) for j in page]


def test_a_later_poller_skips_the_job_offered_to_an_earlier_one(engine, sm):
    queue = order(engine)
    a = poll(sm, "rt-a")
    assert [j["id"] for j in a] == queue[:20], "the first poll: the seed's page"
    b = poll(sm, "rt-b")
    assert [j["id"] for j in b] == queue[1:21], "the offered job is skipped, order kept"
    assert keys(b) == sorted(keys(b))
    assert [j["id"] for j in poll(sm, "rt-a")][0] == queue[0], "the offer still shows to its holder"
    with engine.connect() as c:
        offered = c.execute(text("SELECT offered_to, offered_until > now() + interval '25 seconds'"
                                 " FROM ai_runtime_job WHERE id = :id"), {"id": queue[0]}).one()
    assert tuple(offered) == ("rt-a", True)


def test_an_offer_that_ran_out_hides_nothing(engine, sm):
    queue = order(engine)
    short = QueueTimings(lock_seconds=30, retry_backoff_seconds=0, offer_seconds=0.05)
    assert poll(sm, "rt-a", timings=short)[0]["id"] == queue[0]
    with engine.connect() as c:  # the offer's end, as the database keeps it
        until = c.execute(text("SELECT offered_until FROM ai_runtime_job WHERE id = :id"),
                          {"id": queue[0]}).scalar()
    deadline = time.monotonic() + 10
    with engine.connect() as c:  # wait on the database's clock, which the offer is on
        while c.execute(text("SELECT now() <= :u"), {"u": until}).scalar():
            assert time.monotonic() < deadline
            c.rollback()
            eventlet.sleep(0.01)
    assert poll(sm, "rt-b", timings=short)[0]["id"] == queue[0]


def test_an_offered_job_can_still_be_locked_by_anyone(engine, sm):
    queue = order(engine)
    poll(sm, "rt-a")
    assert lock(sm, queue[0], "rt-b")["attemptNo"] == 1
    with pytest.raises(AiJobError) as lost:
        lock(sm, queue[0], "rt-a")
    assert lost.value.code == "JOB_ALREADY_LOCKED"
    assert [j["id"] for j in poll(sm, "rt-a")][0] == queue[1]


def test_concurrent_pollers_get_different_first_jobs(db_url, engine, sm):
    """Green threads (psycopg2 is cooperative under the monkey patch), one
    connection each, released together."""
    pollers = 12
    engine2 = make_engine(db_url, pool_size=pollers, max_overflow=0)
    sm2 = make_sessionmaker(engine2)
    start = threading.Barrier(pollers, timeout=20)
    firsts: dict[str, str] = {}
    errors = []

    def poller(rid):
        try:
            with sm2() as s:
                s.execute(text("SELECT 1"))  # the connection is open before the start
                s.commit()
                start.wait()
                with s.begin():
                    firsts[rid] = repo.poll(s, TIMINGS, rid, CAPS, 20)[0]["id"]
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=poller, args=(f"rt-{i}",)) for i in range(pollers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    engine2.dispose()
    assert errors == []
    assert len(firsts) == pollers
    assert len(set(firsts.values())) == pollers, "every poller was offered its own first job"
    with engine.connect() as c:
        offered = dict(c.execute(text("SELECT id, offered_to FROM ai_runtime_job"
                                      " WHERE offered_to IS NOT NULL")).all())
    assert offered == {job: rid for rid, job in firsts.items()}


def test_more_concurrent_polls_than_a_page_still_get_offers_of_their_own(engine, sm):
    """Three polls are offering the first three jobs right now (their rows are
    locked by their statements). A fourth poll with a page of three is offered
    the fourth job and its page starts there: the offer is looked for past
    the page, not only among it."""
    queue = order(engine)
    with engine.connect() as offering:
        offering.execute(text("SELECT id FROM ai_runtime_job WHERE id = ANY(:ids) FOR UPDATE"),
                         {"ids": queue[:3]})
        page = poll(sm, "rt-d", limit=3)
        offering.rollback()
    assert [j["id"] for j in page] == queue[3:6]
    with engine.connect() as c:
        offered = c.execute(text("SELECT id, offered_to FROM ai_runtime_job WHERE offered_to IS NOT NULL")).all()
    assert [tuple(r) for r in offered] == [(queue[3], "rt-d")]


def test_with_every_pending_job_being_offered_the_page_is_the_front(engine, sm):
    queue = order(engine)
    with engine.connect() as offering:
        offering.execute(text("SELECT id FROM ai_runtime_job FOR UPDATE"))
        page = poll(sm, "rt-e", limit=5)
        offering.rollback()
    assert [j["id"] for j in page] == queue[:5], "no offer: the seed's page, nobody's job hidden"
    with engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM ai_runtime_job WHERE offered_to IS NOT NULL")).scalar() == 0


def test_a_lost_lock_costs_one_statement(engine, sm):
    queue = order(engine)
    lock(sm, queue[0], "rt-a")
    statements = []

    def count(_conn, _cursor, statement, *_args):
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    try:
        with pytest.raises(AiJobError) as lost:
            lock(sm, queue[0], "rt-b")
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert lost.value.code == "JOB_ALREADY_LOCKED"
    assert len(statements) == 1, statements
    with pytest.raises(AiJobError) as missing:
        lock(sm, "no-such-job", "rt-b")
    assert missing.value.code == "NOT_FOUND"
