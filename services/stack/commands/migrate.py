"""``linectl migrate [rev]``: Alembic upgrade to head (or ``rev``), each statement
waiting at most the lock timeout for a table lock; then, with a plant file
(``LINECTL_PLANT_FILE``), every line of the plant registered: its schema and its
role made and granted, before any of its services starts. (Without a plant file
the one line's controller records its tables at its first start, as before.)"""

from __future__ import annotations

import sys

from services.stack.commands.database import database_url
from services.stack.migrate import is_lock_timeout, register_plant, upgrade
from shared.config import Settings, mask_url
from shared.plant import plant_of


def run(settings: Settings, args) -> int:
    plant = plant_of(settings) if settings.plant_file else None  # a bad plant file: before the database
    url, _server = database_url(settings)
    try:
        upgrade(url, args.revision, lock_timeout=args.lock_timeout)
    except Exception as exc:
        if not is_lock_timeout(exc):
            raise
        print(f"linectl migrate: a table stayed locked by another session for longer than the lock "
              f"timeout ({args.lock_timeout or '5s'}); nothing was changed. Run it again, or when that "
              f"session ends: {str(getattr(exc, 'orig', exc)).strip().splitlines()[0]}", file=sys.stderr)
        return 1
    print(f"database: {mask_url(url)} migrated to {args.revision}")
    if plant is not None:
        placed = register_plant(url, plant)
        for line_id in plant.line_ids:
            if line_id in placed:
                print(f"line {line_id}: schema {placed[line_id].schema}, role {placed[line_id].role}")
    return 0
