"""Run Alembic programmatically (``linectl migrate``, tests, ``linectl up``)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

import migrations

SCRIPT_LOCATION = str(Path(migrations.__file__).resolve().parent)


def alembic_config(database_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    # '%' must be doubled for ConfigParser interpolation.
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return cfg


def upgrade(database_url: str, revision: str = "head") -> None:
    """Alembic upgrade, then the writer roles' grants on every table (``shared.db.roles``)."""
    command.upgrade(alembic_config(database_url), revision)
    apply_roles(database_url)


def apply_roles(database_url: str) -> bool:
    from shared.db import roles
    from shared.db.engine import make_engine

    engine = make_engine(database_url, pool_size=1)
    try:
        with engine.begin() as conn:
            return roles.apply(conn)
    finally:
        engine.dispose()


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)


def current_heads() -> tuple[str, ...]:
    from alembic.script import ScriptDirectory

    return tuple(ScriptDirectory(SCRIPT_LOCATION).get_heads())
