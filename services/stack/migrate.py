"""This project's migrations (``migrations/``) run through ``shared.db.migrate``:
``linectl migrate``, ``linectl up`` and the tests upgrade the database here."""

from __future__ import annotations

from pathlib import Path

import migrations
from shared.db import migrate

SCRIPT_LOCATION = str(Path(migrations.__file__).resolve().parent)


def upgrade(database_url: str, revision: str = "head") -> None:
    """Alembic upgrade to ``revision``, then the writer roles' grants."""
    migrate.upgrade(database_url, SCRIPT_LOCATION, revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    migrate.downgrade(database_url, SCRIPT_LOCATION, revision)


def current_heads() -> tuple[str, ...]:
    return migrate.current_heads(SCRIPT_LOCATION)
