"""Pending AI jobs inserted in bulk, for the queue's tests and benchmark."""

from __future__ import annotations

from sqlalchemy import text

# n pending jobs over 97 users, priorities 0-9, created a second apart (the last one now).
_PENDING_JOBS = text("""
    INSERT INTO ai_runtime_job (id, user_id, job_type, target_type, target_id, priority,
                                output_schema_version, created_at)
    SELECT gen_random_uuid()::text, 'u' || (g % 97), :t, 'user', 't' || g, g % 10, '1',
           now() - make_interval(secs => :n - g)
    FROM generate_series(1, :n) AS g""")


def insert_pending_jobs(conn, n: int, job_type: str) -> None:
    conn.execute(_PENDING_JOBS, {"n": n, "t": job_type})
