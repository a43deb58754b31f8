"""Failed sign-ins per user name, counted in PostgreSQL so that every gateway
worker (and every gateway) counts alike: after ``limit`` failures within
``window`` the name is refused, even with the right password, until the
oldest of them leaves the window. An attempt counts as a failure from its
start (so attempts made at once cannot all slip under the limit); a success
clears the name's count."""

from __future__ import annotations

import math
from datetime import timedelta

from sqlalchemy import delete, func, insert, select

from shared.db.models import PeopleSignInFailure

TABLE = PeopleSignInFailure.__table__
FAILURE_LIMIT = 5
FAILURE_WINDOW = timedelta(minutes=15)


class Throttle:
    def __init__(self, limit: int = FAILURE_LIMIT, window: timedelta = FAILURE_WINDOW):
        self.limit = limit
        self.window = window

    def retry_after(self, conn, user_name: str) -> int | None:
        """Seconds until ``user_name`` may try again, or None if it may now."""
        recent = (select(TABLE.c.at).where(TABLE.c.user_name == user_name,
                                           TABLE.c.at > func.now() - self.window)
                  .order_by(TABLE.c.at.desc()).limit(self.limit).subquery())
        count, oldest, now = conn.execute(
            select(func.count(), func.min(recent.c.at), func.now()).select_from(recent)).one()
        if count < self.limit:
            return None
        return max(1, math.ceil((oldest + self.window - now).total_seconds()))

    @staticmethod
    def lock(conn, user_name: str) -> None:
        """Attempts for one name, one at a time until the caller's transaction ends."""
        conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(user_name))))

    @staticmethod
    def failed(conn, user_name: str) -> None:
        conn.execute(insert(TABLE).values(user_name=user_name))

    @staticmethod
    def cleared(conn, user_name: str) -> None:
        conn.execute(delete(TABLE).where(TABLE.c.user_name == user_name))

    def forget_old(self, conn) -> None:
        """Failures out of the window count for nothing: dropped as sign-ins go."""
        conn.execute(delete(TABLE).where(TABLE.c.at < func.now() - self.window))
