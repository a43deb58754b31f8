"""Where a line's tables live: a schema per line, and a role per line that can
reach only that schema (PRODUCT.md, "Plant (several lines)", isolation).

Every line has the same line tables (``work_order`` … ``audit_log``), in its own
schema. The tables a one-line database already has, in ``public``, are its
line's: the first line registered takes ``public`` with the role
``linectl_controller``, so an upgraded database keeps every row where it was and
its ``seq`` continues. Every other line gets the schema ``line_<id>`` (a copy of
``public``'s line tables: columns, defaults, checks, keys, indexes, foreign keys)
and the role ``linectl_line_<id>``, granted that schema's tables only.

A line's controller connects with its role and ``search_path`` set to its schema
(``make_engine(role=, schema=)``): the loop's SQL names no schema and no
line, and PostgreSQL refuses it any other line's table. Ids stay unique across
the plant because every copy's id defaults draw on ``public``'s sequences; each
schema's ``event_log`` numbers its own ``seq``, gapless per line.

``plant_line`` records the placement, so reordering the plant file (which line
is the default) never moves a line's data.

**A line's login** (PRODUCT.md, "Line credentials"): every line's processes log
in as ``linectl_line_<id>`` (:func:`login_role_for`), a LOGIN role with a password
(:func:`set_login`): another line's is the line's role itself; the line in
``public``'s is a member of ``linectl_controller``. Each is also a member of
``linectl_lines`` (the transport's tables, ``shared.db.roles``), and of nothing
else: what a line's processes hold cannot write another line's tables, nor the
people, audit or AI tables. Roles are the server's, not one database's: two
linectl databases on one server must not have lines of the same id.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import re
from dataclasses import dataclass

from psycopg2 import errorcodes
from sqlalchemy import text
from sqlalchemy.exc import ProgrammingError

from shared.db import roles
from shared.db.engine import make_engine
from shared.db.models import Base
from shared.db.models import line as line_models
from shared.db.models import line_states as line_state_models

log = logging.getLogger(__name__)

PUBLIC = "public"
# Table names in dependency order (a table after the tables it refers to).
LINE_TABLES = tuple(t.name for t in Base.metadata.sorted_tables
                    if t.name in {m.__tablename__ for module in (line_models, line_state_models)
                                  for m in vars(module).values()
                                  if isinstance(m, type) and issubclass(m, Base) and m is not Base})
_REGISTER_LOCK = 0x6C696E6573  # pg_advisory_xact_lock key: one registration at a time


class LineNotPlaced(RuntimeError):
    """A line whose tables cannot be found or made; ``str()`` says why in one line."""


def quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


@dataclass(frozen=True)
class LinePlacement:
    line_id: str
    schema: str
    role: str

    @property
    def qualified(self) -> str:
        """The schema as SQL names it (``"line_cell-b"``)."""
        return quote(self.schema)


def schema_for(line_id: str) -> str:
    return f"line_{line_id}"


def role_for(line_id: str) -> str:
    return f"linectl_line_{line_id}"


def login_role_for(line_id: str) -> str:
    """The role a line's processes log in as (whichever schema the line has)."""
    return role_for(line_id)


def placements(conn) -> dict[str, LinePlacement]:
    """Every registered line's placement (empty before the first registration)."""
    rows = conn.execute(text("SELECT id, schema_name, role_name FROM plant_line")).all()
    return {r.id: LinePlacement(r.id, r.schema_name, r.role_name) for r in rows}


def draw_ids_from_public(conn, schema: str, tables) -> None:
    """A line's copies of ``tables`` take their ids from ``public``'s sequences (ids
    unique across the plant, as its other tables); the copies' own sequences go."""
    if schema == PUBLIC:
        return
    for table in tables:
        conn.execute(text(f"ALTER TABLE {quote(schema)}.{table} ALTER COLUMN id SET DEFAULT "
                          f"nextval('public.{table}_id_seq'::regclass)"))
        conn.execute(text(f"DROP SEQUENCE IF EXISTS {quote(schema)}.{table}_id_seq"))


def add_line_tables(conn, create, tables) -> list[str]:
    """A migration's new line tables, in every line's schema: ``create(schema)`` in
    each, then the copies' ids drawn from ``public``'s sequences. The schemas, in order."""
    schemas = line_schemas(conn)
    for schema in schemas:
        create(schema)
    for schema in schemas:
        draw_ids_from_public(conn, schema, tables)
    return schemas


def line_schemas(conn) -> list[str]:
    """Every line's schema, ``public`` first. A migration that changes a line table
    changes it in each of these (``SET LOCAL search_path`` to each in turn)."""
    if conn.execute(text("SELECT to_regclass('public.plant_line')")).scalar() is None:
        return [PUBLIC]
    schemas = conn.execute(text("SELECT schema_name FROM plant_line ORDER BY id")).scalars().all()
    return [PUBLIC] + [s for s in schemas if s != PUBLIC]


