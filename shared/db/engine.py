"""Engines and sessions. Always psycopg2: eventlet can make it cooperative
(SQLAlchemy 2.1 would map ``postgresql://`` to psycopg 3, which it cannot)."""

from __future__ import annotations

from psycopg2 import errorcodes
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from shared.db.roles import connect_args

PUBLIC = "public"


def sqlalchemy_url(url: str) -> str:
    """``postgresql://…`` / ``postgres://…`` / ``pgsql://…`` → ``postgresql+psycopg2://…``.
    libpq's multi-host form (``u:p@db1:5432,db2:5432/db``) becomes SQLAlchemy's
    (``u:p@/db?host=db1:5432&host=db2:5432``): the same servers, tried in order."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"not a database URL: {url!r}")
    netloc, slash, tail = rest.partition("/")
    userinfo, at, hostlist = netloc.rpartition("@")
    if "," not in hostlist:
        return "postgresql+psycopg2://" + rest
    path, question, query = tail.partition("?")
    hosts = "&".join(f"host={h}" for h in hostlist.split(","))
    return (f"postgresql+psycopg2://{userinfo}{at}/{path}?{hosts}"
            + (f"&{query}" if question and query else ""))


def make_engine(url: str, *, read_only: bool = False, pool_size: int = 5, role: str | None = None,
                statement_timeout_ms: int | None = None, schema: str | None = None, **kwargs) -> Engine:
    """``role``: run every statement as that PostgreSQL role (``shared.db.roles``).
    ``schema``: the only schema unqualified names find (a line's, ``shared.db.lines``).
    ``statement_timeout_ms``: PostgreSQL cancels a statement that runs longer."""
    options = []
    if role:
        options.append(connect_args(role)["options"])
    if schema and schema != PUBLIC:
        options.append(search_path_option(schema))
    if statement_timeout_ms:
        options.append(f"-c statement_timeout={int(statement_timeout_ms)}")
    if options:
        kwargs["connect_args"] = {**kwargs.get("connect_args", {}), "options": " ".join(options)}
    engine = create_engine(
        sqlalchemy_url(url),
        pool_size=pool_size,
        max_overflow=kwargs.pop("max_overflow", 10),
        pool_pre_ping=kwargs.pop("pool_pre_ping", True),
        future=True,
        **kwargs,
    )
    event.listen(engine, "handle_error", _demoted_server_is_a_disconnect)
    if read_only:
        # The gateway reads only; a write attempt fails in PostgreSQL itself.
        @event.listens_for(engine, "connect")
        def _read_only(dbapi_conn, _record):
            with dbapi_conn.cursor() as cur:
                cur.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            dbapi_conn.commit()

    return engine


def _demoted_server_is_a_disconnect(context) -> None:
    """A write refused because the server turned read-only (it was demoted in a
    failover) is handled as a lost connection: SQLAlchemy drops every pooled
    connection, and the next ones (``target_session_attrs=read-write``) reach the
    new primary. The gateway answers such a failure 503, as any lost connection."""
    if getattr(context.original_exception, "pgcode", None) == errorcodes.READ_ONLY_SQL_TRANSACTION:
        context.is_disconnect = True


def search_path_option(schema: str) -> str:
    """libpq ``options`` text that makes ``schema`` the connection's search_path."""
    quoted = '"' + schema.replace('"', '""') + '"'
    return "-c search_path=" + quoted.replace("\\", "\\\\").replace(" ", "\\ ")


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False, future=True)
