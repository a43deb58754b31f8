from sqlalchemy import text

from shared.db.retention import RetentionPolicy, purge


def test_purge_removes_only_what_is_old_and_finished(engine):
    with engine.begin() as c:
        c.execute(text("""
            INSERT INTO event_log (seq, tx_id, type, at, payload) VALUES
              (1, 1, 'Old', now() - interval '40 days', '{}'),
              (2, 2, 'New', now(), '{}')"""))
        c.execute(text("""
            INSERT INTO ai_snapshot (id, user_id, target_type, target_id, data, created_at) VALUES
              ('s-old', 'u', 'user', 'u', '{}', now() - interval '200 days')"""))
        c.execute(text("""
            INSERT INTO ai_runtime_job (id, user_id, job_type, target_type, target_id, status,
                                        finished_at, updated_at, snapshot_id) VALUES
              ('old-done', 'u', 'quiz_generation', 'user', 'u', 'succeeded',
               now() - interval '100 days', now() - interval '100 days', 's-old'),
              ('old-pending', 'u', 'quiz_generation', 'user', 'u', 'pending',
               NULL, now() - interval '100 days', NULL),
              ('new-done', 'u', 'quiz_generation', 'user', 'u', 'failed', now(), now(), NULL)"""))
        c.execute(text("""
            INSERT INTO ai_job_transition (job_id, from_status, to_status)
            VALUES ('old-done', 'running', 'succeeded')"""))
    counts = purge(engine, RetentionPolicy(event_days=30, ai_days=90))
    assert counts["event_log"] == 1
    assert counts["ai_runtime_job"] == 1
    assert counts["ai_snapshot"] == 1  # no job names it any more
    with engine.connect() as c:
        assert [r[0] for r in c.execute(text("SELECT seq FROM event_log"))] == [2]
        jobs = sorted(r[0] for r in c.execute(text("SELECT id FROM ai_runtime_job")))
        assert jobs == ["new-done", "old-pending"]
        assert c.execute(text("SELECT count(*) FROM ai_job_transition")).scalar() == 0
