"""This project's migrations (``migrations/``) run through ``shared.db.migrate``:
``linectl migrate``, ``linectl up`` and the tests upgrade the database here.
With a plant file, both then register the plant's lines (:func:`register_plant`):
every line's schema and role exist before its services start."""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy import text

import migrations
from shared.db import migrate
from shared.db.engine import make_engine
from shared.db.lines import LinePlacement, register_lines
from shared.plant import Plant

log = logging.getLogger(__name__)

SCRIPT_LOCATION = str(Path(migrations.__file__).resolve().parent)


def upgrade(database_url: str, revision: str = "head", lock_timeout: str | None = None) -> None:
    """Alembic upgrade to ``revision``, then the writer roles' grants. A statement
    that waits longer than ``lock_timeout`` (default 5 s, migrations/env.py) for a
    table lock fails the upgrade, which then changes nothing."""
    migrate.upgrade(database_url, SCRIPT_LOCATION, revision, lock_timeout)


def register_plant(database_url: str, plant: Plant) -> dict[str, LinePlacement]:
    """Every line of ``plant``: its tables (the default line ``public``, unless a
    line already has it; another line its schema) and its role, granted
    (``shared.db.lines.register_lines``; idempotent). Needs the database owner.
    Nothing before the revision that made ``plant_line`` (a migrate to an older one)."""
    engine = make_engine(database_url, pool_size=1)
    try:
        with engine.begin() as conn:
            if conn.execute(text("SELECT to_regclass('public.plant_line')")).scalar() is None:
                log.warning("plant %s: the database has no plant_line table at this revision; "
                            "its lines are registered by a migrate to head", plant.id)
                return {}
            return register_lines(conn, plant.line_ids, default=plant.default_line.id)
    finally:
        engine.dispose()


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
