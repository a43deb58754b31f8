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


def test_purge_keeps_the_newest_event_so_seq_never_restarts(engine):
    with engine.begin() as c:
        c.execute(text("""
            INSERT INTO event_log (seq, tx_id, type, at, payload)
            SELECT g, g, 'Old', now() - interval '40 days', '{}' FROM generate_series(1, 5) g"""))
    assert purge(engine, RetentionPolicy(event_days=30))["event_log"] == 4
    from services.line_controller.dbstate import DBState
    with engine.connect() as c:
        assert DBState(c).last_seq_and_tx() == (5, 5)  # the loop numbers on from 6


def test_purge_removes_old_dead_letters_after_their_own_period(engine):
    with engine.begin() as c:
        c.execute(text("""
            INSERT INTO mq_dead_letter (id, queue, payload, delivery_count, dead_at) VALUES
              (1, 'q', '{}', 5, now() - interval '20 days'),
              (2, 'q', '{}', 5, now() - interval '2 days')"""))
    counts = purge(engine, RetentionPolicy(dead_letter_days=14))
    assert counts["mq_dead_letter"] == 1
    with engine.connect() as c:
        assert [r[0] for r in c.execute(text("SELECT id FROM mq_dead_letter"))] == [2]


def test_the_retention_process_purges_at_once_and_stops_cleanly_on_sigterm(engine, db_url):
    """``linectl retention`` (``linectl up``'s ``retention`` process) runs a round
    when it starts, then every interval, and exits 0 on SIGTERM."""
    import os
    import signal
    import subprocess
    import sys

    from tests.support.waiting import wait_for

    with engine.begin() as c:
        c.execute(text("""
            INSERT INTO event_log (seq, tx_id, type, at, payload)
            SELECT g, g, 'Old', now() - interval '40 days', '{}' FROM generate_series(1, 3) g"""))
    env = {**os.environ, "LINECTL_DATABASE_URL": db_url, "LINECTL_RETENTION_EVENT_DAYS": "30",
           "LINECTL_RETENTION_INTERVAL_SECONDS": "3600"}
    proc = subprocess.Popen([sys.executable, "-m", "services.stack.cli", "retention"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def left():
            with engine.connect() as c:
                return c.execute(text("SELECT count(*) FROM event_log")).scalar()
        wait_for(lambda: left() == 1, 30, 0.1, "the first round purged the old events")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "event_log=2" in out


def test_purge_keeps_what_the_mqtt_broker_has_not_acknowledged_up_to_its_bound(engine, caplog):
    """The northbound publisher's outbox is the log: an event after the line's
    ``uns_node.acked_seq`` outlives ``event_days``; past ``unpublished_days`` it goes
    all the same, counted (``/metrics``) and logged."""
    with engine.begin() as c:
        c.execute(text("""
            INSERT INTO event_log (seq, tx_id, type, at, payload)
            SELECT g, g, 'Old', now() - make_interval(days => CASE WHEN g <= 3 THEN 100 ELSE 40 END), '{}'
              FROM generate_series(1, 5) g"""))
        c.execute(text("INSERT INTO event_log (seq, tx_id, type, at, payload) VALUES (6, 6, 'New', now(), '{}')"))
        c.execute(text("INSERT INTO uns_node (line_id, schema_name, acked_seq) VALUES ('demo-cell', 'public', 1)"))
    with caplog.at_level("WARNING", logger="shared.db.retention"):
        assert purge(engine, RetentionPolicy(event_days=30, unpublished_days=90))["event_log"] == 3
    with engine.connect() as c:
        assert [r[0] for r in c.execute(text("SELECT seq FROM event_log ORDER BY seq"))] == [4, 5, 6]
        assert c.execute(text("SELECT purged_unpublished FROM uns_node")).scalar() == 2
    warned = [r.getMessage() for r in caplog.records if "never acknowledged" in r.getMessage()]
    assert len(warned) == 1 and "2 event(s) of line demo-cell" in warned[0], warned
    # Acknowledged now: the rest may go at event_days, and nothing more is counted lost.
    with engine.begin() as c:
        c.execute(text("UPDATE uns_node SET acked_seq = 6"))
    assert purge(engine, RetentionPolicy(event_days=30, unpublished_days=90))["event_log"] == 2
    with engine.connect() as c:
        assert c.execute(text("SELECT purged_unpublished FROM uns_node")).scalar() == 2
