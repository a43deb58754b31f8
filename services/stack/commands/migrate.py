"""``linectl migrate [rev]``: Alembic upgrade to head (or ``rev``), each statement
waiting at most the lock timeout for a table lock."""

from __future__ import annotations

import sys

from services.stack.commands.database import database_url
from services.stack.migrate import is_lock_timeout, upgrade
from shared.config import Settings, mask_url


def run(settings: Settings, args) -> int:
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
    return 0
