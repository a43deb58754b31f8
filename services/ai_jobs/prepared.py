"""The runtimes' unit of work on the bare driver: statements prepared once per
connection, the transaction opened with its first statement.

The hot operations (poll, lock, heartbeat, result) are a few short statements
each, and PostgreSQL answers each in a fraction of a millisecond; SQLAlchemy
Core's per-statement work (compiling the text, processing parameters and
rows) and a planned-afresh statement cost more than that
(``tests/bench/profile_runtime_requests.py``). :class:`PreparedUnit` gives
the repository the same ``execute(text(...), params)`` it gets from a
SQLAlchemy connection (``first``, ``scalar``, ``all``, ``one``; rows with
attribute access), on a psycopg2 connection of the same engine's pool:

- each statement is ``PREPARE``d the first time the connection runs it, then
  run by ``EXECUTE`` (planned once; PostgreSQL's generic plan cache does the
  rest). The names are the connection's (``info`` of its pool record, gone
  when the connection is), so a reconnect prepares afresh. A statement
  PostgreSQL cannot prepare (a parameter's type it cannot infer) runs plainly.
- the connection is in autocommit and ``BEGIN`` travels with the first
  statement, one round trip fewer per operation; an operation whose every
  statement stands alone (a poll, a lock: each statement atomic, nothing to
  decide between them under a row lock) runs them without a transaction
  around them, two round trips fewer.
- a connection that fails is invalidated with every connection of the pool
  opened before it, as SQLAlchemy does for its own, and the error is raised as
  SQLAlchemy's ``OperationalError`` (503 at the edge).
"""

from __future__ import annotations

import hashlib
import re
from collections import namedtuple
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

import psycopg2
import psycopg2.errors
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine

# ``:name`` binds as SQLAlchemy's text() reads them (not ``::`` casts).
_BIND = re.compile(r"(?<![:\w]):(\w+)")
_PREPARED = "ai_prepared"  # key in the pool record's info: names prepared on this connection


@dataclass(frozen=True)
class Statement:
    name: str
    positional: str  # the text with $1..$n
    binds: tuple[str, ...]  # the parameter of each $n
    plain: str  # the text with %(name)s, for a statement that cannot be prepared


@lru_cache(maxsize=512)
def statement(sql: str) -> Statement:
    binds: list[str] = []

    def number(match):
        name = match.group(1)
        if name not in binds:
            binds.append(name)
        return f"${binds.index(name) + 1}"

    positional = _BIND.sub(number, sql)
    plain = _BIND.sub(lambda m: f"%({m.group(1)})s", sql.replace("%", "%%"))
    name = "ai_" + hashlib.sha1(sql.encode()).hexdigest()[:16]
    return Statement(name, positional, tuple(binds), plain)


# A statement's rows always have the same columns: their named tuple is made
# once per statement (reading the driver's column names costs a decode each).
_ROW_MAKERS: dict[str, Callable | None] = {}


def _row_maker(name: str, cursor) -> Callable | None:
    make = _ROW_MAKERS.get(name, _ROW_MAKERS)
    if make is _ROW_MAKERS:
        desc = cursor.description
        make = None if desc is None else namedtuple("Row", [d.name for d in desc], rename=True)._make
        _ROW_MAKERS[name] = make
    return make


class Result:
    """What the repository reads of a statement's outcome: rows with attribute access."""

    __slots__ = ("_cursor", "_make")

    def __init__(self, cursor, make):
        self._cursor = cursor
        self._make = make

    def first(self):
        if self._make is None:
            return None
        row = self._cursor.fetchone()
        return None if row is None else self._make(row)

    def one(self):
        row = self.first()
        if row is None:
            raise sa_exc.NoResultFound("no row where one was required")
        return row

    def scalar(self):
        row = self.first()
        return None if row is None else row[0]

    def all(self):
        if self._make is None:
            return []
        make = self._make
        return [make(r) for r in self._cursor.fetchall()]


