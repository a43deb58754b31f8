"""``linectl backup [FILE]`` and ``linectl restore FILE``.

A backup is one ``pg_dump --format=custom`` of the linectl database: one
snapshot, so it is consistent while the line runs. The dump is made and
restored with the client binaries of the server's own major version (the
embedded wheel's for the embedded server; ``/usr/lib/postgresql/<major>/bin``
or the ``PATH`` for an external one): an older ``pg_dump`` refuses a newer
server, and a newer one writes archives an older ``pg_restore`` cannot read.

What the backup leaves out: the rows of ``mq_message`` and ``mq_consumer``,
the transport's messages in flight and the processes that consumed them. A
restore happens later, onto a cell that has moved on; an RPC to the hardware
service replayed from the backup would move the robot on a stale plan. Without
them every action that was open at the backup is an unknown outcome to the
restored line_controller, and its start-up checks put it before an operator
(as with RabbitMQ, whose messages a PostgreSQL backup never holds anyway).

A restore goes into an empty database, in one transaction (``pg_restore``
writes the SQL, ``psql --single-transaction`` applies it): a restore that
fails leaves the database as it was. A database that holds tables is refused
unless ``--force``, which drops them in that same transaction; ``--force``
still refuses while other sessions use the database (stop the services first).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg2

# The transport's tables whose rows belong to the running processes, not to the plant.
TRANSIENT_TABLES = ("mq_message", "mq_consumer")
LOCK_WAIT = "30s"  # a backup gives up rather than queue behind a schema change for long
_VERSION = re.compile(r"\(PostgreSQL\) (\d+)")


class BackupError(RuntimeError):
    """A backup or restore that cannot go ahead; ``str(err)`` says why and what to do."""


def libpq_target(url: str) -> tuple[str, dict[str, str]]:
    """``url`` for libpq's tools without its password (which would show in ``ps``),
    and the environment that carries the password instead."""
    parts = urlsplit(url)
    scheme = parts.scheme.split("+", 1)[0]
    if scheme in ("pgsql", "postgres"):
        scheme = "postgresql"
    env = {}
    netloc = parts.netloc
    if parts.password is not None:
        env["PGPASSWORD"] = unquote(parts.password)
        netloc = netloc.replace(f":{parts.password}@", "@", 1)
    return urlunsplit(parts._replace(scheme=scheme, netloc=netloc)), env


def connect(url: str):
    dsn, env = libpq_target(url)
    return psycopg2.connect(dsn, password=env.get("PGPASSWORD"))


def server_major(url: str) -> int:
    conn = connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW server_version_num")
            return int(cur.fetchone()[0]) // 10000
    finally:
        conn.close()


def tool_major(path: str) -> int | None:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except OSError:
        return None
    found = _VERSION.search(out)
    return int(found.group(1)) if found else None


def candidate_bin_dirs(major: int, embedded_bin_dir: Path | None, pg_bin: Path | None) -> list[Path]:
    """Where client binaries of PostgreSQL ``major`` may be, best first; a directory
    the user named (``--pg-bin``) is the only one."""
    if pg_bin:
        return [pg_bin]
    dirs = []
    if embedded_bin_dir is not None:
        dirs.append(embedded_bin_dir)
    dirs.append(Path(f"/usr/lib/postgresql/{major}/bin"))
    on_path = shutil.which("pg_dump")
    if on_path:
        dirs.append(Path(os.path.realpath(on_path)).parent)
    return dirs


def find_bin_dir(major: int, candidates: list[Path], tools=("pg_dump", "pg_restore", "psql")) -> Path:
    """The first directory whose ``tools`` all are of ``major``."""
    looked = []
    for directory in candidates:
        looked.append(str(directory))
        if all((directory / t).is_file() and tool_major(str(directory / t)) == major for t in tools):
            return directory
    raise BackupError(
        f"the server runs PostgreSQL {major}, and no {'/'.join(tools)} of major {major} was found "
        f"(looked in {', '.join(looked)}); install them (Debian: postgresql-client-{major}) "
        f"or name their directory with --pg-bin")


def default_backup_file(data_dir: Path, now: datetime | None = None) -> Path:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return Path(data_dir) / "backups" / f"linectl-{stamp}.dump"


def backup(url: str, target: Path, bin_dir: Path) -> Path:
    """Dump the database at ``url`` into ``target`` (mode 0600: it holds the users'
    encrypted credentials). Written under a temporary name, renamed when whole."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)
    dsn, env = libpq_target(url)
    args = [str(bin_dir / "pg_dump"), "--format=custom", f"--lock-wait-timeout={LOCK_WAIT}",
            "--no-owner", "--no-acl", f"--file={partial}", f"--dbname={dsn}",
            *[f"--exclude-table-data={t}" for t in TRANSIENT_TABLES]]
    res = subprocess.run(args, env={**os.environ, **env}, capture_output=True, text=True)
    if res.returncode != 0:
        partial.unlink(missing_ok=True)
        raise BackupError(f"pg_dump failed ({res.returncode}): {res.stderr.strip()}")
    partial.rename(target)
    return target


