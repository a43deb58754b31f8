"""``linectl migrate [rev]``: Alembic upgrade to head (or ``rev``), each statement
waiting at most the lock timeout for a table lock; then, with a plant file
(``LINECTL_PLANT_FILE``), every line of the plant registered: its schema and its
role made and granted, before any of its services starts, and its login's
password set (``services.stack.line_credentials``). (Without a plant file,
``linectl up`` does this for its one line.)"""

from __future__ import annotations

import sys

from services.stack.commands.database import database_url
from services.stack.line_credentials import ensure_logins, given_urls, password_file
from services.stack.migrate import is_lock_timeout, register_plant, upgrade
from shared.config import Settings, mask_url
from shared.db.lines import login_role_for
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
        given = given_urls(plant)
        logins = ensure_logins(url, settings, plant, list(placed)) if placed and settings.db_roles else {}
        for line_id in plant.line_ids:
            if line_id in placed:
                login = (f", login {login_role_for(line_id)} (password "
                         + (f"in the secrets file {plant.secrets_file})" if line_id in given
                            else f"in {password_file(settings, line_id)})") if line_id in logins else "")
                print(f"line {line_id}: schema {placed[line_id].schema}, role {placed[line_id].role}{login}")
    return 0
