"""The plans of the runtimes' hot statements: each runs its generic plan from
its first EXECUTE on (no planning per call: left to "auto", PostgreSQL kept
re-planning the poll, half of its time), and no generic plan reads
ai_runtime_job from end to end, whatever the table's size when it was planned
(a join back to the table had been planned as a hash join over a scan of it
at 2,000 rows)."""

from __future__ import annotations

import psycopg2
import pytest
from sqlalchemy import text

from services.ai_jobs.domain import QueueTimings, output_hash
from services.ai_jobs.prepared import PreparedUnit, prepared_unit, statement
from services.ai_jobs.queue import AiJobQueue, AiQueueConfig
from services.ai_runtime.providers import OfflineProvider
from shared.db.engine import make_engine
from tests.ai.conftest import ai_settings
from tests.support.ai_jobs import insert_pending_jobs

CAPS = ["learning_state_analysis", "quiz_generation"]
PENDING = 2_000


@pytest.fixture
def queue(db_url, tmp_path):
    engine = make_engine(db_url, pool_size=1, max_overflow=0, pool_pre_ping=False)
    with engine.begin() as c:
        insert_pending_jobs(c, PENDING, "learning_state_analysis")
        insert_pending_jobs(c, 50, "quiz_generation")
        c.execute(text("ANALYZE ai_runtime_job"))
    config = AiQueueConfig.from_settings(ai_settings(db_url, tmp_path))
    yield AiJobQueue(engine, AiQueueConfig(timings=QueueTimings(lock_seconds=30, retry_backoff_seconds=0),
                                           box=config.box))
    engine.dispose()


@pytest.fixture
def executed(monkeypatch):
    """Every statement a unit runs, by its prepared name, with its last arguments."""
    seen: dict[str, tuple] = {}
    run = PreparedUnit.execute

    def execute(self, clause, params=None):
        stmt = statement(getattr(clause, "text", clause))
        seen[stmt.name] = (stmt, [(params or {})[b] for b in stmt.binds])
        return run(self, clause, params)

    monkeypatch.setattr(PreparedUnit, "execute", execute)
    return seen


def runtime_requests(queue: AiJobQueue, rounds: int = 8) -> None:
    """What a runtime sends: the seed's poll, lock, heartbeats, a success and a
    failure; a lost lock; the claim; a poll that finds nothing."""
    offline = OfflineProvider()
    for n in range(rounds):
        job = queue.poll("rt-a", CAPS, 3)[0]
        attempt = queue.lock(job["id"], "rt-a")["attemptNo"]
        with pytest.raises(Exception, match="locked|running"):
            queue.lock(job["id"], "rt-b")
        queue.heartbeat(job["id"], "rt-a", attempt)
        queue.heartbeat(job["id"], "rt-a", attempt)
        if n % 2:
            queue.submit_result(job["id"], "rt-a", attempt, "failed", error_code="MODEL_TIMEOUT",
                                error_message="slow")
        else:
            output = offline.complete(job, None, None)
            queue.submit_result(job["id"], "rt-a", attempt, "succeeded", output=output,
                                output_hash=output_hash(output))
        claimed = queue.poll("rt-c", CAPS, 1, claim=True)[0]
        queue.heartbeat(claimed["id"], "rt-c", claimed["attemptNo"])
        output = offline.complete(claimed, None, None)
        queue.submit_result(claimed["id"], "rt-c", claimed["attemptNo"], "succeeded", output=output,
                            output_hash=output_hash(output))
        assert queue.poll("rt-d", ["flashcard_generation"], 50) == []


def test_the_hot_statements_run_their_generic_plan_from_the_first_call(queue, executed):
    runtime_requests(queue)
    with prepared_unit(queue.engine) as unit:  # the pool's one connection: its prepared statements
        plans = {r.name: (r.generic_plans, r.custom_plans) for r in unit.execute(text(
            "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE name LIKE 'ai\\_%'")).all()}
    assert len(executed) >= 8, sorted(executed)
    for name in executed:
        assert name in plans, f"{name} was not prepared"
        generic, custom = plans[name]
        assert custom == 0 and generic >= 1, (name, plans[name], executed[name][0].positional[:300])


def test_no_generic_plan_reads_the_job_table_from_end_to_end(queue, executed, db_url):
    runtime_requests(queue, rounds=2)
    conn = psycopg2.connect(db_url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SET plan_cache_mode = force_generic_plan")
            for name, (stmt, args) in executed.items():
                if "ai_runtime_job" not in stmt.positional:
                    continue
                cur.execute(f"PREPARE {name} AS {stmt.positional}")
                placeholders = ", ".join(["%s"] * len(args))
                cur.execute(f"EXPLAIN EXECUTE {name}({placeholders})" if args else f"EXPLAIN EXECUTE {name}",
                            args)
                plan = "\n".join(r[0] for r in cur.fetchall())
                assert "Seq Scan on ai_runtime_job" not in plan, f"{stmt.positional}\n{plan}"
    finally:
        conn.close()
