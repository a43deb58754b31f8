"""The plumbing every part of :class:`DBState` shares: the connection, the
transaction's time and events, conditional statements, and the exceptions a
condition that does not hold raises."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from sqlalchemy import text
from sqlalchemy.engine import Connection

from shared.db.models import JOB_TERMINAL
from shared.errors import CodedError

JOB_TERMINAL_SQL = "(" + ", ".join(f"'{s}'" for s in JOB_TERMINAL) + ")"
KEEP = object()  # "leave this column as it is"


class Rejected(CodedError):
    """A command or event that the current state forbids; the transaction is rolled back."""


class ConditionFailed(Rejected):
    """A conditional update matched no row: the state is not what was expected."""

    def __init__(self, message: str):
        super().__init__("INVALID_TRANSITION", message)


def as_json(value) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


class StateBase:
    def __init__(self, conn: Connection, *, now: datetime | None = None,
                 routes: dict[int, list] | None = None, line_id: str | None = None):
        self.conn = conn
        self.line_id = line_id  # the line whose tables these are (its pieces' serials name it)
        self.now = now or datetime.now(UTC)
        self.events: list[tuple[str, dict]] = []
        # An order's route never changes after creation; the loop shares this cache.
        self._routes = routes if routes is not None else {}

    # -- plumbing ------------------------------------------------------------------

    def _all(self, sql: str, **params):
        return self.conn.execute(text(sql), params).fetchall()

    def _one(self, sql: str, **params):
        return self.conn.execute(text(sql), params).first()

    def _must(self, row, what: str):
        if row is None:
            raise ConditionFailed(what)
        return row

    def emit(self, type_: str, payload: dict) -> None:
        self.events.append((type_, payload))

    def _change(self, sql: str, why: str, event: str, shape, **params):
        """One conditional statement on one row (``sql`` RETURNING *): the row, and the
        event ``event`` with ``shape(row)`` as payload; :class:`ConditionFailed` (``why``)
        when no row matched."""
        row = self._must(self._one(sql, **params), why)
        self.emit(event, shape(row))
        return row