def placement(conn, line_id: str, *, default: bool = True) -> LinePlacement:
    """Where ``line_id``'s tables are. An unregistered default line is ``public``'s
    when no other line has taken it (a one-line database before its first
    registration); any other unregistered line raises :class:`LineNotPlaced`."""
    known = placements(conn)
    if line_id in known:
        return known[line_id]
    if default and not any(p.schema == PUBLIC for p in known.values()):
        return LinePlacement(line_id, PUBLIC, roles.CONTROLLER)
    raise LineNotPlaced(f"line {line_id!r} has no tables yet: run `linectl migrate` with the plant file")


def line_placement(url: str, line_id: str, default: bool) -> LinePlacement:
    """Where a line's controller works, registering its line first if needed and
    allowed (as the database's owner; ``linectl migrate`` and ``linectl up`` do this
    for every line before its services start, and a line's own login may not)."""
    engine = make_engine(url, pool_size=1)
    try:
        with engine.begin() as conn:
            if line_id in placements(conn):
                return placement(conn, line_id, default=default)
        try:
            with engine.begin() as conn:
                register_lines(conn, [line_id], default=line_id if default else None)
        except ProgrammingError as exc:
            if getattr(exc.orig, "pgcode", None) != errorcodes.INSUFFICIENT_PRIVILEGE:
                raise
            raise LineNotPlaced(f"line {line_id!r} has no tables yet, and its login may not make them:"
                                " run `linectl migrate` with the plant file") from None
        with engine.begin() as conn:
            return placement(conn, line_id, default=default)
    finally:
        engine.dispose()


class LoginNotSet(RuntimeError):
    """A line's login the migrating user may not make; ``str()`` says what to do."""


def may_create_roles(conn) -> bool:
    return bool(conn.execute(text(
        "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user")).scalar())


def set_login(conn, line: LinePlacement, password: str) -> str:
    """``line``'s login role, made (if missing) and given ``password``; its name.
    Needs a superuser or CREATEROLE (:class:`LoginNotSet` otherwise)."""
    login = login_role_for(line.line_id)
    if not may_create_roles(conn):
        raise LoginNotSet(f"line {line.line_id}: the migrating user may not create or alter the role {login}:"
                          " a DBA creates it (docs/operations.md, \"Line credentials\"), and the plant file's"
                          " secrets file gives its URL")
    roles.create_role(conn, login)
    member_of = [roles.LINES] + ([roles.CONTROLLER] if line.schema == PUBLIC else [])
    database = conn.execute(text("SELECT current_database()")).scalar()
    # psycopg2 binds on the client: the verifier goes as a literal, which ALTER ROLE needs.
    conn.execute(text(f"ALTER ROLE {quote(login)} LOGIN PASSWORD :verifier"),
                 {"verifier": scram_sha_256(password)})
    conn.execute(text(f"GRANT {', '.join(member_of)} TO {quote(login)}"))
    conn.execute(text(f"GRANT CONNECT ON DATABASE {quote(database)} TO {quote(login)}"))
    if not conn.execute(text("SELECT pg_has_role(current_user, :r, 'MEMBER')"), {"r": login}).scalar():
        conn.execute(text(f"GRANT {quote(login)} TO CURRENT_USER"))  # its backends' start times: transport
    return login


def scram_sha_256(password: str, iterations: int = 4096) -> str:
    """The SCRAM-SHA-256 verifier PostgreSQL stores for ``password`` (RFC 5802, as
    libpq's ``PQencryptPasswordConn``): the clear password is never sent in an
    ALTER ROLE, so no server log can hold it. ASCII only (no SASLprep needed)."""
    if not password.isascii():
        raise ValueError("a line's password must be ASCII")
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    b64 = base64.b64encode
    return (f"SCRAM-SHA-256${iterations}:{b64(salt).decode()}"
            f"${b64(hashlib.sha256(client_key).digest()).decode()}:{b64(server_key).decode()}")


def register_lines(conn, line_ids: list[str] | tuple[str, ...], default: str | None = None) -> dict[str, LinePlacement]:
    """Give every line of ``line_ids`` its tables and role (idempotent). ``default``
    (the plant's default line) takes ``public`` if no line has it; the others get
    schemas of their own. Needs the database owner (and CREATEROLE for the roles)."""
    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _REGISTER_LOCK})
    known = placements(conn)
    order = ([default] if default in line_ids else []) + [i for i in line_ids if i != default]
    for line_id in order:
        if line_id in known:
            continue
        public_free = not any(p.schema == PUBLIC for p in known.values())
        if line_id == default and public_free:
            new = LinePlacement(line_id, PUBLIC, roles.CONTROLLER)
        else:
            new = LinePlacement(line_id, schema_for(line_id), role_for(line_id))
            _copy_line_tables(conn, new.schema)
        conn.execute(text("INSERT INTO plant_line (id, schema_name, role_name) VALUES (:i, :s, :r)"),
                     {"i": new.line_id, "s": new.schema, "r": new.role})
        log.info("line %s: tables in schema %s, role %s", new.line_id, new.schema, new.role)
        known[line_id] = new
    grant(conn, list(known.values()))
    return known


