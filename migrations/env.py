"""Alembic environment. The database URL comes from the caller
(``shared.db.migrate``) or, for the plain ``alembic`` CLI, from linectl's
settings: one source of truth."""

from alembic import context
from sqlalchemy import engine_from_config, pool, text

from shared.db.engine import sqlalchemy_url
from shared.db.models import Base

config = context.config
target_metadata = Base.metadata
# How long one migration statement waits for a table lock before the upgrade gives
# up (and rolls back): a migration behind a long transaction of the running line
# must not hold every later query of that table queued behind its own lock request.
DEFAULT_LOCK_TIMEOUT = "5s"


def _lock_timeout(connection, *, session: bool = False) -> None:
    """``session``: for the connection's life, which is the upgrade's own (a migration's
    autocommit block, an online index build, commits the transaction and begins another:
    a setting local to the first would be gone for the rest). Otherwise local to the
    migrations' transaction, so a caller's connection's next user is unaffected."""
    timeout = config.get_main_option("lock_timeout") or DEFAULT_LOCK_TIMEOUT
    connection.execute(text("SELECT set_config('lock_timeout', :t, :local)"),
                       {"t": timeout, "local": not session})


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        from shared.config import load_settings

        url = load_settings().database_url
        if not url:
            raise SystemExit("LINECTL_DATABASE_URL is not set (or use `linectl migrate`)")
    return sqlalchemy_url(url)


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connectable = config.attributes.get("connection")
    if connectable is not None:
        context.configure(connection=connectable, target_metadata=target_metadata)
        with context.begin_transaction():
            _lock_timeout(connectable)
            context.run_migrations()
        return
    engine = engine_from_config(
        {"sqlalchemy.url": _url()}, prefix="sqlalchemy.", poolclass=pool.NullPool
    )
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            _lock_timeout(connection, session=True)
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