class PreparedUnit:
    """One transaction on one pooled connection; ``execute`` as SQLAlchemy's."""

    def __init__(self, record_info: dict, dbapi_conn, transaction: bool = True):
        self._conn = dbapi_conn
        self._cursor = dbapi_conn.cursor()
        if _PREPARED not in record_info:
            # A connection's first unit: its prepared statements run their
            # generic plan from the first EXECUTE on. Left to "auto", PostgreSQL
            # kept re-planning the poll on every call (its generic estimate for
            # an unknown capability array and limit looks dearer than the
            # custom plans): planning was half of the statement's time. Every
            # statement prepared here looks a job up by its key or walks the
            # poll index, whatever the parameters (tests/ai/test_prepared.py).
            # Once per connection, outside any transaction, so it stays.
            self._cursor.execute("SET plan_cache_mode = force_generic_plan")
        self._prepared: set[str] = record_info.setdefault(_PREPARED, set())
        self._unprepared: set[str] = record_info.setdefault(_PREPARED + "_not", set())
        self._transaction = transaction
        self._begun = False

    def execute(self, clause, params: dict | None = None) -> Result:
        stmt = statement(getattr(clause, "text", clause))
        params = params or {}
        begin = "BEGIN; " if self._transaction and not self._begun else ""
        if stmt.name not in self._prepared and stmt.name not in self._unprepared:
            self._prepare(stmt)
        if stmt.name in self._prepared:
            args = [params[b] for b in stmt.binds]
            placeholders = ", ".join(["%s"] * len(args))
            sql = f"{begin}EXECUTE {stmt.name}({placeholders})" if args else f"{begin}EXECUTE {stmt.name}"
            self._cursor.execute(sql, args)
        else:
            self._cursor.execute(begin + stmt.plain, params)
        self._begun = self._transaction
        return Result(self._cursor, _row_maker(stmt.name, self._cursor))

    def _prepare(self, stmt: Statement) -> None:
        # Inside a transaction a failed PREPARE would abort it: a savepoint keeps
        # it alive. Once per statement per connection.
        if self._begun:
            self._cursor.execute("SAVEPOINT ai_prepare")
        try:
            self._cursor.execute(f"PREPARE {stmt.name} AS {stmt.positional}")
        except psycopg2.ProgrammingError:  # e.g. a parameter whose type cannot be inferred
            if self._begun:
                self._cursor.execute("ROLLBACK TO SAVEPOINT ai_prepare")
            self._unprepared.add(stmt.name)
            return
        if self._begun:
            self._cursor.execute("RELEASE SAVEPOINT ai_prepare")
        self._prepared.add(stmt.name)

    def finish(self, commit: bool) -> None:
        if self._begun:
            self._cursor.execute("COMMIT" if commit else "ROLLBACK")
        self._cursor.close()


_DISCONNECTS = (psycopg2.OperationalError, psycopg2.InterfaceError)


@contextmanager
def prepared_unit(engine: Engine, commit: bool = True, transaction: bool = True):
    """``with prepared_unit(engine) as unit:`` one transaction, committed at the
    end (``commit=False``: rolled back, for reads), rolled back on an error.
    ``transaction=False``: each statement commits on its own (autocommit)."""
    fairy = engine.raw_connection()
    dbapi_conn = fairy.driver_connection
    try:
        # Autocommit while we hold it (BEGIN goes with the first statement); the
        # pool's other users (SQLAlchemy's own transactions) get it back without.
        dbapi_conn.autocommit = True
        unit = PreparedUnit(fairy.info, dbapi_conn, transaction)
        try:
            yield unit
        except BaseException:
            unit.finish(commit=False)
            raise
        unit.finish(commit=commit)
    except _DISCONNECTS as exc:
        if isinstance(exc, psycopg2.InterfaceError) or dbapi_conn.closed:
            # As SQLAlchemy does with its own: this connection and every one opened
            # before it are gone (PostgreSQL restarted); the next checkout reconnects.
            engine.pool._invalidate(fairy, exc)  # noqa: SLF001 - SQLAlchemy's own disconnect handling
        raise sa_exc.OperationalError("AI queue statement", None, exc) from exc
    except psycopg2.errors.FeatureNotSupported as exc:
        # "cached plan must not change result type": a migration changed a
        # table under a prepared statement. This connection's statements are
        # stale: drop it (the next one prepares afresh); this request is 503.
        fairy.invalidate(exc)
        raise sa_exc.OperationalError("AI queue statement", None, exc) from exc
    except psycopg2.Error as exc:
        # Anything else from the driver (bad data the edge let through): as
        # SQLAlchemy would wrap it, so gateway.errors maps it the same way.
        raise sa_exc.DBAPIError.instance("AI queue statement", None, exc, psycopg2.Error) from exc
    finally:
        if not dbapi_conn.closed:
            dbapi_conn.autocommit = False
        fairy.close()  # back to the pool