def grant(conn, lines: list[LinePlacement]) -> None:
    """Each line's role: its own schema's tables, the shared id sequences, and
    ``plant_line`` to read. The gateway reads every line. Roles are made where the
    user may (as ``shared.db.roles.apply``)."""
    may_create = conn.execute(text(
        "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user")).scalar()
    sequences = roles.sequences_of(conn, list(LINE_TABLES))
    for line in lines:
        if line.schema == PUBLIC:
            continue  # roles.apply grants public's line tables to linectl_controller
        if may_create:
            roles.create_role(conn, line.role)
        role, schema = quote(line.role), line.qualified
        for sql in (
            f"REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role}, {roles.GATEWAY}",
            f"GRANT USAGE ON SCHEMA {schema} TO {role}, {roles.GATEWAY}",
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}",
            f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {roles.GATEWAY}",
            f"GRANT USAGE ON SCHEMA public TO {role}",
        ):
            conn.execute(text(sql))
        if sequences:
            conn.execute(text(f"GRANT USAGE, SELECT ON SEQUENCE {', '.join(sequences)} TO {role}"))
        if not conn.execute(text("SELECT pg_has_role(current_user, :r, 'MEMBER')"), {"r": line.role}).scalar():
            conn.execute(text(f"GRANT {role} TO CURRENT_USER"))
    conn.execute(text(f"GRANT SELECT ON plant_line TO {roles.CONTROLLER}, {roles.GATEWAY}"
                      + "".join(f", {quote(p.role)}" for p in lines if p.schema != PUBLIC)))


def _copy_line_tables(conn, schema: str) -> None:
    """``schema``: a copy of ``public``'s line tables, empty but for the dock's row,
    with the same names for every constraint and index."""
    target = quote(schema)
    # The line tables public has: a database at an older revision (a migrate to it) lacks
    # the newer ones, which their own migration then makes in every line's schema.
    tables = [t for t in LINE_TABLES
              if conn.execute(text("SELECT to_regclass(:t)"), {"t": f"public.{t}"}).scalar() is not None]
    conn.execute(text(f"CREATE SCHEMA IF NOT EXISTS {target}"))
    conn.execute(text("SET LOCAL search_path = ''"))  # definitions below name public.* in full
    try:
        for table in tables:
            conn.execute(text(f"CREATE TABLE IF NOT EXISTS {target}.{table}"
                              f" (LIKE public.{table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS"
                              " INCLUDING STORAGE INCLUDING COMMENTS)"))
        for table in tables:
            for name, definition in _keys_of(conn, table):
                conn.execute(text(f"ALTER TABLE {target}.{table} ADD CONSTRAINT {quote(name)} "
                                  + _in_schema(definition, target)))
        for table in tables:
            for definition in _plain_indexes_of(conn, table):
                conn.execute(text(_in_schema(definition, target)))
        conn.execute(text(f"INSERT INTO {target}.dock (id) VALUES (1) ON CONFLICT DO NOTHING"))
        # The generated order codes' numbers: public's id sequence (migration 0009).
        conn.execute(text(f"CREATE OR REPLACE FUNCTION {target}.next_work_order_number() RETURNS bigint"
                          " LANGUAGE sql VOLATILE AS $$ SELECT nextval("
                          "pg_get_serial_sequence('public.work_order', 'id')) $$"))
    finally:
        conn.execute(text("SET LOCAL search_path = DEFAULT"))


def _keys_of(conn, table: str) -> list[tuple[str, str]]:
    """Primary, unique, then foreign keys of ``public.<table>`` (what LIKE leaves out)."""
    return [(r.conname, r.definition) for r in conn.execute(text(
        "SELECT conname, pg_get_constraintdef(oid) AS definition FROM pg_constraint"
        " WHERE conrelid = to_regclass(:t) AND contype IN ('p', 'u', 'f')"
        " ORDER BY CASE contype WHEN 'p' THEN 0 WHEN 'u' THEN 1 ELSE 2 END, conname"),
        {"t": f"public.{table}"})]


def _plain_indexes_of(conn, table: str) -> list[str]:
    return list(conn.execute(text(
        "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i"
        " WHERE i.indrelid = to_regclass(:t)"
        " AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)"
        " ORDER BY i.indexrelid"), {"t": f"public.{table}"}).scalars())


def _in_schema(definition: str, target: str) -> str:
    return re.sub(r"\bpublic\.", target + ".", definition)
