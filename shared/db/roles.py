"""Who may write what, enforced by PostgreSQL: one role per writer.

* ``linectl_controller``: the line_controller's domain connections. Reads and
  writes the line-control tables (orders, jobs, slots, tasks, alarms, manual
  actions, the event log, the inbox, audit); no access to the AI tables.
* ``linectl_gateway``: the gateway's connections. Reads every line-control
  table, and writes only the AI tables (``ai_*``), as seed 000's "API", and
  the people tables (``people_*``: users, sessions, the access audit), which
  the line_controller does not see, and the northbound publisher's
  (``uns_*``; ``services.uns`` runs as this role).

* ``linectl_lines``: what every line's login (``shared.db.lines``) may do
  beside its own line's tables: the message transport's rows (``mq_*``: read,
  insert, update, delete; no TRUNCATE, no DDL), and reading ``plant_line`` and
  ``alembic_version`` (a line host checks the database is migrated).

A process takes its role at connect time (libpq ``options=-c role=…``, see
:func:`connect_args`), so every statement of that connection is checked
against the role's grants, whatever the code does. The roles are NOLOGIN
groups: the login user (the database owner, or a line's own login) assumes
them. The message transport's connections (``mq_*`` tables) keep the login
user's privileges; its liveness check asks ``mq_backend_started`` (migration
0010), which sees every login's backends.

:func:`apply` creates the roles where the migrating user may (superuser or
CREATEROLE) and (re)grants on every table; ``linectl migrate`` runs it after
each upgrade, so a table added later is covered too. On a server where the
migrating user may not create roles, a DBA creates them once
(``docs/operations.md``); until they exist, processes that need them fail at
connect with PostgreSQL's own "role … does not exist".
"""

from __future__ import annotations

import logging

from sqlalchemy import text

log = logging.getLogger(__name__)

CONTROLLER = "linectl_controller"
GATEWAY = "linectl_gateway"
LINES = "linectl_lines"
ROLES = (CONTROLLER, GATEWAY, LINES)

AI_TABLE_PREFIX = "ai_"
PEOPLE_TABLE_PREFIX = "people_"
UNS_TABLE_PREFIX = "uns_"  # the northbound publisher's progress (services.uns), which runs as the gateway's role
TRANSPORT_TABLE_PREFIX = "mq_"
NOT_DOMAIN = ("alembic_version", "plant_line")  # plant_line: read by both, written by migrate


def connect_args(role: str | None) -> dict:
    """psycopg2 connect arguments that make every statement run as ``role``."""
    return {"options": f"-c role={role}"} if role else {}


def create_role(conn, role: str) -> None:
    """A NOLOGIN group role, unless it exists."""
    literal = role.replace("'", "''")
    quoted = '"' + role.replace('"', '""') + '"'
    conn.execute(text(f"""
        DO $$ BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{literal}') THEN
                CREATE ROLE {quoted} NOLOGIN;
            END IF;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;  -- a concurrent migrate
        END $$"""))


def _create_roles(conn) -> None:
    for role in ROLES:
        create_role(conn, role)


def _tables(conn) -> list[str]:
    return conn.execute(text(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename"
    )).scalars().all()


def sequences_of(conn, tables: list[str]) -> list[str]:
    if not tables:
        return []
    return conn.execute(text(
        "SELECT s.relname FROM pg_class s JOIN pg_depend d ON d.objid = s.oid"
        " JOIN pg_class t ON t.oid = d.refobjid"
        " WHERE s.relkind = 'S' AND t.relname = ANY(:tables)"), {"tables": tables}).scalars().all()


def apply(conn) -> bool:
    """Create the roles if allowed, then grant; False when the roles are missing."""
    may_create = conn.execute(text(
        "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user")).scalar()
    if may_create:
        _create_roles(conn)
    present = set(conn.execute(text("SELECT rolname FROM pg_roles WHERE rolname = ANY(:r)"),
                               {"r": list(ROLES)}).scalars())
    if present != set(ROLES):
        log.warning("database roles %s missing and %s may not create them; see docs/operations.md",
                    ", ".join(sorted(set(ROLES) - present)), "the migrating user")
        return False
    tables = _tables(conn)
    gateway_writes = [t for t in tables if t.startswith((AI_TABLE_PREFIX, PEOPLE_TABLE_PREFIX, UNS_TABLE_PREFIX))]
    line = [t for t in tables if not t.startswith((AI_TABLE_PREFIX, PEOPLE_TABLE_PREFIX, TRANSPORT_TABLE_PREFIX,
                                                   UNS_TABLE_PREFIX)) and t not in NOT_DOMAIN]
    transport = [t for t in tables if t.startswith(TRANSPORT_TABLE_PREFIX)]
    quoted = ", ".join
    statements = [
        f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {CONTROLLER}, {GATEWAY}, {LINES}",
        f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {CONTROLLER}, {GATEWAY}, {LINES}",
        f"GRANT USAGE ON SCHEMA public TO {CONTROLLER}, {GATEWAY}, {LINES}",
        f"GRANT SELECT ON {quoted(line)} TO {GATEWAY}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON {quoted(gateway_writes)} TO {GATEWAY}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON {quoted(line)} TO {CONTROLLER}",
    ]
    if transport:
        statements.append(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {quoted(transport)} TO {LINES}")
    if "alembic_version" in tables:
        statements.append(f"GRANT SELECT ON alembic_version TO {LINES}")
    statements += _no_ddl_in_public(conn)
    for role, owned in ((GATEWAY, gateway_writes), (CONTROLLER, line), (LINES, transport)):
        seqs = sequences_of(conn, owned)
        if seqs:
            statements.append(f"GRANT USAGE, SELECT ON SEQUENCE {quoted(seqs)} TO {role}")
    # A non-superuser owner may take the roles only as their member.
    for role in ROLES:
        if not conn.execute(text("SELECT pg_has_role(current_user, :r, 'MEMBER')"), {"r": role}).scalar():
            statements.append(f"GRANT {role} TO CURRENT_USER")
    if "plant_line" in tables:
        statements.append(f"GRANT SELECT ON plant_line TO {CONTROLLER}, {GATEWAY}, {LINES}")
    for sql in statements:
        conn.execute(text(sql))
    return True


def _no_ddl_in_public(conn) -> list[str]:
    """Nobody but its owner creates objects in ``public`` (PostgreSQL 15's default;
    a database made by an older server still lets every role): a line's login
    makes no table there. Only where the migrating user owns the schema."""
    owns = conn.execute(text(
        "SELECT pg_has_role(current_user, nspowner, 'USAGE') FROM pg_namespace WHERE nspname = 'public'")).scalar()
    return ["REVOKE CREATE ON SCHEMA public FROM PUBLIC"] if owns else []
