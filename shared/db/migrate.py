"""Run Alembic programmatically. The caller names the migrations directory
(``script_location``): shared/ sits below migrations/ and does not import it
(``services.stack.migrate`` binds this project's)."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy import text


def alembic_config(database_url: str, script_location: str, lock_timeout: str | None = None) -> Config:
    """``lock_timeout``: how long a migration waits for a table lock (PostgreSQL's
    syntax, ``5s``; the migrations' env.py has the default)."""
    cfg = Config()
    cfg.set_main_option("script_location", script_location)
    if lock_timeout:
        cfg.set_main_option("lock_timeout", lock_timeout)
    # '%' must be doubled for ConfigParser interpolation.
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return cfg


def upgrade(database_url: str, script_location: str, revision: str = "head",
            lock_timeout: str | None = None) -> None:
    """Alembic upgrade, then the writer roles' grants on every table (``shared.db.roles``)."""
    command.upgrade(alembic_config(database_url, script_location, lock_timeout), revision)
    apply_roles(database_url)


def apply_roles(database_url: str) -> bool:
    """The writer roles' grants, and each line's role on its own schema
    (``shared.db.lines``): after every upgrade, and after a restore (a dump holds no grants)."""
    from shared.db import lines, roles
    from shared.db.engine import make_engine

    engine = make_engine(database_url, pool_size=1)
    try:
        with engine.begin() as conn:
            applied = roles.apply(conn)
            if applied and conn.execute(text("SELECT to_regclass('plant_line')")).scalar() is not None:
                lines.grant(conn, list(lines.placements(conn).values()))
            return applied
    finally:
        engine.dispose()


def downgrade(database_url: str, script_location: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url, script_location), revision)


def current_heads(script_location: str) -> tuple[str, ...]:
    from alembic.script import ScriptDirectory

    return tuple(ScriptDirectory(script_location).get_heads())
