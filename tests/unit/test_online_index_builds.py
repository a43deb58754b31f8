"""The indexes migration 0005 adds to tables the running line writes are built
online: ``CREATE INDEX CONCURRENTLY``, outside the migration's transaction
(Alembic's offline SQL of 0004 → 0005 shows it, no database needed)."""

from __future__ import annotations

import io
import re

from alembic import command

from services.stack.migrate import SCRIPT_LOCATION
from shared.db.migrate import alembic_config

ONLINE = ("ix_alarm_raised_at", "ix_job_finished_at", "ix_task_job_ids", "ix_ai_runtime_job_finished_at",
          "ix_ai_runtime_job_retried_from_job_id")


def _offline_sql(revisions: str) -> str:
    cfg = alembic_config("postgresql://offline@127.0.0.1/offline", SCRIPT_LOCATION)
    cfg.output_buffer = out = io.StringIO()
    command.upgrade(cfg, revisions, sql=True)
    return out.getvalue()


def test_0005_builds_the_indexes_of_written_tables_concurrently_outside_a_transaction():
    sql = _offline_sql("0004:0005")
    builds = {m.group(2): m.group(1) for m in re.finditer(r"CREATE (?:UNIQUE )?INDEX (CONCURRENTLY )?(\w+)", sql)}
    assert all(builds[name] for name in ONLINE), builds
    assert not builds["ix_alarm_shelved_until"]  # in the transaction that alters alarm (operations.md)
    # Before the revision's transaction begins: CONCURRENTLY cannot run inside one.
    last_online = max(sql.index(f"CREATE INDEX CONCURRENTLY {name}") for name in ONLINE)
    assert sql.index("COMMIT", 0) < sql.index("CREATE INDEX CONCURRENTLY")
    assert last_online < sql.index("BEGIN", last_online) < sql.index("CREATE TABLE machine_state_interval")