def _relations(conn) -> list[tuple[str, str, str]]:
    """(schema, name, kind) of every table, view and sequence outside the system schemas."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT n.nspname, c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')"
            " AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%%'"
            " AND n.nspname NOT LIKE 'pg_temp%%' ORDER BY 1, 2")
        return cur.fetchall()


def _other_sessions(conn) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND pid <> pg_backend_pid() AND backend_type = 'client backend'")
        return cur.fetchone()[0]


def _drop_statements(relations) -> list[str]:
    """Every other line's schema (shared.db.lines), then public's tables (CASCADE takes
    their views and owned sequences), then what is left, then public's functions
    (the dump makes them again)."""
    order = {"r": 0, "p": 0, "f": 0, "m": 1, "v": 1, "S": 2}
    keyword = {"r": "TABLE", "p": "TABLE", "f": "FOREIGN TABLE", "m": "MATERIALIZED VIEW", "v": "VIEW",
               "S": "SEQUENCE"}
    quote = lambda s: '"' + s.replace('"', '""') + '"'  # noqa: E731
    schemas = sorted({s for s, _n, _k in relations if s != "public"})
    return ([f"DROP SCHEMA IF EXISTS {quote(s)} CASCADE;" for s in schemas]
            + [f"DROP {keyword[k]} IF EXISTS {quote(s)}.{quote(n)} CASCADE;"
               for s, n, k in sorted(relations, key=lambda r: order[r[2]]) if s == "public"]
            + ["DROP FUNCTION IF EXISTS public.next_work_order_number();",
               "DROP FUNCTION IF EXISTS public.mq_backend_started(integer);"])


def restore(url: str, source: Path, bin_dir: Path, *, force: bool = False) -> None:
    """Restore the dump ``source`` into the database at ``url`` (see the module docstring)."""
    source = Path(source)
    if not source.is_file():
        raise BackupError(f"{source}: no such backup file")
    conn = connect(url)
    try:
        relations = _relations(conn)
        others = _other_sessions(conn) if relations else 0
    finally:
        conn.close()
    if relations and not force:
        tables = [n for _s, n, k in relations if k in "rp"]
        names = ", ".join(tables[:8]) + (", …" if len(tables) > 8 else "")
        raise BackupError(f"the database is not empty ({len(tables)} tables: {names}); "
                          "nothing was changed. A restore replaces everything in it: stop linectl's "
                          "services and run again with --force")
    if relations and others:
        raise BackupError(f"{others} other session(s) use the database; nothing was changed. "
                          "Stop linectl's services (gateway, line_controller, hardware) first")
    dsn, env = libpq_target(url)
    env = {**os.environ, **env, "PGOPTIONS": "-c client_min_messages=warning"}
    listing = subprocess.run([str(bin_dir / "pg_restore"), "--list", str(source)], env=env,
                             capture_output=True, text=True)
    if listing.returncode != 0:
        raise BackupError(f"{source}: not a backup pg_restore {bin_dir.parent.name} can read: "
                          f"{listing.stderr.strip()}")
    psql = subprocess.Popen([str(bin_dir / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "--single-transaction",
                             f"--dbname={dsn}", "-f", "-"], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    reader = subprocess.Popen([str(bin_dir / "pg_restore"), "--no-owner", "--no-acl", "--file=-", str(source)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        if relations:
            psql.stdin.write("\n".join(_drop_statements(relations)).encode() + b"\n")
        shutil.copyfileobj(reader.stdout, psql.stdin, 1 << 20)
    except BrokenPipeError:  # psql stopped at an error: its stderr says which
        pass
    finally:
        reader.stdout.close()
        reader_err = reader.stderr.read().decode()
        reader.wait()
        try:
            psql.stdin.close()
        except BrokenPipeError:
            pass
        psql_err = psql.stderr.read().decode()
        psql.wait()
    if reader.returncode != 0 or psql.returncode != 0:
        raise BackupError("restore failed, nothing was changed: "
                          + (psql_err.strip() or reader_err.strip() or f"psql exited {psql.returncode}"))


def schema_revision(url: str) -> str | None:
    conn = connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT to_regclass('alembic_version') IS NOT NULL")
            if not cur.fetchone()[0]:
                return None
            cur.execute("SELECT version_num FROM alembic_version")
            row = cur.fetchone()
            return row[0] if row else None
    finally:
        conn.close()
