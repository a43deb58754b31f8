"""Migrations go up and down on an empty database, and agree with the models."""

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from services.stack.migrate import current_heads, downgrade, upgrade
from shared.db.engine import make_engine
from shared.db.models import Base


def test_single_head():
    assert len(current_heads()) == 1


def test_up_and_down_on_an_empty_database(empty_db_url):
    engine = make_engine(empty_db_url, pool_size=1)
    try:
        upgrade(empty_db_url)
        tables = set(inspect(engine).get_table_names())
        assert set(Base.metadata.tables) <= tables
        downgrade(empty_db_url, "base")
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
        upgrade(empty_db_url)  # and up again: downgrade left nothing behind
        assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_models_and_migrations_agree(engine):
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(ctx, Base.metadata)
    assert diff == [], diff
