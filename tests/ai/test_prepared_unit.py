"""``services.ai_jobs.prepared``: statements prepared once per connection, a
statement PostgreSQL cannot prepare run plainly, the transaction (or none)
as asked, and a connection that died replaced, as SQLAlchemy does."""

from __future__ import annotations

import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import text

from services.ai_jobs.prepared import prepared_unit
from shared.db.engine import make_engine
from tests.support.db import admin_execute

COUNT_PREPARED = "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'ai\\_%'"


@pytest.fixture
def one_connection(db_url):
    engine = make_engine(db_url, pool_size=1, max_overflow=0, pool_pre_ping=False)
    yield engine
    engine.dispose()


def test_a_statement_is_prepared_once_per_connection(one_connection):
    for n in range(3):
        with prepared_unit(one_connection) as unit:
            assert unit.execute(text("SELECT :a + 1 AS b"), {"a": n}).one().b == n + 1
            prepared = unit.execute(text(COUNT_PREPARED)).scalar()
    assert prepared == 2  # the two statements above (the count counts itself), each once


def test_a_statement_postgresql_cannot_prepare_runs_plainly(one_connection):
    # "$1 IS NULL" gives PostgreSQL no type to infer: PREPARE fails, the statement still runs.
    for transaction in (True, False):
        with prepared_unit(one_connection, transaction=transaction) as unit:
            unit.execute(text("SELECT 1"))  # inside the transaction, the savepoint keeps it alive
            assert unit.execute(text("SELECT :x IS NULL AS v"), {"x": None}).one().v is True
            assert unit.execute(text("SELECT count(*) FROM ai_runtime_job")).scalar() == 0
            prepared = unit.execute(text(COUNT_PREPARED)).scalar()
    assert prepared == 3  # SELECT 1, the two counts (this one too), not the one that cannot be


def test_the_unit_commits_rolls_back_and_leaves_no_autocommit_behind(one_connection):
    insert = text("INSERT INTO ai_snapshot (id, user_id, target_type, target_id, data)"
                  " VALUES (:id, 'u', 'user', 't', '{}')")
    with prepared_unit(one_connection) as unit:
        unit.execute(insert, {"id": "kept"})
    with pytest.raises(RuntimeError):
        with prepared_unit(one_connection) as unit:
            unit.execute(insert, {"id": "rolled-back"})
            raise RuntimeError("the operation failed")
    with one_connection.connect() as c:  # SQLAlchemy's own transaction on the same connection
        c.execute(text("INSERT INTO ai_snapshot (id, user_id, target_type, target_id, data)"
                       " VALUES ('not-committed', 'u', 'user', 't', '{}')"))
        c.rollback()
        assert c.execute(text("SELECT id FROM ai_snapshot ORDER BY id")).scalars().all() == ["kept"]


def test_without_a_transaction_each_statement_commits_alone(one_connection):
    insert = text("INSERT INTO ai_snapshot (id, user_id, target_type, target_id, data)"
                  " VALUES (:id, 'u', 'user', 't', '{}')")
    with pytest.raises(RuntimeError):
        with prepared_unit(one_connection, transaction=False) as unit:
            unit.execute(insert, {"id": "alone"})
            raise RuntimeError("after the statement")
    with one_connection.connect() as c:
        assert c.execute(text("SELECT id FROM ai_snapshot")).scalars().all() == ["alone"]


def test_a_connection_that_died_fails_its_unit_and_the_next_reconnects(db_url, one_connection):
    with prepared_unit(one_connection) as unit:
        unit.execute(text("SELECT :a + 0 AS a"), {"a": 1})
        pid = unit.execute(text("SELECT pg_backend_pid()")).scalar()
    admin_execute(db_url, f"SELECT pg_terminate_backend({int(pid)})")
    with pytest.raises(sa_exc.OperationalError):
        with prepared_unit(one_connection) as unit:
            unit.execute(text("SELECT :a + 0 AS a"), {"a": 1})
    with prepared_unit(one_connection) as unit:  # a new connection: prepares afresh
        assert unit.execute(text("SELECT :a + 0 AS a"), {"a": 2}).one().a == 2
        assert unit.execute(text("SELECT pg_backend_pid()")).scalar() != pid
