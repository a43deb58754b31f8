"""This project's migrations (``migrations/``) run through ``shared.db.migrate``:
``linectl migrate``, ``linectl up`` and the tests upgrade the database here."""

from __future__ import annotations

from pathlib import Path

import migrations
from shared.db import migrate

SCRIPT_LOCATION = str(Path(migrations.__file__).resolve().parent)


def upgrade(database_url: str, revision: str = "head", lock_timeout: str | None = None) -> None:
    """Alembic upgrade to ``revision``, then the writer roles' grants. A statement
    that waits longer than ``lock_timeout`` (default 5 s, migrations/env.py) for a
    table lock fails the upgrade, which then changes nothing."""
    migrate.upgrade(database_url, SCRIPT_LOCATION, revision, lock_timeout)


def downgrade(database_url: str, revision: str = "base") -> None:
    migrate.downgrade(database_url, SCRIPT_LOCATION, revision)


def current_heads() -> tuple[str, ...]:
    return migrate.current_heads(SCRIPT_LOCATION)


def previous_head() -> str | None:
    """The revision before the newest one (what the last release migrated to)."""
    from alembic.script import ScriptDirectory

    (head,) = current_heads()
    down = ScriptDirectory(SCRIPT_LOCATION).get_revision(head).down_revision
    return down if isinstance(down, str) or down is None else down[0]


def is_lock_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` (as Alembic raises it) is PostgreSQL's lock_timeout (55P03)."""
    orig = getattr(exc, "orig", None)
    return getattr(orig, "pgcode", None) == "55P03"
